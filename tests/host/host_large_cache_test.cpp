// unipool host: the threads' large caches (csrc/host/large_cache.hpp). A
// thread that holds many large blocks keeps the ones of at most 256 KiB it
// frees, by size class, and hands the last one freed out again; the cache
// stays within its bounds, goes back to the arenas at trim(), thread exit and
// under a limit, and a cached block is free (a second free is refused,
// usable_size() is 0); validate() recounts it.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "host_test_util.hpp"
#include "support/valid.hpp"

namespace unipool::test {
namespace {

constexpr size_t kKiB = 1024;
constexpr size_t kHeld = 16;          // live large blocks a thread needs before it caches
constexpr size_t kUncached = 300000;  // a large block above the cached sizes

void free_all(HostPool& pool, const std::vector<void*>& blocks) {
  for (void* p : blocks) EXPECT_EQ(pool.deallocate(p), Status::ok) << HostPool::last_error();
}

// With no small block anywhere, the pool's cached bytes are the large caches'.
uint64_t cached(const HostPool& pool) { return pool.stats().cached_bytes; }

TEST(HostLargeCache, TheLastFreedBlockIsTheNextAllocated) {
  HostPool pool(kTestConf);
  const std::vector<void*> held = allocate_n(pool, kHeld, kUncached);
  void* a = pool.allocate(200000);
  void* b = pool.allocate(200000);
  ASSERT_TRUE(a != nullptr && b != nullptr);
  const uint64_t extent = pool.usable_size(a) + 64;
  ASSERT_EQ(pool.deallocate(a), Status::ok);
  ASSERT_EQ(pool.deallocate(b), Status::ok);
  EXPECT_EQ(cached(pool), 2 * extent);
  EXPECT_EQ(pool.stats().large_blocks, kHeld);
  EXPECT_VALID(pool);
  // Any size of the class (192-224 KiB) takes them, newest first.
  EXPECT_EQ(pool.allocate(210000).ptr, b);
  EXPECT_EQ(pool.allocate(193 * kKiB).ptr, a);
  EXPECT_EQ(cached(pool), 0u);
  EXPECT_EQ(pool.stats().requested_bytes, kHeld * kUncached + 210000 + 193 * kKiB);
  EXPECT_VALID(pool);
  free_all(pool, {a, b});
  free_all(pool, held);
  EXPECT_EQ(pool.stats().allocated_bytes, 0u);
  EXPECT_VALID(pool);
}

TEST(HostLargeCache, BlocksAreRoundedUpToTheirClass) {
  HostPool pool(kTestConf);
  struct Case {
    size_t size, usable;
  };
  for (const Case c : {Case{128 * kKiB + 1, 160 * kKiB}, Case{161 * kKiB, 192 * kKiB}, Case{256 * kKiB, 256 * kKiB}}) {
    void* p = pool.allocate(c.size);
    ASSERT_NE(p, nullptr) << HostPool::last_error();
    EXPECT_EQ(pool.usable_size(p), c.usable) << c.size;
    EXPECT_EQ(pool.deallocate(p), Status::ok);
  }
  // Past 256 KiB, exact sizes (64-byte granules).
  void* p = pool.allocate(256 * kKiB + 1);
  EXPECT_LT(pool.usable_size(p), 256 * kKiB + 128);
  EXPECT_EQ(pool.deallocate(p), Status::ok);
  // Lean policies and hardened=on have no large cache, so no rounding either.
  for (const char* extra : {"thread_cache=size", "thread_cache=none", "hardened=on"}) {
    HostPool lean(conf(extra));
    void* q = lean.allocate(200000);
    ASSERT_NE(q, nullptr) << extra << ": " << HostPool::last_error();
    EXPECT_LT(lean.usable_size(q), 200000u + 128) << extra;
    EXPECT_EQ(lean.deallocate(q), Status::ok);
  }
  EXPECT_VALID(pool);
}

// A thread with few live large blocks frees them to the arena: there, the
// next request gets the same memory back anyway (measured: caching them
// cost such workloads page faults and 3-9% of their speed). The block being
// freed counts: 16 live with it.
TEST(HostLargeCache, AThreadWithFewLargeBlocksDoesNotCache) {
  HostPool pool(kTestConf);
  const std::vector<void*> held = allocate_n(pool, kHeld - 2, kUncached);
  void* p = pool.allocate(200000);
  ASSERT_EQ(pool.deallocate(p), Status::ok);  // 15 live with it: not cached
  EXPECT_EQ(cached(pool), 0u);
  const std::vector<void*> one_more = allocate_n(pool, 1, kUncached);
  void* q = pool.allocate(200000);
  const uint64_t extent = pool.usable_size(q) + 64;
  ASSERT_EQ(pool.deallocate(q), Status::ok);  // 16 live with it: cached
  EXPECT_EQ(cached(pool), extent);
  EXPECT_VALID(pool);
  free_all(pool, one_more);
  free_all(pool, held);
  EXPECT_VALID(pool);
}

// Blocks resized in place or aligned past 64 bytes are not their class's
// exact extent: they go back to the arena.
TEST(HostLargeCache, ResizedAndAlignedBlocksAreNotCached) {
  HostPool pool(kTestConf);
  const std::vector<void*> held = allocate_n(pool, kHeld, kUncached);
  void* aligned = pool.allocate(200000, 4096);
  ASSERT_NE(aligned, nullptr) << HostPool::last_error();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(aligned) % 4096, 0u);
  EXPECT_LT(pool.usable_size(aligned), 200000u + 128);
  ASSERT_EQ(pool.deallocate(aligned), Status::ok);
  EXPECT_EQ(cached(pool), 0u);
  // The last block of the arena: it grows in place into the free range after it.
  void* grown = pool.allocate(200000);
  const HostAllocation r = pool.reallocate(grown, 240000);
  ASSERT_EQ(r.ptr, grown) << HostPool::last_error();
  EXPECT_GE(pool.usable_size(grown), 240000u);
  ASSERT_EQ(pool.deallocate(grown), Status::ok);
  EXPECT_EQ(cached(pool), 0u);
  EXPECT_VALID(pool);
  free_all(pool, held);
  EXPECT_VALID(pool);
}

// A request the cache cannot serve takes memory the arena handed out before
// when some fits, and the cache keeps its blocks.
TEST(HostLargeCache, AMissTakesUsedMemoryFirst) {
  HostPool pool(kTestConf);
  std::vector<void*> held = allocate_n(pool, kHeld + 1, kUncached);
  void* p = pool.allocate(200000);
  const uint64_t extent = pool.usable_size(p) + 64;
  ASSERT_EQ(pool.deallocate(p), Status::ok);
  void* hole = held.back();
  held.pop_back();
  ASSERT_EQ(pool.deallocate(hole), Status::ok);  // an uncached size: to the arena
  ASSERT_EQ(cached(pool), extent);
  const uint64_t committed = pool.stats().committed_bytes;
  void* q = pool.allocate(250000);  // 256 KiB class: none cached
  ASSERT_NE(q, nullptr) << HostPool::last_error();
  EXPECT_EQ(q, hole);
  EXPECT_EQ(cached(pool), extent);
  EXPECT_EQ(pool.stats().committed_bytes, committed);
  EXPECT_VALID(pool);
  EXPECT_EQ(pool.deallocate(q), Status::ok);
  free_all(pool, held);
  EXPECT_VALID(pool);
}

TEST(HostLargeCache, ACachedBlockIsFree) {
  HostPool pool(kTestConf);
  const std::vector<void*> held = allocate_n(pool, kHeld, kUncached);
  void* p = pool.allocate(150000);
  ASSERT_EQ(pool.deallocate(p), Status::ok);
  ASSERT_GT(cached(pool), 0u);
  EXPECT_EQ(pool.usable_size(p), 0u);
  EXPECT_FALSE(pool.owns(p));
  EXPECT_EQ(pool.deallocate(p), Status::not_live);
  EXPECT_NE(std::string(HostPool::last_error()).find("double free"), std::string::npos) << HostPool::last_error();
  EXPECT_EQ(pool.reallocate(p, 1000).ptr, nullptr);
  EXPECT_EQ(pool.stats().misuse_errors, 2u);
  EXPECT_VALID(pool);
  free_all(pool, held);
}

TEST(HostLargeCache, StaysWithinItsClassLimitAndBudget) {
  HostPool pool(kTestConf);
  const std::vector<void*> held = allocate_n(pool, kHeld + 16, kUncached);
  // 224 KiB blocks: at most 4 (1 MiB of them); the fifth free gives the
  // older half back first.
  const std::vector<void*> mid = allocate_n(pool, 5, 200000);
  const uint64_t extent = pool.usable_size(mid[0]) + 64;
  for (size_t i = 0; i < 4; ++i) ASSERT_EQ(pool.deallocate(mid[i]), Status::ok);
  EXPECT_EQ(cached(pool), 4 * extent);
  ASSERT_EQ(pool.deallocate(mid[4]), Status::ok);
  EXPECT_EQ(cached(pool), 3 * extent);
  EXPECT_VALID(pool);
  // A request the cache cannot serve, when no memory handed out before
  // fits it, gives the cache back before the arena takes new memory.
  const std::vector<void*> top = allocate_n(pool, 4, 250000);
  EXPECT_EQ(cached(pool), 0u);
  const uint64_t top_extent = pool.usable_size(top[0]) + 64;
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_EQ(pool.deallocate(top[i]), Status::ok);
    EXPECT_EQ(cached(pool), (i + 1) * top_extent);
  }
  // 1 MiB in all: a fourth 256 KiB block makes the fullest class give back
  // its older half first.
  ASSERT_EQ(pool.deallocate(top[3]), Status::ok);
  EXPECT_EQ(cached(pool), 2 * top_extent);
  EXPECT_VALID(pool);
  free_all(pool, held);
  EXPECT_VALID(pool);
}

