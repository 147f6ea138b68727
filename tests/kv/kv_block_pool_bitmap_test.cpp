// KVBlockPool's bitmaps: lowest-free-first order against a model, pools deep
// enough for several summary levels, and every shape of batch that free
// takes its own path for (a run, ascending ids, any order; more than 64 ids),
// each refused with nothing changed when one id is bad.
#include <algorithm>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kv/kv_simd.hpp"
#include "kv/kv_test_util.hpp"
#include "support/test_scale.hpp"

namespace unipool::test {
namespace {

// Which blocks are live, block by block.
std::vector<bool> live_map(const KVBlockPool& pool) {
  std::vector<bool> live(pool.num_blocks());
  for (uint64_t id = 0; id < pool.num_blocks(); ++id) live[id] = pool.is_live(id);
  return live;
}

TEST(KVBlockPoolBitmap, AllocHandsOutTheLowestFreeIdsAscending) {
  // 300,000 blocks: four levels (4,688 words, 74, 2, 1).
  KVBlockPool pool(small_kv_options(64, 300000));
  std::mt19937_64 rng(3);
  std::set<int64_t> free_model;
  for (int64_t id = 0; id < 300000; ++id) free_model.insert(id);
  std::vector<int64_t> live;
  const int steps = std::max(100, static_cast<int>(3000 * test_scale()));
  for (int step = 0; step < steps; ++step) {
    if (rng() % 2 == 0 || live.empty()) {
      const size_t n = rng() % 300;
      std::vector<int64_t> ids(n);
      ASSERT_EQ(pool.allocate(n, ids.data()), Status::ok);
      // Exactly the n lowest free ids, in ascending order.
      auto it = free_model.begin();
      for (size_t i = 0; i < n; ++i, ++it) ASSERT_EQ(ids[i], *it) << "step " << step << " id " << i;
      free_model.erase(free_model.begin(), it);
      live.insert(live.end(), ids.begin(), ids.end());
    } else {
      std::shuffle(live.begin(), live.end(), rng);
      const size_t n = 1 + rng() % std::min<size_t>(live.size(), 300);
      std::vector<int64_t> batch(live.end() - static_cast<ptrdiff_t>(n), live.end());
      live.resize(live.size() - n);
      if (rng() % 3 == 0) std::sort(batch.begin(), batch.end());  // the ascending path too
      ASSERT_EQ(pool.deallocate(batch.data(), n), Status::ok);
      free_model.insert(batch.begin(), batch.end());
    }
    ASSERT_EQ(pool.free_blocks(), free_model.size());
    if (step % 256 == 0) expect_valid(pool);
  }
  expect_valid(pool);
  // The whole pool, across every word and level, then back.
  std::vector<int64_t> rest(free_model.size());
  ASSERT_EQ(pool.allocate(rest.size(), rest.data()), Status::ok);
  EXPECT_TRUE(std::equal(rest.begin(), rest.end(), free_model.begin()));
  EXPECT_EQ(pool.free_blocks(), 0u);
  int64_t one;
  EXPECT_EQ(pool.allocate(1, &one), Status::out_of_space);
  live.insert(live.end(), rest.begin(), rest.end());
  ASSERT_EQ(pool.deallocate(live.data(), live.size()), Status::ok);
  EXPECT_EQ(pool.free_blocks(), 300000u);
  expect_valid(pool);
}

TEST(KVBlockPoolBitmap, PoolsOfOddSizesNeverHandOutAnIdPastTheEnd) {
  for (uint64_t blocks : {1u, 63u, 64u, 65u, 4095u, 4096u, 4097u, 262145u}) {
    KVBlockPool pool(small_kv_options(64, blocks));
    std::vector<uint32_t> ids(blocks);
    ASSERT_EQ(pool.allocate(blocks, ids.data()), Status::ok) << blocks;
    for (uint64_t i = 0; i < blocks; ++i) ASSERT_EQ(ids[i], i);
    uint32_t extra;
    EXPECT_EQ(pool.allocate(1, &extra), Status::out_of_space) << blocks;
    expect_valid(pool);
    ASSERT_EQ(pool.deallocate(ids.data(), blocks), Status::ok);
    EXPECT_EQ(pool.free_blocks(), blocks);
    expect_valid(pool);
  }
}

// A batch of `shape` built from live blocks: a run, ascending with gaps, or
// shuffled; n may exceed 64 (release_any works 64 ids at a time).
std::vector<int64_t> live_batch(const std::string& shape, size_t n, std::mt19937_64& rng) {
  std::vector<int64_t> ids(n);
  if (shape == "run") {
    std::iota(ids.begin(), ids.end(), 100);
  } else {
    for (size_t i = 0; i < n; ++i) ids[i] = static_cast<int64_t>(3 * i + 1);  // gaps: not a run
    if (shape == "any") std::shuffle(ids.begin(), ids.end(), rng);
  }
  return ids;
}

TEST(KVBlockPoolBitmap, EveryBatchShapeRefusesABadIdAndChangesNothing) {
  std::mt19937_64 rng(9);
  for (const std::string shape : {"run", "ascending", "any"}) {
    for (size_t n : {2u, 64u, 65u, 200u}) {
      for (const std::string bad : {"out of range", "negative", "double free", "deferred", "twice"}) {
        for (size_t at : {size_t{0}, n / 2, n - 1}) {
          ManualFenceSource fences;  // outlives the pool, which releases its pending fences
          KVBlockPool pool(small_kv_options(64, 1024));
          std::vector<int64_t> all(1024);
          ASSERT_EQ(pool.allocate(1024, all.data()), Status::ok);
          const int64_t freed = 900, deferred = 901;
          ASSERT_EQ(pool.deallocate(&freed, 1), Status::ok);
          ASSERT_EQ(pool.deallocate_after(&deferred, 1, fences, fences.record(0, 1)), Status::ok);
          std::vector<int64_t> batch = live_batch(shape, n, rng);
          if (bad == "out of range") batch[at] = 1024 + static_cast<int64_t>(at);
          if (bad == "negative") batch[at] = -1;
          if (bad == "double free") batch[at] = freed;
          if (bad == "deferred") batch[at] = deferred;
          if (bad == "twice") batch[at] = batch[at == 0 ? 1 : 0];
          const std::vector<bool> before = live_map(pool);
          const KVBlockPoolStats st = pool.stats();
          const std::string where = shape + " n=" + std::to_string(n) + " " + bad + " at " + std::to_string(at);
          ASSERT_EQ(pool.deallocate(batch.data(), n), Status::not_live) << where;
          const std::string error = KVBlockPool::last_error();
          const char* expected = bad == "out of range" || bad == "negative" ? "out of range"
                                 : bad == "twice"                          ? "appears twice"
                                 : bad == "deferred"                       ? "waiting on a fence"
                                                                           : "not allocated: double free";
          EXPECT_NE(error.find(expected), std::string::npos) << where << ": " << error;
          EXPECT_NE(error.find("nothing was freed"), std::string::npos) << where;
          EXPECT_EQ(live_map(pool), before) << where;
          EXPECT_EQ(pool.free_blocks(), st.free_blocks) << where;
          EXPECT_EQ(pool.stats().misuse_errors, st.misuse_errors + 1) << where;
          // The same through free_after: refused, and its fence released.
          const size_t fences_before = fences.outstanding();
          ASSERT_EQ(pool.deallocate_after(batch.data(), n, fences, fences.record(0, 2)), Status::not_live) << where;
          EXPECT_EQ(fences.outstanding(), fences_before) << where;
          EXPECT_EQ(live_map(pool), before) << where;
          expect_valid(pool);
        }
      }
      // And the good batch of that shape is taken, then the pool is whole.
      KVBlockPool pool(small_kv_options(64, 1024));
      std::vector<int64_t> all(1024);
      ASSERT_EQ(pool.allocate(1024, all.data()), Status::ok);
      std::vector<int64_t> batch = live_batch(shape, n, rng);
      ASSERT_EQ(pool.deallocate(batch.data(), n), Status::ok) << shape << " " << n;
      for (int64_t id : batch) EXPECT_FALSE(pool.is_live(id));
      EXPECT_EQ(pool.free_blocks(), n);
      expect_valid(pool);
    }
  }
}

// Runs of every length up to past two words, starting anywhere in a word, in
// each id type: the run path's vector loops (and their tails) and its one-,
// two- and many-word cases. A run with one block not live is refused whole.
template <class Id>
void check_runs_of_every_length() {
  for (uint64_t offset : {0u, 1u, 31u, 63u, 64u}) {
    for (size_t n = 1; n <= 150; ++n) {
      const std::string where = std::to_string(sizeof(Id) * 8) + "-bit ids, run of " + std::to_string(n) + " at " +
                                std::to_string(offset);
      KVBlockPool pool(small_kv_options(64, 512));
      std::vector<Id> all(512);
      ASSERT_EQ(pool.allocate(all.size(), all.data()), Status::ok);
      std::vector<Id> run(n);
      std::iota(run.begin(), run.end(), static_cast<Id>(offset));
      // One block in the middle of the run freed first: the run is refused.
      const Id hole = run[n / 2];
      ASSERT_EQ(pool.deallocate(&hole, 1), Status::ok) << where;
      ASSERT_EQ(pool.deallocate(run.data(), n), Status::not_live) << where;
      EXPECT_EQ(pool.free_blocks(), 1u) << where;
      std::vector<Id> back(1);
      ASSERT_EQ(pool.allocate(1, back.data()), Status::ok) << where;
      ASSERT_EQ(back[0], hole) << where;
      // Its ends are those of a run but one id near the end repeats the
      // first: not a run (the vector test's tail decides), refused whole.
      if (n >= 3) {
        std::vector<Id> fake = run;
        fake[n - 2] = fake[0];
        ASSERT_EQ(pool.deallocate(fake.data(), n), Status::not_live) << where;
        EXPECT_NE(std::string(KVBlockPool::last_error()).find("appears twice"), std::string::npos) << where;
        EXPECT_EQ(pool.free_blocks(), 0u) << where;
      }
      // The whole run, then the same blocks back through free_and_alloc in
      // place: the lowest free ids are the run itself.
      ASSERT_EQ(pool.deallocate(run.data(), n), Status::ok) << where;
      EXPECT_EQ(pool.free_blocks(), n) << where;
      for (Id id : run) ASSERT_FALSE(pool.is_live(static_cast<uint64_t>(id))) << where;
      expect_valid(pool);
      std::vector<Id> again(n, Id{0});
      ASSERT_EQ(pool.allocate(n, again.data()), Status::ok) << where;
      ASSERT_EQ(again, run) << where;
      ASSERT_EQ(pool.deallocate_and_allocate(again.data(), n, n, again.data()), Status::ok) << where;
      ASSERT_EQ(again, run) << where;
      EXPECT_EQ(pool.free_blocks(), 0u) << where;
      expect_valid(pool);
    }
  }
}

TEST(KVBlockPoolBitmap, RunsOfEveryLengthAndOffsetInEachIdTypeAndVectorWidth) {
  const kv::SimdLevel best = kv::simd_level();
  for (kv::SimdLevel level : {kv::SimdLevel::base, kv::SimdLevel::avx2, kv::SimdLevel::avx512}) {
    if (!kv::use_simd_level(level)) continue;  // this CPU lacks it
    SCOPED_TRACE("vector loops " + std::to_string(static_cast<int>(level)));
    check_runs_of_every_length<int64_t>();
    check_runs_of_every_length<int32_t>();
    check_runs_of_every_length<uint32_t>();
  }
  kv::use_simd_level(best);
}

TEST(KVBlockPoolBitmap, DeferredBatchesOfEveryShapeComeBackFree) {
  std::mt19937_64 rng(5);
  ManualFenceSource fences;
  KVBlockPool pool(small_kv_options(64, 1024));
  std::vector<int64_t> all(1024);
  ASSERT_EQ(pool.allocate(1024, all.data()), Status::ok);
  size_t deferred = 0;
  for (const std::string shape : {"run", "ascending", "any"}) {
    std::vector<int64_t> batch = live_batch(shape, 70, rng);
    for (int64_t& id : batch) id += shape == "run" ? 0 : shape == "ascending" ? 400 : 700;  // disjoint batches
    ASSERT_EQ(pool.deallocate_after(batch.data(), batch.size(), fences, fences.record(0, 1)), Status::ok) << shape;
    deferred += batch.size();
    EXPECT_EQ(pool.stats().deferred_blocks, deferred);
    EXPECT_EQ(pool.free_blocks(), 0u);
    expect_valid(pool);
  }
  fences.complete_all();
  EXPECT_EQ(pool.collect_deferred(), deferred);
  EXPECT_EQ(pool.free_blocks(), deferred);
  expect_valid(pool);
}

}  // namespace
}  // namespace unipool::test
