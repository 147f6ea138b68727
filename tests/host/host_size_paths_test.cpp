// unipool host: every size path hands out usable, distinct, aligned blocks of
// the right size, and gives every byte back.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "host/size_classes.hpp"
#include "host_test_util.hpp"
#include "support/rng.hpp"
#include "support/test_scale.hpp"

namespace unipool::test {
namespace {

struct Case {
  const char* name;
  size_t size;
};

class HostSizePath : public ::testing::TestWithParam<Case> {};

TEST_P(HostSizePath, AllocatesDistinctUsableBlocksAndReturnsEveryByte) {
  HostPool pool(kTestConf);
  const size_t size = GetParam().size;
  const int n = size > (1 << 20) ? 6 : 200;
  std::vector<void*> blocks;
  for (int i = 0; i < n; ++i) {
    void* p = pool.allocate(size);
    ASSERT_NE(p, nullptr) << HostPool::last_error();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 16, 0u);
    EXPECT_GE(pool.usable_size(p), size);
    EXPECT_TRUE(pool.owns(p));
    fill(p, size, static_cast<uint8_t>(i));
    blocks.push_back(p);
  }
  // Distinct and non-overlapping.
  std::vector<void*> sorted = blocks;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 1; i < sorted.size(); ++i) {
    EXPECT_GE(static_cast<char*>(sorted[i]) - static_cast<char*>(sorted[i - 1]), static_cast<ptrdiff_t>(size));
  }
  for (int i = 0; i < n; ++i) EXPECT_TRUE(intact(blocks[i], size, static_cast<uint8_t>(i)));
  HostPoolStats st = pool.stats();
  EXPECT_GE(st.allocated_bytes, n * size);
  EXPECT_GE(st.requested_bytes, n * size);
  EXPECT_VALID(pool);
  for (void* p : blocks) EXPECT_EQ(pool.deallocate(p), Status::ok);
  st = pool.stats();
  EXPECT_EQ(st.allocated_bytes, 0u);
  EXPECT_EQ(st.requested_bytes, 0u);
  EXPECT_EQ(st.small_blocks + st.middle_blocks + st.large_blocks + st.huge_blocks, 0u);
  EXPECT_VALID(pool);
}

INSTANTIATE_TEST_SUITE_P(Paths, HostSizePath,
                         ::testing::Values(Case{"tiny", 1}, Case{"small16", 16}, Case{"small100", 100},
                                           Case{"small1024", 1024}, Case{"small1025", 1025}, Case{"small8000", 8000},
                                           Case{"small8192", 8192}, Case{"middle8193", 8193},
                                           Case{"middle32k1", (32 << 10) + 1}, Case{"middle128k", 128 << 10},
                                           Case{"large128k1", (128 << 10) + 1}, Case{"large300k", 300000},
                                           Case{"large3M", 3 << 20}, Case{"huge9M", 9 << 20}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(HostPool, SmallAndMiddleBlocksUseSizeClassesWithBoundedWaste) {
  HostPool pool(kTestConf);
  for (size_t size = 1; size <= (128 << 10); size += (size < 8192 ? 1 : 97)) {
    void* p = pool.allocate(size);
    ASSERT_NE(p, nullptr);
    const size_t usable = pool.usable_size(p);
    EXPECT_GE(usable, size);
    // Four classes per power of two: at most 25% over (16 B minimum);
    // eight between 1 and 16 KiB: at most 12.5%.
    EXPECT_LE(usable, std::max<size_t>(16, size + size / 4 + 15)) << size;
    if (size > 1024 && size <= host::kFineMax) {
      EXPECT_LE(usable, size + size / 8) << size;
    }
    ASSERT_EQ(pool.deallocate(p), Status::ok);
  }
  EXPECT_VALID(pool);
}

// Where each size path ends: small blocks at 8 KiB (64 KiB pages; the next
// class is middle, on 256 KiB pages) under every policy with thread pages,
// and the middle path at middle_max, under its default (128 KiB under
// performance, 32 KiB under size) and set by hand. Each case allocates the
// last size of one path and the next byte, which takes the next path.
TEST(HostPool, EachSizePathEndsWhereItShould) {
  using Count = uint64_t HostPoolStats::*;
  struct Case {
    const char* extra;
    size_t last;
    Count at, past;
    size_t usable_past;  // 0: not checked (a large block's size)
  };
  const Case cases[] = {
      {"", 8192, &HostPoolStats::small_blocks, &HostPoolStats::middle_blocks, 9216},
      {"thread_cache=size", 8192, &HostPoolStats::small_blocks, &HostPoolStats::middle_blocks, 9216},
      {"", size_t{128} << 10, &HostPoolStats::middle_blocks, &HostPoolStats::large_blocks, 0},
      {"thread_cache=size", size_t{32} << 10, &HostPoolStats::middle_blocks, &HostPoolStats::large_blocks, 0},
      {"middle_max=64KiB", size_t{64} << 10, &HostPoolStats::middle_blocks, &HostPoolStats::large_blocks, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.extra) + " at " + std::to_string(c.last));
    HostPool pool(conf(c.extra));
    void* at = pool.allocate(c.last);
    void* past = pool.allocate(c.last + 1);
    ASSERT_TRUE(at != nullptr && past != nullptr);
    const HostPoolStats st = pool.stats();
    EXPECT_EQ(st.*c.at, 1u);
    EXPECT_EQ(st.*c.past, 1u);
    EXPECT_EQ(pool.usable_size(at), c.last);  // the last class of a path is its limit itself
    if (c.usable_past != 0) {
      EXPECT_EQ(pool.usable_size(past), c.usable_past);
    }
    EXPECT_EQ(pool.deallocate(at), Status::ok);
    EXPECT_EQ(pool.deallocate(past), Status::ok);
    EXPECT_VALID(pool);
  }
}

// An aligned request whose class lies past middle_max is a large block,
// also when middle_max falls between two classes (40000: 32 KiB is the
// last class under it, 40 KiB the next).
TEST(HostPool, AnAlignedClassPastMiddleMaxIsALargeBlock) {
  for (const char* extra : {"middle_max=40000", "thread_cache=size"}) {
    HostPool pool(conf(extra));
    void* middle = pool.allocate(size_t{32} << 10, 4096);
    void* large = pool.allocate((size_t{32} << 10) + 1, 64);
    ASSERT_TRUE(middle != nullptr && large != nullptr) << extra;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(middle) % 4096, 0u) << extra;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(large) % 64, 0u) << extra;
    const HostPoolStats st = pool.stats();
    EXPECT_EQ(st.middle_blocks, 1u) << extra;
    EXPECT_EQ(st.large_blocks, 1u) << extra;
    EXPECT_EQ(pool.deallocate(middle), Status::ok);
    EXPECT_EQ(pool.deallocate(large), Status::ok);
    EXPECT_VALID(pool);
  }
}

