// LockedRangeAllocator: the wrapper forwards faithfully, and several threads
// sharing one allocator never get overlapping ranges and leave it whole.
// Runs under ThreadSanitizer in the tsan preset.
#include "unipool/locked_range_allocator.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "support/rng.hpp"
#include "support/test_scale.hpp"
#include "support/units.hpp"
#include "support/valid.hpp"

namespace unipool {
namespace {

using test::kKiB;
using test::kMiB;

TEST(LockedRangeAllocator, ForwardsEveryCall) {
  LockedRangeAllocator a(1 * kMiB, {.alignment = 256});
  EXPECT_VALID(a);
  EXPECT_EQ(a.capacity(), 1 * kMiB);
  const RangeAllocation x = a.allocate(100);
  ASSERT_TRUE(x);
  EXPECT_EQ(x.offset, 0u);
  const RangeAllocation y = a.allocate(100, 4096);
  ASSERT_TRUE(y);
  EXPECT_EQ(y.offset, 4096u);
  EXPECT_VALID(a);
  EXPECT_EQ(a.used_bytes(), 512u);
  EXPECT_EQ(a.requested_bytes(), 200u);
  EXPECT_EQ(a.free_bytes(), 1 * kMiB - 512);
  EXPECT_EQ(a.live_allocations(), 2u);
  EXPECT_EQ(a.free_ranges(), 2u);
  EXPECT_EQ(a.largest_free(), 1 * kMiB - 4096 - 256);
  EXPECT_DOUBLE_EQ(a.fragmentation(), 1.0 - static_cast<double>(1 * kMiB - 4096 - 256) / (1 * kMiB - 512));
  EXPECT_EQ(a.deallocate(y.offset + 256, y.handle), Status::not_live);
  LockedRangeAllocator other(1 * kMiB, {.alignment = 256});
  EXPECT_EQ(other.deallocate(y), Status::foreign);  // the owner tag is checked here too
  EXPECT_EQ(a.deallocate(y), Status::ok);
  EXPECT_EQ(a.deallocate(x.offset, x.handle), Status::ok);
  EXPECT_EQ(a.deallocate(x), Status::not_live);
  EXPECT_EQ(a.allocate(0).status, Status::zero_size);
  EXPECT_EQ(a.extend(1 * kMiB), Status::ok);
  EXPECT_EQ(a.capacity(), 2 * kMiB);
  EXPECT_EQ(a.free_ranges(), 1u);
  EXPECT_VALID(a);
  const uint64_t ranges = a.with_lock([](RangeAllocator& inner) {
    uint64_t n = 0;
    inner.for_each_range([&](const RangeInfo&) { ++n; });
    return n;
  });
  EXPECT_EQ(ranges, 1u);
}

// Four threads allocate and free at random, each freeing only its own
// allocations. Every 256-byte granule of the pool has an owner slot: a thread
// claims the granules of each range it gets and releases them before freeing,
// so two threads ever holding one byte would be seen at once.
TEST(LockedRangeAllocator, ThreadsShareOnePool) {
  constexpr int kThreads = 4;
  constexpr uint64_t kGranule = 256;
  constexpr uint64_t kCapacity = 2 * kMiB;
  const uint64_t ops = test::scaled(40000, 500);
  LockedRangeAllocator a(kCapacity, {.alignment = kGranule});
  std::unique_ptr<std::atomic<int>[]> owner(new std::atomic<int>[kCapacity / kGranule]);
  for (uint64_t g = 0; g < kCapacity / kGranule; ++g) owner[g].store(-1, std::memory_order_relaxed);

  std::atomic<uint64_t> overlaps{0}, bad_status{0}, invalid{0}, successes{0};
  auto worker = [&](int id) {
    test::Rng rng(1000 + static_cast<uint64_t>(id));
    std::vector<RangeAllocation> mine;
    auto claim = [&](const RangeAllocation& x, int from, int to) {
      const uint64_t first = x.offset / kGranule;
      const uint64_t count = (a.with_lock([&](RangeAllocator& inner) {
                               return inner.allocation_size(x.offset, x.handle);
                             }) + kGranule - 1) / kGranule;
      for (uint64_t g = first; g < first + count; ++g) {
        int expected = from;
        if (!owner[g].compare_exchange_strong(expected, to, std::memory_order_acq_rel)) overlaps.fetch_add(1);
      }
    };
    auto release_one = [&](size_t i) {
      claim(mine[i], id, -1);  // before free(): afterwards another thread may get it
      if (a.deallocate(mine[i]) != Status::ok) bad_status.fetch_add(1);
      mine[i] = mine.back();
      mine.pop_back();
    };
    for (uint64_t step = 0; step < ops; ++step) {
      if (mine.empty() || rng.chance(0.55)) {
        const uint64_t align = rng.chance(0.1) ? 4096 : 0;
        const RangeAllocation x = a.allocate(rng.log_uniform(1, 32 * kKiB), align);
        if (x) {
          if (x.offset % kGranule != 0 || (align != 0 && x.offset % align != 0)) bad_status.fetch_add(1);
          claim(x, -1, id);
          mine.push_back(x);
          successes.fetch_add(1, std::memory_order_relaxed);
        } else if (x.status != Status::out_of_space) {
          bad_status.fetch_add(1);
        } else if (!mine.empty()) {
          release_one(rng.below(mine.size()));
        }
      } else {
        release_one(rng.below(mine.size()));
      }
      if (step % 64 == 0) {
        // Readers interleaved with writers: each call alone is only sane,
        // a with_lock() snapshot is consistent.
        if (a.free_bytes() > a.capacity() || a.used_bytes() > a.capacity()) bad_status.fetch_add(1);
        const double f = a.fragmentation();
        if (f < 0.0 || f > 1.0) bad_status.fetch_add(1);
        a.with_lock([&](RangeAllocator& inner) {
          if (inner.largest_free() > inner.free_bytes() || inner.used_bytes() + inner.free_bytes() != kCapacity ||
              inner.requested_bytes() > inner.used_bytes()) {
            bad_status.fetch_add(1);
          }
        });
      }
      if (step % 512 == 0 && !a.validate()) invalid.fetch_add(1);
    }
    while (!mine.empty()) release_one(mine.size() - 1);
  };

  std::vector<std::thread> threads;
  for (int id = 0; id < kThreads; ++id) threads.emplace_back(worker, id);
  for (auto& t : threads) t.join();

  EXPECT_EQ(overlaps.load(), 0u);
  EXPECT_EQ(bad_status.load(), 0u);
  EXPECT_EQ(invalid.load(), 0u);
  EXPECT_GT(successes.load(), ops);  // the pool was really used
  EXPECT_EQ(a.live_allocations(), 0u);
  EXPECT_EQ(a.used_bytes(), 0u);
  EXPECT_EQ(a.requested_bytes(), 0u);
  EXPECT_EQ(a.free_bytes(), a.capacity());
  EXPECT_EQ(a.free_ranges(), 1u);
  EXPECT_EQ(a.largest_free(), kCapacity);
  EXPECT_VALID(a);
  for (uint64_t g = 0; g < kCapacity / kGranule; ++g) ASSERT_EQ(owner[g].load(), -1) << g;
}

// with_lock() makes several calls one step: no other thread sees the
// allocation made and freed inside it.
TEST(LockedRangeAllocator, WithLockIsAtomicAcrossCalls) {
  constexpr int kThreads = 4;
  const uint64_t ops = test::scaled(5000, 100);
  LockedRangeAllocator a(1 * kMiB);
  std::atomic<uint64_t> errors{0};
  auto worker = [&](int id) {
    test::Rng rng(77 + static_cast<uint64_t>(id));
    for (uint64_t i = 0; i < ops; ++i) {
      a.with_lock([&](RangeAllocator& inner) {
        const uint64_t live = inner.live_allocations();
        const uint64_t used = inner.used_bytes();
        const RangeAllocation x = inner.allocate(rng.between(1, 4096));
        if (!x || inner.live_allocations() != live + 1) errors.fetch_add(1);
        if (inner.deallocate(x) != Status::ok || inner.used_bytes() != used) errors.fetch_add(1);
      });
    }
  };
  std::vector<std::thread> threads;
  for (int id = 0; id < kThreads; ++id) threads.emplace_back(worker, id);
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0u);
  EXPECT_EQ(a.live_allocations(), 0u);
  EXPECT_EQ(a.free_bytes(), a.capacity());
  EXPECT_VALID(a);
}

}  // namespace
}  // namespace unipool
