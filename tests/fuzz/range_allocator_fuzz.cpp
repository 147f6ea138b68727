// libFuzzer target: the input is a program of RangeAllocator operations run
// against the reference model (tests/support/range_model.hpp); any
// disagreement, failed validate() or sanitizer report aborts.
//
// Program format (missing bytes read as 0):
//   header, 6 bytes
//     [0] pool alignment: {1, 1, 2, 8, 64, 256, 4096, 1}[b % 8]
//     [1] capacity kind (b % 4), [2] its parameter p:
//         0: 1 + 64 p (tiny)  1: 4 KiB (p + 1)  2: 2^(40 + p % 21) + p (huge)  3: p % 64
//     [3] fit_scan_limit = b % 10 (0 means 1)
//     [4] max_allocations = b >= 224 ? b - 223 : 0
//     [5] initial_nodes = b % 5
//   then operations, one opcode byte each plus arguments:
//     0-5   allocate: a size byte (class in the top two bits) and, for
//           opcodes 4-5, an alignment byte
//     6-8   free the live allocation chosen by the next byte
//     9     free a recently freed allocation again (double free / stale)
//     10    free a garbage (offset, handle) read from the input
//     11    free an interior offset of a live allocation
//     12    extend by ((u16 + 1) << (b % 24)) bytes
//     13    validate() and compare every range with the model
//     14    allocate the previous size again, (b % 32) times (uniform bursts)
//     15    free (b % 32) live allocations
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "support/range_model.hpp"
#include "unipool/range_allocator.hpp"

namespace {

using unipool::RangeAllocatorOptions;
using unipool::test::Differential;

class Input {
 public:
  Input(const uint8_t* data, size_t size) : p_(data), n_(size) {}
  bool empty() const { return n_ == 0; }
  uint8_t byte() {
    if (n_ == 0) return 0;
    --n_;
    return *p_++;
  }
  uint64_t u16() { return byte() | uint64_t{byte()} << 8; }
  uint64_t u32() { return u16() | u16() << 16; }
  uint64_t u64() { return u32() | u32() << 32; }

 private:
  const uint8_t* p_;
  size_t n_;
};

[[noreturn]] void disagree(const std::string& what, size_t op) {
  std::fprintf(stderr, "range_allocator_fuzz: op %zu: %s\n", op, what.c_str());
  std::fflush(stderr);
  std::abort();
}

uint64_t read_capacity(Input& in) {
  const uint8_t kind = in.byte() % 4;
  const uint64_t p = in.byte();
  switch (kind) {
    case 0: return 1 + 64 * p;
    case 1: return 4096 * (p + 1);
    case 2: return (uint64_t{1} << (40 + p % 21)) + p;
    default: return p % 64;
  }
}

// A size from one byte (and more for the larger classes), relative to the pool.
uint64_t read_size(Input& in, uint64_t capacity, uint64_t previous) {
  const uint8_t b = in.byte();
  switch (b >> 6) {
    case 0: return 1 + (b & 63);                                      // tiny
    case 1: return 1 + in.u16() * (1 + (b & 63));                       // up to a few MiB
    case 2: return capacity / 256 * (1 + in.byte()) + (b & 63);        // a fraction of the pool
    default: {
      if ((b & 32) != 0) return previous;                               // uniform streams
      const uint64_t p = uint64_t{1} << (in.byte() % 62);               // a power of two +- 1
      return (b & 16) != 0 ? p + 1 : p - ((b & 8) != 0 && p > 1 ? 1 : 0);
    }
  }
}

uint64_t read_alignment(Input& in) {
  const uint8_t b = in.byte();
  if (b < 128) return 0;
  if (b < 136) return 3 + 2 * uint64_t{b};  // not a power of two
  return uint64_t{1} << (b % 64);            // up to 2^63
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  static constexpr uint64_t kAlignments[8] = {1, 1, 2, 8, 64, 256, 4096, 1};
  RangeAllocatorOptions options;
  options.alignment = kAlignments[in.byte() % 8];
  const uint64_t capacity = read_capacity(in);
  options.fit_scan_limit = in.byte() % 10;
  const uint8_t cap = in.byte();
  options.max_allocations = cap >= 224 ? cap - 223 : 0;
  options.initial_nodes = in.byte() % 5;

  Differential d(capacity, options);
  std::string err = d.check_full();
  if (!err.empty()) disagree("fresh allocator: " + err, 0);

  uint64_t previous_size = 1;
  for (size_t op = 1; !in.empty() && op < 20000; ++op) {
    const uint8_t code = in.byte() % 16;
    const uint64_t live = d.model().live_count();
    const uint64_t cap_now = d.allocator().capacity();
    switch (code) {
      case 0: case 1: case 2: case 3: case 4: case 5: {
        const uint64_t s = read_size(in, cap_now, previous_size);
        const uint64_t align = code >= 4 ? read_alignment(in) : 0;
        err = d.allocate(s, align);
        if (s != 0) previous_size = s;
        break;
      }
      case 6: case 7: case 8:
        if (live != 0) err = d.free_live(in.byte() % live);
        break;
      case 9:
        err = d.free_stale(in.byte());
        break;
      case 10: {
        const uint64_t offset = in.byte() < 128 ? in.u16() : in.u64();
        err = d.free_any(offset, in.u64());
        break;
      }
      case 11:
        if (live != 0) err = d.free_interior(in.byte() % live, in.u32());
        break;
      case 12: {
        const uint64_t amount = in.u16() + 1;
        err = d.extend(amount << (in.byte() % 24));
        break;
      }
      case 13:
        err = d.check_full();
        break;
      case 14:
        for (int n = in.byte() % 32; n > 0 && err.empty(); --n) err = d.allocate(previous_size);
        break;
      default:
        for (int n = in.byte() % 32; n > 0 && err.empty() && d.model().live_count() != 0; --n) {
          err = d.free_live(in.byte() % d.model().live_count());
        }
        break;
    }
    if (!err.empty()) disagree(err, op);
    // validate() after every step; the full range comparison every 8th.
    std::string why;
    if (!d.allocator().validate(&why)) disagree("validate(): " + why, op);
    if (op % 8 == 0) {
      err = d.check_full();
      if (!err.empty()) disagree(err, op);
    }
  }
  err = d.check_full();
  if (!err.empty()) disagree("at the end: " + err, 0);
  // Free everything: one free range (or none in an empty pool) must remain.
  while (d.model().live_count() != 0) {
    err = d.free_live(d.model().live_count() - 1);
    if (!err.empty()) disagree("teardown: " + err, 0);
  }
  err = d.check_full();
  if (!err.empty()) disagree("after teardown: " + err, 0);
  if (d.allocator().free_ranges() != (d.allocator().capacity() != 0 ? 1u : 0u)) {
    disagree("an empty pool is not one free range", 0);
  }
  return 0;
}
