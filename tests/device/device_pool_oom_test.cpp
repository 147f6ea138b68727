// The OOM path: release the cache and retry; then a clear error, counted,
// reported to the observer; limits by fraction and bytes; the GC threshold.
#include <gtest/gtest.h>

#include <string>

#include "device_test_support.hpp"

namespace unipool::test {
namespace {

class DevicePoolOom : public ::testing::TestWithParam<bool> {};

TEST_P(DevicePoolOom, ReleasesTheCacheAndRetries) {
  SimPool sim(GetParam(), 64 * kMiB);
  DevicePool& pool = *sim.pool;
  void* a = pool.allocate(30 * kMiB, kStreamA);
  pool.deallocate(a);  // cached by A
  void* b = pool.allocate(40 * kMiB, kStreamB);  // 30 + 40 > 64: release A's cache, retry
  const DeviceStats s = pool.stats();
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.num_ooms, 0);
  EXPECT_EQ(s.num_device_free, 1);
  EXPECT_EQ(s.num_sync_all_streams, 1);  // waited for A's fence before giving A's memory back
  EXPECT_EQ(s.reserved_bytes[0].current, static_cast<int64_t>(40 * kMiB));
  pool.deallocate(b);
  EXPECT_POOL_VALID(pool);
}

TEST_P(DevicePoolOom, ErrorTextCountersAndObserver) {
  SimPool sim(GetParam(), 64 * kMiB);
  DevicePool& pool = *sim.pool;
  int observed = 0;
  DeviceOomInfo seen;
  pool.set_oom_observer([&](const DeviceOomInfo& info) {
    ++observed;
    seen = info;
  });
  void* a = pool.allocate(40 * kMiB, kStreamA);
  std::string text;
  try {
    pool.allocate(40 * kMiB, kStreamA);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    text = e.what();
    EXPECT_EQ(e.status(), Status::out_of_space);
  }
  EXPECT_NE(text.find("out of memory. Tried to allocate 40.00 MiB (41943040 bytes)"), std::string::npos) << text;
  EXPECT_NE(text.find("total capacity of 64.00 MiB of which 24.00 MiB is free"), std::string::npos) << text;
  EXPECT_NE(text.find("40.00 MiB is allocated and 40.00 MiB is reserved"), std::string::npos) << text;
  EXPECT_NE(text.find("largest free block is"), std::string::npos) << text;
  const DeviceStats s = pool.stats();
  EXPECT_EQ(s.num_ooms, 1);
  EXPECT_EQ(s.num_alloc_retries, 1);
  ASSERT_EQ(observed, 1);
  EXPECT_EQ(seen.requested, 40 * kMiB);
  EXPECT_EQ(seen.allocated, 40 * kMiB);
  EXPECT_EQ(seen.reserved, 40 * kMiB);
  EXPECT_EQ(seen.device_free, 24 * kMiB);
  EXPECT_EQ(seen.device_total, 64 * kMiB);
  EXPECT_EQ(seen.message, text);
  EXPECT_POOL_VALID(pool);
  void* small = pool.allocate(10 * kMiB, kStreamA);  // the pool is still usable
  for (void* p : {a, small}) pool.deallocate(p);
  EXPECT_POOL_VALID(pool);
}

TEST_P(DevicePoolOom, LargestFreeBlockShowsFragmentation) {
  SimPool sim(GetParam(), 64 * kMiB, "memory_limit=40MiB");
  DevicePool& pool = *sim.pool;
  void* a = pool.allocate(8 * kMiB, kStreamA);
  void* b = pool.allocate(8 * kMiB, kStreamA);
  void* c = pool.allocate(2 * kMiB, kStreamA);
  pool.deallocate(a);
  DeviceOomInfo seen;
  pool.set_oom_observer([&](const DeviceOomInfo& info) { seen = info; });
  EXPECT_THROW(pool.allocate(36 * kMiB, kStreamA), OutOfMemoryError);
  if (GetParam()) {
    EXPECT_EQ(seen.largest_free, 0u);  // a's granules were unmapped by the retry
    EXPECT_EQ(seen.reserved, 10 * kMiB);
  } else {
    EXPECT_EQ(seen.largest_free, 8 * kMiB);  // a's hole in the 20 MiB segment
  }
  EXPECT_EQ(seen.limit, 40 * kMiB);
  EXPECT_NE(seen.message.find("limit of 40.00 MiB"), std::string::npos) << seen.message;
  for (void* p : {b, c}) pool.deallocate(p);
}

TEST_P(DevicePoolOom, MemoryFraction) {
  SimPool sim(GetParam(), kGiB);
  DevicePool& pool = *sim.pool;
  pool.set_memory_fraction(0.25);
  EXPECT_EQ(pool.memory_limit(), kGiB / 4);
  void* a = pool.allocate(200 * kMiB, kStreamA);
  EXPECT_THROW(pool.allocate(100 * kMiB, kStreamA), OutOfMemoryError);
  pool.set_memory_limit(200 * kMiB);  // both set: the smaller wins
  EXPECT_EQ(pool.memory_limit(), 200 * kMiB);
  pool.set_memory_fraction(0);
  pool.set_memory_limit(0);
  EXPECT_EQ(pool.memory_limit(), 0u);
  void* b = pool.allocate(100 * kMiB, kStreamA);
  for (void* p : {a, b}) pool.deallocate(p);
  EXPECT_POOL_VALID(pool);
}

TEST_P(DevicePoolOom, GarbageCollectionThreshold) {
  SimPool sim(GetParam(), kGiB, "memory_limit=100MiB,garbage_collection_threshold=0.5");
  DevicePool& pool = *sim.pool;
  void* x = pool.allocate(60 * kMiB, kStreamA);
  pool.deallocate(x);  // 60 MiB cached by A
  void* y = pool.allocate(15 * kMiB, kStreamB);  // B cannot take A's yet: grows (marker on A recorded)
  EXPECT_EQ(pool.stats().num_device_free, 0);
  sim.backend->manual_fences().complete_stream(kStreamA);
  void* z = pool.allocate(512 * 1024, kStreamB);  // growth over 50%: settled cache released first
  const DeviceStats s = pool.stats();
  EXPECT_EQ(s.num_device_free, 1);
  EXPECT_EQ(s.num_alloc_retries, 0);
  EXPECT_EQ(s.reserved_bytes[0].current, static_cast<int64_t>(18 * kMiB));
  for (void* p : {y, z}) pool.deallocate(p);
  EXPECT_POOL_VALID(pool);
}

TEST_P(DevicePoolOom, ReleaseThreshold) {
  SimPool sim(GetParam(), kGiB, "release_threshold=10MiB");
  DevicePool& pool = *sim.pool;
  void* x = pool.allocate(30 * kMiB, kStreamA);
  pool.deallocate(x);  // 30 MiB cached > 10 MiB: a marker is recorded, nothing is lost
  EXPECT_POOL_VALID(pool);
  sim.backend->manual_fences().complete_stream(kStreamA);
  void* y = pool.allocate(kMiB / 2, kStreamA);
  pool.deallocate(y);  // now the settled 30 MiB goes back
  EXPECT_LE(pool.stats().reserved_bytes[0].current, static_cast<int64_t>(10 * kMiB));
  EXPECT_POOL_VALID(pool);
}

INSTANTIATE_TEST_SUITE_P(Segments, DevicePoolOom, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "expandable" : "plain"; });

}  // namespace
}  // namespace unipool::test
