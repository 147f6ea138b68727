#include "cell_result.hpp"

namespace host_bench {

// The first eleven keys are the record's contract (check_host_json.py requires
// them); the rest explain them.
nlohmann::json to_json(const CellResult& r) {
  return {
      {"allocator", r.allocator},
      {"workload", r.workload},
      {"threads", r.threads},
      {"ops_per_s", r.ops_per_s},
      {"p50_alloc_ns", r.p50_alloc_ns},
      {"p99_alloc_ns", r.p99_alloc_ns},
      {"p50_free_ns", r.p50_free_ns},
      {"p99_free_ns", r.p99_free_ns},
      {"peak_rss_bytes", r.peak_rss_bytes},
      {"page_faults", r.page_faults},
      {"usable_over_requested", r.usable_over_requested},
      {"ops", r.ops},
      {"wall_s", r.wall_s},
      {"cpu_s", r.cpu_s},
      {"ops_per_cpu_s", r.ops_per_cpu_s},
      {"baseline_rss_bytes", r.baseline_rss_bytes},
      {"peak_requested_bytes", r.peak_requested_bytes},
      {"rss_over_requested", r.rss_over_requested},
      {"thread_peaks_requested_bytes", r.thread_peaks_requested_bytes},
      {"rss_over_thread_peaks", r.rss_over_thread_peaks},
      {"timer_overhead_ns", r.timer_overhead_ns},
      {"cpu_share", r.cpu_share},
  };
}

CellResult cell_from_json(const nlohmann::json& j) {
  CellResult r;
  r.allocator = j.value("allocator", "");
  r.workload = j.at("workload").get<std::string>();
  r.threads = j.at("threads").get<unsigned>();
  r.ops_per_s = j.at("ops_per_s").get<double>();
  r.p50_alloc_ns = j.at("p50_alloc_ns").get<double>();
  r.p99_alloc_ns = j.at("p99_alloc_ns").get<double>();
  r.p50_free_ns = j.at("p50_free_ns").get<double>();
  r.p99_free_ns = j.at("p99_free_ns").get<double>();
  r.peak_rss_bytes = j.at("peak_rss_bytes").get<uint64_t>();
  r.page_faults = j.at("page_faults").get<uint64_t>();
  r.usable_over_requested = j.at("usable_over_requested").get<double>();
  r.ops = j.at("ops").get<uint64_t>();
  r.wall_s = j.at("wall_s").get<double>();
  r.cpu_s = j.at("cpu_s").get<double>();
  r.ops_per_cpu_s = j.at("ops_per_cpu_s").get<double>();
  r.baseline_rss_bytes = j.at("baseline_rss_bytes").get<uint64_t>();
  r.peak_requested_bytes = j.at("peak_requested_bytes").get<uint64_t>();
  r.rss_over_requested = j.at("rss_over_requested").get<double>();
  r.thread_peaks_requested_bytes = j.at("thread_peaks_requested_bytes").get<uint64_t>();
  r.rss_over_thread_peaks = j.at("rss_over_thread_peaks").get<double>();
  r.timer_overhead_ns = j.at("timer_overhead_ns").get<double>();
  r.cpu_share = j.at("cpu_share").get<double>();
  return r;
}

}  // namespace host_bench
