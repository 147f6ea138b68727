// offset_util: the workload loops. Every loop is a template over the policy
// (instantiated once per policy through with_policy), so all policies run the
// same code around their allocate/free calls. Timings cover what
// allocator_bench's timings cover: the whole measured loop, evictions and
// sampling included.
#include "workloads.hpp"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <random>
#include <stdexcept>

#include "driver.hpp"

namespace offset_util {
namespace {

using Clock = std::chrono::steady_clock;

double elapsed_ns(Clock::time_point start, Clock::time_point end) {
  return static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count());
}

// Two independent engines per run, both from cfg.seed: one draws the requests
// (identical for every policy), one draws the eviction victims.
uint64_t workload_seed(const RunConfig& cfg) { return cfg.seed; }
uint64_t evict_seed(const RunConfig& cfg) { return cfg.seed ^ 0x9e3779b97f4a7c15ull; }

template <class Policy>
void check_or_throw(const Policy& policy, uint64_t requested, const RunConfig& cfg,
                    const std::string& what) {
  if (!cfg.check) return;
  std::string why;
  if (!policy.check(requested, &why)) throw std::runtime_error(what + ": check failed: " + why);
}

// Percentiles as allocator_bench takes them: the value at index n*q of the sorted
// samples (so "p1" is the low tail).
struct Spread {
  double min = 0, p1 = 0, p10 = 0, p50 = 0, max = 0, avg = 0;
};
Spread spread(std::vector<double>& samples) {
  Spread s;
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  const auto at = [&](double q) {
    return samples[static_cast<size_t>(static_cast<double>(samples.size()) * q)];
  };
  s.min = samples.front();
  s.max = samples.back();
  s.p1 = at(0.01);
  s.p10 = at(0.10);
  s.p50 = at(0.50);
  s.avg = std::accumulate(samples.begin(), samples.end(), 0.0) / static_cast<double>(samples.size());
  return s;
}

// ---- uniform ---------------------------------------------------------------

template <class Policy>
UniformResult uniform_loop(Policy& policy, uint64_t pool, uint64_t size, const RunConfig& cfg) {
  const uint64_t warmup = pool / size;
  Driver<Policy> driver(policy, pool, evict_seed(cfg), warmup + 10);
  for (uint64_t i = 0; i < warmup; ++i) driver.allocate(size);
  const uint64_t warm_evictions = driver.evictions();

  double min_util = 1.0;
  double total = 0.0;
  const auto start = Clock::now();
  for (uint64_t i = 0; i < cfg.uniform_calls; ++i) {
    driver.allocate(size);
    const double util = driver.ratio();
    if (util < min_util) min_util = util;
    total += util;
  }
  const auto end = Clock::now();

  check_or_throw(policy, driver.requested(), cfg, "uniform " + std::to_string(size));
  UniformResult r;
  r.size = size;
  r.pool = pool;
  r.min_util = min_util;
  r.avg_util = total / static_cast<double>(cfg.uniform_calls);
  r.ns_per_op = elapsed_ns(start, end) / static_cast<double>(cfg.uniform_calls);
  r.calls = cfg.uniform_calls;
  r.evictions = driver.evictions() - warm_evictions;
  return r;
}

// ---- random ----------------------------------------------------------------

template <class Policy>
RandomResult random_loop(Policy& policy, const RunConfig& cfg) {
  const uint64_t pool = cfg.random_pool;
  std::mt19937_64 rng(workload_seed(cfg));
  std::uniform_int_distribution<uint64_t> dist(cfg.random_min, cfg.random_max);
  Driver<Policy> driver(policy, pool, evict_seed(cfg), pool / cfg.random_min + 10);

  // Warm-up: until the sizes asked for add up to the pool.
  for (uint64_t asked = 0; asked < pool;) {
    const uint64_t size = dist(rng);
    driver.allocate(size);
    asked += size;
  }
  const uint64_t warm_evictions = driver.evictions();

  std::vector<double> samples;
  samples.reserve(cfg.random_calls);
  const auto start = Clock::now();
  for (uint64_t i = 0; i < cfg.random_calls; ++i) {
    driver.allocate(dist(rng));
    samples.push_back(driver.ratio());
  }
  const auto end = Clock::now();

  check_or_throw(policy, driver.requested(), cfg, "random");
  const Spread s = spread(samples);
  RandomResult r;
  r.min = s.min;
  r.p1 = s.p1;
  r.p10 = s.p10;
  r.p50 = s.p50;
  r.max = s.max;
  r.avg = s.avg;
  r.ns_per_op = elapsed_ns(start, end) / static_cast<double>(cfg.random_calls);
  r.calls = cfg.random_calls;
  r.evictions = driver.evictions() - warm_evictions;
  return r;
}

// ---- paired KV / indexer ---------------------------------------------------

template <class Policy>
PairedResult paired_loop(Policy& policy, const RunConfig& cfg) {
  const uint64_t pool = cfg.paired_pool;
  std::mt19937_64 rng(workload_seed(cfg));
  std::uniform_int_distribution<uint32_t> per_round(1, cfg.paired_max_per_round);
  Driver<Policy> driver(policy, pool, evict_seed(cfg), pool / cfg.paired_indexer + 1024);
  const double fraction = cfg.paired_evict_fraction;

  for (uint32_t round = 0; round < cfg.paired_warmup_rounds; ++round) {
    const uint32_t n = per_round(rng);
    for (uint32_t i = 0; i < n; ++i) driver.allocate(cfg.paired_kv, fraction);
    for (uint32_t i = 0; i < n; ++i) driver.allocate(cfg.paired_indexer, fraction);
  }
  const uint64_t warm_evictions = driver.evictions();

  std::vector<double> samples;
  samples.reserve(4096);
  uint64_t ops = 0;
  const auto start = Clock::now();
  for (uint32_t round = 0; round < cfg.paired_rounds; ++round) {
    const uint32_t n = per_round(rng);
    for (uint32_t i = 0; i < n; ++i) driver.allocate(cfg.paired_kv, fraction, &samples);
    for (uint32_t i = 0; i < n; ++i) driver.allocate(cfg.paired_indexer, fraction, &samples);
    ops += 2 * uint64_t{n};
  }
  const auto end = Clock::now();

  check_or_throw(policy, driver.requested(), cfg, "paired");
  PairedResult r;
  r.pool = pool;
  r.samples = samples.size();
  const Spread s = spread(samples);
  r.avg_util = s.avg;
  r.min = s.min;
  r.p1 = s.p1;
  r.p10 = s.p10;
  r.p50 = s.p50;
  r.max = s.max;
  r.ops = ops;
  r.ns_per_op = elapsed_ns(start, end) / static_cast<double>(ops);
  r.evictions = driver.evictions() - warm_evictions;
  return r;
}

// ---- allocator alone: alloc/free pairs -------------------------------------

template <class Policy>
PairResult pair_loop(Policy& policy, const std::vector<uint64_t>& sizes, const RunConfig& cfg) {
  using Handle = typename Policy::Handle;
  const size_t live = cfg.pair_live;
  const size_t ring_mask = live - 1;
  const size_t size_mask = sizes.size() - 1;
  std::vector<Handle> ring(live);
  std::vector<uint8_t> held(live, 0);
  size_t next = 0;
  uint64_t failures = 0;

  // Frees the oldest allocation (the slot about to be reused) and allocates.
  const auto step = [&](uint64_t j) {
    const size_t slot = j & ring_mask;
    if (held[slot]) policy.free(ring[slot]);
    held[slot] = policy.allocate(sizes[next++ & size_mask], ring[slot]) ? 1 : 0;
    failures += held[slot] ^ 1u;
  };
  for (uint64_t j = 0; j < live + cfg.pair_warmup; ++j) step(j);
  failures = 0;

  const uint64_t first = live + cfg.pair_warmup;
  const auto start = Clock::now();
  for (uint64_t j = first; j < first + cfg.pair_count; ++j) step(j);
  const auto end = Clock::now();

  uint64_t requested = 0;  // the sizes of what is still held, for the check
  for (size_t slot = 0; slot < live; ++slot) {
    if (!held[slot]) continue;
    // The allocation in `slot` was made by step j with j & ring_mask == slot,
    // the last such j before first + pair_count; its size index is j itself.
    const uint64_t end_j = first + cfg.pair_count;
    const uint64_t j = end_j - 1 - ((end_j - 1 - slot) & ring_mask);
    requested += sizes[j & size_mask];
  }
  check_or_throw(policy, requested, cfg, "pair");
  PairResult r;
  r.ns_per_pair = elapsed_ns(start, end) / static_cast<double>(cfg.pair_count);
  r.pairs = cfg.pair_count;
  r.failures = failures;
  r.live = cfg.pair_live;
  return r;
}

template <class Result>
Result labelled(Result r, const PolicySpec& spec) {
  r.policy = spec.name();
  r.align = spec.align;
  return r;
}

}  // namespace

