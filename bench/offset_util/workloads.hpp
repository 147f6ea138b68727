// offset_util: the workloads of Mooncake's allocator_bench, plus an
// allocator-only alloc/free pair loop. Each run builds a fresh policy and fresh random engines from the same
// seed, so every policy sees the same request stream.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "policies.hpp"

namespace offset_util {

struct RunConfig {
  uint64_t seed = 0x5eed000;  // any fixed value; the same for every policy
  bool quick = false;
  bool check = false;  // validate the allocator at the end of every run
  // Runs of every (workload, size, policy), round-robin over the policies;
  // the reported time is the fastest run (the machine is shared and noisy).
  // Utilization is deterministic, so every run must report the same.
  uint32_t repeat = 3;
  // Uniform: pool 2 GiB, 128 MiB below this size; pool/size warm-up calls.
  uint64_t uniform_calls = 1'000'000;
  uint64_t uniform_pool = uint64_t{1} << 31;
  uint64_t uniform_small_pool = uint64_t{1} << 27;
  uint64_t uniform_small_below = 1024;
  // Random: sizes uniform in [random_min, random_max]; warm-up until the
  // requested sum reaches the pool.
  uint64_t random_calls = 1'000'000;
  uint64_t random_pool = uint64_t{1} << 31;
  uint64_t random_min = 1024;
  uint64_t random_max = uint64_t{1} << 26;
  // Paired KV/indexer.
  uint64_t paired_kv = 3'274'752;
  uint64_t paired_indexer = 658'432;
  uint64_t paired_pool = uint64_t{1} << 40;
  uint32_t paired_max_per_round = 128;
  uint32_t paired_warmup_rounds = 5'000;
  uint32_t paired_rounds = 50'000;
  double paired_evict_fraction = 0.05;
  // Allocator alone: a ring of pair_live allocations (a power of two), sizes
  // uniform in [pair_min, pair_max] from a pre-generated array.
  uint64_t pair_count = 10'000'000;
  uint64_t pair_warmup = 1'000'000;
  uint32_t pair_live = 4096;
  uint64_t pair_pool = uint64_t{1} << 31;
  uint64_t pair_min = 64;
  uint64_t pair_max = uint64_t{1} << 18;
};

// One of allocator_bench's uniform size lists: base sizes 32, 128, ... below 2^26.
struct SizeList {
  std::string name;   // "pow2", "pow2-17", "pow2+17", "x0.9", "x1.1"
  std::string title;  // for the table heading
  std::vector<uint64_t> sizes;
};
// quick: four sizes of each list (bases 512, 32768, 8388608, 33554432).
std::vector<SizeList> uniform_size_lists(bool quick);

// floor(P / s') * s / P with s' = s rounded up to `align`: the best any
// allocator can do for one uniform size (align 1: the physical limit).
double uniform_limit(uint64_t pool, uint64_t size, uint64_t align);

struct UniformResult {
  std::string policy;
  uint64_t align = 1;
  std::string list;
  uint64_t size = 0;
  uint64_t pool = 0;
  double limit = 0;
  double min_util = 0;
  double avg_util = 0;
  double ns_per_op = 0;  // the fastest of ns_runs
  std::vector<double> ns_runs;
  uint64_t calls = 0;
  uint64_t evictions = 0;
};

struct RandomResult {
  std::string policy;
  uint64_t align = 1;
  double min = 0, p1 = 0, p10 = 0, p50 = 0, max = 0, avg = 0;
  double ns_per_op = 0;
  std::vector<double> ns_runs;
  uint64_t calls = 0;
  uint64_t evictions = 0;
};

struct PairedResult {
  std::string policy;
  uint64_t align = 1;
  uint64_t pool = 0;
  double avg_util = 0;  // mean of the samples taken just before each eviction
  double min = 0, p1 = 0, p10 = 0, p50 = 0, max = 0;
  uint64_t samples = 0;
  double ns_per_op = 0;
  std::vector<double> ns_runs;
  uint64_t ops = 0;
  uint64_t evictions = 0;
};

struct PairResult {
  std::string policy;
  uint64_t align = 1;
  double ns_per_pair = 0;
  std::vector<double> ns_runs;
  uint64_t pairs = 0;
  uint64_t failures = 0;  // allocations that found no room (the slot stays empty)
  uint32_t live = 0;
};

// Each throws std::runtime_error when cfg.check is set and a check fails.
UniformResult run_uniform(const PolicySpec& spec, const std::string& list, uint64_t size,
                          const RunConfig& cfg);
RandomResult run_random(const PolicySpec& spec, const RunConfig& cfg);
PairedResult run_paired(const PolicySpec& spec, const RunConfig& cfg);
PairResult run_pair(const PolicySpec& spec, const RunConfig& cfg);

}  // namespace offset_util
