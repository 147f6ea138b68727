// bench/device: allocation traces replayed against unipool's device pool
// (plain and expandable segments), CUB's CachingDeviceAllocator, one
// cudaMalloc per request and PyTorch's CUDACachingAllocator (plain and
// expandable segments), all in the same run, all on one null GPU when the
// build has it (each peer's substrate is printed in the header).
//
//   device_bench [--quick] [--json FILE] [--trace NAME]... [--allocator NAME]...
//                [--seed N] [--trace-dir DIR]
//
// Tables go to stdout, progress to stderr. No timing is measured on a GPU:
// the null GPU measures host-side CPU cost only.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "peers.hpp"
#include "replay.hpp"
#include "report.hpp"
#include "trace.hpp"
#if DEVICE_BENCH_NULL_GPU
#include "null_gpu.hpp"
#endif

namespace {

using namespace device_bench;

struct Options {
  bool quick = false;
  std::string json_file;
  std::vector<std::string> trace_filter, allocator_filter;
  uint64_t seed = 1;
  std::string trace_dir = DEVICE_BENCH_TRACE_DIR;
};

bool wanted(const std::vector<std::string>& filter, const std::string& name) {
  return filter.empty() || std::find(filter.begin(), filter.end(), name) != filter.end();
}

// The generated traces, then every recorded model trace found in the trace
// directory (cut to their first 200,000 operations with --quick).
std::vector<Trace> build_traces(const Options& o) {
  const uint64_t kMiB = uint64_t{1} << 20;
  const auto& f = o.trace_filter;
  std::vector<Trace> traces;
  if (wanted(f, "random_10k")) traces.push_back(random_trace("random_10k", 10000, 4 * kMiB, uint64_t{1} << 30, o.seed));
  if (wanted(f, "random_100k")) {
    traces.push_back(random_trace("random_100k", o.quick ? 20000 : 100000, 4 * kMiB, uint64_t{1} << 30, o.seed + 1));
  }
  if (wanted(f, "inference")) traces.push_back(inference_trace(o.quick ? 60 : 600, o.seed + 2));
  if (wanted(f, "batch_growth")) traces.push_back(batch_growth_trace(8, o.quick ? 16 : 40));
  for (const auto& [name, path] : model_trace_files(o.trace_dir)) {
    if (!wanted(f, name)) continue;
    traces.push_back(read_trace_file(path, name, o.quick ? 200000 : 0));
    if (traces.back().streams > 1) {
      std::cerr << name << ": " << traces.back().streams << " streams in the file, replayed on one\n";
    }
  }
  return traces;
}

std::vector<PeerInfo> select_peers(const Options& o) {
  std::vector<PeerInfo> peers;
  for (PeerInfo& p : all_peers()) {
    if (wanted(o.allocator_filter, p.name)) peers.push_back(std::move(p));
  }
  return peers;
}

void print_header(const Options& o, const std::vector<PeerInfo>& peers) {
  std::printf("device_bench%s: CPU times on this machine, no GPU (the null GPU measures host-side cost only).\n",
              o.quick ? " --quick" : "");
  for (const PeerInfo& p : peers) std::printf("  %-20s %s\n", p.name.c_str(), p.runs_on.c_str());
  const std::string missing = missing_peers();
  if (!missing.empty()) std::printf("  (%s)\n", missing.c_str());
}

std::vector<HotPath> run_hot_paths(const Options& o, const std::vector<PeerInfo>& peers) {
  std::vector<HotPath> hot;
  const uint64_t iterations = o.quick ? 20000 : 200000;
  for (const uint64_t bytes : {uint64_t{4096}, uint64_t{1} << 20}) {
    for (const PeerInfo& p : peers) {
      if (p.name == "cudamalloc") continue;  // nothing is cached there
      hot.push_back({p.name, bytes, hot_path_ns(p, bytes, iterations, o.quick ? 1 : 5)});
    }
  }
  return hot;
}

int run(const Options& o) {
#if DEVICE_BENCH_NULL_GPU
  prepare_null_gpu();  // before any peer exists
#endif
  const std::vector<Trace> traces = build_traces(o);
  const std::vector<PeerInfo> peers = select_peers(o);
  print_header(o, peers);

  std::vector<Result> results;
  for (const Trace& t : traces) {
    for (const PeerInfo& p : peers) {
      std::cerr << "replaying " << t.name << " (" << t.ops.size() << " ops) on " << p.name << "\n";
      results.push_back(replay(t, p, o.quick ? 1 : 3));
    }
    print_trace_table(results, t.name);
  }
  const std::vector<HotPath> hot = run_hot_paths(o, peers);
  print_hot_path_table(hot);
  const std::vector<Target> targets = evaluate_targets(results, hot);
  print_targets(targets);

  if (!o.json_file.empty()) {
    std::ofstream out(o.json_file);
    out << to_json(peers, results, hot, targets, o.quick).dump(2) << "\n";
    if (!out) {
      std::cerr << "cannot write " << o.json_file << "\n";
      return 1;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"unipool device pool benchmark: trace replay against the device allocators"};
  Options o;
  app.add_flag("--quick", o.quick, "reduced counts (CI smoke)");
  app.add_option("--json", o.json_file, "write the results as JSON to FILE");
  app.add_option("--trace", o.trace_filter,
                 "random_10k, random_100k, inference, batch_growth, model_<name> (default: all)");
  app.add_option("--allocator", o.allocator_filter,
                 "unipool, unipool:expandable, cub, cudamalloc, torch, torch:expandable (default: all)");
  app.add_option("--seed", o.seed, "trace seed");
  app.add_option("--trace-dir", o.trace_dir, "where model_<name>.trace.gz files are read from");
  CLI11_PARSE(app, argc, argv);
  // A peer that fails (a trace file that does not parse, an allocator out of
  // memory) ends the run with its message rather than a terminate().
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::cerr << "device_bench: " << e.what() << "\n";
    return 1;
  }
}
