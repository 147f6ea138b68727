// KVBlockPool: bad input is refused with an error and leaves the pool as it
// was; a fence source that throws never takes the process down.
//
// Each public member that takes input, and where its case is (file: test).
// Geometry, counters, stats, pinned, pinning_state, reset_peak_stats and
// last_error take none; block(id) and base() are plain address arithmetic:
// ids are checked where they are handed back (deallocate, is_live, Python's
// view()).
//
//   KVBlockPool(options)     here: KVBlockPoolBadInput.SizesWhoseStrideOverflowsAreRefused,
//                            KVBlockPoolBadInput.SizesWhoseArenaOverflowsAreRefused,
//                            KVBlockPoolBadInput.ArenaLargerThanTheMachineIsRefused;
//                            kv_block_pool_basic_test: KVBlockPool.BadOptionsAreRefusedWithTheReason
//   allocate(n, out)         kv_block_pool_misuse_test: KVBlockPoolMisuse.ExhaustionTakesNothingAndSaysWhy;
//                            here: KVBlockPoolBadInput.MoreBlocksThanThePoolHoldsWritesNoId
//   deallocate(ids, n)       kv_block_pool_misuse_test: KVBlockPoolMisuse.DoubleFreeIsRefused,
//                            KVBlockPoolMisuse.RepeatedIdInOneBatchIsRefused, KVBlockPoolMisuse.OutOfRangeIdsAreRefused
//   deallocate_and_allocate  kv_block_pool_free_and_alloc_test: KVBlockPoolFreeAndAlloc.ABadFreeIdRefusesBothHalves,
//                            KVBlockPoolFreeAndAlloc.TooFewBlocksEvenWithTheFreedOnesFreesNothing;
//                            here: KVBlockPoolBadInput.MoreBlocksThanThePoolHoldsWritesNoId
//   deallocate_after         here: KVBlockPoolBadInput.FreeAfterRefusesFenceZero,
//                            KVBlockPoolBadInput.FreeAfterRefusesAFenceNeverRecorded,
//                            KVBlockPoolBadInput.FreeAfterRefusesAReleasedFence,
//                            KVBlockPoolBadInput.FreeAfterOfBadIdsDefersNothing
//   collect_deferred         here: KVBlockPoolBadInput.CollectSurvivesASourceThatThrows
//   is_live(id)              here: KVBlockPoolBadInput.IsLiveOfIdsOutOfRangeIsFalse
//   validate(why)            here: KVBlockPoolBadInput.IsLiveOfIdsOutOfRangeIsFalse (validate(nullptr))
#include <sys/sysinfo.h>

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include "kv/kv_test_util.hpp"

namespace unipool::test {
namespace {

bool error_mentions(const char* what) { return std::string(KVBlockPool::last_error()).find(what) != std::string::npos; }

// Fences it has handed out complete at once; once `lost` is set it throws for
// every fence, as a source that has lost its fences (a reset device) would.
class LosingFenceSource final : public FenceSource {
 public:
  bool lost = false;
  FenceId record(int, StreamHandle) override { return ++last_; }
  bool completed(FenceId) override {
    if (lost) throw std::runtime_error("LosingFenceSource: fence lost");
    return false;
  }
  void wait(FenceId) override {}
  void release(FenceId) override {
    if (lost) throw std::runtime_error("LosingFenceSource: fence lost");
  }

