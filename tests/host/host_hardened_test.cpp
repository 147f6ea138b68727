// unipool host: hardened=on. A write after free over a free block's link (its
// first 8 bytes) is reported, never followed: the allocation that reaches the
// block fails with Status::corrupted and a message naming it, validate()
// names it before and counts it after, and no block is handed out from where
// the damaged link pointed. Small and middle classes; the block freed by its
// owner (local list) or by another thread (remote list).
//
// The pool's blocks live in its own mappings, which ASan does not poison, so
// ASan does not see these writes first and the tests run under it too.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "host_test_util.hpp"

namespace unipool::test {
namespace {

// What the program writes over the link of the freed block.
enum class Write { garbage, other_page, misaligned, zero };
enum class FreedBy { owner, other_thread };

const char* name_of(Write w) {
  switch (w) {
    case Write::garbage: return "garbage";
    case Write::other_page: return "other_page";
    case Write::misaligned: return "misaligned";
    case Write::zero: return "zero";
  }
  return "?";
}

std::string hex(const void* p) {
  char text[32];
  std::snprintf(text, sizeof text, "0x%" PRIxPTR, reinterpret_cast<uintptr_t>(p));
  return text;
}

std::string corruption_message(const void* block) {
  return "heap corruption: the free block at " + hex(block) + " was written after it was freed";
}

void write_link(void* freed, uintptr_t value) { std::memcpy(freed, &value, sizeof value); }

class HostHardened : public ::testing::TestWithParam<std::tuple<Write, size_t, FreedBy>> {
 protected:
  // The value written over the link. `neighbour` is another free block of the
  // same page, `elsewhere` a free block of another page.
  static uintptr_t bad_link(Write w, const void* neighbour, const void* elsewhere) {
    switch (w) {
      case Write::garbage: return 0x4141414141414141ull;
      case Write::other_page: return reinterpret_cast<uintptr_t>(elsewhere);
      case Write::misaligned: return reinterpret_cast<uintptr_t>(neighbour) + 8;
      case Write::zero: return 0;
    }
    return 0;
  }
};

TEST_P(HostHardened, WriteAfterFreeIsReportedAndNeverFollowed) {
  const auto [write, size, freed_by] = GetParam();
  HostPool pool(conf("hardened=on"));
  // `elsewhere`: a free block of another class, so of another page.
  void* elsewhere = pool.allocate(size == 64 ? 4096 : 64);
  ASSERT_NE(elsewhere, nullptr);
  ASSERT_EQ(pool.deallocate(elsewhere), Status::ok);
  std::vector<void*> live;
  for (int i = 0; i < 8; ++i) live.push_back(pool.allocate(size));
  void* neighbour = live[2];
  void* victim = live[5];
  ASSERT_EQ(pool.deallocate(neighbour), Status::ok);
  if (freed_by == FreedBy::owner) {
    ASSERT_EQ(pool.deallocate(victim), Status::ok);
  } else {
    Status s = Status::bad_argument;
    std::thread([&] { s = pool.deallocate(victim); }).join();
    ASSERT_EQ(s, Status::ok);
  }
  write_link(victim, bad_link(write, neighbour, elsewhere));

  // validate() walks the lists with every check: it names the block first.
  std::string why;
  EXPECT_FALSE(pool.validate(&why));
  EXPECT_NE(why.find(corruption_message(victim)), std::string::npos) << why;

  // Allocate until the pool reaches the victim (at once from the local list;
  // once the page's local blocks are used up for a remote free).
  std::set<void*> handed_out;
  HostAllocation a;
  for (int i = 0; i < 100000; ++i) {
    a = pool.allocate(size);
    if (a.ptr == nullptr) break;
    ASSERT_TRUE(handed_out.insert(a.ptr).second) << "handed out twice: " << a.ptr;
    EXPECT_NE(a.ptr, victim);
    EXPECT_NE(reinterpret_cast<uintptr_t>(a.ptr) % 16, 8u) << "followed the misaligned link";
    EXPECT_NE(a.ptr, elsewhere) << "followed the link into another page";
    std::memset(a.ptr, 0x5a, size);
  }
  ASSERT_EQ(a.ptr, nullptr) << "the damaged block was never reached";
  EXPECT_EQ(a.status, Status::corrupted);
  EXPECT_NE(std::string(HostPool::last_error()).find(corruption_message(victim)), std::string::npos)
      << HostPool::last_error();

  // The pool goes on serving, and never the dropped blocks.
  for (int i = 0; i < 64; ++i) {
    void* p = pool.allocate(size);
    ASSERT_NE(p, nullptr) << HostPool::last_error();
    EXPECT_NE(p, victim);
    handed_out.insert(p);
  }
  // validate() keeps saying what was found.
  why.clear();
  EXPECT_FALSE(pool.validate(&why));
  EXPECT_NE(why.find("heap corruption was found 1 time"), std::string::npos) << why;
  EXPECT_NE(why.find(corruption_message(victim)), std::string::npos) << why;
  for (void* p : handed_out) EXPECT_EQ(pool.deallocate(p), Status::ok);
  for (void* p : live) {
    if (p != victim && p != neighbour) {
      EXPECT_EQ(pool.deallocate(p), Status::ok);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Writes, HostHardened,
                         ::testing::Combine(::testing::Values(Write::garbage, Write::other_page, Write::misaligned,
                                                              Write::zero),
                                            ::testing::Values(size_t{64}, size_t{4096}, size_t{20000}),
                                            ::testing::Values(FreedBy::owner, FreedBy::other_thread)),
                         [](const auto& info) {
                           return std::string(name_of(std::get<0>(info.param))) + "_" +
                                  std::to_string(std::get<1>(info.param)) +
                                  (std::get<2>(info.param) == FreedBy::owner ? "_owner" : "_other_thread");
                         });

// Without hardened=on a link that leaves its page is still reported rather
// than dereferenced (the cheap check of every mode), when the block is popped.
// A block freed by its owner sits in the thread's block cache first, where
// nothing reads its link: more frees push it out onto its page's list.
TEST(HostHardenedOff, ALinkOutOfItsPageIsReportedNotFollowed) {
  for (const size_t size : {size_t{64}, size_t{4096}, size_t{20000}}) {
    HostPool pool(kTestConf);
    void* keep = pool.allocate(size);
    void* victim = pool.allocate(size);
    std::vector<void*> pushers;
    for (int i = 0; i < 128; ++i) pushers.push_back(pool.allocate(size));
    ASSERT_EQ(pool.deallocate(victim), Status::ok);
    for (void* p : pushers) ASSERT_EQ(pool.deallocate(p), Status::ok);
    write_link(victim, 0x4141414141414141ull);
    std::set<void*> handed_out;
    HostAllocation a;
    for (int i = 0; i < 100000; ++i) {
      a = pool.allocate(size);
      if (a.ptr == nullptr) break;
      EXPECT_NE(a.ptr, victim);
      handed_out.insert(a.ptr);
    }
    EXPECT_EQ(a.ptr, nullptr);
    EXPECT_EQ(a.status, Status::corrupted);
    EXPECT_NE(std::string(HostPool::last_error()).find(corruption_message(victim)), std::string::npos)
        << HostPool::last_error();
    void* p = pool.allocate(size);
    ASSERT_NE(p, nullptr);
    EXPECT_NE(p, victim);
    std::string why;
    EXPECT_FALSE(pool.validate(&why));
    EXPECT_NE(why.find("heap corruption was found 1 time"), std::string::npos) << why;
    pool.deallocate(p);
    for (void* q : handed_out) pool.deallocate(q);
    pool.deallocate(keep);
  }
}

// A deterministic mixed workload: allocations of every small and middle
// size, owner and cross-thread frees, contents checked. Returns a digest of
// what the program saw (sizes, contents), not of addresses.
struct Outcome {
  uint64_t digest = 0;
  HostPoolStats stats;
};

Outcome run_workload(HostPool& pool) {
  std::mt19937_64 rng(7);
  std::vector<std::pair<void*, size_t>> slots(2048, {nullptr, 0});
  Outcome out;
  auto take = [&](size_t i) {
    auto [p, n] = slots[i];
    if (p == nullptr) return;
    EXPECT_TRUE(intact(p, n, static_cast<uint8_t>(n)));
    out.digest = out.digest * 31 + n + pool.usable_size(p);
    slots[i] = {nullptr, 0};
  };
  for (int round = 0; round < 6; ++round) {
    for (int step = 0; step < 20000; ++step) {
      const size_t i = rng() % slots.size();
      if (slots[i].first != nullptr) {
        void* p = slots[i].first;
        take(i);
        EXPECT_EQ(pool.deallocate(p), Status::ok);
      } else {
        const size_t n = 1 + rng() % (step % 4 == 0 ? 32768 : 1024);
        void* p = pool.allocate(n);
        if (p == nullptr) {
          ADD_FAILURE() << HostPool::last_error();
          return out;
        }
        fill(p, n, static_cast<uint8_t>(n));
        slots[i] = {p, n};
      }
    }
    // Another thread frees every other live block: remote lists.
    std::vector<std::pair<void*, size_t>> handed;
    for (size_t i = 0; i < slots.size(); i += 2) {
      if (slots[i].first == nullptr) continue;
      handed.push_back(slots[i]);
      take(i);
    }
    std::thread([&] {
      for (auto [p, n] : handed) EXPECT_EQ(pool.deallocate(p), Status::ok);
    }).join();
  }
  out.stats = pool.stats();
  for (size_t i = 0; i < slots.size(); ++i) {
    void* p = slots[i].first;
    take(i);
    if (p != nullptr) {
      EXPECT_EQ(pool.deallocate(p), Status::ok);
    }
  }
  return out;
}

TEST(HostHardened, ANormalWorkloadPassesValidateAndGivesTheSameResults) {
  HostPool plain(kTestConf);
  HostPool hardened(conf("hardened=on"));
  const Outcome a = run_workload(plain);
  const Outcome b = run_workload(hardened);
  EXPECT_EQ(a.digest, b.digest);
  EXPECT_EQ(a.stats.allocated_bytes, b.stats.allocated_bytes);
  EXPECT_EQ(a.stats.requested_bytes, b.stats.requested_bytes);
  EXPECT_EQ(a.stats.small_blocks, b.stats.small_blocks);
  EXPECT_EQ(a.stats.middle_blocks, b.stats.middle_blocks);
  for (uint32_t c = 0; c < a.stats.num_classes; ++c) {
    EXPECT_EQ(a.stats.classes[c].live_blocks, b.stats.classes[c].live_blocks) << "class " << c;
  }
  EXPECT_EQ(hardened.stats().allocated_bytes, 0u);
  EXPECT_VALID(plain);
  EXPECT_VALID(hardened);
}

TEST(HostHardened, SharedClassListsUnderThreadCacheNone) {
  HostPool pool(conf("hardened=on,thread_cache=none"));
  void* keep = pool.allocate(256);
  void* victim = pool.allocate(256);
  ASSERT_EQ(pool.deallocate(victim), Status::ok);
  write_link(victim, 0);
  const HostAllocation a = pool.allocate(256);
  EXPECT_EQ(a.ptr, nullptr);
  EXPECT_EQ(a.status, Status::corrupted);
  EXPECT_NE(std::string(HostPool::last_error()).find(corruption_message(victim)), std::string::npos)
      << HostPool::last_error();
  void* p = pool.allocate(256);
  ASSERT_NE(p, nullptr);
  EXPECT_NE(p, victim);
  pool.deallocate(p);
  pool.deallocate(keep);
}

}  // namespace
}  // namespace unipool::test
