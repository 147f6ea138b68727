// Random operation sequences (fixed seeds): allocations of mixed sizes on
// three streams, frees, record_stream, fence completions, empty_cache. After
// every step validate() holds; periodically the stats equal a recount from
// the snapshot and the JSON matches the snapshot.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <vector>

#include "device_test_support.hpp"
#include "support/rng.hpp"
#include "support/test_scale.hpp"

namespace unipool::test {
namespace {

struct Param {
  bool expandable;
  uint64_t seed;
};

class DevicePoolRandom : public ::testing::TestWithParam<Param> {};

TEST_P(DevicePoolRandom, StatsEqualSnapshotRecount) {
  const Param param = GetParam();
  SimPool sim(param.expandable, 512 * kMiB);
  DevicePool& pool = *sim.pool;
  Rng rng(param.seed);
  const StreamHandle streams[] = {kStreamA, kStreamB, kStreamC};
  std::vector<void*> live;
  const uint64_t steps = scaled(3000, 300);
  uint64_t ooms = 0;
  for (uint64_t step = 0; step < steps; ++step) {
    const uint64_t op = rng.below(100);
    if (op < 55 || live.empty()) {
      const uint64_t size = rng.chance(0.6) ? rng.log_uniform(1, kMiB) : rng.log_uniform(kMiB, 48 * kMiB);
      try {
        live.push_back(pool.allocate(size, streams[rng.below(3)]));
        EXPECT_EQ(pool.requested_size(live.back()), size);
      } catch (const OutOfMemoryError&) {
        ++ooms;
      }
    } else if (op < 90) {
      const uint64_t i = rng.below(live.size());
      pool.deallocate(live[i]);
      live[i] = live.back();
      live.pop_back();
    } else if (op < 95) {
      pool.record_stream(live[rng.below(live.size())], streams[rng.below(3)]);
    } else if (op < 99) {
      sim.backend->manual_fences().complete_stream(streams[rng.below(3)]);
    } else {
      pool.empty_cache();
    }
    ASSERT_VALID(pool) << "step " << step;
    if (step % 97 == 0) {
      expect_stats_match_snapshot(pool);
      const nlohmann::json j = nlohmann::json::parse(pool.snapshot_json());
      EXPECT_EQ(j["segments"].size(), pool.snapshot().segments.size());
    }
  }
  expect_stats_match_snapshot(pool);
  for (void* p : live) pool.deallocate(p);
  sim.backend->manual_fences().complete_all();
  pool.empty_cache();
  const DeviceStats s = pool.stats();
  EXPECT_EQ(s.reserved_bytes[0].current, 0);
  EXPECT_EQ(s.active[0].current, 0);
  EXPECT_EQ(s.num_ooms, static_cast<int64_t>(ooms));
  EXPECT_EQ(sim.backend->used_bytes(0), 0u);
  EXPECT_POOL_VALID(pool);
}

INSTANTIATE_TEST_SUITE_P(Seeds, DevicePoolRandom,
                         ::testing::Values(Param{false, 1}, Param{false, 2}, Param{false, 3}, Param{true, 1},
                                           Param{true, 2}, Param{true, 3}),
                         [](const auto& info) {
                           return std::string(info.param.expandable ? "expandable" : "plain") + "_seed" +
                                  std::to_string(info.param.seed);
                         });

}  // namespace
}  // namespace unipool::test
