// Misuse and invalid arguments: each returns its Status and leaves the
// allocator exactly as it was (validate() passes, every counter and range is
// unchanged).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "support/allocator_checks.hpp"
#include "unipool/range_allocator.hpp"
#include "unipool/status.hpp"

namespace unipool {
namespace {

using test::kKiB;

// A pool with live allocations and free ranges of several sizes.
class Misuse : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const uint64_t size : {100u, 200u, 300u, 400u, 500u}) {
      live.push_back(a.allocate(size));
      ASSERT_TRUE(live.back());
    }
    freed = live[1];
    ASSERT_EQ(a.deallocate(freed), Status::ok);
    live.erase(live.begin() + 1);
    ASSERT_VALID(a);
  }

  // Runs a failing call and checks that it changed nothing.
  template <class F>
  void expect_no_change(F&& call) {
    const test::Accounting before(a);
    call();
    EXPECT_VALID(a);
    EXPECT_EQ(test::Accounting(a), before);
    // Every live allocation is still live and freeable afterwards.
    for (const auto& x : live) EXPECT_GT(a.allocation_size(x.offset, x.handle), 0u);
  }

  void expect_free_fails(uint64_t offset, uint64_t handle) {
    expect_no_change([&] { EXPECT_EQ(a.deallocate(offset, handle), Status::not_live) << offset << "/" << handle; });
  }

  RangeAllocator a{64 * kKiB};
  std::vector<RangeAllocation> live;
  RangeAllocation freed;
};

TEST_F(Misuse, DoubleFree) {
  expect_free_fails(freed.offset, freed.handle);
  const RangeAllocation x = live[2];
  ASSERT_EQ(a.deallocate(x), Status::ok);
  live.erase(live.begin() + 2);
  expect_free_fails(x.offset, x.handle);
  expect_free_fails(x.offset, x.handle);
}

TEST_F(Misuse, NeverAllocatedHandle) {
  expect_free_fails(0, 0);
  expect_free_fails(12345, 12345);
  expect_free_fails(live[0].offset, 0xFFFFFFFFu);                // node index far past the pool
  expect_free_fails(live[0].offset, ~uint64_t{0});
  expect_free_fails(live[0].offset, live[0].handle + (uint64_t{7} << 32));  // a generation never used
  // The handle of the free range's node at its offset (a node that is free).
  const auto ranges = test::ranges_of(a);
  for (const auto& r : ranges) {
    if (r.used) continue;
    for (uint64_t node = 0; node < 16; ++node) {
      for (uint64_t generation = 0; generation < 4; ++generation) {
        expect_free_fails(r.offset, (generation << 32) | node);
      }
    }
  }
  // A failed allocation's result is not a handle either.
  const RangeAllocation failed = a.allocate(0);
  ASSERT_FALSE(failed);
  expect_free_fails(failed.offset, failed.handle);
}

TEST_F(Misuse, InteriorOffset) {
  const RangeAllocation x = live[1];
  expect_free_fails(x.offset + 1, x.handle);
  expect_free_fails(x.offset + 299, x.handle);
  expect_free_fails(x.offset - 1, x.handle);
  expect_no_change([&] { EXPECT_EQ(a.allocation_size(x.offset + 1, x.handle), 0u); });
  EXPECT_EQ(a.deallocate(x), Status::ok);
  EXPECT_VALID(a);
}

TEST_F(Misuse, AnotherAllocationsHandle) {
  expect_free_fails(live[0].offset, live[1].handle);
  expect_free_fails(live[1].offset, live[0].handle);
}

TEST_F(Misuse, StaleHandleAfterTheNodeWasReused) {
  // Free a block between two used blocks and allocate the same size again:
  // it lands at the same offset on the same node, with a new generation.
  const RangeAllocation old = live[2];  // 400 bytes, neighbours used
  ASSERT_EQ(a.deallocate(old), Status::ok);
  live.erase(live.begin() + 2);
  const RangeAllocation fresh = a.allocate(400);
  ASSERT_TRUE(fresh);
  ASSERT_EQ(fresh.offset, old.offset);
  EXPECT_NE(fresh.handle, old.handle);
  live.push_back(fresh);
  expect_free_fails(old.offset, old.handle);
  EXPECT_EQ(a.allocation_size(old.offset, old.handle), 0u);
  EXPECT_EQ(a.allocation_size(fresh.offset, fresh.handle), 400u);
  EXPECT_EQ(a.deallocate(fresh), Status::ok);
  EXPECT_VALID(a);
}