TEST(HostPool, LargeBlocksAreExactSizeNotPowerOfTwo) {
  HostPool pool(kTestConf);
  const size_t size = (1 << 20) + 1;  // PyTorch's pinned allocator would reserve 2 MiB
  void* p = pool.allocate(size);
  ASSERT_NE(p, nullptr);
  EXPECT_GE(pool.usable_size(p), size);
  EXPECT_LT(pool.usable_size(p), size + 128);
  const HostPoolStats st = pool.stats();
  EXPECT_EQ(st.large_blocks, 1u);
  EXPECT_EQ(st.requested_bytes, size);
  EXPECT_LT(st.allocated_bytes, size + 256);
  EXPECT_EQ(pool.deallocate(p), Status::ok);
  EXPECT_VALID(pool);
}

TEST(HostPool, FreedLargeBlockIsReusedForTheSameSize) {
  HostPool pool(kTestConf);
  void* a = pool.allocate(200000);
  void* b = pool.allocate(200000);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(pool.deallocate(a), Status::ok);
  void* c = pool.allocate(200000);
  EXPECT_EQ(c, a);
  pool.deallocate(b);
  pool.deallocate(c);
  EXPECT_VALID(pool);
}

TEST(HostPool, HugeBlocksGoBackToTheOsThroughASmallCache) {
  HostPool pool(conf("huge_cache=2"));
  const size_t size = 9 << 20;
  void* a = pool.allocate(size);
  ASSERT_NE(a, nullptr);
  fill(a, size, 3);
  const uint64_t committed = pool.stats().committed_bytes;
  ASSERT_EQ(pool.deallocate(a), Status::ok);
  HostPoolStats st = pool.stats();
  EXPECT_EQ(st.committed_bytes, committed);  // cached
  EXPECT_GE(st.cached_bytes, size);
  void* b = pool.allocate(size);  // reuses the cached mapping: no new page faults
  EXPECT_EQ(b, a);
  EXPECT_EQ(pool.stats().huge_cache_hits, 1u);
  // Three freed mappings, a cache of two: the oldest is unmapped.
  void* c = pool.allocate(size);
  void* d = pool.allocate(size);
  pool.deallocate(b);
  pool.deallocate(c);
  pool.deallocate(d);
  st = pool.stats();
  EXPECT_EQ(st.cached_bytes - (st.cached_bytes % size), 2 * size);
  pool.trim();
  st = pool.stats();
  EXPECT_LT(st.committed_bytes, size);
  EXPECT_VALID(pool);
}

