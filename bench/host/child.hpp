// host_bench: the measuring side, run in its own process per allocator so
// LD_PRELOAD picks the allocator and peak RSS and page faults are its own.
#pragma once

#include <string>

namespace host_bench {

struct ChildArgs {
  std::string workload;
  unsigned threads = 1;
  bool quick = false;
  std::string expect_symbol;  // dies unless the preloaded allocator defines it
  bool pin = true;            // thread t on the t-th CPU the process may use
};

// Runs the workload and prints one JSON line (a CellResult) on stdout.
int run_child(const ChildArgs& args);

}  // namespace host_bench
