// unipool host: fork. The child allocates and frees (even blocks its parent's
// other threads owned) and validates; the parent is unaffected.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <thread>
#include <vector>

#include "host_test_util.hpp"

namespace unipool::test {
namespace {

int run_in_child(HostPool& pool, const std::vector<void*>& inherited) {
  for (void* p : inherited) {
    if (pool.free(p) != Status::ok) return 2;
  }
  std::vector<void*> mine;
  for (int i = 0; i < 2000; ++i) {
    void* p = pool.allocate(static_cast<size_t>(1 + (i * 37) % 40000));
    if (p == nullptr) return 3;
    mine.push_back(p);
  }
  for (void* p : mine) {
    if (pool.free(p) != Status::ok) return 4;
  }
  std::string why;
  if (!pool.validate(&why)) return 5;
  const HostPoolStats st = pool.stats();
  if (st.allocated_bytes != 0) {
    std::fprintf(stderr, "child: allocated %llu small %llu middle %llu large %llu huge %llu\n",
                 (unsigned long long)st.allocated_bytes, (unsigned long long)st.small_blocks,
                 (unsigned long long)st.middle_blocks, (unsigned long long)st.large_blocks,
                 (unsigned long long)st.huge_blocks);
    return 6;
  }
  return 0;
}

TEST(HostFork, ChildAllocatesAndFreesParentUnaffected) {
  HostPool pool(kTestConf);
  // Blocks owned by another (still running) thread at the time of the fork.
  std::vector<void*> theirs;
  std::atomic<bool> ready{false}, done{false};
  std::thread other([&] {
    for (int i = 0; i < 200; ++i) theirs.push_back(pool.allocate(static_cast<size_t>(32 + i * 10)));
    ready = true;
    while (!done) std::this_thread::yield();
    for (void* p : theirs) pool.free(p);
  });
  while (!ready) std::this_thread::yield();
  std::vector<void*> mine;
  for (int i = 0; i < 100; ++i) {
    mine.push_back(pool.allocate(static_cast<size_t>(100 + i)));
    fill(mine.back(), 100, static_cast<uint8_t>(i));
  }
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::vector<void*> all = theirs;
    all.insert(all.end(), mine.begin(), mine.end());
    _exit(run_in_child(pool, all));
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  done = true;
  other.join();
  for (int i = 0; i < 100; ++i) {
    EXPECT_TRUE(intact(mine[static_cast<size_t>(i)], 100, static_cast<uint8_t>(i)));
    EXPECT_EQ(pool.free(mine[static_cast<size_t>(i)]), Status::ok);
  }
  EXPECT_EQ(pool.stats().allocated_bytes, 0u);
  EXPECT_VALID(pool);
}

TEST(HostFork, DefaultPoolWorksInTheChild) {
  HostPool& pool = HostPool::default_pool();
  void* p = pool.allocate(64);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    void* q = pool.allocate(64);
    const bool ok = q != nullptr && pool.free(q) == Status::ok && pool.free(p) == Status::ok;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(pool.free(p), Status::ok);
}

}  // namespace
}  // namespace unipool::test
