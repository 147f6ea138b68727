// The named workloads: shapes, sizes and counts (docs/host_benchmarks.md).
#include "workloads.hpp"

#include "work_patterns.hpp"

namespace host_bench {
namespace {

constexpr uint64_t KiB = 1024;
constexpr uint64_t MiB = 1024 * KiB;

// Counts in a full run; --quick divides them by kQuickDivisor (at least 1).
constexpr uint64_t kQuickDivisor = 50;

uint64_t count(uint64_t full, bool quick) { return quick ? std::max<uint64_t>(full / kQuickDivisor, 1) : full; }

uint64_t seed_of(const std::string& name, unsigned thread_index) {
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a
  for (const char c : name) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001B3ull;
  return h + 0x9E3779B97F4A7C15ull * (thread_index + 1);
}

RoundParams hakmem_rounds(const std::string& name, bool quick) {
  // JSON: 16 x ~64 KiB, MIR: 4 x ~256 KiB, VM: 1 x ~2 MiB per round.
  const SizeSpec json{SizeLaw::uniform, 32 * KiB, 96 * KiB};
  const SizeSpec mir{SizeLaw::uniform, 128 * KiB, 384 * KiB};
  const SizeSpec vm{SizeLaw::uniform, 3 * MiB / 2, 5 * MiB / 2};
  if (name == "hakmem_json") return {count(5'000, quick), {16, 0, 0}, {json, json, json}, 1};
  if (name == "hakmem_mir") return {count(2'500, quick), {4, 0, 0}, {mir, mir, mir}, 1};
  if (name == "hakmem_vm") return {count(10'000, quick), {1, 0, 0}, {vm, vm, vm}, 1};
  return {count(40'000, quick), {16, 4, 1}, {json, mir, vm}, 3};
}

}  // namespace

const std::vector<WorkloadInfo>& all_workloads() {
  static const std::vector<WorkloadInfo> list = {
      {"rl_small", 32, "65,536 live blocks/thread, 16-512 B uniform, each step frees a random one and allocates"},
      {"rl_medium", 32, "4,096 live blocks/thread, 128-4096 B uniform, batches of 32 random frees then 32 allocations"},
      {"fragmentation_mix", 32, "2,048 live blocks/thread, 16 B-256 KiB log-uniform, random replacement"},
      {"alignment64", 32, "8,192 live blocks/thread, aligned_alloc(64, 64-2048 B step 64), random replacement"},
      {"hakmem_json", 1, "rounds of 16 x 32-96 KiB: allocate, write every page, free all"},
      {"hakmem_mir", 1, "rounds of 4 x 128-384 KiB: allocate, write every page, free all"},
      {"hakmem_vm", 1, "rounds of 1 x 1.5-2.5 MiB: allocate, write every page, free"},
      {"hakmem_mixed", 1, "each round one of the json/mir/vm rounds, picked at random"},
      {"rpmalloc_random", 32, "150,000 slots/thread, 16-16000 B linear falloff, 20 loops of 75,000 scattered frees + 75,000 scattered allocations"},
      {"mid_mt", 32, "256 slots/thread, 8-32 KiB uniform, 3,000,000 cycles: free a full slot or fill an empty one"},
      {"producer_consumer", 32, "thread pairs: 2,000,000 blocks of 16 B-4 KiB log-uniform through a 1,024-slot ring, freed by the consumer"},
      {"exchange", 32, "4,096 live objects/thread, 16 B-8 KiB log-uniform, 2,000,000 steps; one new object in four goes to a random other thread"},
  };
  return list;
}

const WorkloadInfo* find_workload(const std::string& name) {
  for (const auto& w : all_workloads()) {
    if (w.name == name) return &w;
  }
  return nullptr;
}

std::unique_ptr<ThreadWork> make_thread_work(const std::string& name, bool quick, unsigned thread_index,
                                             unsigned threads) {
  const uint64_t seed = seed_of(name, thread_index);
  if (name == "rl_small") {
    return make_replace_work({65'536, count(2'000'000, quick), 1, 0, {SizeLaw::uniform, 16, 512}}, seed);
  }
  if (name == "rl_medium") {
    return make_replace_work({4'096, count(125'000, quick), 32, 0, {SizeLaw::uniform, 128, 4096}}, seed);
  }
  if (name == "fragmentation_mix") {
    return make_replace_work({2'048, count(1'000'000, quick), 1, 0, {SizeLaw::log_uniform, 16, 256 * KiB}}, seed);
  }
  if (name == "alignment64") {
    return make_replace_work({8'192, count(2'000'000, quick), 1, 64, {SizeLaw::uniform, 1, 2048, 64}}, seed);
  }
  if (name.rfind("hakmem_", 0) == 0) return make_round_work(hakmem_rounds(name, quick), seed);
  if (name == "rpmalloc_random") {
    const SizeSpec sizes{SizeLaw::linear_falloff, 16, 16'000};
    return quick ? make_scatter_work({15'000, 7'500, 4, sizes}, seed)
                 : make_scatter_work({150'000, 75'000, 20, sizes}, seed);
  }
  if (name == "mid_mt") {
    return make_toggle_work({256, count(60'000 * 50, quick), {SizeLaw::uniform, 8 * KiB, 32 * KiB}}, seed);
  }
  if (name == "producer_consumer") {
    return make_producer_consumer_work({count(2'000'000, quick), 1024, {SizeLaw::log_uniform, 16, 4 * KiB}}, seed,
                                       thread_index, threads);
  }
  if (name == "exchange") {
    return make_exchange_work({4'096, count(2'000'000, quick), {SizeLaw::log_uniform, 16, 8 * KiB}}, seed,
                              thread_index, threads);
  }
  die("unknown workload");
}

}  // namespace host_bench
