// RangeAllocator and LockedRangeAllocator: bad input to each public member
// that takes some, and where its case is (file: test). The counters (capacity,
// used_bytes, ..., trailing_free) and tag take no input.
//
//   RangeAllocator(capacity, options)
//     range_allocator_errors_test: RangeAllocatorErrors.ConstructorRejectsBadAlignment
//     range_allocator_capacity_test: RangeAllocatorCapacity.CapacityOf2To62IsRejected
//   allocate(size, alignment)
//     range_allocator_errors_test: Misuse.ZeroSize, Misuse.SizeAboveCapacity, Misuse.AlignmentNotAPowerOfTwo,
//       Misuse.AlignmentTooLargeForAnyPool, Misuse.AlignmentLargerThanTheFreeSpace
//     range_allocator_capacity_test: RangeAllocatorLimits.MaxAllocationsReturnsAllocationLimit
//   allocate_at(offset, size)
//     range_allocator_place_test: AllocateAtRefusals.EachMisuseHasItsStatusAndChangesNothing,
//       AllocateAtRefusals.TheAllocationCapApplies
//     here: RangeAllocatorBadInput.AllocateAtOffsetsThatWrap
//   deallocate(offset, handle), deallocate(allocation)
//     range_allocator_errors_test: Misuse.DoubleFree, Misuse.NeverAllocatedHandle, Misuse.InteriorOffset,
//       Misuse.AnotherAllocationsHandle, Misuse.StaleHandleAfterTheNodeWasReused,
//       RangeAllocatorErrors.ForeignAllocationIsRefused, RangeAllocatorErrors.FailedAllocationIsForeignToEveryAllocator
//   resize(offset, handle, size)
//     range_allocator_resize_test: RangeResize.RefusalsChangeNothing
//   allocation_size(offset, handle)
//     here: RangeAllocatorBadInput.AllocationSizeOfWhatIsNotLiveIsZero
//   extend(bytes)
//     range_allocator_capacity_test: RangeAllocatorExtend.RefusesToReach2To62AndChangesNothing
//   for_each_range(f), validate(why)
//     here: RangeAllocatorBadInput.ValidateAndWalkOfAnEmptyAllocator
//   LockedRangeAllocator: every member above, behind its mutex
//     here: LockedRangeAllocatorBadInput.RefusesAsTheInnerAllocatorDoes
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "support/allocator_checks.hpp"
#include "unipool/locked_range_allocator.hpp"
#include "unipool/range_allocator.hpp"

namespace unipool {
namespace {

using test::kKiB;

TEST(RangeAllocatorBadInput, AllocateAtOffsetsThatWrap) {
  RangeAllocator a(64 * kKiB, {.alignment = 256});
  const test::Accounting before(a);
  for (const uint64_t offset : {~uint64_t{0} - 255, ~uint64_t{0} & ~uint64_t{255}, uint64_t{1} << 63}) {
    const RangeAllocation r = a.allocate_at(offset, 512);
    EXPECT_FALSE(r) << offset;
    EXPECT_EQ(r.status, Status::bad_argument) << offset;
  }
  const RangeAllocation r = a.allocate_at(256, ~uint64_t{0} - 255);  // offset + size wraps to 0
  EXPECT_FALSE(r);
  EXPECT_NE(r.status, Status::ok);
  EXPECT_EQ(test::Accounting(a), before);
  EXPECT_VALID(a);
}

TEST(RangeAllocatorBadInput, AllocationSizeOfWhatIsNotLiveIsZero) {
  RangeAllocator a(64 * kKiB);
  RangeAllocator other(64 * kKiB);
  const RangeAllocation x = a.allocate(1000);
  const RangeAllocation freed = a.allocate(2000);
  const RangeAllocation theirs = other.allocate(3000);
  ASSERT_TRUE(x && freed && theirs);
  ASSERT_EQ(a.deallocate(freed), Status::ok);
  EXPECT_EQ(a.allocation_size(freed), 0u);
  EXPECT_EQ(a.allocation_size(x.offset + 256, x.handle), 0u);  // interior
  EXPECT_EQ(a.allocation_size(x.offset, x.handle + 1), 0u);    // another handle
  EXPECT_EQ(a.allocation_size(~uint64_t{0}, ~uint64_t{0}), 0u);
  EXPECT_EQ(a.allocation_size(RangeAllocation{}), 0u);  // a failed allocation's
  EXPECT_EQ(a.allocation_size(theirs), 0u);             // another allocator's
  EXPECT_GE(a.allocation_size(x), 1000u);
  EXPECT_VALID(a);
}

TEST(RangeAllocatorBadInput, ValidateAndWalkOfAnEmptyAllocator) {
  RangeAllocator a(4096);
  EXPECT_TRUE(a.validate(nullptr));
  int ranges = 0;
  a.for_each_range([&](const RangeInfo&) { ++ranges; });
  EXPECT_EQ(ranges, 1);  // one free range
}

TEST(LockedRangeAllocatorBadInput, RefusesAsTheInnerAllocatorDoes) {
  EXPECT_THROW(LockedRangeAllocator(4096, {.alignment = 48}), std::invalid_argument);
  LockedRangeAllocator a(64 * kKiB);
  EXPECT_EQ(a.allocate(0).status, Status::zero_size);
  EXPECT_EQ(a.allocate(100, 24).status, Status::bad_alignment);
  EXPECT_EQ(a.allocate(128 * kKiB).status, Status::too_large);
  const RangeAllocation x = a.allocate(100);
  ASSERT_TRUE(x);
  EXPECT_EQ(a.deallocate(x.offset + 16, x.handle), Status::not_live);
  EXPECT_EQ(a.deallocate(x), Status::ok);
  EXPECT_EQ(a.deallocate(x), Status::not_live);
  EXPECT_EQ(a.extend(~uint64_t{0}), Status::too_large);
  EXPECT_EQ(a.live_allocations(), 0u);
  EXPECT_EQ(a.capacity(), 64 * kKiB);
  EXPECT_TRUE(a.validate(nullptr));
}

}  // namespace
}  // namespace unipool