 private:
  FenceId last_ = 0;
};

TEST(KVBlockPoolBadInput, FreeAfterRefusesFenceZero) {
  KVBlockPool pool(small_kv_options(256, 8));
  ManualFenceSource fences;
  int64_t ids[2];
  ASSERT_EQ(pool.allocate(2, ids), Status::ok);
  ASSERT_EQ(pool.deallocate_after(ids, 2, fences, kNoFence), Status::bad_argument);
  EXPECT_TRUE(error_mentions("fence")) << KVBlockPool::last_error();
  EXPECT_TRUE(pool.is_live(ids[0]));
  EXPECT_TRUE(pool.is_live(ids[1]));
  EXPECT_EQ(pool.stats().deferred_blocks, 0u);
  EXPECT_EQ(pool.collect_deferred(), 0u);
  expect_valid(pool);
  EXPECT_EQ(pool.deallocate(ids, 2), Status::ok);
}

TEST(KVBlockPoolBadInput, FreeAfterRefusesAFenceNeverRecorded) {
  KVBlockPool pool(small_kv_options(256, 8));
  ManualFenceSource fences;
  int64_t ids[2];
  ASSERT_EQ(pool.allocate(2, ids), Status::ok);
  ASSERT_EQ(pool.deallocate_after(ids, 2, fences, 12345), Status::bad_argument);
  EXPECT_TRUE(error_mentions("fence 12345")) << KVBlockPool::last_error();
  EXPECT_TRUE(pool.is_live(ids[0]));
  EXPECT_EQ(pool.collect_deferred(), 0u);  // nothing deferred: nothing to ask the source about
  expect_valid(pool);
}

TEST(KVBlockPoolBadInput, FreeAfterRefusesAReleasedFence) {
  KVBlockPool pool(small_kv_options(256, 8));
  ManualFenceSource fences;
  uint32_t ids[1];
  ASSERT_EQ(pool.allocate(1, ids), Status::ok);
  const FenceId f = fences.record(0, 1);
  fences.release(f);
  ASSERT_EQ(pool.deallocate_after(ids, 1, fences, f), Status::bad_argument);
  EXPECT_TRUE(pool.is_live(ids[0]));
  expect_valid(pool);
}

TEST(KVBlockPoolBadInput, EmptyBatchReleasesItsFence) {
  KVBlockPool pool(small_kv_options(256, 8));
  ManualFenceSource fences;
  const int64_t none[1] = {0};
  EXPECT_EQ(pool.deallocate_after(none, 0, fences, fences.record(0, 1)), Status::ok);
  EXPECT_EQ(fences.outstanding(), 0u);  // nothing waits on it: the pool did not keep it
  EXPECT_EQ(pool.stats().deferred_blocks, 0u);
  expect_valid(pool);
}

// A fence that throws once deferred is treated as completed (its source has
// lost it: nothing is left to wait for), as the host pool does.
TEST(KVBlockPoolBadInput, CollectSurvivesASourceThatThrows) {
  KVBlockPool pool(small_kv_options(256, 4));
  LosingFenceSource fences;
  int64_t ids[4];
  ASSERT_EQ(pool.allocate(4, ids), Status::ok);
  ASSERT_EQ(pool.deallocate_after(ids, 2, fences, fences.record(0, 1)), Status::ok);
  fences.lost = true;
  // In a child first: before the fix this is std::terminate.
  EXPECT_EXIT(std::exit(pool.collect_deferred() == 2 ? 0 : 1), ::testing::ExitedWithCode(0), "");
  if (HasFailure()) return;
  EXPECT_EQ(pool.collect_deferred(), 2u);
  EXPECT_EQ(pool.free_blocks(), 2u);
  expect_valid(pool);
  // The same through alloc's reclaim, which runs when the pool is full.
  ASSERT_EQ(pool.allocate(2, ids), Status::ok);
  fences.lost = false;
  ASSERT_EQ(pool.deallocate_after(ids, 4, fences, fences.record(0, 1)), Status::ok);
  fences.lost = true;
  EXPECT_EQ(pool.allocate(4, ids), Status::ok);
  expect_valid(pool);
}

// Refused before an id is written: a caller may size `out` for what it can
// hold rather than for n (the Python binding passes one slot for an n
// beyond the pool).
TEST(KVBlockPoolBadInput, MoreBlocksThanThePoolHoldsWritesNoId) {
  KVBlockPool pool(small_kv_options(256, 8));
  int64_t one[1] = {-7};
  for (size_t n : {size_t{9}, size_t{1} << 40, ~size_t{0}}) {
    EXPECT_EQ(pool.allocate(n, one), Status::out_of_space) << n;
    EXPECT_TRUE(error_mentions("blocks asked")) << KVBlockPool::last_error();
    EXPECT_EQ(one[0], -7);
  }
  int64_t live[2];
  ASSERT_EQ(pool.allocate(2, live), Status::ok);
  EXPECT_EQ(pool.deallocate_and_allocate(live, 2, ~size_t{0}, one), Status::out_of_space);
  EXPECT_EQ(one[0], -7);
  EXPECT_TRUE(pool.is_live(live[0]) && pool.is_live(live[1]));  // nothing freed either
  EXPECT_EQ(pool.free_blocks(), 6u);
  expect_valid(pool);
}

// Bad ids are refused as free() refuses them, and nothing is deferred; the
// pool owns the fence from the call on, so it gives it back to its source.
TEST(KVBlockPoolBadInput, FreeAfterOfBadIdsDefersNothing) {
  KVBlockPool pool(small_kv_options(256, 8));
  ManualFenceSource fences;
  int64_t ids[2];
  ASSERT_EQ(pool.allocate(2, ids), Status::ok);
  const int64_t bad[3] = {ids[0], 8, ids[1]};
  EXPECT_EQ(pool.deallocate_after(bad, 3, fences, fences.record(0, 1)), Status::not_live);
  EXPECT_TRUE(error_mentions("out of range")) << KVBlockPool::last_error();
  const int64_t twice[2] = {ids[0], ids[0]};
  EXPECT_EQ(pool.deallocate_after(twice, 2, fences, fences.record(0, 1)), Status::not_live);
  EXPECT_EQ(fences.outstanding(), 0u);
  EXPECT_EQ(pool.stats().deferred_blocks, 0u);
  EXPECT_TRUE(pool.is_live(ids[0]) && pool.is_live(ids[1]));
  EXPECT_EQ(pool.deallocate_after(ids, 2, fences, fences.record(0, 1)), Status::ok);
  fences.complete_all();
  EXPECT_EQ(pool.collect_deferred(), 2u);
  expect_valid(pool);
}

TEST(KVBlockPoolBadInput, IsLiveOfIdsOutOfRangeIsFalse) {
  KVBlockPool pool(small_kv_options(256, 8));
  int64_t ids[8];
  ASSERT_EQ(pool.allocate(8, ids), Status::ok);
  for (uint64_t id : {uint64_t{8}, uint64_t{1} << 40, ~uint64_t{0}}) EXPECT_FALSE(pool.is_live(id)) << id;
  EXPECT_TRUE(pool.validate(nullptr));
  EXPECT_EQ(pool.deallocate(ids, 8), Status::ok);
}

TEST(KVBlockPoolBadInput, SizesWhoseStrideOverflowsAreRefused) {
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  for (uint64_t block_bytes : {kMax, kMax - 100, kMax - 255}) {
    try {
      KVBlockPool pool(small_kv_options(block_bytes, 1));
      ADD_FAILURE() << "block_bytes " << block_bytes << " accepted: stride " << pool.stride() << ", arena "
                    << pool.arena_bytes();
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("block_bytes"), std::string::npos) << e.what();
    }
  }
  KVBlockPoolOptions o = small_kv_options(kMax - (uint64_t{1} << 20), 1);
  o.alignment = uint64_t{2} << 20;  // rounds up past 2^64 though block_bytes + 255 would not
  EXPECT_THROW(KVBlockPool{o}, std::invalid_argument);
}

TEST(KVBlockPoolBadInput, SizesWhoseArenaOverflowsAreRefused) {
  for (uint64_t num_blocks : {uint64_t{2}, uint64_t{1} << 31}) {
    try {
      KVBlockPool pool(small_kv_options(uint64_t{1} << 62, num_blocks));
      ADD_FAILURE() << "accepted: arena " << pool.arena_bytes();
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("arena"), std::string::npos) << e.what();
    }
  }
}

// An arena the machine cannot hold (more than its RAM and swap) is refused at
// construction, naming its size and the machine's memory, rather than
// killed by the kernel at its first touch. first_touch is off so that a
// pool that wrongly accepts it touches nothing.
TEST(KVBlockPoolBadInput, ArenaLargerThanTheMachineIsRefused) {
  struct sysinfo si {};
  ASSERT_EQ(sysinfo(&si), 0);
  const uint64_t machine = (uint64_t{si.totalram} + si.totalswap) * si.mem_unit;
  KVBlockPoolOptions o = small_kv_options(uint64_t{1} << 30, 2 * (machine >> 30) + 1);
  o.first_touch = false;
  try {
    KVBlockPool pool(o);
    ADD_FAILURE() << "a " << o.num_blocks << " GiB arena was accepted";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(std::to_string(o.num_blocks << 30)), std::string::npos) << what;
    EXPECT_NE(what.find("memory"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace unipool::test
