// unipool host: fork. The child allocates and frees (even blocks its parent's
// other threads owned) and validates; the parent is unaffected. A fork while
// the pinning thread (pin_thread=on) registers chunks ahead: the child has no
// such thread, forgets its claim and pins for itself; the parent's thread
// finishes.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <thread>
#include <vector>

#include "host_test_util.hpp"
#include "test_pinner.hpp"

namespace unipool::test {
namespace {

int run_in_child(HostPool& pool, const std::vector<void*>& inherited) {
  for (void* p : inherited) {
    if (pool.deallocate(p) != Status::ok) return 2;
  }
  std::vector<void*> mine;
  for (int i = 0; i < 2000; ++i) {
    void* p = pool.allocate(static_cast<size_t>(1 + (i * 37) % 40000));
    if (p == nullptr) return 3;
    mine.push_back(p);
  }
  for (void* p : mine) {
    if (pool.deallocate(p) != Status::ok) return 4;
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
    for (void* p : theirs) pool.deallocate(p);
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
    EXPECT_EQ(pool.deallocate(mine[static_cast<size_t>(i)]), Status::ok);
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
    const bool ok = q != nullptr && pool.deallocate(q) == Status::ok && pool.deallocate(p) == Status::ok;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(pool.deallocate(p), Status::ok);
}

// The test pinner, with a gate: the registration numbered `gate_call` waits
// in pin() until `hold` drops (before it takes the test pinner's lock, so a
// forked child inherits that lock free).
std::atomic<uint64_t> g_calls{0}, g_gate_call{0};
std::atomic<bool> g_hold{false}, g_entered{false};

class GatedPinner final : public backend::HostPinner {
 public:
  const char* name() const noexcept override { return "gated"; }
  bool available() override { return inner_.available(); }
  BackendStatus pin(void* ptr, uint64_t bytes) override {
    if (g_calls.fetch_add(1) + 1 == g_gate_call.load()) {
      g_entered = true;
      while (g_hold) std::this_thread::yield();
    }
    return inner_.pin(ptr, bytes);
  }
  BackendStatus unpin(void* ptr) override { return inner_.unpin(ptr); }

 private:
  TestPinner inner_;
};

std::unique_ptr<backend::HostPinner> make_gated_pinner() { return std::make_unique<GatedPinner>(); }

int run_in_child_while_pinning(HostPool& pool, void* first) {
  alarm(30);  // a child waiting for the parent's thread would hang: fail instead
  void* big = pool.allocate(6 << 20);  // must grow the arena past the claim
  if (big == nullptr) return 2;
  if (!pool.is_pinned(big) || !pool.is_pinned(first)) return 3;
  if (pool.stats().pin_thread_registrations != 0) return 4;
  if (pool.deallocate(big) != Status::ok || pool.deallocate(first) != Status::ok) return 5;
  pool.wait_for_pinning();  // no thread: returns
  std::string why;
  if (!pool.validate(&why)) {
    std::fprintf(stderr, "child: %s\n", why.c_str());
    return 6;
  }
  const HostPoolStats st = pool.stats();
  if (st.pinned_bytes != st.committed_bytes || pinner_state().overlaps != 0) return 7;
  return 0;
}

TEST(HostFork, WhileThePinningThreadRegistersTheChildPinsForItself) {
  UseTestPinner use;
  host::set_pinner_factory(make_gated_pinner);
  g_calls = 0;
  g_gate_call = 2;  // 1: the first allocation's own; 2: the thread's first
  g_hold = true;
  g_entered = false;
  {
    HostPool pool(conf("pinned=on,pin_thread=on,chunk=4MiB,max_pin=64MiB"));
    void* first = pool.allocate(1 << 20);
    ASSERT_NE(first, nullptr) << HostPool::last_error();
    while (!g_entered) std::this_thread::yield();  // the thread is inside pin()
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      g_hold = false;
      _exit(run_in_child_while_pinning(pool, first));
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status)) << "child killed (signal " << WTERMSIG(status) << ")";
    EXPECT_EQ(WEXITSTATUS(status), 0);
    // The parent's thread finishes its registration.
    g_hold = false;
    pool.wait_for_pinning();
    const HostPoolStats st = pool.stats();
    EXPECT_EQ(st.pin_thread_registrations, 1u);
    EXPECT_EQ(st.committed_bytes, uint64_t{12} << 20);
    EXPECT_EQ(st.pinned_bytes, pinner_state().pinned());
    EXPECT_EQ(pool.deallocate(first), Status::ok);
    EXPECT_VALID(pool);
  }
  EXPECT_EQ(pinner_state().pinned(), 0u);
  EXPECT_EQ(pinner_state().bad_unpins, 0u);
}

}  // namespace
}  // namespace unipool::test