TEST(HostPool, AnyPowerOfTwoAlignmentOnEveryPath) {
  HostPool pool(kTestConf);
  std::vector<void*> blocks;
  for (size_t align = 1; align <= (1 << 22); align *= 2) {
    for (size_t size : {size_t{1}, size_t{24}, size_t{700}, size_t{5000}, size_t{40000}, size_t{1 << 20},
                        size_t{9 << 20}}) {
      void* p = pool.allocate(size, align);
      ASSERT_NE(p, nullptr) << size << " / " << align << ": " << HostPool::last_error();
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % align, 0u) << size << " / " << align;
      EXPECT_GE(pool.usable_size(p), size);
      fill(p, size, 9);
      blocks.push_back(p);
    }
  }
  EXPECT_VALID(pool);
  for (void* p : blocks) EXPECT_EQ(pool.deallocate(p), Status::ok);
  EXPECT_EQ(pool.stats().allocated_bytes, 0u);
  EXPECT_VALID(pool);
}

// Above a segment's alignment (4 MiB, that of an arena's base) the arena's
// offsets say nothing about the address: such blocks must still come back
// aligned, and usable_size / free / validate must know them, up to the
// largest alignment the pool accepts (2^40), whatever the size and config.
TEST(HostPool, AlignmentsAboveASegmentAreServedAlignedAndFreed) {
#if defined(__SANITIZE_THREAD__)
  // TSan's memory layout leaves no room to reserve 2^39 bytes and more.
  constexpr size_t kLargest = size_t{1} << 32;
#else
  constexpr size_t kLargest = size_t{1} << 40;
#endif
  for (const char* config : {"", kTestConf}) {
    HostPool pool(config);
    for (size_t align = 16; align <= kLargest; align *= 2) {
      for (size_t size : {size_t{1}, size_t{100}, size_t{5000}, size_t{1} << 20, size_t{9} << 20,
                          size_t{40} << 20}) {
        void* p = pool.allocate(size, align);
        ASSERT_NE(p, nullptr) << config << ": " << size << " / " << align << ": " << HostPool::last_error();
        EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % align, 0u) << config << ": " << size << " / " << align;
        EXPECT_GE(pool.usable_size(p), size) << config << ": " << size << " / " << align;
        // Its first and last pages are written and read back (the whole of
        // 40 MiB blocks, 92 times over, took a minute under TSan).
        const size_t edge = size <= 8192 ? size : 4096;  // the ends never overlap
        char* last = static_cast<char*>(p) + size - edge;
        fill(p, edge, 3);
        fill(last, edge, 5);
        EXPECT_TRUE(intact(p, edge, 3) || last == p);
        EXPECT_TRUE(intact(last, edge, 5));
        EXPECT_EQ(pool.deallocate(p), Status::ok)
            << config << ": " << size << " / " << align << ": " << HostPool::last_error();
      }
      EXPECT_VALID(pool);
    }
    EXPECT_EQ(pool.stats().allocated_bytes, 0u) << config;
  }
}

TEST(HostPool, Alignment64UsesTheClassesNotLargeBlocks) {
  HostPool pool(kTestConf);
  void* p = pool.allocate(100, 64);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  EXPECT_EQ(pool.usable_size(p), 128u);
  EXPECT_EQ(pool.stats().large_blocks, 0u);
  pool.deallocate(p);
}

TEST(HostPool, RandomMixKeepsContentsAndAccounting) {
  HostPool pool(kTestConf);
  Rng rng(42);
  struct Live {
    void* p;
    size_t size;
    uint8_t tag;
  };
  std::vector<Live> live;
  const uint64_t ops = scaled(20000, 2000);
  for (uint64_t i = 0; i < ops; ++i) {
    if (live.empty() || rng.below(100) < 55) {
      const uint64_t r = rng.below(100);
      size_t size = r < 60 ? 1 + rng.below(1024) : r < 90 ? 1025 + rng.below(31 << 10) : r < 99 ? 40000 + rng.below(2 << 20)
                                                                                              : (9 << 20);
      const size_t align = rng.below(8) == 0 ? size_t{1} << rng.below(13) : 0;
      void* p = align ? pool.allocate(size, align) : pool.allocate(size);
      ASSERT_NE(p, nullptr);
      const auto tag = static_cast<uint8_t>(i);
      const size_t check = std::min<size_t>(size, 256);
      fill(p, check, tag);
      live.push_back({p, check, tag});
    } else {
      const size_t k = rng.below(live.size());
      ASSERT_TRUE(intact(live[k].p, live[k].size, live[k].tag));
      ASSERT_EQ(pool.deallocate(live[k].p), Status::ok);
      live[k] = live.back();
      live.pop_back();
    }
  }
  EXPECT_VALID(pool);
  for (const Live& l : live) {
    ASSERT_TRUE(intact(l.p, l.size, l.tag));
    ASSERT_EQ(pool.deallocate(l.p), Status::ok);
  }
  const HostPoolStats st = pool.stats();
  EXPECT_EQ(st.allocated_bytes, 0u);
  EXPECT_GT(st.peak_allocated_bytes, 0u);
  EXPECT_VALID(pool);
}

