// unipool host: thread-cache policies, decommit, flush, and the OS options
// (THP, hugetlb fallback, NUMA binding).
#include <gtest/gtest.h>

#include <barrier>
#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "host_test_util.hpp"

namespace unipool::test {
namespace {

// Cached bytes a thread keeps after freeing everything it allocated.
uint64_t kept_after_free(const char* policy) {
  HostPool pool(conf(std::string("thread_cache=") + policy));
  std::vector<void*> v;
  for (int i = 0; i < 20000; ++i) v.push_back(pool.allocate(1000));  // ~300 pages of one class
  for (void* p : v) pool.deallocate(p);
  EXPECT_VALID(pool);
  const HostPoolStats st = pool.stats();
  EXPECT_EQ(st.allocated_bytes, 0u);
  return st.cached_bytes + st.arena_free_bytes;
}

TEST(HostPolicy, SizePolicyKeepsLessThanUnlimited) {
  const uint64_t unlimited = kept_after_free("unlimited");
  const uint64_t size = kept_after_free("size");
  const uint64_t none = kept_after_free("none");
  EXPECT_GT(unlimited, 0u);
  EXPECT_LT(size, unlimited);
  EXPECT_LT(none, unlimited);
}

// Thread A allocates `blocks` blocks of `block` bytes, frees one in `every`
// and stays alive; thread B then allocates as many as A freed. Returns how
// many of B's blocks are ones A freed: B adopted A's partly free pages (a
// thread with no empty page of its own adopts a shared page before it
// takes one from a segment; B has none).
size_t reused_by_second_thread(const char* policy, size_t block, int blocks, int every) {
  HostPool pool(conf(std::string("thread_cache=") + policy));
  std::vector<void*> a_blocks, b_blocks;
  std::set<void*> a_freed;
  std::barrier sync(2);
  size_t reused = 0;
  std::thread a([&] {
    for (int i = 0; i < blocks; ++i) {
      a_blocks.push_back(pool.allocate(block));
      fill(a_blocks.back(), block, static_cast<uint8_t>(i));
    }
    for (int i = 0; i < blocks; i += every) {
      a_freed.insert(a_blocks[static_cast<size_t>(i)]);
      ASSERT_EQ(pool.deallocate(a_blocks[static_cast<size_t>(i)]), Status::ok);
    }
    sync.arrive_and_wait();  // B runs now
    sync.arrive_and_wait();
    for (int i = 0; i < blocks; ++i) {
      if (i % every == 0) continue;
      EXPECT_TRUE(intact(a_blocks[static_cast<size_t>(i)], block, static_cast<uint8_t>(i)));
      ASSERT_EQ(pool.deallocate(a_blocks[static_cast<size_t>(i)]), Status::ok);
    }
  });
  std::thread b([&] {
    sync.arrive_and_wait();
    for (size_t i = 0; i < a_freed.size(); ++i) {
      b_blocks.push_back(pool.allocate(block));
      fill(b_blocks.back(), block, static_cast<uint8_t>(i + 7));
      reused += a_freed.count(b_blocks.back());
    }
    sync.arrive_and_wait();
    for (size_t i = 0; i < b_blocks.size(); ++i) {
      EXPECT_TRUE(intact(b_blocks[i], block, static_cast<uint8_t>(i + 7)));
      ASSERT_EQ(pool.deallocate(b_blocks[i]), Status::ok);
    }
  });
  a.join();
  b.join();
  const HostPoolStats st = pool.stats();
  EXPECT_EQ(st.allocated_bytes, 0u);
  EXPECT_EQ(st.small_blocks, 0u);
  EXPECT_VALID(pool);
  return reused;
}

// `size` shares a page at a quarter free; `performance` at half free, and
// only pages of blocks up to 8 KiB; `unlimited` never. A shared page's free
// blocks serve the next thread that needs the class, before new pages. (Not
// every one: A's current page of the class stays A's, and so do the blocks
// still in A's block cache.)
TEST(HostPolicy, PartlyFreePagesGoToOtherThreadsAsThePolicySays) {
  constexpr int kSmall = 6400, kMiddle = 1600;  // 1 KiB and 16 KiB blocks, about 100 pages of each
  auto expect_shared = [](const char* policy, size_t block, int blocks, int every) {
    const size_t freed = static_cast<size_t>((blocks + every - 1) / every);
    EXPECT_GE(reused_by_second_thread(policy, block, blocks, every), freed * 9 / 10)
        << policy << " " << block << " 1/" << every;
  };
  auto expect_kept = [](const char* policy, size_t block, int blocks, int every) {
    EXPECT_EQ(reused_by_second_thread(policy, block, blocks, every), 0u) << policy << " " << block << " 1/" << every;
  };
  expect_kept("size", 1000, kSmall, 8);    // an eighth of each page free
  expect_shared("size", 1000, kSmall, 4);  // a quarter
  expect_kept("performance", 1000, kSmall, 4);
  expect_shared("size", 1000, kSmall, 2);  // half
  expect_shared("performance", 1000, kSmall, 2);
  expect_kept("unlimited", 1000, kSmall, 2);
  expect_shared("size", 16000, kMiddle, 2);  // middle pages, half
  expect_kept("performance", 16000, kMiddle, 2);
}

TEST(HostPolicy, NoneServesEverythingFromTheSharedLists) {
  HostPool pool(conf("thread_cache=none"));
  std::vector<void*> v;
  for (int i = 0; i < 1000; ++i) v.push_back(pool.allocate(static_cast<size_t>(1 + i * 29)));
  HostPoolStats st = pool.stats();
  EXPECT_GT(st.small_blocks + st.middle_blocks, 0u);
  EXPECT_VALID(pool);
  for (void* p : v) ASSERT_EQ(pool.deallocate(p), Status::ok);
  EXPECT_EQ(pool.stats().allocated_bytes, 0u);
  EXPECT_VALID(pool);
}

TEST(HostPolicy, FreedArenaChunksAreDecommittedPastRetain) {
  HostPool pool(conf("retain=0"));
  std::vector<void*> v;
  for (int i = 0; i < 16; ++i) v.push_back(pool.allocate(2 << 20));
  const uint64_t before = pool.stats().committed_bytes;
  EXPECT_GE(before, uint64_t{32} << 20);
  for (void* p : v) pool.deallocate(p);
  const uint64_t after = pool.stats().committed_bytes;
  EXPECT_LT(after, before / 2);
  EXPECT_VALID(pool);
  // Decommitted chunks come back when needed.
  void* p = pool.allocate(20 << 20);
  ASSERT_NE(p, nullptr);
  fill(p, 20 << 20, 1);
  EXPECT_TRUE(intact(p, 20 << 20, 1));
  EXPECT_VALID(pool);
  pool.deallocate(p);
}

TEST(HostPolicy, TrimReturnsCachedMemory) {
  HostPool pool(kTestConf);  // performance: retains up to 256 MiB of free chunks
  std::vector<void*> v;
  for (int i = 0; i < 16; ++i) v.push_back(pool.allocate(2 << 20));
  for (int i = 0; i < 5000; ++i) v.push_back(pool.allocate(100));
  for (void* p : v) pool.deallocate(p);
  const uint64_t before = pool.stats().committed_bytes;
  pool.trim();
  const HostPoolStats st = pool.stats();
  EXPECT_LT(st.committed_bytes, before);
  EXPECT_EQ(st.cached_bytes, 0u);
  EXPECT_VALID(pool);
}

TEST(HostPolicy, FlushThreadCacheHandsPagesToTheSharedLists) {
  HostPool pool(conf("thread_cache=unlimited"));
  std::vector<void*> v;
  for (int i = 0; i < 3000; ++i) v.push_back(pool.allocate(64));
  for (size_t i = 0; i < v.size(); i += 2) pool.deallocate(v[i]);
  pool.flush_thread_cache();
  EXPECT_VALID(pool);
  for (size_t i = 1; i < v.size(); i += 2) ASSERT_EQ(pool.deallocate(v[i]), Status::ok);
  EXPECT_EQ(pool.stats().allocated_bytes, 0u);
  EXPECT_VALID(pool);
  void* p = pool.allocate(64);  // adopts a shared page again
  EXPECT_NE(p, nullptr);
  pool.deallocate(p);
  EXPECT_VALID(pool);
}

TEST(HostPolicy, TransparentHugePagesAndFirstTouch) {
  HostPool pool(conf("huge_pages=thp,first_touch=on"));
  void* p = pool.allocate(3 << 20);
  ASSERT_NE(p, nullptr);
  fill(p, 3 << 20, 2);
  EXPECT_TRUE(intact(p, 3 << 20, 2));
  pool.deallocate(p);
  EXPECT_VALID(pool);
}

// The line of /proc/self/smaps that starts with `key`, in the mapping that
// holds p ("" when there is none).
std::string smaps_line_of(const void* p, const char* key) {
  std::ifstream smaps("/proc/self/smaps");
  const auto a = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2) inside = lo <= a && a < hi;
    if (inside && line.rfind(key, 0) == 0) return line;
  }
  return "";
}

