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
  // A device that holds one segment's worth (plain) or 10 MiB, so B cannot grow.
  SimPool small(GetParam(), GetParam() ? 10 * kMiB : 20 * kMiB);
  DevicePool& pool2 = *small.pool;
  void* x1 = pool2.allocate(4 * kMiB, kStreamA);
  void* x2 = pool2.allocate(4 * kMiB, kStreamA);
  pool2.deallocate(x1);  // free on A; A's work may still use it
  EXPECT_THROW(pool2.allocate(4 * kMiB, kStreamB), OutOfMemoryError);  // A not known to be past it
  EXPECT_EQ(pool2.stats().num_ooms, 1);
  small.backend->manual_fences().complete_stream(kStreamA);  // A's marker completes
  void* y = pool2.allocate(4 * kMiB, kStreamB);
  EXPECT_EQ(y, x1);  // taken over from A
  const uint64_t before = small.backend->manual_fences().outstanding();
  pool2.deallocate(y);  // B used memory A owns: a fence on B
  EXPECT_EQ(small.backend->manual_fences().outstanding(), before + 1);
  void* z = pool2.allocate(2 * kMiB, kStreamA);
  EXPECT_NE(z, x1);  // A may not reuse it before B's fence
  small.backend->manual_fences().complete_stream(kStreamB);
  pool2.deallocate(z);
  void* w = pool2.allocate(4 * kMiB, kStreamA);
  EXPECT_EQ(w, x1);
  for (void* p : {w, x2}) pool2.deallocate(p);
  EXPECT_POOL_VALID(pool2);
  expect_stats_match_snapshot(pool2);
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
