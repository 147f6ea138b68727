// unipool host: the block cache (csrc/host/block_cache.hpp). A block a
// thread frees comes back to that thread first; the cache stays within its
// bound and goes back to the pages when full, at thread exit and after
// trim(); a cached block is free (a second free is refused by its owner and
// found when another thread makes it, usable_size() is 0), and validate()
// recounts it.
#include <gtest/gtest.h>

#include <algorithm>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "host_test_util.hpp"
#include "support/valid.hpp"

namespace unipool::test {
namespace {

// The class stats of the class that serves `size`.
HostClassStats class_of(const HostPool& pool, size_t size) {
  const HostPoolStats st = pool.stats();
  for (uint32_t c = 0; c < st.num_classes; ++c) {
    if (st.classes[c].block_size >= size) return st.classes[c];
  }
  ADD_FAILURE() << "no class holds " << size << " bytes";
  return {};
}

TEST(HostBlockCache, TheLastFreedBlockIsTheNextAllocated) {
  HostPool pool(kTestConf);
  std::vector<void*> blocks = allocate_n(pool, 8, 64);
  ASSERT_EQ(pool.deallocate(blocks[3]), Status::ok);
  ASSERT_EQ(pool.deallocate(blocks[5]), Status::ok);
  EXPECT_EQ(class_of(pool, 64).cached_blocks, 2u);
  EXPECT_EQ(class_of(pool, 64).live_blocks, 6u);
  EXPECT_VALID(pool);
  EXPECT_EQ(pool.allocate(64).ptr, blocks[5]);
  EXPECT_EQ(pool.allocate(64).ptr, blocks[3]);
  EXPECT_EQ(class_of(pool, 64).cached_blocks, 0u);
  for (void* p : blocks) EXPECT_EQ(pool.deallocate(p), Status::ok);
  EXPECT_EQ(pool.stats().allocated_bytes, 0u);
  EXPECT_VALID(pool);
}

TEST(HostBlockCache, ACachedBlockIsFreeToItsOwner) {
  HostPool pool(kTestConf);
  void* keep = pool.allocate(128);
  void* p = pool.allocate(128);
  ASSERT_EQ(pool.deallocate(p), Status::ok);
  ASSERT_EQ(class_of(pool, 128).cached_blocks, 1u);
  EXPECT_EQ(pool.usable_size(p), 0u);
  EXPECT_FALSE(pool.owns(p));
  EXPECT_EQ(pool.deallocate(p), Status::not_live);
  EXPECT_NE(std::string(HostPool::last_error()).find("double free"), std::string::npos) << HostPool::last_error();
  EXPECT_EQ(pool.stats().misuse_errors, 1u);
  EXPECT_VALID(pool);
  EXPECT_EQ(pool.deallocate(keep), Status::ok);
}

// Another thread's second free of a cached block is not refused on the
// spot (that would read a line the owner keeps writing): the owner finds it
// when it collects the page's remote frees, reports it and drops the block.
TEST(HostBlockCache, AnotherThreadsSecondFreeIsFoundByTheOwner) {
  HostPool pool(kTestConf);
  void* keep = pool.allocate(128);
  void* p = pool.allocate(128);
  ASSERT_EQ(pool.deallocate(p), Status::ok);
  std::string why;
  std::thread([&] { EXPECT_EQ(pool.deallocate(p), Status::ok); }).join();
  EXPECT_FALSE(pool.validate(&why));
  EXPECT_NE(why.find("remote free list has its live bit clear"), std::string::npos) << why;
  pool.flush_thread_cache();  // the owner collects
  why.clear();
  EXPECT_FALSE(pool.validate(&why));
  EXPECT_NE(why.find("was freed twice"), std::string::npos) << why;
  EXPECT_NE(std::string(HostPool::last_error()).find("was freed twice"), std::string::npos) << HostPool::last_error();
  EXPECT_EQ(pool.deallocate(keep), Status::ok);
}

// A remote free flags the page (its tag) until the owner collects. The
// owner's frees into the page stay on the fast path meanwhile and are
// cached, but with their cookie written, as on a list: another thread's
// second free of such a block is refused on the spot, and the block still
// pending on the remote list is refused to the owner.
TEST(HostBlockCache, ARemoteFreeMakesTheOwnersCachedFreesRefusableUntilItCollects) {
  HostPool pool(kTestConf);
  void* by_other = pool.allocate(96);
  void* first = pool.allocate(96);
  void* second = pool.allocate(96);
  std::thread([&] { EXPECT_EQ(pool.deallocate(by_other), Status::ok); }).join();
  ASSERT_EQ(pool.deallocate(first), Status::ok);
  EXPECT_EQ(class_of(pool, 96).cached_blocks, 1u);
  std::thread([&] { EXPECT_EQ(pool.deallocate(first), Status::not_live); }).join();
  EXPECT_EQ(pool.deallocate(by_other), Status::not_live);  // pending: still refused
  EXPECT_EQ(pool.stats().misuse_errors, 2u);
  EXPECT_VALID(pool);
  // Allocate until the page runs dry and the owner collects: by_other
  // comes back, once.
  std::vector<void*> taken;
  while (taken.size() < 2000 && (taken.empty() || taken.back() != by_other)) taken.push_back(pool.allocate(96));
  ASSERT_EQ(taken.back(), by_other);
  EXPECT_EQ(std::count(taken.begin(), taken.end(), first), 1);
  ASSERT_EQ(pool.deallocate(second), Status::ok);
  EXPECT_EQ(class_of(pool, 96).cached_blocks, 1u);
  EXPECT_EQ(pool.deallocate(second), Status::not_live);
  for (void* p : taken) ASSERT_EQ(pool.deallocate(p), Status::ok);
  EXPECT_EQ(pool.stats().allocated_bytes, 0u);
  EXPECT_VALID(pool);
}

// A middle page (256 KiB) has a tag per 64 KiB, all alike: a remote free
// flags each of them, so the owner's free of any block of the page, in its
// quarter or another, writes the block's cookie until the owner collects,
// and another thread's second free of it is refused. The page is not the
// segment's first, where page and tag indexes coincide.
TEST(HostBlockCache, ARemoteFreeFlagsEveryQuarterOfAMiddlePage) {
  HostPool pool(kTestConf);
  constexpr size_t kSize = 20 << 10;
  std::vector<void*> blocks = allocate_n(pool, 36, kSize);
  auto page = [](void* p) { return reinterpret_cast<uintptr_t>(p) >> 18; };
  auto page_in_segment = [](void* p) { return (reinterpret_cast<uintptr_t>(p) >> 18) & 15; };
  auto quarter = [](void* p) { return (reinterpret_cast<uintptr_t>(p) >> 16) & 3; };
  void* by_other = nullptr;
  void* mine = nullptr;
  for (void* x : blocks) {
    for (void* y : blocks) {
      if (!by_other && page_in_segment(x) != 0 && quarter(x) >= 2 && page(y) == page(x) && quarter(y) < quarter(x)) {
        by_other = x;
        mine = y;
      }
    }
  }
  ASSERT_NE(by_other, nullptr) << "no two blocks in different quarters of one page";
  std::thread([&] { EXPECT_EQ(pool.deallocate(by_other), Status::ok); }).join();
  EXPECT_EQ(pool.deallocate(by_other), Status::not_live);  // pending on the remote list: refused
  ASSERT_EQ(pool.deallocate(mine), Status::ok);
  EXPECT_EQ(class_of(pool, kSize).cached_blocks, 1u);
  std::thread([&] { EXPECT_EQ(pool.deallocate(mine), Status::not_live); }).join();
  EXPECT_VALID(pool);
  for (void* p : blocks) {
    if (p == by_other || p == mine) continue;
    ASSERT_EQ(pool.deallocate(p), Status::ok);
  }
  EXPECT_EQ(pool.stats().allocated_bytes, 0u);
  EXPECT_VALID(pool);
}

TEST(HostBlockCache, StaysWithinItsBoundAndGivesTheOlderBlocksBack) {
  HostPool pool(kTestConf);
  std::vector<void*> blocks = allocate_n(pool, 1000, 64);
  for (void* p : blocks) ASSERT_EQ(pool.deallocate(p), Status::ok);
  const HostClassStats cs = class_of(pool, 64);
  EXPECT_GT(cs.cached_blocks, 0u);
  EXPECT_LE(cs.cached_blocks, 64u);
  EXPECT_GE(cs.free_blocks, cs.cached_blocks);
  EXPECT_EQ(cs.live_blocks, 0u);
  EXPECT_EQ(pool.stats().allocated_bytes, 0u);
  EXPECT_VALID(pool);
  // The newest frees stayed: the last one is handed out first.
  void* again = pool.allocate(64);
  EXPECT_EQ(again, blocks.back());
  EXPECT_EQ(pool.deallocate(again), Status::ok);
  EXPECT_VALID(pool);
}

// The fast paths count no frees into the cache and no allocations out of it:
// the cached count moves instead. Live counts stay exact through every way a
// block enters or leaves the cache: a push, a pop, the drain of a full cache,
// no cache at all (hardened), and under size the drain of a page that leaves
// its heap (the 2,000 blocks span three pages; freed in order, the first
// pages fall to a quarter free while the cache holds some of their blocks).
TEST(HostBlockCache, LiveCountsStayExactAsItFillsDrainsAndEmpties) {
  for (const char* extra : {"thread_cache=performance", "thread_cache=size", "hardened=on"}) {
    SCOPED_TRACE(extra);
    HostPool pool(conf(extra));
    std::vector<void*> blocks = allocate_n(pool, 2000, 64);
    for (size_t i = 0; i < blocks.size(); ++i) {
      ASSERT_EQ(pool.deallocate(blocks[i]), Status::ok);
      ASSERT_EQ(class_of(pool, 64).live_blocks, blocks.size() - 1 - i);
      ASSERT_EQ(pool.stats().allocated_bytes, (blocks.size() - 1 - i) * 64);
    }
    EXPECT_VALID(pool);
    for (size_t i = 0; i < blocks.size(); ++i) {
      blocks[i] = pool.allocate(64);
      ASSERT_NE(blocks[i], nullptr);
      ASSERT_EQ(class_of(pool, 64).live_blocks, i + 1);
    }
    EXPECT_VALID(pool);
    pool.flush_thread_cache();
    EXPECT_EQ(class_of(pool, 64).live_blocks, blocks.size());
    for (void* p : blocks) ASSERT_EQ(pool.deallocate(p), Status::ok);
    pool.flush_thread_cache();
    EXPECT_EQ(class_of(pool, 64).live_blocks, 0u);
    EXPECT_EQ(pool.stats().allocated_bytes, 0u);
    EXPECT_VALID(pool);
  }
}

TEST(HostBlockCache, ThePoliciesBoundIt) {
  struct Case {
    const char* conf;
    uint64_t most;
  };
  for (const Case& c : {Case{"thread_cache=size", 16}, Case{"thread_cache=none", 0}, Case{"hardened=on", 0}}) {
    HostPool pool(conf(c.conf));
    std::vector<void*> blocks = allocate_n(pool, 200, 256);
    for (void* p : blocks) ASSERT_EQ(pool.deallocate(p), Status::ok);
    EXPECT_LE(class_of(pool, 256).cached_blocks, c.most) << c.conf;
    if (c.most != 0) {
      EXPECT_GT(class_of(pool, 256).cached_blocks, 0u) << c.conf;
    }
    EXPECT_VALID(pool);
  }
}

// A class of large blocks still caches 16 of them (64 KiB alone would be two
// 32 KiB blocks), at most 512 KiB; `size` keeps one.
TEST(HostBlockCache, LargeClassesKeepSixteenBlocksUpTo512KiB) {
  struct Case {
    const char* conf;
    size_t size;
    uint64_t most;
  };
  for (const Case& c : {Case{"", 32 << 10, 16}, Case{"middle_max=64KiB", 64 << 10, 8}, Case{"", 128 << 10, 4},
                        Case{"thread_cache=size", 32 << 10, 1}}) {
    HostPool pool(conf(c.conf));
    std::vector<void*> blocks = allocate_n(pool, c.most + 1, c.size);
    for (size_t i = 0; i < c.most; ++i) ASSERT_EQ(pool.deallocate(blocks[i]), Status::ok);
    EXPECT_EQ(class_of(pool, c.size).cached_blocks, c.most) << c.conf;
    EXPECT_VALID(pool);
    // Full: the next free sends the older half (all of a one-block cache)
    // to the pages, then caches its block.
    ASSERT_EQ(pool.deallocate(blocks[c.most]), Status::ok);
    EXPECT_EQ(class_of(pool, c.size).cached_blocks, c.most / 2 + 1) << c.conf;
    EXPECT_EQ(class_of(pool, c.size).live_blocks, 0u) << c.conf;
    EXPECT_VALID(pool);
  }
}

TEST(HostBlockCache, ThreadExitAndFlushGiveItBack) {
  HostPool pool(kTestConf);
  std::thread([&] {
    std::vector<void*> blocks = allocate_n(pool, 100, 256);
    for (void* p : blocks) EXPECT_EQ(pool.deallocate(p), Status::ok);
    EXPECT_GT(class_of(pool, 256).cached_blocks, 0u);
  }).join();
  EXPECT_VALID(pool);  // its blocks are back on their pages, now shared

  std::vector<void*> blocks = allocate_n(pool, 10, 256);
  for (void* p : blocks) ASSERT_EQ(pool.deallocate(p), Status::ok);
  EXPECT_EQ(class_of(pool, 256).cached_blocks, 10u);
  pool.flush_thread_cache();
  EXPECT_EQ(class_of(pool, 256).cached_blocks, 0u);
  EXPECT_VALID(pool);
}

// A thread's fast path starts from the heap it used last (t_recent_heap).
// Going back and forth between pools, and to a pool made where a destroyed
// one lived, each allocation still comes from its own pool: another pool's
// cached block is never handed out.
TEST(HostBlockCache, EachPoolHandsOutOnlyItsOwnBlocks) {
  alignas(HostPool) unsigned char place[sizeof(HostPool)];
  auto* a = new (place) HostPool(kTestConf);
  HostPool b(kTestConf);
  void* cached = a->allocate(64);
  ASSERT_EQ(a->deallocate(cached), Status::ok);  // now on a's cache
  for (int i = 0; i < 4; ++i) {
    void* from_b = b.allocate(64);
    EXPECT_TRUE(b.owns(from_b));
    EXPECT_FALSE(a->owns(from_b));
    void* from_a = a->allocate(64);
    EXPECT_EQ(from_a, cached);
    EXPECT_EQ(b.deallocate(from_b), Status::ok);
    EXPECT_EQ(a->deallocate(from_a), Status::ok);
  }
  EXPECT_VALID(*a);
  EXPECT_VALID(b);
  a->~HostPool();
  auto* c = new (place) HostPool(kTestConf);  // same address, a new pool
  void* from_c = c->allocate(64);
  EXPECT_TRUE(c->owns(from_c));
  EXPECT_EQ(class_of(*c, 64).live_blocks, 1u);
  EXPECT_EQ(c->deallocate(from_c), Status::ok);
  EXPECT_VALID(*c);
  c->~HostPool();
}

// trim() cannot reach into another thread's cache: it asks, and the thread
// gives its cache back at its next slow call.
TEST(HostBlockCache, TrimAsksEveryThreadToGiveItBack) {
  HostPool pool(kTestConf);
  std::mutex m;
  std::condition_variable cv;
  int step = 0;
  auto wait_for = [&](int s) {
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return step >= s; });
  };
  auto go = [&](int s) {
    {
      std::lock_guard<std::mutex> lock(m);
      step = s;
    }
    cv.notify_all();
  };
  void* other = nullptr;
  std::thread worker([&] {
    std::vector<void*> blocks = allocate_n(pool, 40, 64);
    for (void* p : blocks) EXPECT_EQ(pool.deallocate(p), Status::ok);
    go(1);
    wait_for(2);
    other = pool.allocate(3000);  // a class never used: its slow path
    go(3);
    wait_for(4);
    EXPECT_EQ(pool.deallocate(other), Status::ok);
  });
  wait_for(1);
  EXPECT_EQ(class_of(pool, 64).cached_blocks, 40u);
  pool.trim();
  EXPECT_EQ(class_of(pool, 64).cached_blocks, 40u);  // the worker made no call yet
  go(2);
  wait_for(3);
  EXPECT_NE(other, nullptr);
  EXPECT_EQ(class_of(pool, 64).cached_blocks, 0u);
  EXPECT_VALID(pool);
  go(4);
  worker.join();
  EXPECT_VALID(pool);
}