TEST(HostLargeCache, AFreeByAnotherThreadGoesToThatThreadsCache) {
  HostPool pool(kTestConf);
  const std::vector<void*> held = allocate_n(pool, kHeld, kUncached);
  void* theirs = nullptr;
  std::thread([&] { theirs = pool.allocate(200000); }).join();
  ASSERT_NE(theirs, nullptr);
  ASSERT_EQ(pool.deallocate(theirs), Status::ok);
  EXPECT_EQ(pool.allocate(200000).ptr, theirs);
  EXPECT_EQ(pool.deallocate(theirs), Status::ok);
  EXPECT_VALID(pool);
  free_all(pool, held);
  EXPECT_VALID(pool);
}

// Two threads freeing the same block at once (a program bug): one free
// caches or frees it, the other is refused; the block is never both cached
// and back in its arena.
TEST(HostLargeCache, OfTwoConcurrentFreesOfABlockOneIsRefused) {
  HostPool pool(kTestConf);
  const std::vector<void*> held = allocate_n(pool, kHeld, kUncached);
  std::atomic<void*> block{nullptr};
  std::atomic<int> arrived{0};
  std::atomic<int> ok{0};
  constexpr int kRounds = 200;
  auto free_it = [&](int round) {
    arrived.fetch_add(1);
    while (arrived.load() < 2 * (round + 1)) std::this_thread::yield();
    if (pool.deallocate(block.load()) == Status::ok) ok.fetch_add(1);
  };
  std::thread other([&] {
    for (int round = 0; round < kRounds; ++round) {
      while (arrived.load() < 2 * round + 1) std::this_thread::yield();
      free_it(round);
    }
  });
  for (int round = 0; round < kRounds; ++round) {
    while (arrived.load() < 2 * round) std::this_thread::yield();
    block.store(pool.allocate(200000).ptr);
    free_it(round);
  }
  other.join();
  EXPECT_EQ(ok.load(), kRounds);
  EXPECT_EQ(pool.stats().misuse_errors, static_cast<uint64_t>(kRounds));
  EXPECT_VALID(pool);
  free_all(pool, held);
  EXPECT_VALID(pool);
}

