// unipool backend tests: a fresh null GPU runtime per test, and a leak
// check when the test is done.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "nullgpu/nullgpu.hpp"

namespace unipool::test {

namespace gpu = ::unipool::nullgpu;

class NullGpuTest : public ::testing::Test {
 protected:
  // Tests that need another machine override this.
  virtual gpu::Config config() const { return gpu::Config{}; }

  void SetUp() override { gpu::reset(config()); }
  void TearDown() override {
    // Everything a test created must be gone once its objects are.
    EXPECT_TRUE(gpu::leaks().clean()) << gpu::leaks().describe();
  }
};

// A null GPU whose device memory other processes can map (Config::ipc).
class NullGpuIpcTest : public NullGpuTest {
 protected:
  gpu::Config config() const override {
    gpu::Config c;
    c.capacity = 256 * gpu::kMiB;
    c.ipc = true;
    return c;
  }
};

// Whether the process can write one byte at `p`, asked of the kernel (a
// read() into it fails with EFAULT if not), so no signal is raised.
inline bool writable(void* p) {
  int fds[2];
  if (pipe(fds) != 0) return false;
  const char byte = 0x5a;
  bool ok = write(fds[1], &byte, 1) == 1;
  ok = ok && read(fds[0], p, 1) == 1;
  close(fds[0]);
  close(fds[1]);
  return ok;
}

// Whether the process can read one byte at `p` (write() from it fails with
// EFAULT if not).
inline bool readable(const void* p) {
  int fds[2];
  if (pipe(fds) != 0) return false;
  const bool ok = write(fds[1], p, 1) == 1;
  close(fds[0]);
  close(fds[1]);
  return ok;
}

// Runs `body` in a forked child; true if it returned true.
template <class Body>
bool in_child(Body body) {
  const pid_t pid = fork();
  if (pid == 0) _exit(body() ? 0 : 1);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace unipool::test
