// host_bench: what one (allocator, workload, threads) run measured.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace host_bench {

struct CellResult {
  std::string allocator;
  std::string workload;
  unsigned threads = 0;
  uint64_t ops = 0;  // allocation + free calls, all threads
  double wall_s = 0;
  double cpu_s = 0;  // user + system time of the process during the run
  double ops_per_s = 0;
  double ops_per_cpu_s = 0;
  double p50_alloc_ns = 0;
  double p99_alloc_ns = 0;
  double p50_free_ns = 0;
  double p99_free_ns = 0;
  uint64_t peak_rss_bytes = 0;      // getrusage ru_maxrss of the whole process
  uint64_t baseline_rss_bytes = 0;  // resident just before the clock started
  uint64_t page_faults = 0;         // minor + major, during the run
  uint64_t peak_requested_bytes = 0;  // peak of live requested bytes, all threads at once
  double usable_over_requested = 0;   // malloc_usable_size / request, timed calls
  double rss_over_requested = 0;      // (peak - baseline RSS) / peak requested
  // Each thread's own peak, summed: the same for every allocator (each
  // thread's sequence is fixed), unlike the concurrent peak, which depends
  // on how the threads happened to overlap.
  uint64_t thread_peaks_requested_bytes = 0;
  double rss_over_thread_peaks = 0;   // (peak - baseline RSS) / that sum
  double timer_overhead_ns = 0;
  // cpu_s / (wall_s * min(threads, CPUs)): near 1 when the run had its CPUs
  // to itself; well below when other work on the machine took them.
  double cpu_share = 0;
};

nlohmann::json to_json(const CellResult& r);
CellResult cell_from_json(const nlohmann::json& j);

}  // namespace host_bench
