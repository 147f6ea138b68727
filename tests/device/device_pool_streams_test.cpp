// Stream-ordered reuse: record_stream fences hold blocks back until they
// complete; another stream takes a block only once its owner is past it.
#include <gtest/gtest.h>

#include <vector>

#include "device_test_support.hpp"

namespace unipool::test {
namespace {

class DevicePoolStreams : public ::testing::TestWithParam<bool> {
 protected:
  ManualFenceSource& fences() { return sim.backend->manual_fences(); }
  SimPool sim{GetParam()};
  DevicePool& pool = *sim.pool;
};

TEST_P(DevicePoolStreams, PendingFenceHoldsTheBlockBack) {
  void* p = pool.allocate(4 * kMiB, kStreamA);
  pool.record_stream(p, kStreamB);
  pool.record_stream(p, kStreamC);
  pool.record_stream(p, kStreamA);  // its own stream: no fence needed
  pool.deallocate(p);
  EXPECT_EQ(fences().outstanding(), 2u);  // one for B, one for C
  DeviceStats s = pool.stats();
  EXPECT_EQ(s.allocated_bytes[0].current, 0);
  EXPECT_EQ(s.active_bytes[0].current, static_cast<int64_t>(4 * kMiB));  // still active: pending
  // Nothing hands p out while a fence is pending, on any stream.
  std::vector<void*> others;
  for (int i = 0; i < 6; ++i) {
    others.push_back(pool.allocate(4 * kMiB, i % 2 ? kStreamA : kStreamB));
    EXPECT_NE(others.back(), p);
  }
  fences().complete_stream(kStreamB);
  void* q = pool.allocate(4 * kMiB, kStreamA);
  EXPECT_NE(q, p);  // C's fence is still pending
  fences().complete_stream(kStreamC);
  for (void* o : others) pool.deallocate(o);
  pool.deallocate(q);
  void* r = pool.allocate(4 * kMiB, kStreamA);
  EXPECT_EQ(r, p);  // the exact fit at its old place
  pool.deallocate(r);
  fences().complete_all();
  pool.deallocate(pool.allocate(512, kStreamA));  // polls
  EXPECT_EQ(pool.stats().active[0].current, 0);   // nothing pending any more
  EXPECT_POOL_VALID(pool);
  expect_stats_match_snapshot(pool);
}

TEST_P(DevicePoolStreams, CrossStreamTakeOverWaitsForTheOwner) {
  // A device that holds one segment (plain) or 8 MiB (expandable), so B cannot
  // grow; and a free block that covers no whole granule, so a release cannot help.
  SimPool small(GetParam(), GetParam() ? 8 * kMiB : 20 * kMiB);
  DevicePool& pool2 = *small.pool;
  ManualFenceSource& fences2 = small.backend->manual_fences();
  const uint64_t size = 3 * kMiB / 2;
  void* x1 = pool2.allocate(size, kStreamA);
  void* x2 = pool2.allocate(6 * kMiB, kStreamA);
  pool2.deallocate(x1);  // free on A; A's work may still use it
  EXPECT_THROW(pool2.allocate(size, kStreamB), OutOfMemoryError);  // A not known to be past it
  EXPECT_EQ(pool2.stats().num_ooms, 1);
  fences2.complete_stream(kStreamA);  // A's marker completes
  void* y = pool2.allocate(size, kStreamB);
  EXPECT_EQ(y, x1);  // taken over from A
  const uint64_t before = fences2.outstanding();
  pool2.deallocate(y);  // B used memory A owns: a fence on B
  EXPECT_EQ(fences2.outstanding(), before + 1);
  if (GetParam()) {
    // Only x1's place could hold it without growing: A may not have it yet.
    EXPECT_THROW(pool2.allocate(size, kStreamA), OutOfMemoryError);
  } else {
    void* z = pool2.allocate(size, kStreamA);
    EXPECT_NE(z, x1);  // A may not reuse it before B's fence
    pool2.deallocate(z);
  }
  fences2.complete_stream(kStreamB);
  void* w = pool2.allocate(size, kStreamA);
  EXPECT_EQ(w, x1);
  for (void* p : {w, x2}) pool2.deallocate(p);
  EXPECT_POOL_VALID(pool2);
  expect_stats_match_snapshot(pool2);
}

TEST(DevicePoolStreamsExpandable, OomPathUnmapsAnotherStreamsFreeGranules) {
  SimPool sim(true, 8 * kMiB);
  DevicePool& pool = *sim.pool;
  void* x1 = pool.allocate(4 * kMiB, kStreamA);
  void* x2 = pool.allocate(4 * kMiB, kStreamA);
  pool.deallocate(x1);  // two whole free granules inside A's mapped memory
  void* y = pool.allocate(4 * kMiB, kStreamB);  // waits for A, unmaps them, maps B's
  const DeviceStats s = pool.stats();
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.num_device_free, 1);
  EXPECT_EQ(s.segment[0].current, 2);  // A's run [4, 8) MiB and B's
  EXPECT_EQ(sim.backend->mapped_bytes(0), 8 * kMiB);
  for (void* p : {x2, y}) pool.deallocate(p);
  EXPECT_POOL_VALID(pool);
  expect_stats_match_snapshot(pool);
}

TEST(DevicePoolStreamsPlain, IdleSegmentChangesOwner) {
  SimPool sim(false);
  DevicePool& pool = *sim.pool;
  void* x = pool.allocate(4 * kMiB, kStreamA);  // A's 20 MiB segment
  pool.deallocate(x);
  void* y = pool.allocate(4 * kMiB, kStreamB);  // A unsettled: B grows its own (and a marker is recorded)
  EXPECT_EQ(pool.stats().segment[0].current, 2);
  sim.backend->manual_fences().complete_stream(kStreamA);
  void* y2 = pool.allocate(16 * kMiB, kStreamB);  // fills B's segment
  void* z = pool.allocate(4 * kMiB, kStreamB);    // B full: takes A's idle segment
  EXPECT_EQ(z, x);
  for (const DeviceSegmentInfo& seg : pool.snapshot().segments) EXPECT_EQ(seg.stream, kStreamB);
  const uint64_t before = sim.backend->manual_fences().outstanding();
  pool.deallocate(z);  // B owns it now: no fence
  EXPECT_EQ(sim.backend->manual_fences().outstanding(), before);
  for (void* p : {y, y2}) pool.deallocate(p);
  EXPECT_POOL_VALID(pool);
}

TEST_P(DevicePoolStreams, FreeOnOwnStreamNeedsNoFence) {
  std::vector<void*> blocks;
  for (int i = 0; i < 32; ++i) blocks.push_back(pool.allocate(100000 + 4096 * i, kStreamA));
  for (void* p : blocks) pool.deallocate(p);
  EXPECT_EQ(fences().outstanding(), 0u);
  EXPECT_EQ(pool.stats().active[0].current, 0);
  EXPECT_POOL_VALID(pool);
}

INSTANTIATE_TEST_SUITE_P(Segments, DevicePoolStreams, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "expandable" : "plain"; });

}  // namespace
}  // namespace unipool::test
