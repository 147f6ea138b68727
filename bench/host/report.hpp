// host_bench: markdown tables on stdout, ratios to glibc and mimalloc, the
// benchmark's targets, and the --json document.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "cell_result.hpp"
#include "peers.hpp"

namespace host_bench {

struct ReportContext {
  std::string command;
  bool quick = false;
  unsigned repeat = 1;
  bool pin = true;
  std::vector<Peer> peers;
};

void print_header(std::ostream& out, const ReportContext& ctx);
// One table per workload; rpmalloc_random gets the thread-cache study's columns.
void print_tables(std::ostream& out, const std::vector<CellResult>& results,
                  const std::vector<std::string>& workloads);
// PASS / MISS for every target (docs/host_benchmarks.md) that the results cover.
void print_targets(std::ostream& out, const std::vector<CellResult>& results);

nlohmann::json to_json(const std::vector<CellResult>& results);

}  // namespace host_bench
