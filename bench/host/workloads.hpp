// host_bench: the workloads (request-loop churn, short-lived large buffers,
// the rpmalloc_random thread-cache study, mid_mt, blocks freed by another
// thread than the one that allocated them).
//
// Each thread builds its own ThreadWork (slot tables, pre-drawn sizes) before
// the clock starts, then run() performs every allocator call of the workload
// through the Meter, ending with every block freed. The exact distributions
// are written down in docs/host_benchmarks.md; the constants live in
// workloads.cpp next to the loops that use them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "meter.hpp"

namespace host_bench {

class ThreadWork {
 public:
  virtual ~ThreadWork() = default;
  virtual void run(Meter& meter) = 0;
};

struct WorkloadInfo {
  std::string name;
  uint32_t sample_period;  // time one allocator call in this many
  std::string summary;     // one line for the report header
};

// Every workload, in report order.
const std::vector<WorkloadInfo>& all_workloads();
const WorkloadInfo* find_workload(const std::string& name);

// `quick` shrinks the counts for CI smoke runs (same shapes, ~1/50 the calls).
// `threads`: how many run the cell (the handoff workloads pair them up).
std::unique_ptr<ThreadWork> make_thread_work(const std::string& name, bool quick, unsigned thread_index,
                                             unsigned threads);

}  // namespace host_bench
