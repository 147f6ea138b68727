// unipool host: misuse gets an error status and a message, never a corrupted
// pool: foreign, interior and double frees on every path, bad arguments.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "host/size_classes.hpp"
#include "host_test_util.hpp"

namespace unipool::test {
namespace {

class HostMisuse : public ::testing::TestWithParam<size_t> {};

TEST_P(HostMisuse, DoubleFreeIsRefusedAndThePoolStaysValid) {
  HostPool pool(kTestConf);
  const size_t size = GetParam();
  void* keep = pool.allocate(size);
  void* p = pool.allocate(size);
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(pool.deallocate(p), Status::ok);
  EXPECT_EQ(pool.deallocate(p), Status::not_live);
  EXPECT_NE(std::string(HostPool::last_error()).find("free"), std::string::npos);
  EXPECT_GE(pool.stats().misuse_errors, 1u);
  EXPECT_VALID(pool);
  // The pool still works and hands the block out once, not twice.
  void* a = pool.allocate(size);
  void* b = pool.allocate(size);
  EXPECT_NE(a, b);
  pool.deallocate(a);
  pool.deallocate(b);
  pool.deallocate(keep);
  EXPECT_EQ(pool.stats().allocated_bytes, 0u);
  EXPECT_VALID(pool);
}

// The owner's fast free path proves a block live from the page's live bitmap
// and its tag's pending flag, without reading the block: a block another thread
// freed (pending on the remote list) or one the owner freed (on the local
// list, then collected) must still be refused from either side.
TEST_P(HostMisuse, DoubleFreeAcrossThreadsIsRefused) {
  HostPool pool(kTestConf);
  const size_t size = GetParam();
  void* keep = pool.allocate(size);
  void* by_other = pool.allocate(size);
  void* by_owner = pool.allocate(size);
  ASSERT_NE(by_other, nullptr);
  ASSERT_NE(by_owner, nullptr);
  Status other_first = Status::bad_argument;
  std::thread([&] { other_first = pool.deallocate(by_other); }).join();
  EXPECT_EQ(other_first, Status::ok);
  EXPECT_EQ(pool.deallocate(by_other), Status::not_live);  // the owner, while the remote free is pending
  ASSERT_EQ(pool.deallocate(by_owner), Status::ok);
  Status other_second = Status::ok;
  std::thread([&] { other_second = pool.deallocate(by_owner); }).join();
  EXPECT_EQ(other_second, Status::not_live);
  EXPECT_VALID(pool);
  // Refilling collects the remote free; both blocks are handed out once each.
  std::vector<void*> again;
  for (int i = 0; i < 4; ++i) again.push_back(pool.allocate(size));
  for (size_t i = 0; i < again.size(); ++i) {
    for (size_t j = i + 1; j < again.size(); ++j) EXPECT_NE(again[i], again[j]);
  }
  for (void* q : again) EXPECT_EQ(pool.deallocate(q), Status::ok);
  EXPECT_EQ(pool.deallocate(again[0]), Status::not_live);
  EXPECT_EQ(pool.deallocate(keep), Status::ok);
  EXPECT_EQ(pool.stats().allocated_bytes, 0u);
  EXPECT_VALID(pool);
}

TEST_P(HostMisuse, InteriorPointerIsRefused) {
  HostPool pool(kTestConf);
  const size_t size = GetParam();
  auto* p = static_cast<char*>(pool.allocate(size).ptr);
  ASSERT_NE(p, nullptr);
  for (size_t off : {size_t{1}, size_t{8}, size_t{16}, size / 2}) {
    if (off == 0 || off >= size) continue;
    EXPECT_EQ(pool.deallocate(p + off), Status::not_live) << off;
    EXPECT_EQ(pool.usable_size(p + off), 0u);
  }
  EXPECT_VALID(pool);
  EXPECT_EQ(pool.deallocate(p), Status::ok);
  EXPECT_VALID(pool);
}

INSTANTIATE_TEST_SUITE_P(Paths, HostMisuse,
                         ::testing::Values(size_t{16}, size_t{200}, size_t{4000}, size_t{30000}, size_t{100000},
                                           size_t{200000}, size_t{9} << 20));

// The live bits sit one per 16-byte granule of a segment, found from a
// block's address: over three pages of a class, alternate blocks freed are
// each refused a second time, their neighbours (on either side of a page
// boundary too) stay live, and validate() recounts every page's bits.
TEST(HostMisuseBitmap, AlternateBlocksOverSeveralPagesKeepTheirOwnBits) {
  for (size_t size : {size_t{16}, size_t{48}, size_t{1152}, size_t{4608}, size_t{32768}}) {
    HostPool pool(kTestConf);
    const size_t page = size <= unipool::host::kSmallMax ? size_t{64} << 10 : size_t{256} << 10;
    std::vector<void*> blocks(3 * page / size + 1);
    for (void*& p : blocks) {
      p = pool.allocate(size);
      ASSERT_NE(p, nullptr) << size;
    }
    for (size_t i = 0; i < blocks.size(); i += 2) ASSERT_EQ(pool.deallocate(blocks[i]), Status::ok) << size;
    for (size_t i = 0; i < blocks.size(); ++i) {
      if (i % 2 == 0) {
        EXPECT_EQ(pool.usable_size(blocks[i]), 0u) << size << " block " << i;
        EXPECT_EQ(pool.deallocate(blocks[i]), Status::not_live) << size << " block " << i;
      } else {
        EXPECT_GE(pool.usable_size(blocks[i]), size) << size << " block " << i;
      }
    }
    EXPECT_VALID(pool);
    for (size_t i = 1; i < blocks.size(); i += 2) ASSERT_EQ(pool.deallocate(blocks[i]), Status::ok) << size;
    EXPECT_EQ(pool.stats().allocated_bytes, 0u) << size;
    EXPECT_VALID(pool);
  }
}

TEST(HostMisuseForeign, PointersThePoolNeverGaveOutAreRefused) {
  HostPool pool(kTestConf);
  void* mine = pool.allocate(64);
  void* big = pool.allocate(1 << 20);
  int on_stack = 0;
  void* from_malloc = std::malloc(64);
  EXPECT_EQ(pool.deallocate(&on_stack), Status::not_live);
  EXPECT_EQ(pool.deallocate(from_malloc), Status::not_live);
  EXPECT_EQ(pool.deallocate(reinterpret_cast<void*>(0x1000)), Status::not_live);
  // Inside the pool but never handed out: past the last carved block of a
  // page, and the header area of a large block.
  EXPECT_EQ(pool.deallocate(static_cast<char*>(mine) + 64 * 1000), Status::not_live);
  EXPECT_EQ(pool.deallocate(static_cast<char*>(big) - 64), Status::not_live);
  EXPECT_EQ(pool.deallocate(static_cast<char*>(big) + (1 << 20) + 4096), Status::not_live);
  EXPECT_FALSE(pool.owns(&on_stack));
  EXPECT_FALSE(pool.owns(from_malloc));
  EXPECT_EQ(pool.stats().misuse_errors, 6u);
  EXPECT_VALID(pool);
  std::free(from_malloc);
  EXPECT_EQ(pool.deallocate(mine), Status::ok);
  EXPECT_EQ(pool.deallocate(big), Status::ok);
  EXPECT_EQ(pool.deallocate(nullptr), Status::ok);
  EXPECT_VALID(pool);
}

// The owner's fast free path accepts a pointer on its live bit alone: the
// 4 MiB segment's header (the page descriptors, tags and bitmap, where no
// bit is ever set) and every granule inside a live block must fail it.
TEST(HostMisuseForeign, PointersIntoASegmentHeaderOrInsideABlockAreRefused) {
  HostPool pool(kTestConf);
  auto* first = static_cast<char*>(pool.allocate(64).ptr);
  ASSERT_NE(first, nullptr);
  char* segment = reinterpret_cast<char*>(reinterpret_cast<uintptr_t>(first) & ~((uintptr_t{4} << 20) - 1));
  uint64_t refused = 0;
  for (char* p = segment; p < first; p += 16 * 97) {  // every 97th granule of the header
    EXPECT_EQ(pool.deallocate(p), Status::not_live) << static_cast<const void*>(p);
    ++refused;
  }
  EXPECT_EQ(pool.deallocate(first - 16), Status::not_live);
  for (int g = 1; g < 4; ++g) EXPECT_EQ(pool.deallocate(first + 16 * g), Status::not_live) << g;
  EXPECT_EQ(pool.stats().misuse_errors, refused + 4);
  EXPECT_VALID(pool);
  EXPECT_EQ(pool.deallocate(first), Status::ok);
  EXPECT_VALID(pool);
}

TEST(HostMisuseForeign, BlockOfAnotherPoolIsForeign) {
  HostPool a(kTestConf), b(kTestConf);
  for (size_t size : {size_t{32}, size_t{20000}, size_t{200000}, size_t{9} << 20}) {
    void* p = a.allocate(size);
    EXPECT_EQ(b.deallocate(p), Status::not_live) << size;
    EXPECT_EQ(a.deallocate(p), Status::ok) << size;
  }
  EXPECT_VALID(a);
  EXPECT_VALID(b);
}

TEST(HostMisuseArguments, ZeroSizeBadAlignmentAndTooLarge) {
  HostPool pool(kTestConf);
  EXPECT_EQ(pool.allocate(0).status, Status::zero_size);
  EXPECT_EQ(pool.allocate(0), nullptr);
  const HostAllocation misaligned = pool.allocate(64, 48);
  EXPECT_EQ(misaligned, nullptr);
  EXPECT_EQ(misaligned.status, Status::bad_alignment);
  EXPECT_NE(std::string(HostPool::last_error()).find("48"), std::string::npos);
  EXPECT_EQ(pool.allocate(~size_t{0} - 10).status, Status::too_large);
  EXPECT_VALID(pool);
}

// Every alignment that is not a power of two is refused, small ones too:
// 3..15 used to take the "16 or less: the default" shortcut and succeed.
TEST(HostMisuseArguments, EveryNonPowerOfTwoAlignmentIsRefused) {
  HostPool pool(kTestConf);
  for (const size_t align : {3, 5, 6, 7, 9, 12, 15, 17, 24, 48, 100, 4097}) {
    for (const size_t size : {size_t{1}, size_t{64}, size_t{100} << 10}) {
      const HostAllocation a = pool.allocate(size, align);
      EXPECT_EQ(a, nullptr) << align << "/" << size;
      EXPECT_EQ(a.status, Status::bad_alignment) << align << "/" << size;
      EXPECT_NE(std::string(HostPool::last_error()).find("alignment " + std::to_string(align)), std::string::npos)
          << HostPool::last_error();
    }
  }
  // 0 (the default) and the small powers of two stay valid.
  for (const size_t align : {0, 1, 2, 4, 8, 16, 32}) {
    void* p = pool.allocate(64, align);
    ASSERT_NE(p, nullptr) << align;
    if (align != 0) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % align, 0u) << align;
    }
    EXPECT_EQ(pool.deallocate(p), Status::ok);
  }
  EXPECT_VALID(pool);
}