TEST(HostLargeCache, GoesBackAtTrimFlushAndThreadExit) {
  HostPool pool(kTestConf);
  const std::vector<void*> held = allocate_n(pool, kHeld, kUncached);
  ASSERT_EQ(pool.deallocate(pool.allocate(200000)), Status::ok);
  ASSERT_GT(cached(pool), 0u);
  pool.trim();
  EXPECT_EQ(cached(pool), 0u);
  EXPECT_VALID(pool);
  ASSERT_EQ(pool.deallocate(pool.allocate(200000)), Status::ok);
  ASSERT_GT(cached(pool), 0u);
  pool.flush_thread_cache();
  EXPECT_EQ(cached(pool), 0u);
  EXPECT_VALID(pool);
  std::thread([&] {
    const std::vector<void*> theirs = allocate_n(pool, kHeld, kUncached);
    ASSERT_EQ(pool.deallocate(pool.allocate(140000)), Status::ok);
    EXPECT_GT(cached(pool), 0u);
    free_all(pool, theirs);
  }).join();
  EXPECT_EQ(cached(pool), 0u);
  EXPECT_VALID(pool);
  free_all(pool, held);
  EXPECT_VALID(pool);
}

// Under a limit, memory a large cache holds is given back when a request
// needs it: the request is served, not refused.
TEST(HostLargeCache, ALimitTakesTheCacheBack) {
  HostPool pool(conf("limit=12MiB"));
  const std::vector<void*> held = allocate_n(pool, kHeld, kUncached);
  std::vector<void*> mid;
  while (void* p = pool.allocate(200000)) mid.push_back(p);
  ASSERT_GT(mid.size(), 8u);
  free_all(pool, mid);
  ASSERT_GT(cached(pool), 0u);
  // One block of all their memory but one block's: it needs the cached ones'.
  const size_t big = (mid.size() - 1) * 224 * kKiB;  // their class size
  void* p = pool.allocate(big);
  ASSERT_NE(p, nullptr) << HostPool::last_error();
  EXPECT_EQ(cached(pool), 0u);
  EXPECT_VALID(pool);
  EXPECT_EQ(pool.deallocate(p), Status::ok);
  free_all(pool, held);
  EXPECT_VALID(pool);
}