TEST_F(Misuse, StaleHandlesStayStaleOverManyReuses) {
  const RangeAllocation first = live[2];
  std::set<uint64_t> handles{first.handle};
  RangeAllocation current = first;
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(a.deallocate(current), Status::ok);
    current = a.allocate(400);
    ASSERT_TRUE(current);
    ASSERT_EQ(current.offset, first.offset);
    EXPECT_TRUE(handles.insert(current.handle).second) << "handle reissued after " << i << " reuses";
  }
  live[2] = current;
  for (const uint64_t h : handles) {
    if (h != current.handle) expect_free_fails(first.offset, h);
  }
}

TEST_F(Misuse, ZeroSize) {
  expect_no_change([&] {
    const RangeAllocation x = a.allocate(0);
    EXPECT_FALSE(x);
    EXPECT_EQ(x.status, Status::zero_size);
    EXPECT_EQ(x.offset, RangeAllocation::kNoOffset);
    EXPECT_EQ(a.allocate(0, 4096).status, Status::zero_size);
  });
}

TEST_F(Misuse, SizeAboveCapacity) {
  expect_no_change([&] {
    EXPECT_EQ(a.allocate(a.capacity() + 1).status, Status::too_large);
    EXPECT_EQ(a.allocate(uint64_t{1} << 62).status, Status::too_large);
    EXPECT_EQ(a.allocate(~uint64_t{0}).status, Status::too_large);
    EXPECT_EQ(a.allocate(~uint64_t{0}, uint64_t{1} << 63).status, Status::too_large);
  });
  // Fits the capacity but not the free space: out_of_space, not too_large.
  expect_no_change([&] { EXPECT_EQ(a.allocate(a.capacity()).status, Status::out_of_space); });
  expect_no_change([&] { EXPECT_EQ(a.allocate(a.largest_free() + 1).status, Status::out_of_space); });
}

TEST_F(Misuse, AlignmentNotAPowerOfTwo) {
  expect_no_change([&] {
    for (const uint64_t align : {3ull, 6ull, 24ull, 1000ull, 4097ull, (1ull << 40) + 1, ~0ull}) {
      const RangeAllocation x = a.allocate(10, align);
      EXPECT_EQ(x.status, Status::bad_alignment) << align;
      EXPECT_EQ(x.offset, RangeAllocation::kNoOffset);
    }
  });
}

TEST_F(Misuse, AlignmentTooLargeForAnyPool) {
  expect_no_change([&] {
    EXPECT_EQ(a.allocate(10, uint64_t{1} << 62).status, Status::too_large);
    EXPECT_EQ(a.allocate(10, uint64_t{1} << 63).status, Status::too_large);
  });
}

TEST_F(Misuse, AlignmentLargerThanTheFreeSpace) {
  // Legal, it just cannot be met here.
  expect_no_change([&] { EXPECT_EQ(a.allocate(10, uint64_t{1} << 40).status, Status::out_of_space); });
}

TEST(RangeAllocatorErrors, ConstructorRejectsBadAlignment) {
  for (const uint64_t align : {0ull, 3ull, 48ull, 1000ull, 257ull, ~0ull}) {
    EXPECT_THROW(RangeAllocator(4096, {.alignment = align}), std::invalid_argument) << align;
  }
  for (const uint64_t align : {1ull, 2ull, 256ull, 1ull << 20}) {
    EXPECT_NO_THROW(RangeAllocator(4096, {.alignment = align})) << align;
  }
}

