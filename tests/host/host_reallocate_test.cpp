// unipool host: reallocate (realloc) keeps a block that still fits, remaps a
// huge block (mremap: no new mapping, exact accounting), grows or shrinks a
// large block in its arena where the range after it allows, moves the rest
// with their bytes, and leaves the block live and unchanged on every refusal.
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "host_test_util.hpp"

namespace unipool::test {
namespace {

uint64_t page_round(uint64_t n) {
  const auto page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return (n + page - 1) / page * page;
}

TEST(HostReallocate, SmallAndLargeBlocksMoveWithTheirBytes) {
  HostPool pool(kTestConf);
  void* p = pool.allocate(100);
  ASSERT_NE(p, nullptr);
  fill(p, 100, 1);
  const HostAllocation grown = pool.reallocate(p, 5000);  // past its class
  ASSERT_NE(grown, nullptr) << HostPool::last_error();
  EXPECT_NE(grown.ptr, p);
  EXPECT_TRUE(intact(grown.ptr, 100, 1));
  EXPECT_EQ(pool.usable_size(p), 0u);  // the old block was freed
  const size_t usable = pool.usable_size(grown.ptr);
  EXPECT_EQ(pool.reallocate(grown.ptr, usable / 2 + 1).ptr, grown.ptr);  // fits, wastes under half: stays

  fill(grown.ptr, usable, 2);
  const HostAllocation large = pool.reallocate(grown.ptr, 3 << 20);  // into a large block
  ASSERT_NE(large, nullptr) << HostPool::last_error();
  EXPECT_TRUE(intact(large.ptr, usable, 2));
  EXPECT_EQ(pool.stats().large_blocks, 1u);
  fill(large.ptr, 3 << 20, 3);
  const HostAllocation small = pool.reallocate(large.ptr, 64);  // wastes over half: moves back
  ASSERT_NE(small, nullptr);
  EXPECT_TRUE(intact(small.ptr, 64, 3));
  EXPECT_EQ(pool.stats().large_blocks, 0u);
  EXPECT_EQ(pool.deallocate(small.ptr), Status::ok);
  EXPECT_EQ(pool.stats().requested_bytes, 0u);
  EXPECT_VALID(pool);
}

// A large block (in an arena) grows into the free range after it and gives
// its tail back when it shrinks: same address, no copy, exact books. With
// a live block right after it, growing moves it.
TEST(HostReallocate, LargeBlockGrowsAndShrinksInItsArena) {
  HostPool pool(kTestConf);
  void* p = pool.allocate(200000);
  ASSERT_NE(p, nullptr);
  fill(p, 200000, 4);
  const HostAllocation grown = pool.reallocate(p, 700000);
  ASSERT_EQ(grown.ptr, p) << HostPool::last_error();
  EXPECT_GE(pool.usable_size(p), 700000u);
  EXPECT_TRUE(intact(p, 200000, 4));
  HostPoolStats st = pool.stats();
  EXPECT_EQ(st.large_blocks, 1u);
  EXPECT_EQ(st.requested_bytes, 700000u);
  EXPECT_LT(st.allocated_bytes, 700000u + 256);
  EXPECT_VALID(pool);
  fill(p, 700000, 5);
  const HostAllocation shrunk = pool.reallocate(p, 200000);
  ASSERT_EQ(shrunk.ptr, p);
  EXPECT_TRUE(intact(p, 200000, 5));
  st = pool.stats();
  EXPECT_EQ(st.requested_bytes, 200000u);
  EXPECT_LT(st.allocated_bytes, 200000u + 256);
  EXPECT_VALID(pool);

  EXPECT_EQ(pool.deallocate(p), Status::ok);
  EXPECT_EQ(pool.stats().allocated_bytes, 0u);
  EXPECT_VALID(pool);
}

TEST(HostReallocate, LargeBlockWithALiveNeighbourMoves) {
  HostPool pool(kTestConf);
  void* p = pool.allocate(200000);
  void* next = pool.allocate(200000);  // carved right after p
  ASSERT_TRUE(p != nullptr && next != nullptr);
  ASSERT_GT(static_cast<char*>(next), static_cast<char*>(p));
  // Right after p's usable bytes, behind its own 64-byte header.
  ASSERT_EQ(static_cast<char*>(next), static_cast<char*>(p) + pool.usable_size(p) + 64);
  fill(p, 200000, 6);
  const HostAllocation moved = pool.reallocate(p, 400000);
  ASSERT_NE(moved, nullptr) << HostPool::last_error();
  EXPECT_NE(moved.ptr, p);
  EXPECT_TRUE(intact(moved.ptr, 200000, 6));
  EXPECT_EQ(pool.usable_size(p), 0u);
  EXPECT_EQ(pool.deallocate(next), Status::ok);
  EXPECT_EQ(pool.deallocate(moved.ptr), Status::ok);
  EXPECT_EQ(pool.stats().allocated_bytes, 0u);
  EXPECT_VALID(pool);
}

TEST(HostReallocate, HugeBlockGrowsAndShrinksByRemapping) {
  HostPool pool(conf("huge_cache=0"));
  const size_t first = 16 * kMiB;
  void* p = pool.allocate(first);
  ASSERT_NE(p, nullptr);
  fill(p, first, 4);
  const HostPoolStats before = pool.stats();

  const HostAllocation grown = pool.reallocate(p, 64 * kMiB);
  ASSERT_NE(grown, nullptr) << HostPool::last_error();
  EXPECT_TRUE(intact(grown.ptr, first, 4));
  HostPoolStats st = pool.stats();
  EXPECT_EQ(st.huge_cache_misses, before.huge_cache_misses);  // no new mapping
  EXPECT_EQ(st.huge_blocks, 1u);
  EXPECT_EQ(st.committed_bytes, before.committed_bytes + 48 * kMiB);
  EXPECT_EQ(st.allocated_bytes, before.allocated_bytes + 48 * kMiB);
  EXPECT_EQ(st.requested_bytes, before.requested_bytes + 48 * kMiB);
  EXPECT_EQ(pool.usable_size(grown.ptr), 64 * kMiB);
  std::memset(static_cast<char*>(grown.ptr) + first, 0x5A, 48 * kMiB);  // the new tail is usable
  EXPECT_VALID(pool);

  const size_t small = 9 * kMiB + 1;
  const HostAllocation shrunk = pool.reallocate(grown.ptr, small);
  ASSERT_EQ(shrunk.ptr, grown.ptr);  // a shrink stays where it is
  EXPECT_TRUE(intact(shrunk.ptr, 9 * kMiB, 4));
  EXPECT_EQ(pool.usable_size(shrunk.ptr), page_round(small));
  st = pool.stats();
  EXPECT_EQ(st.committed_bytes, before.committed_bytes - first + page_round(small));  // the tail went back
  EXPECT_EQ(st.requested_bytes, before.requested_bytes - first + small);
  EXPECT_VALID(pool);

  EXPECT_EQ(pool.deallocate(shrunk.ptr), Status::ok);
  EXPECT_EQ(pool.stats().committed_bytes, before.committed_bytes - first);
  EXPECT_EQ(pool.stats().requested_bytes, 0u);
  EXPECT_VALID(pool);
}

TEST(HostReallocate, ManyHugeBlocksRemappedKeepTheirTableExact) {
  // Re-keying moved blocks in the table while others come and go.
  HostPool pool(conf("huge_cache=0"));
  std::vector<void*> blocks;
  for (uint8_t i = 0; i < 40; ++i) {
    void* p = pool.allocate(9 * kMiB + i * 4096);
    ASSERT_NE(p, nullptr);
    fill(p, 4096, i);
    blocks.push_back(p);
  }
  for (int round = 1; round <= 3; ++round) {
    for (size_t i = 0; i < blocks.size(); ++i) {
      const HostAllocation r = pool.reallocate(blocks[i], (9 * kMiB + i * 4096) * (1 + round % 2));
      ASSERT_NE(r, nullptr) << HostPool::last_error();
      EXPECT_TRUE(intact(r.ptr, 4096, static_cast<uint8_t>(i)));
      blocks[i] = r.ptr;
    }
    EXPECT_EQ(pool.stats().huge_blocks, blocks.size());
    EXPECT_VALID(pool);
  }
  for (void* p : blocks) EXPECT_EQ(pool.deallocate(p), Status::ok);
  EXPECT_EQ(pool.stats().committed_bytes, 0u);
  EXPECT_VALID(pool);
}

TEST(HostReallocate, UnderALimitAHugeBlockGrowsByCopying) {
  // With a limit, the headroom check and the count are one step only on
  // the allocation path: growth takes it.
  HostPool pool(conf("huge_cache=0,limit=256MiB"));
  void* p = pool.allocate(16 * kMiB);
  ASSERT_NE(p, nullptr);
  fill(p, 16 * kMiB, 5);
  const HostPoolStats before = pool.stats();
  const HostAllocation grown = pool.reallocate(p, 32 * kMiB);
  ASSERT_NE(grown, nullptr) << HostPool::last_error();
  EXPECT_TRUE(intact(grown.ptr, 16 * kMiB, 5));
  EXPECT_EQ(pool.stats().huge_cache_misses, before.huge_cache_misses + 1);  // a new mapping
  EXPECT_EQ(pool.stats().committed_bytes, before.committed_bytes + 16 * kMiB);

  const HostAllocation refused = pool.reallocate(grown.ptr, 512 * kMiB);  // past the limit
  EXPECT_EQ(refused, nullptr);
  EXPECT_EQ(refused.status, Status::out_of_space);
  EXPECT_TRUE(intact(grown.ptr, 16 * kMiB, 5));
  EXPECT_EQ(pool.usable_size(grown.ptr), 32 * kMiB);
  const HostAllocation shrunk = pool.reallocate(grown.ptr, 20 * kMiB);  // shrinks remap, limit or not
  EXPECT_EQ(shrunk.ptr, grown.ptr);
  EXPECT_EQ(pool.deallocate(shrunk.ptr), Status::ok);
  EXPECT_VALID(pool);
}

TEST(HostReallocate, RefusalsLeaveTheBlockLiveAndUnchanged) {
  HostPool pool(kTestConf);
  void* p = pool.allocate(1000);
  ASSERT_NE(p, nullptr);
  fill(p, 1000, 6);
  int local = 0;
  HostAllocation r = pool.reallocate(&local, 10);
  EXPECT_EQ(r.status, Status::not_live);
  EXPECT_NE(std::string(HostPool::last_error()).find("reallocate"), std::string::npos) << HostPool::last_error();
  r = pool.reallocate(static_cast<char*>(p) + 16, 10);  // interior
  EXPECT_EQ(r.status, Status::not_live);
  EXPECT_EQ(pool.reallocate(p, 0).status, Status::zero_size);
  EXPECT_EQ(pool.reallocate(p, SIZE_MAX).status, Status::too_large);
  EXPECT_TRUE(intact(p, 1000, 6));
  EXPECT_EQ(pool.usable_size(p), 1024u);
  EXPECT_EQ(pool.deallocate(p), Status::ok);
  EXPECT_EQ(pool.reallocate(p, 10).status, Status::not_live);  // freed
  EXPECT_EQ(pool.stats().misuse_errors, 3u);

  const HostAllocation fresh = pool.reallocate(nullptr, 64);  // allocates
  ASSERT_NE(fresh, nullptr);
  EXPECT_EQ(pool.deallocate(fresh.ptr), Status::ok);
  EXPECT_VALID(pool);
}

TEST(HostReallocate, WithHistoryAnAllocationThenAFreeAreRecorded) {
  HostPool pool(conf("huge_cache=0"));
  ASSERT_TRUE(pool.record_history(64));
  void* p = pool.allocate(16 * kMiB);
  ASSERT_NE(p, nullptr);
  fill(p, 4096, 7);
  const uint64_t misses = pool.stats().huge_cache_misses;
  const HostAllocation r = pool.reallocate(p, 32 * kMiB);
  ASSERT_NE(r, nullptr);
  EXPECT_TRUE(intact(r.ptr, 4096, 7));
  // Moved, not remapped: the old address is recorded free before anyone
  // else can be handed it.
  EXPECT_EQ(pool.stats().huge_cache_misses, misses + 1);
  const std::vector<HostHistoryEntry> h = pool.history();
  ASSERT_GE(h.size(), 3u);
  const HostHistoryEntry& alloc = h[h.size() - 2];
  const HostHistoryEntry& freed = h.back();
  EXPECT_EQ(alloc.action, HostHistoryAction::alloc);
  EXPECT_EQ(alloc.address, reinterpret_cast<uint64_t>(r.ptr));
  EXPECT_EQ(alloc.size, 32 * kMiB);
  EXPECT_EQ(freed.action, HostHistoryAction::free);
  EXPECT_EQ(freed.address, reinterpret_cast<uint64_t>(p));
  EXPECT_EQ(pool.deallocate(r.ptr), Status::ok);
  EXPECT_VALID(pool);
}

}  // namespace
}  // namespace unipool::test
