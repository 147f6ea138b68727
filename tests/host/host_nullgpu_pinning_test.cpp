// unipool host: pinning through the real CUDA pinner (cudaHostRegister) on
// the null GPU, with injected registration failures: pinned=on
// fails clearly, best_effort serves pageable and counts it, the pending CUDA
// error is cleared, registrations stay under max_pin, no driver = pageable.
// Background pinning (pin_thread=on): the pool's thread registers chunks
// ahead; its failures follow the same rules; destruction leaves no
// registration; threads allocating while it runs register nothing twice.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "nullgpu/nullgpu.hpp"
#include "support/units.hpp"
#include "support/valid.hpp"
#include "unipool/host_pool.hpp"

namespace unipool {
namespace {

constexpr const char* kConf = "reserve=1GiB,huge_threshold=8MiB,chunk=4MiB,max_pin=8MiB";

std::string conf(const char* extra) { return std::string(kConf) + "," + extra; }

class HostNullGpu : public ::testing::Test {
 protected:
  void SetUp() override { nullgpu::reset(); }
  void TearDown() override { EXPECT_TRUE(nullgpu::leaks().clean()) << nullgpu::leaks().describe(); }
};

TEST_F(HostNullGpu, PinnedOnRegistersChunksUnderMaxPin) {
  {
    HostPool pool(conf("pinned=on"));
    std::vector<void*> blocks;
    for (size_t size : {size_t{64}, size_t{20000}, size_t{20} << 20, size_t{9} << 20}) {
      void* p = pool.allocate(size);
      ASSERT_NE(p, nullptr) << HostPool::last_error();
      EXPECT_TRUE(pool.is_pinned(p));
      blocks.push_back(p);
    }
    EXPECT_EQ(pool.pinning_state(), PinningState::pinned);
    const HostPoolStats st = pool.stats();
    EXPECT_EQ(st.pinned_bytes, nullgpu::pinned_bytes());
    for (const nullgpu::HostRange& r : nullgpu::registered_ranges()) EXPECT_LE(r.bytes, uint64_t{8} << 20);
    for (void* p : blocks) EXPECT_EQ(pool.deallocate(p), Status::ok);
    EXPECT_VALID(pool);
  }
  EXPECT_EQ(nullgpu::pinned_bytes(), 0u);  // every registration undone with the pool
}

TEST_F(HostNullGpu, PinnedOnFailsClearlyAndClearsThePendingError) {
  HostPool pool(conf("pinned=on"));
  nullgpu::fail_nth_call("cudaHostRegister", 1);
  const HostAllocation a = pool.allocate(1000);
  EXPECT_EQ(a, nullptr);
  EXPECT_EQ(a.status, Status::out_of_space);
  EXPECT_NE(std::string(HostPool::last_error()).find("pinned=on"), std::string::npos) << HostPool::last_error();
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // not left for an unrelated later call
  EXPECT_EQ(pool.stats().committed_bytes, 0u);
  EXPECT_EQ(pool.stats().pin_failures, 1u);
  void* p = pool.allocate(1000);  // the next registration works
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(pool.is_pinned(p));
  pool.deallocate(p);
}

TEST_F(HostNullGpu, BestEffortServesPageableAndCountsIt) {
  HostPool pool(conf("pinned=best_effort"));
  nullgpu::fail_nth_call("cudaHostRegister", 1);
  void* p = pool.allocate(1000);
  ASSERT_NE(p, nullptr) << HostPool::last_error();
  EXPECT_FALSE(pool.is_pinned(p));
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  const HostPoolStats st = pool.stats();
  EXPECT_EQ(st.pin_failures, 1u);
  EXPECT_EQ(st.pageable_bytes, uint64_t{4} << 20);
  EXPECT_EQ(pool.pinning_state(), PinningState::partially_pinned);
  pool.deallocate(p);
}

TEST_F(HostNullGpu, RegistrationBeyondThePinnedLimitFails) {
  nullgpu::Config config;
  config.pinned_limit = uint64_t{16} << 20;
  nullgpu::reset(config);
  HostPool pool(conf("pinned=on"));
  void* a = pool.allocate(10 << 20);
  ASSERT_NE(a, nullptr) << HostPool::last_error();
  EXPECT_EQ(pool.allocate(10 << 20), nullptr);  // would pass the limit
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_LE(nullgpu::pinned_bytes(), uint64_t{16} << 20);
  pool.deallocate(a);
}

TEST_F(HostNullGpu, NoDriverMeansPageableAndSaysSo) {
  nullgpu::Config config;
  config.driver_present = false;
  nullgpu::reset(config);
  HostPool refusing(conf("pinned=on"));
  EXPECT_EQ(refusing.allocate(1000), nullptr);  // pinned=on never serves pageable memory
  EXPECT_NE(std::string(HostPool::last_error()).find("no CUDA device"), std::string::npos) << HostPool::last_error();
  HostPool pool(conf("pinned=best_effort"));
  void* p = pool.allocate(1000);
  ASSERT_NE(p, nullptr);
  EXPECT_FALSE(pool.is_pinned(p));
  EXPECT_EQ(pool.pinning_state(), PinningState::pageable_no_gpu);
  EXPECT_EQ(nullgpu::calls("cudaHostRegister"), 0u);
  pool.deallocate(p);
}

// A pinned huge block cannot follow mremap (its registration covers the old
// range): realloc moves it into new pinned memory and unpins the old one.
TEST_F(HostNullGpu, PinnedHugeBlockReallocatesIntoPinnedMemory) {
  HostPool pool(conf("pinned=on,huge_cache=0"));
  auto* p = static_cast<unsigned char*>(pool.allocate(size_t{20} << 20).ptr);
  ASSERT_NE(p, nullptr) << HostPool::last_error();
  for (size_t i = 0; i < (size_t{20} << 20); i += 4096) p[i] = static_cast<unsigned char>(i >> 12);
  const HostAllocation r = pool.reallocate(p, size_t{40} << 20);
  ASSERT_NE(r, nullptr) << HostPool::last_error();
  EXPECT_NE(r.ptr, p);
  EXPECT_TRUE(pool.is_pinned(r.ptr));
  const auto* q = static_cast<const unsigned char*>(r.ptr);
  for (size_t i = 0; i < (size_t{20} << 20); i += 4096) ASSERT_EQ(q[i], static_cast<unsigned char>(i >> 12)) << i;
  EXPECT_EQ(pool.stats().pinned_bytes, nullgpu::pinned_bytes());  // the old block's pieces are unpinned
  for (const nullgpu::HostRange& r2 : nullgpu::registered_ranges()) EXPECT_LE(r2.bytes, uint64_t{8} << 20);
  EXPECT_EQ(pool.deallocate(r.ptr), Status::ok);
  EXPECT_VALID(pool);
}

// ---- pin_thread=on ---------------------------------------------------------------

using test::kMiB;

// Whether the null GPU's registrations cover [p, p + bytes) (one or
// several side by side).
bool registered(const void* p, uint64_t bytes) {
  auto a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t end = a + bytes;
  for (const nullgpu::HostRange& r : nullgpu::registered_ranges()) {  // by address
    const auto b = reinterpret_cast<uintptr_t>(r.base);
    if (b <= a && a < b + r.bytes) a = b + r.bytes;
    if (a >= end) return true;
  }
  return false;
}

TEST_F(HostNullGpu, PinThreadRegistersChunksAhead) {
  {
    HostPool pool(conf("pinned=on,pin_thread=on"));
    void* first = pool.allocate(1 << 20);
    ASSERT_NE(first, nullptr) << HostPool::last_error();
    pool.wait_for_pinning();
    HostPoolStats st = pool.stats();
    EXPECT_EQ(st.pin_thread_registrations, 1u);
    EXPECT_EQ(st.committed_bytes, 12 * kMiB);  // the first chunk and two ahead
    EXPECT_EQ(st.pinned_bytes, nullgpu::pinned_bytes());
    EXPECT_EQ(nullgpu::registered_ranges().size(), st.pin_registrations);
    // Served from the chunks the thread registered: the allocation itself
    // calls nothing, and the null GPU holds the block as registered.
    const uint64_t calls = nullgpu::calls("cudaHostRegister");
    void* big = pool.allocate(6 << 20);
    ASSERT_NE(big, nullptr) << HostPool::last_error();
    EXPECT_TRUE(pool.is_pinned(big));
    EXPECT_TRUE(registered(big, 6 << 20));
    pool.wait_for_pinning();
    st = pool.stats();
    EXPECT_EQ(st.pin_registrations - st.pin_thread_registrations, 1u);
    EXPECT_EQ(nullgpu::calls("cudaHostRegister"), calls + (st.pin_thread_registrations - 1));
    EXPECT_EQ(st.pinned_bytes, nullgpu::pinned_bytes());
    for (const nullgpu::HostRange& r : nullgpu::registered_ranges()) EXPECT_LE(r.bytes, uint64_t{8} << 20);
    EXPECT_EQ(pool.deallocate(first), Status::ok);
    EXPECT_EQ(pool.deallocate(big), Status::ok);
    EXPECT_VALID(pool);
  }
  // Every registration, the thread's too, undone with the pool (and
  // TearDown checks the null GPU holds nothing else).
  EXPECT_EQ(nullgpu::pinned_bytes(), 0u);
  EXPECT_TRUE(nullgpu::registered_ranges().empty());
}

TEST_F(HostNullGpu, PinThreadFailureWithPinnedOnIsNeverHandedOut) {
  HostPool pool(conf("pinned=on,pin_thread=on"));
  // Call 1 is the first allocation's own; 2 is the thread's (after it), and
  // fails; so does 3, the next allocation's own.
  nullgpu::fail_nth_call("cudaHostRegister", 2);
  nullgpu::fail_nth_call("cudaHostRegister", 3);
  void* first = pool.allocate(1 << 20);
  ASSERT_NE(first, nullptr) << HostPool::last_error();
  pool.wait_for_pinning();
  EXPECT_EQ(pool.stats().pin_failures, 1u);
  EXPECT_EQ(pool.stats().pin_thread_registrations, 0u);
  EXPECT_EQ(pool.allocate(6 << 20), nullptr);  // pins for itself: fails too
  const std::string why = HostPool::last_error();
  EXPECT_NE(why.find("pinned=on"), std::string::npos) << why;
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // nothing pending here
  const HostPoolStats st = pool.stats();
  EXPECT_EQ(st.pin_failures, 2u);
  EXPECT_EQ(st.committed_bytes, 4 * kMiB);  // no unpinned chunk kept
  EXPECT_EQ(st.pinned_bytes, nullgpu::pinned_bytes());
  EXPECT_EQ(st.pinned_bytes, st.committed_bytes);
  EXPECT_EQ(pool.deallocate(first), Status::ok);
  std::string v;
  EXPECT_TRUE(pool.validate(&v)) << v;
}

TEST_F(HostNullGpu, PinThreadFailureWithBestEffortIsServedPageable) {
  HostPool pool(conf("pinned=best_effort,pin_thread=on"));
  nullgpu::fail_nth_call("cudaHostRegister", 2);  // the thread's registration
  void* first = pool.allocate(1 << 20);
  ASSERT_NE(first, nullptr) << HostPool::last_error();
  EXPECT_TRUE(pool.is_pinned(first));
  pool.wait_for_pinning();
  HostPoolStats st = pool.stats();
  EXPECT_EQ(st.pin_failures, 1u);
  EXPECT_EQ(st.pageable_bytes, 8 * kMiB);
  EXPECT_EQ(st.pinned_bytes, nullgpu::pinned_bytes());
  void* big = pool.allocate(6 << 20);
  ASSERT_NE(big, nullptr) << HostPool::last_error();
  EXPECT_FALSE(pool.is_pinned(big));  // it lies over the chunks the thread failed to pin
  EXPECT_FALSE(registered(big, 6 << 20));
  EXPECT_EQ(pool.pinning_state(), PinningState::partially_pinned);
  EXPECT_EQ(pool.deallocate(first), Status::ok);
  EXPECT_EQ(pool.deallocate(big), Status::ok);
  EXPECT_VALID(pool);
}

TEST_F(HostNullGpu, PinThreadWithThreadsAllocatingRegistersNothingTwice) {
  {
    HostPool pool(conf("pinned=on,pin_thread=on"));
    std::vector<std::thread> workers;
    std::vector<int> bad(4, 0);
    for (int t = 0; t < 4; ++t) {
      workers.emplace_back([&, t] {
        std::vector<void*> live;
        for (int i = 0; i < 200; ++i) {
          const size_t n = i % 3 == 0 ? (size_t{1} << 20) + static_cast<size_t>(i * 7919 % (3 << 20))
                                      : static_cast<size_t>(64 + i * 131 % 30000);
          void* p = pool.allocate(n);
          if (p == nullptr || !pool.is_pinned(p)) ++bad[t];
          if (p != nullptr) live.push_back(p);
          if (live.size() > 6) {
            if (pool.deallocate(live.front()) != Status::ok) ++bad[t];
            live.erase(live.begin());
          }
        }
        for (void* p : live) {
          if (pool.deallocate(p) != Status::ok) ++bad[t];
        }
      });
    }
    for (std::thread& w : workers) w.join();
    for (int t = 0; t < 4; ++t) EXPECT_EQ(bad[t], 0) << "thread " << t;
    pool.wait_for_pinning();
    const HostPoolStats st = pool.stats();
    // A second registration of a range fails in the null GPU
    // (cudaErrorHostMemoryAlreadyRegistered): none failed.
    EXPECT_EQ(st.pin_failures, 0u);
    EXPECT_EQ(nullgpu::registered_ranges().size(), st.pin_registrations);
    EXPECT_EQ(nullgpu::calls("cudaHostRegister"), st.pin_registrations);
    EXPECT_EQ(st.pinned_bytes, nullgpu::pinned_bytes());
    EXPECT_VALID(pool);
  }
  EXPECT_TRUE(nullgpu::registered_ranges().empty());
}

}  // namespace
}  // namespace unipool
