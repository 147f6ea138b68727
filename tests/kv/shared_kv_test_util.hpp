// Spawning member processes (shared_kv_worker) for the SharedKVBlockPool
// tests, and reading what they report.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "unipool/shared_kv_block_pool.hpp"

extern char** environ;

namespace unipool::test {

// A pageable pool of `blocks` blocks of `block_bytes`.
inline SharedKVBlockPoolOptions shared_options(uint64_t blocks, uint64_t block_bytes = 4096,
                                               SharedKVLifetime lifetime = SharedKVLifetime::while_attached) {
  SharedKVBlockPoolOptions o;
  o.block_bytes = block_bytes;
  o.num_blocks = blocks;
  o.pinned = HostPinned::off;
  o.lifetime = lifetime;
  return o;
}

inline void expect_valid(const SharedKVBlockPool& pool) {
  std::string why;
  EXPECT_TRUE(pool.validate(&why)) << why;
}

// A worker process with a pipe to its stdin and one from its stdout.
class Worker {
 public:
  explicit Worker(std::vector<std::string> args) {
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) std::abort();
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    args.insert(args.begin(), UNIPOOL_SHARED_KV_WORKER);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ) != 0) std::abort();
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    close(out[1]);
    stdin_ = in[1];
    stdout_ = fdopen(out[0], "r");
  }
  ~Worker() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      wait();
    }
    if (stdin_ >= 0) close(stdin_);
    if (stdout_) fclose(stdout_);
  }
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  pid_t pid() const { return pid_; }
  // The next line it printed ("" at its end).
  std::string line() {
    char buf[512];
    if (!fgets(buf, sizeof buf, stdout_)) return "";
    std::string s = buf;
    if (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }
  // Lines up to "ready" (not included); stops early at its end.
  std::vector<std::string> until_ready() {
    std::vector<std::string> lines;
    for (std::string s = line(); !s.empty() && s != "ready"; s = line()) lines.push_back(s);
    return lines;
  }
  void send(const std::string& text) { (void)!write(stdin_, text.data(), text.size()); }
  void close_stdin() {
    close(stdin_);
    stdin_ = -1;
  }
  // Waits for it to end; returns its wait status.
  int wait() {
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }
  void kill_now() {
    kill(pid_, SIGKILL);
    wait();
  }
  // Waits until it stopped itself (SIGSTOP).
  bool wait_stopped() {
    int status = 0;
    return waitpid(pid_, &status, WUNTRACED) == pid_ && WIFSTOPPED(status);
  }
  // Whether it ended on its own (reaps it).
  bool ended() {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) != pid_) return false;
    pid_ = -1;
    return true;
  }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1;
  FILE* stdout_ = nullptr;
};

inline int exit_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

// How many processes map, or hold open, a file whose name contains `what`
// (a memfd shows as "/memfd:<name> (deleted)").
inline int processes_holding(const std::string& what) {
  int found = 0;
  DIR* proc = opendir("/proc");
  while (dirent* e = proc ? readdir(proc) : nullptr) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    std::ifstream maps(std::string("/proc/") + e->d_name + "/maps");
    bool holds = false;
    for (std::string l; !holds && std::getline(maps, l);) holds = l.find(what) != std::string::npos;
    const std::string fd_dir = std::string("/proc/") + e->d_name + "/fd";
    DIR* fds = opendir(fd_dir.c_str());
    while (dirent* f = !holds && fds ? readdir(fds) : nullptr) {
      char target[512];
      const ssize_t n = readlink((fd_dir + "/" + f->d_name).c_str(), target, sizeof target - 1);
      holds = n > 0 && std::string(target, static_cast<size_t>(n)).find(what) != std::string::npos;
    }
    if (fds) closedir(fds);
    found += holds;
  }
  if (proc) closedir(proc);
  return found;
}

// The entries of /dev/shm.
inline std::vector<std::string> dev_shm() {
  std::vector<std::string> names;
  DIR* d = opendir("/dev/shm");
  while (dirent* e = d ? readdir(d) : nullptr) names.push_back(e->d_name);
  if (d) closedir(d);
  return names;
}

// A pool name no other test run uses at the same time.
inline std::string unique_name(const char* what) {
  static std::atomic<int> counter{0};
  return std::string("test.") + what + "." + std::to_string(getpid()) + "." + std::to_string(counter++);
}

}  // namespace unipool::test
