// offset_util: the placement policies under test, behind one small interface
// the benchmark driver is templated over:
//
//   struct Handle;                                    // what free() needs
//   bool allocate(uint64_t size, Handle& out);        // false: out of space
//   void free(const Handle& h);
//   bool check(uint64_t requested, std::string* why) const;  // --check runs
//
//   unipool      unipool::RangeAllocator (exact sizes, own-bin best fit)
//   bin-roundup  the classic allocator, every request rounded up to its bin
//                value (Mooncake's "after optimization" OffsetAllocator)
//   exact        the classic allocator with exact sizes (Mooncake's "before")
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "classic_offset_allocator.hpp"
#include "unipool/range_allocator.hpp"

namespace offset_util {

enum class PolicyKind { unipool, bin_roundup, exact };

struct PolicySpec {
  PolicyKind kind = PolicyKind::unipool;
  uint64_t align = 1;  // only unipool takes an alignment other than 1
  uint32_t fit_scan_limit = 0;  // unipool only; 0: the library's default

  const char* name() const noexcept {
    switch (kind) {
      case PolicyKind::unipool: return "unipool";
      case PolicyKind::bin_roundup: return "bin-roundup";
      case PolicyKind::exact: return "exact";
    }
    return "?";
  }
  // "unipool", "unipool@256": how tables label the policy.
  std::string label() const {
    return align == 1 ? std::string(name()) : std::string(name()) + "@" + std::to_string(align);
  }
};

// Every policy of a full run, in table order.
inline std::vector<PolicySpec> all_policies() {
  return {{PolicyKind::unipool, 1, 0},
          {PolicyKind::bin_roundup, 1, 0},
          {PolicyKind::exact, 1, 0},
          {PolicyKind::unipool, 256, 0}};
}

class UnipoolPolicy {
 public:
  struct Handle {
    uint64_t offset = 0;
    uint64_t id = 0;
  };

  // fit_scan_limit 0: the library's default.
  UnipoolPolicy(uint64_t capacity, uint64_t align, uint64_t expected_live, uint32_t fit_scan_limit)
      : alloc_(capacity, options(align, expected_live, fit_scan_limit)) {}

  bool allocate(uint64_t size, Handle& out) {
    const unipool::RangeAllocation a = alloc_.allocate(size);
    out = Handle{a.offset, a.handle};
    return static_cast<bool>(a);
  }
  void free(const Handle& h) { alloc_.deallocate(h.offset, h.id); }
  // The allocator's invariants, and its requested-bytes count against the
  // driver's (`requested`).
  bool check(uint64_t requested, std::string* why) const {
    if (!alloc_.validate(why)) return false;
    if (alloc_.requested_bytes() != requested) {
      if (why != nullptr) *why = "requested_bytes() disagrees with the driver";
      return false;
    }
    return true;
  }

 private:
  static unipool::RangeAllocatorOptions options(uint64_t align, uint64_t expected_live,
                                                uint32_t fit_scan_limit) {
    unipool::RangeAllocatorOptions o;
    o.alignment = align;
    if (fit_scan_limit != 0) o.fit_scan_limit = fit_scan_limit;
    // Live ranges plus about as many free ones, like the peer's reservation.
    const uint64_t nodes = 2 * expected_live + 16;
    o.initial_nodes = static_cast<uint32_t>(std::min<uint64_t>(nodes, uint64_t{1} << 26));
    return o;
  }
  unipool::RangeAllocator alloc_;
};

// The classic allocator with a size transform: identity or bin round-up.
template <bool kRoundUpToBin>
class ClassicPolicy {
 public:
  using Handle = ClassicOffsetAllocator::Allocation;

  ClassicPolicy(uint64_t capacity, uint64_t expected_live)
      : alloc_(capacity, static_cast<size_t>(std::min<uint64_t>(2 * expected_live + 16,
                                                                uint64_t{1} << 26))) {}

  bool allocate(uint64_t size, Handle& out) {
    if constexpr (kRoundUpToBin) size = classic_bins::round_up_size(size);
    out = alloc_.allocate(size);
    return static_cast<bool>(out);
  }
  void free(const Handle& h) { alloc_.free(h); }
  // The allocator's invariants; it keeps no requested-bytes count.
  bool check(uint64_t /*requested*/, std::string* why) const { return alloc_.validate(why); }

 private:
  ClassicOffsetAllocator alloc_;
};

using BinRoundupPolicy = ClassicPolicy<true>;
using ExactPolicy = ClassicPolicy<false>;

// Builds the policy `spec` names over [0, capacity) and calls f(policy).
template <class F>
decltype(auto) with_policy(const PolicySpec& spec, uint64_t capacity, uint64_t expected_live,
                           F&& f) {
  switch (spec.kind) {
    case PolicyKind::bin_roundup: {
      BinRoundupPolicy p(capacity, expected_live);
      return f(p);
    }
    case PolicyKind::exact: {
      ExactPolicy p(capacity, expected_live);
      return f(p);
    }
    case PolicyKind::unipool:
      break;
  }
  UnipoolPolicy p(capacity, spec.align, expected_live, spec.fit_scan_limit);
  return f(p);
}

}  // namespace offset_util