TEST(HostPool, StatsAddUpAndPeaksReset) {
  HostPool pool(kTestConf);
  std::vector<void*> blocks;
  for (int i = 0; i < 100; ++i) blocks.push_back(pool.allocate(1000 + i * 500));
  HostPoolStats st = pool.stats();
  EXPECT_EQ(st.allocated_bytes + st.deferred_bytes + st.cached_bytes + st.overhead_bytes + st.arena_free_bytes,
            st.committed_bytes);
  EXPECT_GT(st.committed_bytes, 0u);
  EXPECT_GE(st.reserved_bytes, st.committed_bytes);
  for (void* p : blocks) pool.deallocate(p);
  // A page refill folds the freed bytes into the gauges.
  pool.deallocate(pool.allocate(48));
  const uint64_t peak = pool.stats().peak_allocated_bytes;
  EXPECT_GT(peak, 0u);
  pool.reset_peak_stats();
  st = pool.stats();
  EXPECT_LT(st.peak_allocated_bytes, peak);
  uint64_t refills = 0;
  for (uint32_t c = 0; c < st.num_classes; ++c) refills += st.classes[c].refills;
  EXPECT_GT(refills, 0u);
  EXPECT_VALID(pool);
}

TEST(HostPool, SeveralPoolsAreIndependent) {
  HostPool a(kTestConf), b(kTestConf);
  void* p = a.allocate(64);
  void* q = b.allocate(64);
  EXPECT_TRUE(a.owns(p));
  EXPECT_FALSE(a.owns(q));
  EXPECT_FALSE(b.owns(p));
  EXPECT_EQ(b.deallocate(p), Status::not_live);  // p is a's
  EXPECT_EQ(a.deallocate(p), Status::ok);
  EXPECT_EQ(b.deallocate(q), Status::ok);
  EXPECT_VALID(a);
  EXPECT_VALID(b);
}

TEST(HostPool, DefaultPoolIsUsable) {
  HostPool& pool = HostPool::default_pool();
  void* p = pool.allocate(1000);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(&pool, HostPool::default_pool_nothrow());
  EXPECT_EQ(pool.deallocate(p), Status::ok);
}

// aligned_alloc's class comes from a table: for every power-of-two
// alignment up to 4 KiB and every size up to the largest middle class (and
// one past it), it is the smallest class that holds the size and whose
// blocks are multiples of the alignment, as a walk over the classes finds.
TEST(HostSizeClasses, AlignedClassIsTheSmallestClassOfThatAlignment) {
  using namespace unipool::host;
  for (uint64_t alignment = 1; alignment <= kMaxClassAlignment; alignment *= 2) {
    for (uint64_t size = 1; size <= kMiddleLimit + 1; ++size) {
      uint32_t expect = 0;
      while (expect < kNumClasses && (kClassSize[expect] < size || kClassSize[expect] % alignment != 0)) ++expect;
      ASSERT_EQ(aligned_class(size, alignment), expect) << "size " << size << " alignment " << alignment;
      if (alignment > 16 && size <= kMiddleLimit) {
        ASSERT_EQ(aligned_class_unchecked(size, alignment), expect) << "size " << size << " alignment " << alignment;
      }
    }
  }
}

// usable_size() of a small or middle block is its class size, whether the
// owner asks (its fast path: the page's tag and the block's live bit) or
// another thread does (the page descriptor); 0 once the block is freed.
TEST(HostSizeClasses, UsableSizeIsTheClassSizeForOwnerAndOthers) {
  using namespace unipool::host;
  HostPool pool(kTestConf);
  for (uint32_t c = 0; c < kNumClasses; ++c) {
    const size_t size = kClassSize[c] - (c == 0 ? 0 : 1);
    void* p = pool.allocate(size);
    ASSERT_NE(p, nullptr) << size;
    EXPECT_EQ(pool.usable_size(p), kClassSize[c]) << size;
    size_t seen = 0;
    std::thread([&] { seen = pool.usable_size(p); }).join();
    EXPECT_EQ(seen, kClassSize[c]) << size;
    ASSERT_EQ(pool.deallocate(p), Status::ok);
    EXPECT_EQ(pool.usable_size(p), 0u) << size;
  }
  EXPECT_VALID(pool);
}

}  // namespace
}  // namespace unipool::test
