// unipool host: large blocks of concurrent threads come from separate arenas
// (each with its own lock), frees cross them freely, and the threads' live
// counts, kept in per-heap tallies, stay exact in stats() and validate().
#include <gtest/gtest.h>

#include <barrier>
#include <thread>
#include <vector>

#include "host_test_util.hpp"

namespace unipool::test {
namespace {

constexpr uint64_t kReserve = uint64_t{1} << 30;  // kTestConf's reserve=1GiB
constexpr size_t kLarge = 200000;                 // above middle_max, below huge_threshold

// `threads` threads each allocate one large block at once and hand it back;
// returns the blocks and the pool's reserved bytes while all were live.
std::vector<void*> allocate_together(HostPool& pool, int threads, uint64_t* reserved) {
  std::vector<void*> blocks(static_cast<size_t>(threads), nullptr);
  std::barrier sync(threads + 1);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      blocks[static_cast<size_t>(t)] = pool.allocate(kLarge);
      fill(blocks[static_cast<size_t>(t)], kLarge, static_cast<uint8_t>(t));
      sync.arrive_and_wait();  // all live
      sync.arrive_and_wait();  // counted
    });
  }
  sync.arrive_and_wait();
  *reserved = pool.stats().reserved_bytes;
  sync.arrive_and_wait();
  for (std::thread& w : workers) w.join();
  return blocks;
}

TEST(HostLargeShards, ConcurrentThreadsTakeLargeBlocksFromSeparateArenas) {
  HostPool pool(kTestConf);
  uint64_t reserved = 0;
  // Threads are spread over 8 shards by the order they started: of three
  // consecutive threads at least two have shards of their own.
  std::vector<void*> blocks = allocate_together(pool, 3, &reserved);
  EXPECT_GE(reserved, 2 * kReserve);
  for (size_t i = 0; i < blocks.size(); ++i) {
    ASSERT_NE(blocks[i], nullptr);
    EXPECT_TRUE(intact(blocks[i], kLarge, static_cast<uint8_t>(i)));
  }
  HostPoolStats st = pool.stats();
  EXPECT_EQ(st.large_blocks, 3u);
  EXPECT_EQ(st.requested_bytes, 3 * kLarge);
  EXPECT_VALID(pool);
  // Freed by another thread than the one that allocated: each goes back to its own arena.
  for (void* p : blocks) EXPECT_EQ(pool.deallocate(p), Status::ok);
  st = pool.stats();
  EXPECT_EQ(st.large_blocks, 0u);
  EXPECT_EQ(st.requested_bytes, 0u);
  EXPECT_EQ(st.allocated_bytes, 0u);
  EXPECT_VALID(pool);
  for (void* p : blocks) EXPECT_EQ(pool.deallocate(p), Status::not_live);  // double frees still caught
}

TEST(HostLargeShards, WithALimitEveryThreadSharesArenaZero) {
  // A limit on committed bytes serializes arena growth; shards would only add arenas.
  HostPool pool(conf("limit=256MiB"));
  uint64_t reserved = 0;
  std::vector<void*> blocks = allocate_together(pool, 3, &reserved);
  EXPECT_EQ(reserved, kReserve);
  for (void* p : blocks) EXPECT_EQ(pool.deallocate(p), Status::ok);
  EXPECT_VALID(pool);
}

TEST(HostLargeShards, UnderALimitAFreeRangeInAnotherArenaIsUsedBeforeRefusing) {
  // Arena 0 keeps 20 MiB of its reservation unused; arena 1 holds a freed
  // 30 MiB range. A 20 MiB request would push arena 0 past the limit: it
  // must come from arena 1's free range, not be refused.
  HostPool pool("reserve=64MiB,huge_threshold=32MiB,limit=80MiB,retain=1GiB");
  void* a = pool.allocate(20 * kMiB);
  void* b = pool.allocate(20 * kMiB);
  void* c = pool.allocate(30 * kMiB);  // does not fit arena 0: a second arena
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(pool.stats().reserved_bytes, 2 * (uint64_t{64} << 20));
  ASSERT_EQ(pool.deallocate(c), Status::ok);
  const uint64_t committed = pool.stats().committed_bytes;
  void* d = pool.allocate(20 * kMiB);
  ASSERT_NE(d, nullptr) << HostPool::last_error();
  EXPECT_EQ(d, c);  // the front of arena 1's free range
  EXPECT_EQ(pool.stats().committed_bytes, committed);  // nothing grown
  fill(d, 20 * kMiB, 7);
  // Nothing free fits 40 MiB and growing passes the limit: a clear refusal.
  EXPECT_EQ(pool.allocate(40 * kMiB), nullptr);
  EXPECT_NE(std::string(HostPool::last_error()).find("limit"), std::string::npos) << HostPool::last_error();
  EXPECT_LE(pool.stats().peak_committed_bytes, uint64_t{80} << 20);
  EXPECT_TRUE(intact(d, 20 * kMiB, 7));
  EXPECT_VALID(pool);
  for (void* p : {a, b, d}) EXPECT_EQ(pool.deallocate(p), Status::ok);
  EXPECT_VALID(pool);
}

TEST(HostLargeShards, CountsAreExactWhileAThreadHoldsUnfoldedBlocks) {
  HostPool pool(kTestConf);
  std::barrier sync(2);
  std::vector<void*> held;
  std::thread worker([&] {
    // A small block first: the thread gets its heap, which keeps the tally.
    ASSERT_EQ(pool.deallocate(pool.allocate(64)), Status::ok);
    // Three blocks (300 KB) stay below the 4 MiB a heap folds at.
    for (int i = 0; i < 3; ++i) held.push_back(pool.allocate(kLarge + static_cast<size_t>(i)));
    sync.arrive_and_wait();  // counted by the main thread
    sync.arrive_and_wait();
    for (void* p : held) EXPECT_EQ(pool.deallocate(p), Status::ok);
  });
  sync.arrive_and_wait();
  HostPoolStats st = pool.stats();
  EXPECT_EQ(st.large_blocks, 3u);
  EXPECT_EQ(st.requested_bytes, 3 * kLarge + 3);
  // Each block's extent: its usable bytes (its size, or its large-cache
  // class's) and a 64-byte header.
  uint64_t extents = 0;
  for (void* p : held) extents += pool.usable_size(p) + 64;
  EXPECT_GE(st.allocated_bytes, st.requested_bytes);
  EXPECT_EQ(st.allocated_bytes, extents);
  // The growth was folded as it raised the peaks.
  EXPECT_GE(st.peak_requested_bytes, 3 * kLarge + 3);
  EXPECT_VALID(pool);
  sync.arrive_and_wait();
  worker.join();
  st = pool.stats();
  EXPECT_EQ(st.large_blocks, 0u);
  EXPECT_EQ(st.requested_bytes, 0u);
  EXPECT_GE(st.peak_requested_bytes, 3 * kLarge + 3);
  EXPECT_EQ(st.allocated_bytes + st.deferred_bytes + st.cached_bytes + st.overhead_bytes + st.arena_free_bytes,
            st.committed_bytes);
  EXPECT_VALID(pool);
}

}  // namespace
}  // namespace unipool::test
