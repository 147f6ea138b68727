// unipool kv shared: the member table.
#include "kv/shared/shared_members.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kv/shared/shared_state.hpp"

namespace unipool::kv_shared {
namespace {

std::atomic<uint64_t> g_fork_generation{0};

// (The pool's listening socket is closed in the child by unix_socket's
// own fork handler.)
void on_fork_child() noexcept { g_fork_generation.fetch_add(1, std::memory_order_relaxed); }

// pidfd_open(2), through syscall(): glibc 2.36 is the first to wrap it.
int pidfd_open(pid_t pid) noexcept {
#ifdef SYS_pidfd_open
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
#else
  errno = ENOSYS;
  return -1;
#endif
}

}  // namespace

uint64_t fork_generation() noexcept { return g_fork_generation.load(std::memory_order_relaxed); }

void watch_forks() noexcept {
  static const int registered = pthread_atfork(nullptr, nullptr, on_fork_child);
  (void)registered;
}

uint64_t start_time_of(pid_t pid) noexcept {
  char path[64], text[1024];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  const ssize_t got = read(fd, text, sizeof text - 1);
  close(fd);
  if (got <= 0) return 0;
  text[got] = '\0';
  // The command name (field 2) may hold spaces and parentheses: count the
  // fields from the last ')'. Field 3 follows it; the start time is field 22.
  const char* p = std::strrchr(text, ')');
  if (!p) return 0;
  for (int field = 2; field < 22; ++field) {
    p = std::strchr(p + 1, ' ');
    if (!p) return 0;
  }
  return std::strtoull(p + 1, nullptr, 10);
}

bool member_alive(const Member& m) noexcept {
  const int fd = pidfd_open(m.pid);
  if (fd < 0) {
    if (errno == ESRCH) return false;
    if (errno != ENOSYS) return true;  // EMFILE and the like: not proof of death
    return kill(m.pid, 0) == 0 ? start_time_of(m.pid) == m.start_time : errno != ESRCH;
  }
  pollfd p{fd, POLLIN, 0};
  const bool exited = poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
  // Read while the pidfd is open: the pid cannot be reused meanwhile. A
  // start time that cannot be read (a /proc mounted with hidepid) is not
  // proof of death: a live member's blocks must never be taken.
  const uint64_t start = exited ? 0 : start_time_of(m.pid);
  close(fd);
  return !exited && (start == 0 || m.start_time == 0 || start == m.start_time);
}

void await_exit(const Member& m, int timeout_ms) noexcept {
  const int fd = pidfd_open(m.pid);
  if (fd < 0) return;  // gone already (or no pidfd: the liveness check decides)
  pollfd p{fd, POLLIN, 0};
  (void)poll(&p, 1, timeout_ms);
  close(fd);
}

int join(Header& h) noexcept {
  const pid_t pid = getpid();
  const uint64_t start = start_time_of(pid);
  for (uint32_t i = 0; i < h.max_members; ++i) {
    Member& m = h.members[i];
    if (m.state != MemberState::empty) continue;
    m.pid = pid;
    m.start_time = start;
    std::atomic_signal_fence(std::memory_order_seq_cst);  // the slot is whole before it counts
    m.state = MemberState::attached;
    return static_cast<int>(i);
  }
  return -1;
}

}  // namespace unipool::kv_shared
