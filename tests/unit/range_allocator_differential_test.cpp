// Randomized differential test: RangeAllocator against the reference model of
// tests/support/range_model.hpp over millions of operations in total, spread
// over configurations (pool alignment 1 and 256, small pools kept near full,
// mixed and uniform-size phases, per-call alignments, extend(), the
// allocation cap, misuse, allocate_at at exact offsets). After every operation every counter and query is
// compared with the model and the placement is checked (inside one free gap,
// aligned, at the gap's aligned start, best fit where the bounded scan must
// find it, never out_of_space when a fit had to be found); validate() and a
// range-by-range comparison run every op on the small configurations and
// every few thousand ops on the multi-million one.
//
// Fixed seeds. UNIPOOL_TEST_SCALE scales the operation counts (sanitizers).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "support/range_model.hpp"
#include "support/rng.hpp"
#include "support/test_scale.hpp"
#include "support/units.hpp"
#include "support/valid.hpp"
#include "unipool/range_allocator.hpp"

namespace unipool {
namespace {

using test::kKiB;
using test::kMiB;

struct Scenario {
  const char* name;
  uint64_t seed;
  uint64_t capacity;
  RangeAllocatorOptions options;
  uint64_t ops;                   // at scale 1
  uint64_t epoch_ops = 0;         // a fresh allocator every epoch_ops ops (0: one epoch)
  uint64_t validate_every = 1;     // validate()
  uint64_t full_check_every = 16;  // validate() + range-by-range comparison with the model
  uint64_t min_size = 1, max_size = 64 * kKiB;
  double per_call_align = 0.0;    // chance of a per-call alignment
  uint32_t max_align_log2 = 16;
  double extend_chance = 0.0;
  uint64_t max_extend = 0;
  bool uniform_phases = false;    // alternate mixed and uniform-size phases
  double place_chance = 0.0;      // chance of an allocate_at (in a gap, or anywhere)
  double misuse_chance = 0.02;
};

void PrintTo(const Scenario& s, std::ostream* os) { *os << s.name; }

struct Stats {
  uint64_t ops = 0, allocated = 0, out_of_space = 0, limit = 0, freed = 0, misuse = 0, extends = 0,
           full_checks = 0, validates = 0, uniform_fills = 0, max_live = 0, exact_reuses = 0, placed = 0,
           place_refused = 0;
};

class RangeAllocatorDifferential : public ::testing::TestWithParam<Scenario> {};

TEST_P(RangeAllocatorDifferential, AgreesWithTheReferenceModel) {
  const Scenario& sc = GetParam();
  const uint64_t total_ops = test::scaled(sc.ops, 2000);
  const uint64_t epoch_ops = sc.epoch_ops == 0 ? total_ops : sc.epoch_ops;
  test::Rng rng(sc.seed);
  Stats stats;

  for (uint64_t epoch_start = 0; epoch_start < total_ops; epoch_start += epoch_ops) {
    test::Differential d(sc.capacity, sc.options);
    {
      const std::string err = d.check_full();
      ASSERT_TRUE(err.empty()) << "fresh allocator: " << err;
    }
    const uint64_t base = d.base_alignment();
    bool draining = false;       // freeing after an out_of_space, to stay near full
    uint64_t drain_left = 0;
    // Uniform phase: size s, and whether it started from an empty pool (then
    // the pool must hold exactly floor(capacity / extent) blocks of s).
    uint64_t phase_left = 0, uniform_size = 0, uniform_slots = 0;
    bool clean_uniform = false;

    const uint64_t epoch_end = std::min(total_ops, epoch_start + epoch_ops);
    for (uint64_t op = epoch_start; op < epoch_end; ++op) {
      ++stats.ops;
      std::string err;

      if (sc.uniform_phases && phase_left == 0) {
        // Next phase: mixed, uniform over whatever is live, or uniform from empty.
        phase_left = rng.between(500, 8000);
        const uint64_t kind = rng.below(3);
        // Uniform sizes give at most ~1000 blocks and at least 3.
        const uint64_t cap = d.allocator().capacity();
        const uint64_t lo = std::max<uint64_t>(sc.min_size, cap / 1000 + 1);
        const uint64_t hi = std::min<uint64_t>(sc.max_size, cap / 3);
        uniform_size = kind == 0 || lo > hi ? 0 : rng.log_uniform(lo, hi);
        clean_uniform = kind == 2 && uniform_size != 0;
        uniform_slots = 0;
        if (clean_uniform) {
          while (d.model().live_count() > 0 && err.empty()) err = d.free_live(d.model().live_count() - 1);
          ASSERT_TRUE(err.empty()) << sc.name << " op " << op << ": " << err;
          const uint64_t extent = test::align_up(uniform_size, base);
          uniform_slots = d.allocator().capacity() / extent;
          // Fill: exactly floor(capacity / extent) blocks, then out_of_space.
          for (uint64_t i = 0; i <= uniform_slots; ++i) {
            err = d.allocate(uniform_size);
            ASSERT_TRUE(err.empty()) << sc.name << " op " << op << " uniform fill: " << err;
            const Status s = d.last_allocation().status;
            if (i < uniform_slots) {
              ASSERT_EQ(s, Status::ok) << sc.name << " op " << op << ": block " << i << " of " << uniform_slots
                                       << " of size " << uniform_size;
              ASSERT_EQ(d.last_allocation().offset, i * extent);
            } else {
              ASSERT_EQ(s, Status::out_of_space) << sc.name << ": more than floor(P/s) blocks";
            }
          }
          ++stats.uniform_fills;
        }
      }
      if (phase_left > 0) --phase_left;
      const uint64_t live = d.model().live_count();
      stats.max_live = std::max(stats.max_live, live);

      const double r = static_cast<double>(rng.below(1u << 20)) / (1u << 20);
      if (r < sc.misuse_chance) {
        ++stats.misuse;
        switch (rng.below(7)) {
          case 0: err = d.free_stale(rng.next()); break;
          case 1: err = d.free_any(rng.below(d.allocator().capacity() + 1), rng.next() & 0x0000'00FF'0000'FFFFull); break;
          case 2: err = live ? d.free_interior(rng.below(live), rng.next()) : ""; break;
          case 3: {  // a live offset with a wrong generation
            if (live) {
              const uint64_t off = d.model().live_offset(rng.below(live));
              err = d.free_any(off, d.model().live_at(off)->handle + (rng.between(1, 3) << 32));
            }
            break;
          }
          case 4: err = d.allocate(0); break;
          case 5: err = d.allocate(rng.between(1, 100), 3 + 2 * rng.below(1000)); break;
          default: err = d.allocate(d.allocator().capacity() + 1 + rng.below(1000)); break;
        }
      } else if (r < sc.misuse_chance + sc.extend_chance) {
        ++stats.extends;
        err = d.extend(rng.between(1, sc.max_extend));
      } else if (r < sc.misuse_chance + sc.extend_chance + sc.place_chance) {
        // allocate_at: most often at an aligned offset inside a free gap (it
        // must succeed unless the range runs past the gap), else anywhere.
        const auto& gaps = d.model().gaps();
        const uint64_t size = rng.log_uniform(sc.min_size, sc.max_size);
        uint64_t offset = rng.below(d.allocator().capacity() + 1);
        if (!gaps.empty() && rng.chance(0.8)) {
          auto g = gaps.begin();
          std::advance(g, static_cast<long>(rng.below(std::min<uint64_t>(gaps.size(), 16))));
          offset = g->first + rng.below(g->second);
          if (rng.chance(0.3)) offset = g->first;  // the gap's start, as restores mostly do
        }
        if (rng.chance(0.9)) offset -= offset % base;
        err = d.allocate_at(offset, size);
        if (d.last_allocation().status == Status::ok) {
          ++stats.placed;
        } else {
          ++stats.place_refused;
        }
      } else {
        const bool allocate = live == 0 || (draining ? rng.chance(0.25) : rng.chance(0.75));
        if (allocate) {
          const uint64_t size = uniform_size != 0 ? uniform_size : rng.log_uniform(sc.min_size, sc.max_size);
          uint64_t align = 0;
          if (uniform_size == 0 && sc.per_call_align > 0 && rng.chance(sc.per_call_align)) {
            align = uint64_t{1} << rng.below(sc.max_align_log2 + 1);
          }
          err = d.allocate(size, align);
          const Status s = d.last_allocation().status;
          if (s == Status::ok) {
            ++stats.allocated;
          } else if (s == Status::out_of_space) {
            ++stats.out_of_space;
            if (clean_uniform) {
              // A pool of equal blocks is full only when it holds every slot.
              ASSERT_EQ(d.model().live_count(), uniform_slots)
                  << sc.name << " op " << op << ": out_of_space for size " << uniform_size << " with "
                  << d.model().live_count() << " of " << uniform_slots << " slots used";
            }
            draining = true;
            drain_left = rng.between(1, 48);
          } else if (s == Status::allocation_limit) {
            ++stats.limit;
            draining = true;
            drain_left = rng.between(1, 16);
          }
        } else {
          ++stats.freed;
          err = d.free_live(rng.below(live));
          if (draining && drain_left > 0 && --drain_left == 0) draining = false;
        }
      }
      ASSERT_TRUE(err.empty()) << sc.name << " seed " << sc.seed << " op " << op << ": " << err;
      if (op % sc.full_check_every == 0) {
        ++stats.full_checks;
        err = d.check_full();
        ASSERT_TRUE(err.empty()) << sc.name << " seed " << sc.seed << " op " << op << ": " << err;
      } else if (op % sc.validate_every == 0) {
        ++stats.validates;
        ASSERT_VALID(d.allocator()) << sc.name << " seed " << sc.seed << " op " << op;
      }
    }
    const std::string err = d.check_full();
    ASSERT_TRUE(err.empty()) << sc.name << " end of epoch: " << err;
    stats.exact_reuses += d.exact_reuse_checks();
    // Free everything: the pool is one free range again.
    while (d.model().live_count() > 0) {
      const std::string e = d.free_live(rng.below(d.model().live_count()));
      ASSERT_TRUE(e.empty()) << sc.name << " teardown: " << e;
    }
    ASSERT_TRUE(d.check_full().empty());
    ASSERT_EQ(d.allocator().free_ranges(), d.allocator().capacity() > 0 ? 1u : 0u);
  }

  std::cout << "[ stats    ] " << sc.name << ": " << stats.ops << " ops, " << stats.allocated << " allocated, "
            << stats.out_of_space << " out_of_space, " << stats.limit << " allocation_limit, " << stats.freed
            << " freed, " << stats.misuse << " misuse, " << stats.extends << " extends, " << stats.uniform_fills
            << " uniform fills, " << stats.exact_reuses << " exact reuses, " << stats.validates + stats.full_checks << " validate() calls, " << stats.full_checks
            << " full comparisons, at most " << stats.max_live << " live, " << stats.placed << " placed ("
            << stats.place_refused << " refused)\n";
  // The workload really exercised the interesting states.
  EXPECT_GT(stats.allocated, stats.ops / 4);
  EXPECT_GT(stats.out_of_space + stats.limit, 0u) << "the pool never got full";
  EXPECT_GT(stats.misuse, 0u);
  if (sc.uniform_phases) {
    EXPECT_GT(stats.uniform_fills, 0u);
    EXPECT_GT(stats.exact_reuses, 0u);
  }
  if (sc.extend_chance > 0) {
    EXPECT_GT(stats.extends, 0u);
  }
  if (sc.options.max_allocations > 0) {
    EXPECT_GT(stats.limit, 0u);
  }
  if (sc.place_chance > 0) {
    EXPECT_GT(stats.placed, 0u);
    EXPECT_GT(stats.place_refused, 0u);
  }
}

RangeAllocatorOptions opts(uint64_t alignment, uint32_t fit_scan_limit = 8, uint64_t max_allocations = 0) {
  RangeAllocatorOptions o;
  o.alignment = alignment;
  o.fit_scan_limit = fit_scan_limit;
  o.max_allocations = max_allocations;
  o.initial_nodes = 16;
  return o;
}

Scenario scenario(const char* name, uint64_t seed, uint64_t capacity, RangeAllocatorOptions options, uint64_t ops) {
  Scenario s{};
  s.name = name;
  s.seed = seed;
  s.capacity = capacity;
  s.options = options;
  s.ops = ops;
  return s;
}

std::vector<Scenario> scenarios() {
  std::vector<Scenario> all;
  {  // Byte ranges in a small pool that stays near full; checked every op.
    Scenario s = scenario("mixed_align1_near_full", 1, 256 * kKiB, opts(1), 600000);
    s.max_size = 16 * kKiB;
    s.place_chance = 0.05;
    all.push_back(s);
  }
  {  // CUDA-style 256-byte blocks with per-call alignments up to 64 kKiB.
    Scenario s = scenario("mixed_align256_per_call", 2, 4 * kMiB + 768, opts(256), 600000);
    s.max_size = 128 * kKiB;
    s.per_call_align = 0.25;
    s.place_chance = 0.05;
    all.push_back(s);
  }
  {  // Mixed phases, uniform phases over what is live, uniform phases from empty.
    Scenario s = scenario("uniform_and_mixed_phases", 3, 1 * kMiB, opts(1), 800000);
    s.validate_every = 4;
    s.min_size = 100;
    s.max_size = 48 * kKiB;
    s.uniform_phases = true;
    all.push_back(s);
  }
  {  // The same at 256-byte alignment.
    Scenario s = scenario("uniform_and_mixed_phases_align256", 4, 2 * kMiB, opts(256), 500000);
    s.validate_every = 4;
    s.min_size = 300;
    s.max_size = 96 * kKiB;
    s.uniform_phases = true;
    all.push_back(s);
  }
  {  // Tiny sizes: many ranges share each bin, so the scan limit matters.
    Scenario s = scenario("tiny_sizes_scan_limit_2", 5, 4096, opts(8, 2), 400000);
    s.max_size = 64;
    s.per_call_align = 0.1;
    s.max_align_log2 = 7;
    all.push_back(s);
  }
  {  // A scan of one range per bin: the policy degenerates to good fit.
    Scenario s = scenario("scan_limit_1", 6, 64 * kKiB, opts(1, 1), 400000);
    s.max_size = 2 * kKiB;
    s.uniform_phases = true;
    s.per_call_align = 0.05;
    s.max_align_log2 = 10;
    all.push_back(s);
  }
  {  // Growing pools: extend() while in use; a fresh pool every 20k ops.
    Scenario s = scenario("extend_growth", 7, 16 * kKiB, opts(64), 400000);
    s.epoch_ops = 20000;
    s.max_size = 8 * kKiB;
    s.extend_chance = 0.005;
    s.max_extend = 16 * kKiB;
    s.place_chance = 0.03;
    s.per_call_align = 0.05;
    s.max_align_log2 = 12;
    all.push_back(s);
  }
  {  // The allocation cap hit long before the pool is full.
    Scenario s = scenario("max_allocations_cap", 8, 1 * kMiB, opts(1, 8, 40), 300000);
    s.max_size = 32 * kKiB;
    s.place_chance = 0.05;
    all.push_back(s);
  }
  {  // Byte granularity in a pool of 2^50 + change, sizes up to 2^46.
    Scenario s = scenario("huge_pool_byte_granularity", 9, (uint64_t{1} << 50) + 12345, opts(1), 300000);
    s.validate_every = 4;
    s.min_size = 1;
    s.max_size = uint64_t{1} << 46;
    s.per_call_align = 0.1;
    s.max_align_log2 = 40;
    s.place_chance = 0.02;
    all.push_back(s);
  }
  {  // The multi-million run: larger pool, full checks every 4096 ops.
    Scenario s = scenario("multi_million", 10, 64 * kMiB, opts(1), 2500000);
    s.validate_every = 64;
    s.full_check_every = 4096;
    s.max_size = 1 * kMiB;
    s.per_call_align = 0.05;
    s.uniform_phases = true;
    s.min_size = 1;
    all.push_back(s);
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(Configs, RangeAllocatorDifferential, ::testing::ValuesIn(scenarios()),
                         [](const ::testing::TestParamInfo<Scenario>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace unipool
