// unipool host: allocate_zeroed (calloc) returns zero bytes on every path,
// clears reused memory, and leaves memory new from the OS untouched (its
// pages are not faulted in: page faults counted with getrusage).
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstring>

#include "host_test_util.hpp"

namespace unipool::test {
namespace {

uint64_t minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<uint64_t>(u.ru_minflt);
}

bool all_zero(const void* p, size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) {
    if (b[i] != 0) return false;
  }
  return true;
}

// Faults of allocate_zeroed(size) alone; the block is zero-checked after.
void* zeroed_counting_faults(HostPool& pool, size_t size, uint64_t* faults) {
  const uint64_t before = minor_faults();
  void* p = pool.allocate_zeroed(size);
  *faults = minor_faults() - before;
  return p;
}

TEST(HostZeroed, FreshLargeBlockIsNotClearedAndReadsZero) {
  HostPool pool("reserve=1GiB,huge_threshold=64MiB");  // not conf(): a key may be given once
  const size_t size = 32 << 20;  // a large block: 8192 pages if it were cleared
  uint64_t faults = 0;
  void* p = zeroed_counting_faults(pool, size, &faults);
  ASSERT_NE(p, nullptr) << HostPool::last_error();
  EXPECT_EQ(pool.stats().large_blocks, 1u);
  EXPECT_LT(faults, 512u);  // the header's page and the pool's own metadata
  EXPECT_TRUE(all_zero(p, size));
  EXPECT_EQ(pool.deallocate(p), Status::ok);
  EXPECT_VALID(pool);
}

TEST(HostZeroed, ReusedLargeBlockIsCleared) {
  HostPool pool(kTestConf);
  const size_t size = 1 << 20;
  void* a = pool.allocate(size);
  ASSERT_NE(a, nullptr);
  std::memset(a, 0xAB, size);
  ASSERT_EQ(pool.deallocate(a), Status::ok);
  void* b = pool.allocate_zeroed(size);
  ASSERT_EQ(b, a);  // the same range, dirty until cleared
  EXPECT_TRUE(all_zero(b, size));
  EXPECT_EQ(pool.deallocate(b), Status::ok);
  EXPECT_VALID(pool);
}

TEST(HostZeroed, HugeMappingsAreClearedOnlyWhenTakenFromTheCache) {
  HostPool pool(conf("huge_cache=2"));
  const size_t size = 16 << 20;  // above the tests' huge_threshold (8 MiB)
  uint64_t faults = 0;
  void* a = zeroed_counting_faults(pool, size, &faults);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(pool.stats().huge_blocks, 1u);
  EXPECT_LT(faults, 512u);  // a new mapping: 4096 pages if it were cleared
  EXPECT_TRUE(all_zero(a, size));
  std::memset(a, 0xCD, size);
  ASSERT_EQ(pool.deallocate(a), Status::ok);
  void* b = pool.allocate_zeroed(size);
  ASSERT_EQ(b, a);  // from the huge cache, dirty
  EXPECT_EQ(pool.stats().huge_cache_hits, 1u);
  EXPECT_TRUE(all_zero(b, size));
  EXPECT_EQ(pool.deallocate(b), Status::ok);
  EXPECT_VALID(pool);
}

TEST(HostZeroed, SmallAndMiddleBlocksAreCleared) {
  HostPool pool(kTestConf);
  for (size_t size : {size_t{24}, size_t{1000}, size_t{20000}}) {
    void* a = pool.allocate(size);
    ASSERT_NE(a, nullptr);
    std::memset(a, 0xEE, size);
    ASSERT_EQ(pool.deallocate(a), Status::ok);
    void* b = pool.allocate_zeroed(size);
    ASSERT_EQ(b, a) << size;  // the thread's free list hands it back
    EXPECT_TRUE(all_zero(b, size)) << size;
    EXPECT_EQ(pool.deallocate(b), Status::ok);
  }
  EXPECT_VALID(pool);
}

TEST(HostZeroed, ZeroSizeIsAnError) {
  HostPool pool(kTestConf);
  const HostAllocation a = pool.allocate_zeroed(0);
  EXPECT_EQ(a, nullptr);
  EXPECT_EQ(a.status, Status::zero_size);
}

}  // namespace
}  // namespace unipool::test