std::vector<SizeList> uniform_size_lists(bool quick) {
  struct Rule {
    const char* name;
    const char* title;
    uint64_t (*size)(uint64_t base);
  };
  static constexpr Rule rules[] = {
      {"pow2", "powers of two", [](uint64_t b) { return b; }},
      {"pow2-17", "power of two - 17", [](uint64_t b) { return b - 17; }},
      {"pow2+17", "power of two + 17", [](uint64_t b) { return b + 17; }},
      {"x0.9", "power of two x 0.9 (truncated)",
       [](uint64_t b) { return static_cast<uint64_t>(static_cast<double>(b) * 0.9); }},
      {"x1.1", "power of two x 1.1 (truncated)",
       [](uint64_t b) { return static_cast<uint64_t>(static_cast<double>(b) * 1.1); }},
  };
  std::vector<SizeList> lists;
  for (const Rule& rule : rules) {
    SizeList list{rule.name, rule.title, {}};
    size_t index = 0;
    for (uint64_t base = 32; base < (uint64_t{1} << 26); base *= 4, ++index) {
      // Quick runs keep one 128 MiB-pool size and three 2 GiB ones.
      if (quick && index != 2 && index != 5 && index != 9 && index != 10) continue;
      list.sizes.push_back(rule.size(base));
    }
    lists.push_back(std::move(list));
  }
  return lists;
}

