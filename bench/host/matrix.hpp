// host_bench: the parent side. Runs every (workload, threads, allocator)
// cell in a child process of this same binary and collects the results.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cell_result.hpp"
#include "peers.hpp"

namespace host_bench {

struct MatrixOptions {
  std::vector<std::string> workloads;
  std::vector<unsigned> threads;
  std::vector<Peer> peers;           // for every workload but rpmalloc_random
  std::vector<Peer> policy_peers;    // unipool:<policy>, rpmalloc_random only
  bool quick = false;
  unsigned repeat = 1;  // runs per cell; the median by ops per CPU-second is kept
  double timeout_s = 300;
  bool pin = true;  // each worker thread on a CPU of its own (child.hpp)
};

// Runs one cell once; nothing when the child failed (its stderr shows why).
std::optional<CellResult> run_cell(const Peer& peer, const std::string& workload, unsigned threads,
                                   const MatrixOptions& opt);

struct MatrixResult {
  std::vector<CellResult> cells;
  size_t failed_runs = 0;  // runs whose child failed (their stderr says why)
};

// Runs the whole matrix, printing progress to stderr.
MatrixResult run_matrix(const MatrixOptions& opt);

}  // namespace host_bench
