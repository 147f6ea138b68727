// Checkpoints and restores (what cudagraph trees do to a graph pool), on the
// simulated device, plain and expandable: random sequences that restore
// earlier checkpoints and check the live blocks, the result lists, stats
// against the snapshot recount and validate(); memory still used on other
// streams is waited for, never handed out early; a checkpoint whose
// segment was given back, or of another pool, is refused with the pool
// unchanged.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "device_test_support.hpp"
#include "support/rng.hpp"
#include "support/test_scale.hpp"

namespace unipool::test {
namespace {

// What a test knows of a live block.
struct LiveBlock {
  uint64_t size;  // requested
  StreamHandle stream;
};
using LiveSet = std::map<uint64_t, LiveBlock>;  // by address

LiveSet live_of(const DeviceCheckpoint& cp) {
  LiveSet out;
  for (const DeviceCheckpointSegment& s : cp.segments) {
    for (const DeviceCheckpointBlock& b : s.blocks) out[b.address] = LiveBlock{b.requested, b.stream};
  }
  return out;
}

std::set<uint64_t> addresses(const std::vector<void*>& ptrs) {
  std::set<uint64_t> out;
  for (void* p : ptrs) out.insert(reinterpret_cast<uint64_t>(p));
  EXPECT_EQ(out.size(), ptrs.size()) << "an address is listed twice";
  return out;
}

std::set<uint64_t> keys(const LiveSet& s) {
  std::set<uint64_t> out;
  for (const auto& [a, b] : s) out.insert(a);
  return out;
}

void* at(uint64_t address) { return reinterpret_cast<void*>(address); }

class Checkpoint : public ::testing::TestWithParam<bool> {
 protected:
  SimPool sim{GetParam(), 512 * kMiB};
  DevicePool& pool = *sim.pool;
};

TEST_P(Checkpoint, ListsTheAllocatedBlocksOnly) {
  void* a = pool.allocate(3 * kMiB, kStreamA);
  void* b = pool.allocate(1000, kStreamA);
  void* c = pool.allocate(5 * kMiB, kStreamA);
  pool.record_stream(c, kStreamB);
  pool.deallocate(c);  // pending: waits for kStreamB's fence, not allocated
  const DeviceCheckpoint cp = pool.checkpoint();
  EXPECT_EQ(cp.device, 0);
  EXPECT_EQ(cp.allocated_blocks(), 2u);
  EXPECT_EQ(cp.allocated_bytes(), 3 * kMiB + 1024);
  const LiveSet live = live_of(cp);
  ASSERT_EQ(live.size(), 2u);
  EXPECT_EQ(live.at(reinterpret_cast<uint64_t>(a)).size, 3 * kMiB);
  EXPECT_EQ(live.at(reinterpret_cast<uint64_t>(b)).size, 1000u);
  EXPECT_EQ(live.at(reinterpret_cast<uint64_t>(b)).stream, kStreamA);
  for (const DeviceCheckpointSegment& s : cp.segments) {
    EXPECT_EQ(s.expandable, GetParam());
    for (const DeviceCheckpointBlock& blk : s.blocks) {
      EXPECT_GE(blk.address, s.address);
      EXPECT_LE(blk.address + blk.size, s.address + s.size);
      EXPECT_EQ(s.small, blk.size < kMiB);
    }
  }
  sim.backend->manual_fences().complete_all();
  pool.deallocate(a);
  pool.deallocate(b);
}

TEST_P(Checkpoint, RestoreFreesNewBlocksAndReallocatesMissingOnesAtTheirAddresses) {
  void* keep = pool.allocate(2 * kMiB, kStreamA);
  void* gone = pool.allocate(6 * kMiB, kStreamA);
  void* small = pool.allocate(4096, kStreamA);
  const DeviceCheckpoint cp = pool.checkpoint();
  pool.deallocate(gone);
  pool.deallocate(small);
  void* extra = pool.allocate(7 * kMiB, kStreamA);  // may well land where `gone` was
  void* extra2 = pool.allocate(8192, kStreamA);
  const DeviceStats before = pool.stats();

  const DeviceRestoreResult r = pool.restore(cp);
  EXPECT_EQ(addresses(r.kept), (std::set<uint64_t>{reinterpret_cast<uint64_t>(keep)}));
  EXPECT_EQ(addresses(r.freed), addresses({extra, extra2}));
  EXPECT_EQ(addresses(r.allocated), addresses({gone, small}));
  EXPECT_TRUE(pool.owns(keep) && pool.owns(gone) && pool.owns(small));
  EXPECT_EQ(pool.requested_size(gone), 6 * kMiB);
  EXPECT_EQ(pool.requested_size(small), 4096u);
  if (extra != gone) EXPECT_FALSE(pool.owns(extra));
  const DeviceStats s = pool.stats();
  EXPECT_EQ(s.allocation[0].current, 3);
  EXPECT_EQ(s.allocated_bytes[0].current, static_cast<int64_t>(8 * kMiB + 4096));
  EXPECT_EQ(s.requested_bytes[0].current, static_cast<int64_t>(8 * kMiB + 4096));
  EXPECT_EQ(s.reserved_bytes[0].current, before.reserved_bytes[0].current) << "a restore never grows or releases";
  EXPECT_EQ(s.num_device_alloc, before.num_device_alloc);
  expect_stats_match_snapshot(pool);
  EXPECT_POOL_VALID(pool);
  // The restored blocks are ordinary blocks: freed once, refused the second time.
  pool.deallocate(gone);
  EXPECT_THROW(pool.deallocate(gone), DevicePoolError);
  pool.deallocate(small);
  pool.deallocate(keep);
  EXPECT_EQ(pool.stats().allocation[0].current, 0);
  EXPECT_POOL_VALID(pool);
}

TEST_P(Checkpoint, APendingFreeInTheWayIsWaitedForFirst) {
  void* p = pool.allocate(4 * kMiB, kStreamA);
  const DeviceCheckpoint cp = pool.checkpoint();
  pool.record_stream(p, kStreamB);
  pool.deallocate(p);  // waits for a fence on kStreamB
  ASSERT_EQ(sim.backend->manual_fences().outstanding(), 1u);
  ASSERT_EQ(pool.stats().active[0].current, 1);

  const DeviceRestoreResult r = pool.restore(cp);  // the sim's wait completes the fence
  EXPECT_EQ(addresses(r.allocated), addresses({p}));
  EXPECT_TRUE(r.freed.empty() && r.kept.empty());
  EXPECT_EQ(sim.backend->manual_fences().outstanding(), 0u);
  EXPECT_EQ(pool.stats().active[0].current, 1);
  EXPECT_EQ(pool.stats().allocation[0].current, 1);
  expect_stats_match_snapshot(pool);
  EXPECT_POOL_VALID(pool);
  pool.deallocate(p);
}

TEST_P(Checkpoint, ABlockInTheWayUsedOnAnotherStreamIsSynchronizedBeforeReuse) {
  void* p = pool.allocate(4 * kMiB, kStreamA);
  void* spacer = pool.allocate(1 * kMiB, kStreamA);  // right after p
  const DeviceCheckpoint cp = pool.checkpoint();
  pool.deallocate(p);
  void* q = pool.allocate(2 * kMiB, kStreamA);  // the same place, another size
  ASSERT_EQ(q, p);
  pool.record_stream(q, kStreamB);
  void* far = pool.allocate(3 * kMiB, kStreamA);  // after the spacer (too big for p's rest): not in p's way
  ASSERT_GT(reinterpret_cast<uint64_t>(far), reinterpret_cast<uint64_t>(spacer));
  pool.record_stream(far, kStreamC);

  const DeviceRestoreResult r = pool.restore(cp);
  EXPECT_EQ(addresses(r.freed), addresses({q, far}));
  EXPECT_EQ(addresses(r.allocated), addresses({p}));
  EXPECT_EQ(addresses(r.kept), addresses({spacer}));
  EXPECT_EQ(pool.requested_size(p), 4 * kMiB);
  // q's use on kStreamB was waited for (its memory is p's now); far's on
  // kStreamC was not needed: far waits for its fence as after a deallocate.
  EXPECT_EQ(sim.backend->manual_fences().outstanding(), 1u);
  const DeviceStats s = pool.stats();
  EXPECT_EQ(s.allocation[0].current, 2);
  EXPECT_EQ(s.active[0].current, 3);
  expect_stats_match_snapshot(pool);
  EXPECT_POOL_VALID(pool);
  sim.backend->manual_fences().complete_all();
  pool.deallocate(p);
  pool.deallocate(spacer);
  pool.empty_cache();
  EXPECT_EQ(pool.stats().active[0].current, 0);
  EXPECT_POOL_VALID(pool);
}

TEST_P(Checkpoint, ASegmentGivenBackMakesRestoreFailWithThePoolUnchanged) {
  void* p = pool.allocate(6 * kMiB, kStreamA);
  const DeviceCheckpoint cp = pool.checkpoint();
  pool.deallocate(p);
  pool.empty_cache();  // the segment (or its granules) goes back to the device
  ASSERT_EQ(pool.stats().reserved_bytes[0].current, 0);
  void* other = pool.allocate(4096, kStreamB);  // something live, of another kind and stream
  const DeviceStats before = pool.stats();
  const DeviceSnapshot snap_before = pool.snapshot();
  try {
    pool.restore(cp);
    FAIL() << "restore of a checkpoint whose memory was given back succeeded";
  } catch (const DevicePoolError& e) {
    EXPECT_EQ(e.status(), Status::not_live);
    const std::string what = e.what();
    EXPECT_NE(what.find(GetParam() ? "unmapped" : "given back"), std::string::npos) << what;
  }
  EXPECT_TRUE(pool.owns(other));
  EXPECT_FALSE(pool.owns(p));
  EXPECT_EQ(pool.stats().allocation[0].current, before.allocation[0].current);
  EXPECT_EQ(pool.stats().reserved_bytes[0].current, before.reserved_bytes[0].current);
  EXPECT_EQ(pool.snapshot().segments.size(), snap_before.segments.size());
  EXPECT_POOL_VALID(pool);
  pool.deallocate(other);
}

TEST_P(Checkpoint, ACheckpointOfAnotherPoolIsRefused) {
  SimPool other(GetParam(), 256 * kMiB);
  void* p = other.pool->allocate(kMiB, kStreamA);
  const DeviceCheckpoint cp = other.pool->checkpoint();
  try {
    pool.restore(cp);
    FAIL() << "restored another pool's checkpoint";
  } catch (const DevicePoolError& e) {
    EXPECT_EQ(e.status(), Status::bad_argument);
  }
  EXPECT_EQ(pool.stats().allocation[0].current, 0);
  other.pool->deallocate(p);
}

TEST_P(Checkpoint, AnEmptyCheckpointFreesEverything) {
  const DeviceCheckpoint empty = pool.checkpoint();
  std::vector<void*> ptrs;
  for (int i = 0; i < 20; ++i) ptrs.push_back(pool.allocate((i + 1) * 300 * 1024, i % 2 ? kStreamA : kStreamB));
  const DeviceRestoreResult r = pool.restore(empty);
  EXPECT_EQ(addresses(r.freed), addresses(ptrs));
  EXPECT_TRUE(r.allocated.empty() && r.kept.empty());
  EXPECT_EQ(pool.stats().allocation[0].current, 0);
  // Blocks of one stream carved from the other's segments wait for a fence,
  // as after deallocate(); nothing else is left.
  expect_stats_match_snapshot(pool);
  EXPECT_POOL_VALID(pool);
  sim.backend->manual_fences().complete_all();
  pool.empty_cache();
  EXPECT_EQ(pool.stats().active[0].current, 0);
  EXPECT_EQ(pool.stats().reserved_bytes[0].current, 0);
  EXPECT_POOL_VALID(pool);
}

// Restores while other threads allocate (growing the pool, mapping granules),
// free and record streams on the same pool, and a "GPU" thread completes
// fences: no deadlock, no race (TSan), books exact. The workers' blocks may be
// freed under them by a restore (that is what a restore does to blocks not in
// the checkpoint), so they free with try_deallocate and ignore not_live.
TEST_P(Checkpoint, RestoresRaceWithGrowthAndFreesOnOtherThreads) {
  std::vector<void*> mine;
  for (int i = 0; i < 6; ++i) mine.push_back(pool.allocate((i + 1) * 700 * 1024, kStreamA));
  const DeviceCheckpoint cp = pool.checkpoint();
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      Rng rng(500 + static_cast<uint64_t>(t));
      const StreamHandle s = t == 0 ? kStreamB : kStreamC;
      std::vector<void*> live;
      for (uint64_t i = 0; i < scaled(3000, 200); ++i) {
        if (live.size() < 12 && (live.empty() || rng.chance(0.55))) {
          try {
            live.push_back(pool.allocate(rng.log_uniform(1, 16 * kMiB), s));
          } catch (const OutOfMemoryError&) {
          }
        } else {
          const uint64_t k = rng.below(live.size());
          if (rng.chance(0.2)) {
            try {
              pool.record_stream(live[k], 0x7700);
            } catch (const DevicePoolError&) {  // freed by a restore meanwhile
            }
          }
          (void)pool.try_deallocate(live[k]);
          live[k] = live.back();
          live.pop_back();
        }
      }
      for (void* p : live) (void)pool.try_deallocate(p);
    });
  }
  std::thread gpu([&] {
    while (!stop.load()) {
      sim.backend->manual_fences().complete_all();
      std::this_thread::yield();
    }
  });
  uint64_t restores = 0;
  for (uint64_t i = 0; i < scaled(300, 30); ++i) {
    pool.restore(cp);
    ++restores;
    std::this_thread::yield();
  }
  for (std::thread& t : threads) t.join();
  stop = true;
  gpu.join();
  // Alone again: one more restore leaves exactly the checkpoint's blocks.
  sim.backend->manual_fences().complete_all();
  pool.restore(cp);
  EXPECT_EQ(keys(live_of(pool.checkpoint())), keys(live_of(cp)));
  EXPECT_EQ(pool.stats().allocation[0].current, 6);
  expect_stats_match_snapshot(pool);
  EXPECT_POOL_VALID(pool);
  EXPECT_GT(restores, 0u);
  pool.restore(pool.checkpoint());  // a no-op restore keeps everything
  EXPECT_EQ(pool.stats().allocation[0].current, 6);
  for (void* p : mine) pool.deallocate(p);
  sim.backend->manual_fences().complete_all();
  pool.empty_cache();
  EXPECT_EQ(pool.stats().reserved_bytes[0].current, 0);
  EXPECT_POOL_VALID(pool);
}