TEST(HostMisuseArguments, ExhaustedPoolSaysSo) {
  HostPool pool(conf("limit=16MiB"));
  std::vector<void*> blocks;
  HostAllocation a;
  while ((a = pool.allocate(1 << 20))) blocks.push_back(a);
  EXPECT_EQ(a.status, Status::out_of_space);
  EXPECT_NE(std::string(HostPool::last_error()).find("limit"), std::string::npos) << HostPool::last_error();
  EXPECT_GE(blocks.size(), 10u);
  EXPECT_LE(pool.stats().committed_bytes, uint64_t{16} << 20);
  EXPECT_EQ(pool.allocate(9 << 20), nullptr);  // the huge path obeys the limit too
  EXPECT_VALID(pool);
  for (void* b : blocks) pool.deallocate(b);
  EXPECT_NE(pool.allocate(1 << 20), nullptr);  // and recovers once memory is back
}

TEST(HostMisuseArguments, ConcurrentHugeBlocksNeverPassTheLimit) {
  // Threads racing for new huge mappings: each checks the headroom and counts
  // its mapping in one step, so at most 3 of the 20 MiB blocks are live under
  // 64 MiB, and the peak never passes the limit. No cache: every block maps.
  HostPool pool(conf("limit=64MiB,huge_cache=0"));
  constexpr size_t kBlock = size_t{20} << 20;
  std::vector<std::thread> threads;
  std::vector<int> served(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 1000; ++i) {
        void* p = pool.allocate(kBlock);
        if (p == nullptr) continue;
        ++served[static_cast<size_t>(t)];
        static_cast<char*>(p)[0] = 1;
        EXPECT_EQ(pool.deallocate(p), Status::ok);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  int total = 0;
  for (int n : served) total += n;
  EXPECT_GT(total, 0);
  const HostPoolStats st = pool.stats();
  EXPECT_LE(st.peak_committed_bytes, uint64_t{64} << 20);
  EXPECT_EQ(st.huge_blocks, 0u);
  EXPECT_VALID(pool);
}

}  // namespace
}  // namespace unipool::test
