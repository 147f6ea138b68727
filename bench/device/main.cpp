// bench/device: allocation traces replayed against unipool's device pool
// (plain and expandable segments, on the simulated device), CUB's
// CachingDeviceAllocator and one cudaMalloc per request (both on the null GPU
// CUDA runtime), all in the same run.
//
//   device_bench [--quick] [--json FILE] [--trace NAME]... [--allocator NAME]... [--seed N]
//
// Tables go to stdout, progress to stderr. No timing is measured on a GPU.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "peers.hpp"
#include "replay.hpp"
#include "report.hpp"
#include "trace.hpp"

namespace {

using namespace device_bench;

bool wanted(const std::vector<std::string>& filter, const std::string& name) {
  return filter.empty() || std::find(filter.begin(), filter.end(), name) != filter.end();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"unipool device pool benchmark: trace replay on the simulated device"};
  bool quick = false;
  std::string json_file;
  std::vector<std::string> trace_filter, allocator_filter;
  uint64_t seed = 1;
  app.add_flag("--quick", quick, "reduced counts (CI smoke)");
  app.add_option("--json", json_file, "write the results as JSON to FILE");
  app.add_option("--trace", trace_filter, "random_10k, random_100k, inference, batch_growth (default: all)");
  app.add_option("--allocator", allocator_filter, "unipool, unipool:expandable, cub, cudamalloc (default: all)");
  app.add_option("--seed", seed, "trace seed");
  CLI11_PARSE(app, argc, argv);

  const uint64_t kMiB = uint64_t{1} << 20;
  std::vector<Trace> traces;
  if (wanted(trace_filter, "random_10k")) traces.push_back(random_trace("random_10k", 10000, 4 * kMiB, uint64_t{1} << 30, seed));
  if (wanted(trace_filter, "random_100k")) {
    traces.push_back(random_trace("random_100k", quick ? 20000 : 100000, 4 * kMiB, uint64_t{1} << 30, seed + 1));
  }
  if (wanted(trace_filter, "inference")) traces.push_back(inference_trace(quick ? 60 : 600, seed + 2));
  if (wanted(trace_filter, "batch_growth")) traces.push_back(batch_growth_trace(8, quick ? 16 : 40));
  const int timed_runs = quick ? 1 : 3;

  std::vector<PeerInfo> peers;
  for (PeerInfo& p : all_peers()) {
    if (wanted(allocator_filter, p.name)) peers.push_back(std::move(p));
  }
  std::printf("device_bench%s: unipool on the sim backend; cub and cudamalloc on the %s. CPU times on this machine, no GPU.\n",
              quick ? " --quick" : "", baseline_substrate());

  std::vector<Result> results;
  for (const Trace& t : traces) {
    for (const PeerInfo& p : peers) {
      std::cerr << "replaying " << t.name << " (" << t.ops.size() << " ops) on " << p.name << "\n";
      results.push_back(replay(t, p, timed_runs));
    }
    print_trace_table(results, t.name);
  }

  std::vector<HotPath> hot;
  const uint64_t iterations = quick ? 20000 : 200000;
  for (const uint64_t bytes : {uint64_t{4096}, kMiB}) {
    for (const PeerInfo& p : peers) {
      if (p.name == "cudamalloc") continue;  // nothing is cached there
      hot.push_back({p.name, bytes, hot_path_ns(p, bytes, iterations, quick ? 1 : 5)});
    }
  }
  print_hot_path_table(hot);
  const std::vector<Target> targets = evaluate_targets(results, hot);
  print_targets(targets);

  if (!json_file.empty()) {
    std::ofstream out(json_file);
    out << to_json(results, hot, targets, quick).dump(2) << "\n";
    if (!out) {
      std::cerr << "cannot write " << json_file << "\n";
      return 1;
    }
  }
  return 0;
}