// Blocks freed by a thread that does not own their page skip its cache:
// they go to their page's remote list, and come back to the owner.
TEST(HostBlockCache, OtherThreadsFreesGoToTheOwner) {
  HostPool pool(kTestConf);
  std::vector<void*> blocks = allocate_n(pool, 32, 512);
  std::thread([&] {
    void* mine = pool.allocate(512);  // a heap of its own in this pool
    for (void* p : blocks) EXPECT_EQ(pool.deallocate(p), Status::ok);
    EXPECT_EQ(class_of(pool, 512).cached_blocks, 0u);
    EXPECT_EQ(pool.deallocate(mine), Status::ok);
    EXPECT_EQ(class_of(pool, 512).cached_blocks, 1u);
  }).join();
  EXPECT_VALID(pool);
  // The owner's next allocations collect them from the page's remote list.
  std::vector<void*> again = allocate_n(pool, 32, 512);
  EXPECT_EQ(std::set<void*>(again.begin(), again.end()), std::set<void*>(blocks.begin(), blocks.end()));
  for (void* p : again) EXPECT_EQ(pool.deallocate(p), Status::ok);
  EXPECT_EQ(pool.stats().allocated_bytes, 0u);
  EXPECT_VALID(pool);
}

// A page shed to the shared lists (thread_cache=size) takes its cached
// blocks with it, while another thread adopts shed pages of the class: the
// blocks reach the adopter's lists, never its remote list with their bit set
// (collect_remote would report that as corruption).
TEST(HostBlockCache, ShedPagesLeaveNoCachedBlockBehind) {
  HostPool pool(conf("thread_cache=size"));
  std::atomic<bool> done{false};
  std::thread adopter([&] {
    std::vector<void*> mine;
    while (!done.load()) {
      for (int i = 0; i < 64; ++i) mine.push_back(pool.allocate(48));
      for (void* p : mine) EXPECT_EQ(pool.deallocate(p), Status::ok);
      mine.clear();
    }
  });
  for (int round = 0; round < 20; ++round) {
    std::vector<void*> blocks = allocate_n(pool, 4000, 48);
    for (size_t i = 0; i < blocks.size(); i += 2) ASSERT_EQ(pool.deallocate(blocks[i]), Status::ok);
    for (size_t i = 1; i < blocks.size(); i += 2) ASSERT_EQ(pool.deallocate(blocks[i]), Status::ok);
  }
  done.store(true);
  adopter.join();
  EXPECT_EQ(pool.stats().allocated_bytes, 0u);
  EXPECT_VALID(pool);
}

}  // namespace
}  // namespace unipool::test