// The program wrote in front of a block it had freed: the block is
// reported and never handed out again, whether the cache would have handed
// it out or given it back, and whether the write hit the header's magic
// word or its fields (here its arena and pad, 17-24 bytes in front). It
// stays counted live (leaked), so the stats still add up; validate()
// fails, as it does once the pool has seen heap corruption.
TEST(HostLargeCache, AnOverwrittenHeaderIsReportedAndTheBlockNeverReused) {
  for (const int how : {0, 1, 2, 3}) {
    const bool by_trim = how & 1;
    HostPool pool(kTestConf);
    const std::vector<void*> held = allocate_n(pool, kHeld, kUncached);
    void* p = pool.allocate(200000);
    ASSERT_EQ(pool.deallocate(p), Status::ok);
    // An underflow into the header: its magic word, or the words before the block.
    if (how & 2) {
      std::memset(static_cast<char*>(p) - 24, 0x5a, 8);
    } else {
      std::memset(static_cast<char*>(p) - 64, 0x5a, 8);
    }
    void* q = nullptr;
    if (by_trim) {
      pool.trim();
    } else {
      q = pool.allocate(200000);
      ASSERT_NE(q, nullptr) << HostPool::last_error();
      EXPECT_NE(q, p);
    }
    EXPECT_NE(std::string(HostPool::last_error()).find("heap corruption"), std::string::npos) << HostPool::last_error();
    EXPECT_EQ(cached(pool), 0u);
    const HostPoolStats st = pool.stats();
    EXPECT_EQ(st.large_blocks, kHeld + (q ? 2 : 1));
    EXPECT_EQ(st.allocated_bytes + st.deferred_bytes + st.cached_bytes + st.overhead_bytes + st.arena_free_bytes,
              st.committed_bytes);
    std::string why;
    EXPECT_FALSE(pool.validate(&why)) << how;
    if (q) EXPECT_EQ(pool.deallocate(q), Status::ok);
    free_all(pool, held);
  }
}

}  // namespace
}  // namespace unipool::test
