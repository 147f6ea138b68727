// host_bench: unipool against glibc, mimalloc, jemalloc and tcmalloc on the
// host workloads described in docs/host_benchmarks.md.
//
//   unipool_host_bench                  # full matrix, ~10 minutes
//   unipool_host_bench --quick          # CI smoke, a few seconds
//   unipool_host_bench --json out.json --workloads mid_mt --threads 1,2
//
// The parent runs each cell as `unipool_host_bench --child ...` with the
// allocator preloaded; see child.hpp and matrix.hpp.
#include <CLI/CLI.hpp>

#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "child.hpp"
#include "matrix.hpp"
#include "report.hpp"
#include "workloads.hpp"

using namespace host_bench;

namespace {

std::string joined_command(int argc, char** argv) {
  std::ostringstream s;
  for (int i = 0; i < argc; ++i) s << (i ? " " : "") << argv[i];
  return s.str();
}

std::vector<Peer> select_peers(const std::vector<std::string>& names, const std::map<std::string, std::string>& libs,
                               std::vector<Peer>& policy_peers) {
  std::vector<Peer> all = default_peers(libs);
  std::vector<Peer> out;
  auto wanted = [&](const std::string& name) {
    return names.empty() || std::find(names.begin(), names.end(), name) != names.end();
  };
  for (const auto& p : all) {
    if (wanted(p.name)) out.push_back(p);
    if (p.name == "unipool" && wanted("unipool")) policy_peers = unipool_policy_peers(p);
    if (p.name != "unipool") continue;
    for (const auto& v : unipool_variant_peers(p, libs)) {
      // A unipool@NAME build was asked for by giving it; hardened by name or by default.
      if (wanted(v.name) || (v.name.rfind("unipool@", 0) == 0 && wanted("unipool"))) out.push_back(v);
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"unipool host allocator benchmark"};
  bool child = false, quick = false, no_pin = false;
  std::string json_path, workload, expect_symbol;
  std::vector<std::string> workloads, allocators, libs;
  std::vector<unsigned> threads = {1, 2, 4};
  unsigned repeat = 0;
  double timeout_s = 300;
  app.add_flag("--quick", quick, "reduced counts for CI smoke runs");
  app.add_option("--json", json_path, "write the results as a JSON list");
  app.add_option("--workloads", workloads, "workloads to run (default: all)")->delimiter(',');
  app.add_option("--threads", threads, "thread counts (default 1,2,4)")->delimiter(',');
  app.add_option("--allocators", allocators,
                 "glibc,mimalloc,jemalloc,tcmalloc,unipool,unipool:hardened (default: all found)")
      ->delimiter(',');
  app.add_option("--lib", libs,
                 "NAME=PATH: the library to preload for an allocator; unipool@TAG=PATH adds a peer for another build");
  app.add_option("--repeat", repeat, "runs per cell, the median is kept (default 3, 1 with --quick)");
  app.add_option("--timeout", timeout_s, "seconds before a cell's process is killed");
  app.add_flag("--no-pin", no_pin,
               "leave the worker threads where the scheduler puts them (default: thread t on the t-th CPU)");
  app.add_flag("--child", child, "internal: measure one cell in this process");
  app.add_option("--workload", workload, "internal: the child's workload");
  app.add_option("--expect-symbol", expect_symbol, "internal: symbol the preloaded allocator defines");
  CLI11_PARSE(app, argc, argv);

  if (child) return run_child({workload, threads.empty() ? 1u : threads.front(), quick, expect_symbol, !no_pin});

  std::map<std::string, std::string> lib_paths;
  for (const auto& l : libs) {
    const auto eq = l.find('=');
    if (eq == std::string::npos) {
      std::cerr << "--lib wants NAME=PATH, got " << l << "\n";
      return 1;
    }
    lib_paths[l.substr(0, eq)] = l.substr(eq + 1);
  }
  for (const auto& w : workloads) {
    if (find_workload(w) == nullptr) {
      std::cerr << "unknown workload " << w << "\n";
      return 1;
    }
  }
  if (workloads.empty()) {
    for (const auto& w : all_workloads()) workloads.push_back(w.name);
  }

  MatrixOptions opt;
  opt.workloads = workloads;
  opt.threads = threads;
  opt.peers = select_peers(allocators, lib_paths, opt.policy_peers);
  opt.quick = quick;
  opt.repeat = repeat ? repeat : (quick ? 1 : 3);
  opt.timeout_s = timeout_s;
  opt.pin = !no_pin;

  ReportContext ctx{joined_command(argc, argv), quick, opt.repeat, opt.pin, opt.peers};
  for (const auto& p : opt.policy_peers) ctx.peers.push_back(p);
  print_header(std::cout, ctx);
  std::cout.flush();

  const MatrixResult matrix = run_matrix(opt);
  const std::vector<CellResult>& results = matrix.cells;
  print_tables(std::cout, results, workloads);
  print_targets(std::cout, results);
  if (matrix.failed_runs != 0) std::cout << "**" << matrix.failed_runs << " runs failed** (see stderr)\n";

  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << to_json(results).dump(1) << "\n";
    if (!out) {
      std::cerr << "cannot write " << json_path << "\n";
      return 1;
    }
  }
  return matrix.failed_runs == 0 ? 0 : 1;
}