// Two allocators hand out equal handles (same node, same first generation
// before tags): freeing one's allocation in the other must be refused and
// must leave the other's own block allocated.
TEST(RangeAllocatorErrors, ForeignAllocationIsRefused) {
  RangeAllocator a(64 * kKiB);
  RangeAllocator b(64 * kKiB);
  const RangeAllocation x = a.allocate(100);
  const RangeAllocation victim = b.allocate(100);
  ASSERT_TRUE(x);
  ASSERT_TRUE(victim);
  ASSERT_EQ(x.offset, victim.offset);
  EXPECT_NE(b.deallocate(x), Status::ok);
  EXPECT_EQ(b.live_allocations(), 1u);
  EXPECT_EQ(b.used_bytes(), 100u);
  EXPECT_EQ(b.allocation_size(victim.offset, victim.handle), 100u);
  EXPECT_VALID(b);
  EXPECT_EQ(b.deallocate(x), Status::foreign);  // UNIPOOL_FOREIGN_CHECK
  EXPECT_EQ(b.allocation_size(x), 0u);          // UNIPOOL_FOREIGN_CHECK
  EXPECT_EQ(a.allocation_size(x), 100u);        // UNIPOOL_FOREIGN_CHECK
  // The raw form cannot see the tag, but the per-allocator first generation
  // keeps the two allocators' first handles apart.
  EXPECT_NE(x.handle, victim.handle);                      // UNIPOOL_FOREIGN_CHECK
  EXPECT_EQ(b.deallocate(x.offset, x.handle), Status::not_live);  // UNIPOOL_FOREIGN_CHECK
  EXPECT_EQ(b.live_allocations(), 1u);
  EXPECT_EQ(b.deallocate(victim), Status::ok);
  EXPECT_EQ(a.deallocate(x), Status::ok);
  EXPECT_VALID(a);
  EXPECT_VALID(b);
}

// A failed allocation carries owner 0, which no allocator has.
TEST(RangeAllocatorErrors, FailedAllocationIsForeignToEveryAllocator) {  // UNIPOOL_FOREIGN_CHECK
  RangeAllocator a(4096);                                                 // UNIPOOL_FOREIGN_CHECK
  const RangeAllocation failed = a.allocate(0);                           // UNIPOOL_FOREIGN_CHECK
  EXPECT_EQ(failed.owner, 0u);                                            // UNIPOOL_FOREIGN_CHECK
  EXPECT_NE(a.tag(), 0u);                                                 // UNIPOOL_FOREIGN_CHECK
  EXPECT_EQ(a.deallocate(failed), Status::foreign);                       // UNIPOOL_FOREIGN_CHECK
  static_assert(sizeof(RangeAllocation) == 32);                           // UNIPOOL_FOREIGN_CHECK
}                                                                         // UNIPOOL_FOREIGN_CHECK

// A move takes the tag along: the allocations stay valid in the target and
// are foreign to the emptied source.
TEST(RangeAllocatorErrors, MoveKeepsAllocationsWithTheirRanges) {
  RangeAllocator a(64 * kKiB);
  const RangeAllocation x = a.allocate(100);
  ASSERT_TRUE(x);
  RangeAllocator b(std::move(a));
  EXPECT_NE(a.deallocate(x), Status::ok);
  EXPECT_EQ(a.deallocate(x), Status::foreign);  // UNIPOOL_FOREIGN_CHECK
  EXPECT_EQ(b.deallocate(x), Status::ok);
  EXPECT_VALID(a);
  EXPECT_VALID(b);
}

TEST(RangeAllocatorErrors, StatusStringsAreNonEmptyAndDistinct) {
  const Status all[] = {
      Status::ok,       Status::zero_size,     Status::too_large,    Status::out_of_space,  Status::allocation_limit,
      Status::not_live, Status::bad_alignment, Status::bad_argument, Status::backend_error, Status::foreign,
      Status::corrupted};
  std::set<std::string> seen;
  for (const Status s : all) {
    const char* text = to_string(s);
    ASSERT_NE(text, nullptr);
    EXPECT_GT(std::strlen(text), 0u) << static_cast<int>(s);
    EXPECT_TRUE(seen.insert(text).second) << "duplicate message: " << text;
  }
  // Not one of the enumerators: still a message, not a crash.
  const char* unknown = to_string(static_cast<Status>(200));
  ASSERT_NE(unknown, nullptr);
  EXPECT_GT(std::strlen(unknown), 0u);
}

TEST(RangeAllocatorErrors, OperatorBoolIsStatusOk) {
  RangeAllocator a(100);
  RangeAllocation x = a.allocate(10);
  EXPECT_TRUE(static_cast<bool>(x));
  x.status = Status::out_of_space;
  EXPECT_FALSE(static_cast<bool>(x));
  const RangeAllocation def;
  EXPECT_FALSE(static_cast<bool>(def));
  EXPECT_EQ(def.offset, RangeAllocation::kNoOffset);
}

}  // namespace
}  // namespace unipool
