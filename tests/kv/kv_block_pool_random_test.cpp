// KVBlockPool: random batches against a model (a set of live ids), and
// threads allocating and freeing at once. Fixed seeds.
#include <algorithm>
#include <atomic>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "kv/kv_test_util.hpp"
#include "support/test_scale.hpp"

namespace unipool::test {
namespace {

TEST(KVBlockPoolRandom, MatchesALiveSetModel) {
  KVBlockPool pool(small_kv_options(256, 500));
  ManualFenceSource fences;
  std::mt19937_64 rng(12345);
  std::vector<int64_t> live;
  std::set<int64_t> model;
  uint64_t deferred = 0;
  const int steps = std::max(200, static_cast<int>(20000 * test_scale()));
  for (int step = 0; step < steps; ++step) {
    const int action = static_cast<int>(rng() % 10);
    if (action < 5) {
      const size_t n = rng() % 40;
      std::vector<int64_t> ids(n);
      const Status s = pool.allocate(n, ids.data());
      if (s != Status::ok) {
        // Refused only when too few blocks are free even after reclaiming
        // the completed deferrals.
        ASSERT_EQ(s, Status::out_of_space);
        ASSERT_GT(n, pool.free_blocks());
        continue;
      }
      for (int64_t id : ids) ASSERT_TRUE(model.insert(id).second) << "block " << id << " handed out twice";
      live.insert(live.end(), ids.begin(), ids.end());
    } else if (!live.empty()) {
      std::shuffle(live.begin(), live.end(), rng);
      const size_t n = 1 + rng() % std::min<size_t>(live.size(), 40);
      std::vector<int64_t> batch(live.end() - static_cast<ptrdiff_t>(n), live.end());
      live.resize(live.size() - n);
      if (action < 8) {
        ASSERT_EQ(pool.deallocate(batch.data(), n), Status::ok);
        for (int64_t id : batch) model.erase(id);
      } else {
        ASSERT_EQ(pool.deallocate_after(batch.data(), n, fences, fences.record(0, rng() % 3)), Status::ok);
        for (int64_t id : batch) model.erase(id);  // not live any more, but not free yet
        deferred += n;
      }
      if (rng() % 4 == 0) {
        ASSERT_EQ(pool.deallocate(batch.data(), 1), Status::not_live);  // double free
      }
    }
    if (rng() % 16 == 0) fences.complete_stream(rng() % 3);
    if (step % 512 == 0) expect_valid(pool);
    ASSERT_EQ(pool.stats().live_blocks, model.size());
  }
  expect_valid(pool);
  fences.complete_all();
  pool.collect_deferred();
  ASSERT_EQ(pool.deallocate(live.data(), live.size()), Status::ok);
  EXPECT_EQ(pool.free_blocks(), pool.num_blocks());
  EXPECT_GT(deferred, 0u);
  expect_valid(pool);
}

TEST(KVBlockPoolRandom, ThreadsNeverShareABlock) {
  KVBlockPool pool(small_kv_options(64, 4096));
  const int threads = 4;
  const int rounds = std::max(100, static_cast<int>(5000 * test_scale()));
  std::vector<std::thread> workers;
  std::atomic<int> failures{0};
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937 rng(77 + t);
      std::vector<int64_t> ids(64);
      for (int r = 0; r < rounds; ++r) {
        const size_t n = 1 + rng() % 64;
        if (pool.allocate(n, ids.data()) != Status::ok) continue;
        // Stamp each block with the thread; another owner would overwrite it.
        for (size_t i = 0; i < n; ++i) *static_cast<int64_t*>(pool.block(ids[i])) = t * 1000000 + ids[i];
        for (size_t i = 0; i < n; ++i) {
          if (*static_cast<int64_t*>(pool.block(ids[i])) != t * 1000000 + ids[i]) failures.fetch_add(1);
        }
        if (pool.deallocate(ids.data(), n) != Status::ok) failures.fetch_add(1);
      }
    });
  }
  for (auto& w : workers) w.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(pool.free_blocks(), 4096u);
  expect_valid(pool);
}

}  // namespace
}  // namespace unipool::test
