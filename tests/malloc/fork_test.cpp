// tests/malloc: fork from a multi-threaded process that is allocating.
//
//   fork_test [forks]
//
// Four threads malloc, realloc and free without pause while the main thread
// forks. Each child allocates from every size path (and from a thread of its
// own), checks what it wrote, and exits through exit() so atexit handlers and
// destructors run; some children fork a grandchild first. A child that hangs
// (a lock held by a parent thread at fork time) is killed by alarm() and
// reported. Prints one line that does not depend on timing.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "check.hpp"

namespace {

std::atomic<bool> g_stop{false};

void churn(unsigned seed) {
  std::vector<void*> live(64, nullptr);
  uint64_t s = seed;
  while (!g_stop.load(std::memory_order_relaxed)) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const size_t i = (s >> 33) % live.size();
    const size_t size = 1 + (s >> 40) % (1u << ((s >> 20) % 22));  // 1 B .. 2 MiB
    if (live[i] == nullptr) {
      live[i] = std::malloc(size);
    } else if ((s >> 13) % 3 == 0) {
      void* q = std::realloc(live[i], size);
      if (q != nullptr) live[i] = q;
    } else {
      std::free(live[i]);
      live[i] = nullptr;
    }
    if (live[i] != nullptr) static_cast<unsigned char*>(live[i])[0] = 1;
  }
  for (void* p : live) std::free(p);
}

// What a child does: every size path, a thread of its own, then exit().
int child_work(int depth) {
  alarm(20);
  std::vector<unsigned char*> blocks;
  for (size_t size = 1; size <= (size_t{48} << 20); size = size * 3 + 7) {
    auto* p = static_cast<unsigned char*>(std::malloc(size));
    MALLOC_CHECK(p != nullptr);
    std::memset(p, static_cast<int>(size & 0xFF), std::min<size_t>(size, 65536));
    p[size - 1] = static_cast<unsigned char>(size & 0xFF);
    blocks.push_back(p);
  }
  std::thread t([] {
    for (int i = 0; i < 10000; ++i) std::free(std::malloc(16 + i % 5000));
  });
  t.join();
  size_t size = 1;
  for (unsigned char* p : blocks) {
    MALLOC_CHECK(p[0] == (size & 0xFF) && p[size - 1] == (size & 0xFF));
    std::free(p);
    size = size * 3 + 7;
  }
  if (depth == 0) {
    const pid_t grandchild = fork();
    if (grandchild == 0) std::exit(child_work(1));
    int status = 0;
    MALLOC_CHECK(waitpid(grandchild, &status, 0) == grandchild);
    MALLOC_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int forks = argc > 1 ? std::atoi(argv[1]) : 40;
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < 4; ++t) threads.emplace_back(churn, t + 1);

  int ok = 0;
  for (int i = 0; i < forks; ++i) {
    const pid_t pid = fork();
    MALLOC_CHECK(pid >= 0);
    if (pid == 0) std::exit(child_work(i % 4 == 0 ? 0 : 1));
    int status = 0;
    MALLOC_CHECK(waitpid(pid, &status, 0) == pid);
    if (WIFSIGNALED(status)) {
      std::fprintf(stderr, "fork %d: child killed by signal %d%s\n", i, WTERMSIG(status),
                   WTERMSIG(status) == SIGALRM ? " (hung: a lock held across fork?)" : "");
      return 1;
    }
    MALLOC_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ++ok;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // let the threads move on
  }
  g_stop = true;
  for (auto& t : threads) t.join();
  std::printf("forks=%d ok\n", ok);
  return 0;
}