// The VmFlags of the mapping that holds p ("hg": advised to huge pages).
std::string vm_flags_of(const void* p) { return smaps_line_of(p, "VmFlags:") + " "; }

// kB of transparent huge pages in the mapping that holds p (-1: not found).
long anon_huge_kib_of(const void* p) {
  long kib = -1;
  std::sscanf(smaps_line_of(p, "AnonHugePages:").c_str(), "AnonHugePages: %ld kB", &kib);
  return kib;
}

// huge_pages=auto (the default) advises an arena's memory to transparent
// huge pages only past its first 128 MiB, also where one growth of the arena
// crosses that mark: a small pool keeps 4 KiB pages.
TEST(HostPolicy, AutoHugePagesAdviseAnArenaPastItsFirst128MiB) {
  if (!std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled")) GTEST_SKIP() << "no THP in this kernel";
  // huge_pages=auto by default; a limit keeps every large block in arena 0.
  HostPool pool("reserve=1GiB,huge_threshold=64MiB,limit=900MiB");
  ASSERT_EQ(pool.config().huge_pages, HostHugePages::automatic);
  // The first segment is the arena's first range: its base.
  void* small = pool.allocate(64);
  ASSERT_NE(small, nullptr);
  char* base = reinterpret_cast<char*>(reinterpret_cast<uintptr_t>(small) & ~uintptr_t{(4 << 20) - 1});
  char* mark = base + kHostAutoThpAfter;
  // 16 MiB blocks grow the arena 16 MiB at a time (4 MiB chunks, 64-byte
  // headers: to 24, 40, ..., 120, 136 MiB): one growth crosses the mark.
  std::vector<void*> blocks;
  bool crossed = false;
  while (blocks.empty() || static_cast<char*>(blocks.back()) + (16 << 20) < mark + (4 << 20)) {
    const uint64_t before = pool.stats().committed_bytes;
    blocks.push_back(pool.allocate(16 << 20));
    ASSERT_NE(blocks.back(), nullptr) << HostPool::last_error();
    ASSERT_LT(static_cast<char*>(blocks.back()) - base, 1 << 30) << "not in the arena of the first segment";
    const uint64_t after = pool.stats().committed_bytes;
    crossed = crossed || (before < kHostAutoThpAfter && after > kHostAutoThpAfter);
  }
  EXPECT_TRUE(crossed) << "no growth of the arena crossed the mark";
  EXPECT_EQ(vm_flags_of(base + (1 << 20)).find(" hg "), std::string::npos) << vm_flags_of(base + (1 << 20));
  EXPECT_EQ(vm_flags_of(mark - 4096).find(" hg "), std::string::npos) << vm_flags_of(mark - 4096);
  EXPECT_NE(vm_flags_of(mark + 4096).find(" hg "), std::string::npos) << vm_flags_of(mark + 4096);
  for (void* p : blocks) ASSERT_EQ(pool.deallocate(p), Status::ok);
  ASSERT_EQ(pool.deallocate(small), Status::ok);
  EXPECT_VALID(pool);

  HostPool off("reserve=1GiB,huge_threshold=64MiB,limit=900MiB,huge_pages=off");
  for (void*& p : blocks) {
    p = off.allocate(16 << 20);
    ASSERT_NE(p, nullptr) << HostPool::last_error();
  }
  EXPECT_EQ(vm_flags_of(blocks.back()).find(" hg "), std::string::npos) << vm_flags_of(blocks.back());
  for (void* p : blocks) ASSERT_EQ(off.deallocate(p), Status::ok);
}

// Fills `pool` with 1 KiB blocks (a dense class) until one lies `past`
// bytes beyond the first block's segment; returns them, the first first.
std::vector<void*> small_blocks_past(HostPool& pool, uintptr_t past) {
  std::vector<void*> blocks{pool.allocate(1024)};
  const uintptr_t base = reinterpret_cast<uintptr_t>(blocks[0]) & ~uintptr_t{(4 << 20) - 1};
  while (reinterpret_cast<uintptr_t>(blocks.back()) - base < past) {
    blocks.push_back(pool.allocate(1024));
    if (blocks.back() == nullptr) break;
  }
  return blocks;
}

// huge_pages=auto also advises the segments of blocks up to 1 KiB that start
// past the first 16 MiB of arena 0; not the ones before, not segments of
// 1-8 KiB or middle blocks, and nothing with huge_pages=off. A segment that goes back to the
// arena (at once under thread_cache=size) takes its advice with it.
TEST(HostPolicy, AutoHugePagesAdviseDenseSegmentsPastTheFirst16MiB) {
  if (!std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled")) GTEST_SKIP() << "no THP in this kernel";
  for (const char* conf : {"reserve=1GiB", "reserve=1GiB,thread_cache=size", "reserve=1GiB,huge_pages=off"}) {
    SCOPED_TRACE(conf);
    HostPool pool(conf);
    const bool advised = pool.config().huge_pages == HostHugePages::automatic;
    std::vector<void*> blocks = small_blocks_past(pool, kHostAutoThpSmallAfter + (1 << 20));
    ASSERT_NE(blocks.back(), nullptr) << HostPool::last_error();
    const auto base = reinterpret_cast<uintptr_t>(blocks[0]) & ~uintptr_t{(4 << 20) - 1};
    ASSERT_GE(reinterpret_cast<uintptr_t>(blocks.back()) - base, kHostAutoThpSmallAfter);
    const auto* before_mark = reinterpret_cast<const char*>(base + kHostAutoThpSmallAfter - (1 << 20));
    const auto* past_mark = reinterpret_cast<const char*>(base + kHostAutoThpSmallAfter + (1 << 20));
    EXPECT_EQ(vm_flags_of(blocks[0]).find(" hg "), std::string::npos) << vm_flags_of(blocks[0]);
    EXPECT_EQ(vm_flags_of(before_mark).find(" hg "), std::string::npos) << vm_flags_of(before_mark);
    EXPECT_EQ(vm_flags_of(past_mark).find(" hg ") != std::string::npos, advised) << vm_flags_of(past_mark);
    // Segments of 1-8 KiB and of middle blocks (past 8 KiB) after them: past
    // the mark too, 4 KiB pages.
    for (const size_t size : {size_t{4096}, size_t{16384}}) {
      void* p = pool.allocate(size);
      ASSERT_NE(p, nullptr);
      EXPECT_GE(reinterpret_cast<uintptr_t>(p) - base, kHostAutoThpSmallAfter) << size;
      EXPECT_EQ(vm_flags_of(p).find(" hg "), std::string::npos) << size << ": " << vm_flags_of(p);
      blocks.push_back(p);
    }
    for (void* p : blocks) ASSERT_EQ(pool.deallocate(p), Status::ok);
    pool.flush_thread_cache();
    if (pool.config().thread_cache == HostThreadCache::size) {
      EXPECT_EQ(vm_flags_of(past_mark).find(" hg "), std::string::npos) << vm_flags_of(past_mark);
    }
    EXPECT_VALID(pool);
  }
}

// A cached dense segment past the mark (advised, its pages written, so on
// huge pages where the kernel had them) that comes back for 1-8 KiB blocks
// loses its advice and its huge pages: its pages' memory is given back
// before it serves the larger blocks (Engine::take_cached_segment).
TEST(HostPolicy, ACachedDenseSegmentServingLargerBlocksKeepsNoHugePages) {
  if (!std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled")) GTEST_SKIP() << "no THP in this kernel";
  HostPool pool("reserve=1GiB");  // performance: up to 4 empty segments cached
  // This thread's dense pages up to just before the mark stay live.
  std::vector<void*> kept = small_blocks_past(pool, kHostAutoThpSmallAfter - (1 << 20));
  ASSERT_NE(kept.back(), nullptr) << HostPool::last_error();
  const auto base = reinterpret_cast<uintptr_t>(kept[0]) & ~uintptr_t{(4 << 20) - 1};
  // Another thread fills dense pages past the mark, writes them, frees them
  // and exits: its pages go back, and the segment past the mark empties
  // into the cache.
  uintptr_t past = 0;
  std::thread([&] {
    std::vector<void*> blocks;
    while (blocks.empty() || reinterpret_cast<uintptr_t>(blocks.back()) - base < kHostAutoThpSmallAfter + (3 << 20)) {
      void* p = pool.allocate(1024);
      if (p == nullptr) break;
      fill(p, 1024, 9);
      blocks.push_back(p);
    }
    past = reinterpret_cast<uintptr_t>(blocks.back());
    for (void* p : blocks) pool.deallocate(p);
  }).join();
  ASSERT_GE(past - base, kHostAutoThpSmallAfter + (3 << 20));
  void* q = pool.allocate(4096);
  ASSERT_NE(q, nullptr);
  const auto seg = reinterpret_cast<uintptr_t>(q) & ~uintptr_t{(4 << 20) - 1};
  ASSERT_EQ(seg, past & ~uintptr_t{(4 << 20) - 1}) << "the 4 KiB block did not reuse the cached segment";
  fill(q, 4096, 5);
  EXPECT_EQ(vm_flags_of(q).find(" hg "), std::string::npos) << vm_flags_of(q);
  EXPECT_EQ(anon_huge_kib_of(q), 0);
  EXPECT_EQ(pool.deallocate(q), Status::ok);
  for (void* p : kept) ASSERT_EQ(pool.deallocate(p), Status::ok);
  EXPECT_VALID(pool);
}

TEST(HostPolicy, HugetlbFallsBackToNormalPagesAndCountsIt) {
  HostPool pool(conf("huge_pages=hugetlb"));
  void* p = pool.allocate(100);
  void* q = pool.allocate(9 << 20);
  ASSERT_NE(p, nullptr) << HostPool::last_error();
  ASSERT_NE(q, nullptr) << HostPool::last_error();
  fill(q, 9 << 20, 3);
  // Either the system has hugetlbfs pages or every commit fell back.
  const HostPoolStats st = pool.stats();
  SCOPED_TRACE(st.hugetlb_fallbacks);
  pool.deallocate(p);
  pool.deallocate(q);
  EXPECT_VALID(pool);
}

TEST(HostPolicy, NumaBindingToNodeZeroAndAClearErrorForAMissingNode) {
  {
    HostPool pool(conf("numa_node=0"));
    void* p = pool.allocate(1000);
    if (p == nullptr) {
      // Containers may forbid mbind: then the error names it.
      EXPECT_NE(std::string(HostPool::last_error()).find("mbind"), std::string::npos) << HostPool::last_error();
    } else {
      pool.deallocate(p);
    }
  }
  HostPool pool(conf("numa_node=1000"));
  EXPECT_EQ(pool.allocate(1000), nullptr);
  EXPECT_NE(std::string(HostPool::last_error()).find("mbind"), std::string::npos) << HostPool::last_error();
  EXPECT_VALID(pool);
}

}  // namespace
}  // namespace unipool::test
