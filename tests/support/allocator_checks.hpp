// unipool tests: gtest helpers shared by the RangeAllocator unit tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "support/units.hpp"
#include "support/valid.hpp"
#include "unipool/range_allocator.hpp"
#include "unipool/status.hpp"

namespace unipool {

// Readable Status and RangeInfo in gtest messages.
inline void PrintTo(Status s, std::ostream* os) { *os << to_string(s); }
inline void PrintTo(const RangeInfo& r, std::ostream* os) {
  *os << (r.used ? "used" : "free") << "[" << r.offset << ", +" << r.size << ")";
  if (r.used) *os << " requested " << r.requested;
}
inline bool operator==(const RangeInfo& a, const RangeInfo& b) {
  return a.offset == b.offset && a.size == b.size && a.requested == b.requested && a.used == b.used;
}

}  // namespace unipool

namespace unipool::test {

inline std::vector<RangeInfo> ranges_of(const RangeAllocator& a) {
  std::vector<RangeInfo> out;
  a.for_each_range([&](const RangeInfo& r) { out.push_back(r); });
  return out;
}

inline RangeInfo used_range(uint64_t offset, uint64_t size, uint64_t requested) {
  return RangeInfo{offset, size, requested, true};
}
inline RangeInfo used_range(uint64_t offset, uint64_t size) { return used_range(offset, size, size); }
inline RangeInfo free_range(uint64_t offset, uint64_t size) { return RangeInfo{offset, size, 0, false}; }

// Every counter and query, to show that a failed call changed nothing.
struct Accounting {
  uint64_t capacity, used, requested, free, live, free_ranges, largest, trailing;
  std::vector<RangeInfo> ranges;

  explicit Accounting(const RangeAllocator& a)
      : capacity(a.capacity()),
        used(a.used_bytes()),
        requested(a.requested_bytes()),
        free(a.free_bytes()),
        live(a.live_allocations()),
        free_ranges(a.free_ranges()),
        largest(a.largest_free()),
        trailing(a.trailing_free()),
        ranges(ranges_of(a)) {}

  bool operator==(const Accounting&) const = default;
};

inline void PrintTo(const Accounting& s, std::ostream* os) {
  *os << "{capacity " << s.capacity << ", used " << s.used << ", requested " << s.requested << ", live "
      << s.live << ", free ranges " << s.free_ranges << ", largest " << s.largest << ", trailing "
      << s.trailing << ", " << s.ranges.size() << " ranges}";
}

}  // namespace unipool::test