// Random sequences on two streams with record_stream and fence completions;
// checkpoints are taken along the way and restored in random order (never
// releasing memory, so every segment is still there). After each restore the
// live blocks are exactly the checkpoint's, the result lists partition what
// was live and what is live now, and the books are exact.
struct RandomParam {
  bool expandable;
  uint64_t seed;
};

class CheckpointRandom : public ::testing::TestWithParam<RandomParam> {};

TEST_P(CheckpointRandom, RestoresAreExact) {
  const RandomParam param = GetParam();
  SimPool sim(param.expandable, 1024 * kMiB);
  DevicePool& pool = *sim.pool;
  Rng rng(param.seed);
  const StreamHandle streams[] = {kStreamA, kStreamB};
  LiveSet live;
  std::vector<DeviceCheckpoint> saved;
  uint64_t restores = 0, reallocated = 0, kept = 0, freed = 0;
  const uint64_t steps = scaled(2000, 300);
  for (uint64_t step = 0; step < steps; ++step) {
    const uint64_t op = rng.below(100);
    if (op < 45 || live.empty()) {
      const uint64_t size = rng.chance(0.5) ? rng.log_uniform(1, kMiB) : rng.log_uniform(kMiB, 24 * kMiB);
      const StreamHandle s = streams[rng.below(2)];
      try {
        void* p = pool.allocate(size, s);
        live[reinterpret_cast<uint64_t>(p)] = LiveBlock{size, s};
      } catch (const OutOfMemoryError&) {
      }
    } else if (op < 80) {
      auto it = live.begin();
      std::advance(it, static_cast<long>(rng.below(live.size())));
      pool.deallocate(at(it->first));
      live.erase(it);
    } else if (op < 86) {
      auto it = live.begin();
      std::advance(it, static_cast<long>(rng.below(live.size())));
      pool.record_stream(at(it->first), streams[rng.below(2)] + 0x10);  // a third or fourth stream
    } else if (op < 90) {
      sim.backend->manual_fences().complete_stream(streams[rng.below(2)] + 0x10);
    } else if (op < 95) {
      saved.push_back(pool.checkpoint());
      ASSERT_EQ(live_of(saved.back()).size(), live.size());
      if (saved.size() > 6) saved.erase(saved.begin() + static_cast<long>(rng.below(saved.size())));
    } else if (!saved.empty()) {
      const DeviceCheckpoint& cp = saved[rng.below(saved.size())];
      const LiveSet want = live_of(cp);
      const DeviceRestoreResult r = pool.restore(cp);
      ++restores;
      const std::set<uint64_t> f = addresses(r.freed), a = addresses(r.allocated), k = addresses(r.kept);
      reallocated += a.size();
      kept += k.size();
      freed += f.size();
      // freed + kept = what was live; allocated + kept = what the checkpoint has.
      std::set<uint64_t> was = f, now = a;
      was.insert(k.begin(), k.end());
      now.insert(k.begin(), k.end());
      ASSERT_EQ(was.size(), f.size() + k.size());
      ASSERT_EQ(now.size(), a.size() + k.size());
      EXPECT_EQ(was, keys(live)) << "step " << step;
      EXPECT_EQ(now, keys(want)) << "step " << step;
      live = want;
      const LiveSet got = live_of(pool.checkpoint());
      ASSERT_EQ(keys(got), keys(want)) << "step " << step;
      for (const auto& [address, b] : want) {
        EXPECT_EQ(got.at(address).size, b.size);
        EXPECT_EQ(got.at(address).stream, b.stream);
        EXPECT_EQ(pool.requested_size(at(address)), b.size);
      }
      expect_stats_match_snapshot(pool);
    }
    ASSERT_VALID(pool) << "step " << step;
  }
  std::cout << "[ stats    ] " << restores << " restores: " << reallocated << " blocks allocated again, " << kept
            << " kept, " << freed << " freed\n";
  EXPECT_GT(restores, 5u);
  EXPECT_GT(reallocated, 0u);
  EXPECT_GT(freed, 0u);
  for (const auto& [address, b] : live) pool.deallocate(at(address));
  sim.backend->manual_fences().complete_all();
  pool.empty_cache();
  EXPECT_EQ(pool.stats().reserved_bytes[0].current, 0);
  EXPECT_EQ(sim.backend->used_bytes(0), 0u);
  EXPECT_POOL_VALID(pool);
}

INSTANTIATE_TEST_SUITE_P(Segments, Checkpoint, ::testing::Values(false, true),
                         [](const auto& info) { return std::string(info.param ? "expandable" : "plain"); });

INSTANTIATE_TEST_SUITE_P(Seeds, CheckpointRandom,
                         ::testing::Values(RandomParam{false, 11}, RandomParam{false, 12}, RandomParam{false, 13},
                                           RandomParam{true, 11}, RandomParam{true, 12}, RandomParam{true, 13}),
                         [](const auto& info) {
                           return std::string(info.param.expandable ? "expandable" : "plain") + "_seed" +
                                  std::to_string(info.param.seed);
                         });

}  // namespace
}  // namespace unipool::test
