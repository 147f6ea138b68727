// Many threads on one pool (and on two devices): allocations and frees on
// their own streams, record_stream to a shared stream whose fences another
// thread completes, stats/snapshot/empty_cache readers. Run under TSan by the
// tsan preset; the books must be exact afterwards.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "device_test_support.hpp"
#include "support/rng.hpp"
#include "support/test_scale.hpp"

namespace unipool::test {
namespace {

class DevicePoolThreads : public ::testing::TestWithParam<bool> {};

TEST_P(DevicePoolThreads, StressKeepsExactBooks) {
  SimPool sim(GetParam(), 2 * kGiB);
  DevicePool& pool = *sim.pool;
  std::atomic<int64_t> hook_bytes{0};
  pool.set_segment_hooks({[&](const DeviceSegmentEvent& e) { hook_bytes += static_cast<int64_t>(e.bytes); },
                          [&](const DeviceSegmentEvent& e) { hook_bytes -= static_cast<int64_t>(e.bytes); }});
  constexpr int kWorkers = 4;
  constexpr StreamHandle kShared = 0x9000;
  const uint64_t ops = scaled(20000, 500);
  std::atomic<bool> done{false};
  std::atomic<int> finished{0};

  std::vector<std::thread> threads;
  for (int t = 0; t < kWorkers; ++t) {
    threads.emplace_back([&, t] {
      Rng rng(100 + static_cast<uint64_t>(t));
      const StreamHandle mine = 0x100 * static_cast<StreamHandle>(t + 1);
      std::vector<void*> live;
      for (uint64_t i = 0; i < ops; ++i) {
        if (live.size() < 16 && (live.empty() || rng.chance(0.55))) {
          const uint64_t size = rng.chance(0.7) ? rng.log_uniform(1, kMiB) : rng.log_uniform(kMiB, 24 * kMiB);
          try {
            live.push_back(pool.allocate(size, mine));
          } catch (const OutOfMemoryError&) {
          }
        } else {
          const uint64_t k = rng.below(live.size());
          if (rng.chance(0.1)) pool.record_stream(live[k], kShared);
          pool.deallocate(live[k]);
          live[k] = live.back();
          live.pop_back();
        }
      }
      for (void* p : live) pool.deallocate(p);
      ++finished;
    });
  }
  threads.emplace_back([&] {  // the "GPU": completes fences as work drains
    while (!done.load()) {
      sim.backend->manual_fences().complete_all();
      std::this_thread::yield();
    }
  });
  threads.emplace_back([&] {  // observers and the occasional empty_cache
    int round = 0;
    while (finished.load() < kWorkers) {
      (void)pool.stats();
      if (++round % 4 == 0) (void)pool.snapshot_json();
      if (round % 16 == 0) pool.empty_cache();
      std::this_thread::yield();
    }
  });
  for (int t = 0; t < kWorkers; ++t) threads[static_cast<size_t>(t)].join();
  done = true;
  for (size_t t = kWorkers; t < threads.size(); ++t) threads[t].join();

  sim.backend->manual_fences().complete_all();
  pool.empty_cache();
  EXPECT_POOL_VALID(pool);
  expect_stats_match_snapshot(pool);
  const DeviceStats s = pool.stats();
  EXPECT_EQ(s.active[0].current, 0);
  EXPECT_EQ(s.reserved_bytes[0].current, 0);
  EXPECT_EQ(hook_bytes.load(), 0);
  EXPECT_EQ(sim.backend->used_bytes(0), 0u);
}

TEST(DevicePoolThreadsMultiDevice, DevicesAreIndependent) {
  auto pools = DevicePools::create("backend=sim,sim_devices=2,sim_capacity=512MiB");
  const uint64_t ops = scaled(5000, 200);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      Rng rng(7 + static_cast<uint64_t>(t));
      std::vector<std::pair<void*, int>> live;
      for (uint64_t i = 0; i < ops; ++i) {
        if (live.size() < 8 && (live.empty() || rng.chance(0.5))) {
          const int device = static_cast<int>(rng.below(2));
          live.emplace_back(pools->allocate(rng.log_uniform(1, 8 * kMiB), device, 0x10u + static_cast<unsigned>(t)),
                            device);
        } else {
          const uint64_t k = rng.below(live.size());
          pools->deallocate(live[k].first, rng.chance(0.5) ? live[k].second : -1);
          live[k] = live.back();
          live.pop_back();
        }
      }
      for (auto& [p, d] : live) pools->deallocate(p, d);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_VALID(*pools);
  for (int d = 0; d < 2; ++d) EXPECT_EQ(pools->pool(d).stats().allocation[0].current, 0);
}

INSTANTIATE_TEST_SUITE_P(Segments, DevicePoolThreads, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "expandable" : "plain"; });

}  // namespace
}  // namespace unipool::test
