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

// A backend error that is not out-of-memory (a driver failure) is reported
// as Status::backend_error at once: no cache release, no retry, no OOM count,
// no observer; the pool is unchanged and works once the backend does.
TEST_P(DevicePoolOom, BackendErrorIsNotAnOom) {
  SimPool sim(GetParam(), 256 * kMiB);
  DevicePool& pool = *sim.pool;
  int observed = 0;
  pool.set_oom_observer([&](const DeviceOomInfo&) { ++observed; });
  pool.deallocate(pool.allocate(30 * kMiB, kStreamA));  // cached
  const DeviceStats before = pool.stats();
  sim.backend->fail_next(SimBackend::allocate_call, 1, BackendStatus::error);
  sim.backend->fail_next(SimBackend::map_call, 1, BackendStatus::error);
  try {
    pool.allocate(40 * kMiB, kStreamA);
    FAIL() << "expected DevicePoolError(backend_error)";
  } catch (const OutOfMemoryError& e) {
    FAIL() << "a driver error reported as OOM: " << e.what();
  } catch (const DevicePoolError& e) {
    EXPECT_EQ(e.status(), Status::backend_error);
    const std::string text = e.what();
    EXPECT_NE(text.find("the sim backend failed while allocating 40.00 MiB (41943040 bytes) on device 0"),
              std::string::npos) << text;
    EXPECT_NE(text.find("sim: injected failure"), std::string::npos) << text;
  }
  sim.backend->clear_faults();
  const DeviceStats after = pool.stats();
  EXPECT_EQ(after.num_ooms, 0);
  EXPECT_EQ(after.num_alloc_retries, 0);
  EXPECT_EQ(after.num_device_free, 0);  // the cache was not released
  EXPECT_EQ(after.reserved_bytes[0].current, before.reserved_bytes[0].current);
  EXPECT_EQ(after.allocated_bytes[0].current, 0);
  EXPECT_EQ(observed, 0);
  EXPECT_EQ(static_cast<int64_t>(sim.backend->used_bytes(0)), after.reserved_bytes[0].current);
  EXPECT_POOL_VALID(pool);
  expect_stats_match_snapshot(pool);
  void* p = pool.allocate(40 * kMiB, kStreamA);  // the backend works again
  pool.deallocate(p);
  EXPECT_POOL_VALID(pool);
}

// The same when the first growth met a full device: the second attempt's
// driver error is what the caller learns.
TEST_P(DevicePoolOom, BackendErrorAfterTheOomRetry) {
  SimPool sim(GetParam(), 64 * kMiB);
  DevicePool& pool = *sim.pool;
  pool.deallocate(pool.allocate(30 * kMiB, kStreamA));  // cached by A
  // B's growth fails for lack of memory (30 + 40 > 64); the retry, after A's
  // cache went back, meets a driver error.
  const SimBackend::Call grow_call = GetParam() ? SimBackend::map_call : SimBackend::allocate_call;
  const uint64_t grows_before = sim.backend->calls(grow_call);
  // plain: allocate (OOM), deallocate A's segment, allocate; expandable:
  // reserve B's range, map (OOM), unmap A's granules, map.
  sim.backend->fail_call_at(GetParam() ? 3 : 2, BackendStatus::error);
  try {
    pool.allocate(40 * kMiB, kStreamB);
    FAIL() << "expected DevicePoolError(backend_error)";
  } catch (const OutOfMemoryError& e) {
    FAIL() << "a driver error reported as OOM: " << e.what();
  } catch (const DevicePoolError& e) {
    EXPECT_EQ(e.status(), Status::backend_error) << e.what();
  }
  sim.backend->clear_faults();
  EXPECT_EQ(sim.backend->calls(grow_call) - grows_before, 2u);  // the first attempt and the retry
  EXPECT_EQ(pool.stats().num_alloc_retries, 1);
  EXPECT_EQ(pool.stats().num_ooms, 0);
  EXPECT_POOL_VALID(pool);
  expect_stats_match_snapshot(pool);
  pool.deallocate(pool.allocate(40 * kMiB, kStreamB));
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