double uniform_limit(uint64_t pool, uint64_t size, uint64_t align) {
  const uint64_t extent = (size + align - 1) / align * align;
  return static_cast<double>(pool / extent * size) / static_cast<double>(pool);
}

UniformResult run_uniform(const PolicySpec& spec, const std::string& list, uint64_t size,
                          const RunConfig& cfg) {
  const uint64_t pool = size < cfg.uniform_small_below ? cfg.uniform_small_pool : cfg.uniform_pool;
  UniformResult r = with_policy(spec, pool, pool / size + 10, [&](auto& policy) {
    return uniform_loop(policy, pool, size, cfg);
  });
  r.list = list;
  r.limit = uniform_limit(pool, size, spec.align);
  return labelled(r, spec);
}

RandomResult run_random(const PolicySpec& spec, const RunConfig& cfg) {
  // Expect about pool / mean size live objects, not allocator_bench's pool / min.
  const uint64_t expected = cfg.random_pool / ((cfg.random_min + cfg.random_max) / 2) + 1024;
  return labelled(with_policy(spec, cfg.random_pool, expected,
                              [&](auto& policy) { return random_loop(policy, cfg); }),
                  spec);
}

PairedResult run_paired(const PolicySpec& spec, const RunConfig& cfg) {
  const uint64_t expected = 2 * (cfg.paired_pool / (cfg.paired_kv + cfg.paired_indexer)) + 1024;
  return labelled(with_policy(spec, cfg.paired_pool, expected,
                              [&](auto& policy) { return paired_loop(policy, cfg); }),
                  spec);
}

PairResult run_pair(const PolicySpec& spec, const RunConfig& cfg) {
  if (cfg.pair_live == 0 || (cfg.pair_live & (cfg.pair_live - 1)) != 0) {
    throw std::invalid_argument("pair_live must be a power of two");
  }
  // The same pre-generated sizes for every policy: 2^20 of them, reused
  // cyclically, so the timed loop does no random number generation.
  std::vector<uint64_t> sizes(size_t{1} << 20);
  std::mt19937_64 rng(workload_seed(cfg));
  std::uniform_int_distribution<uint64_t> dist(cfg.pair_min, cfg.pair_max);
  for (uint64_t& s : sizes) s = dist(rng);
  return labelled(with_policy(spec, cfg.pair_pool, cfg.pair_live,
                              [&](auto& policy) { return pair_loop(policy, sizes, cfg); }),
                  spec);
}

}  // namespace offset_util
