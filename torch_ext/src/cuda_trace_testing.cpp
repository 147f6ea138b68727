// unipool torch extension: test hooks for torch's allocator trace trackers,
// for unipool._testing.
// torch has no Python binding for attachAllocatorTraceTracker (its users are
// C++: ProcessGroupNCCL registers segments with NCCL through one), so the
// tests attach one here, through torch's own entry point
// c10::cuda::CUDACachingAllocator::attachAllocatorTraceTracker, and read what
// it was told.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/csrc/utils/pybind.h>

#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

namespace unipool::torch_ext {
namespace {

using c10::CachingDeviceAllocator::TraceEntry;

// (action name, device, address, size, stream)
using SeenEntry = std::tuple<std::string, int, uint64_t, uint64_t, uint64_t>;

std::string action_name(TraceEntry::Action action) {
  switch (action) {
    case TraceEntry::ALLOC: return "alloc";
    case TraceEntry::FREE_REQUESTED: return "free_requested";
    case TraceEntry::FREE_COMPLETED: return "free_completed";
    case TraceEntry::SEGMENT_ALLOC: return "segment_alloc";
    case TraceEntry::SEGMENT_FREE: return "segment_free";
    case TraceEntry::SEGMENT_MAP: return "segment_map";
    case TraceEntry::SEGMENT_UNMAP: return "segment_unmap";
    case TraceEntry::SNAPSHOT: return "snapshot";
    case TraceEntry::OOM: return "oom";
    default: return "other";
  }
}

// One per attached tracker; kept for the life of the process, as trackers
// are (torch offers no detach).
struct TrackerLog {
  std::mutex mutex;
  std::vector<SeenEntry> seen;
};
std::mutex g_logs_mutex;
std::vector<std::shared_ptr<TrackerLog>> g_logs;

}  // namespace

void bind_cuda_trace_testing(py::module_& t) {
  t.def(
      "cuda_attach_trace_tracker",
      [] {
        auto log = std::make_shared<TrackerLog>();
        size_t index = 0;
        {
          std::lock_guard lock(g_logs_mutex);
          index = g_logs.size();
          g_logs.push_back(log);
        }
        c10::cuda::CUDACachingAllocator::attachAllocatorTraceTracker([log](const TraceEntry& e) {
          std::lock_guard lock(log->mutex);
          log->seen.emplace_back(action_name(e.action_), static_cast<int>(e.device_), e.addr_, e.size_,
                                 reinterpret_cast<uint64_t>(e.stream_));
        });
        return index;
      },
      "attaches a trace tracker through torch; returns its index for cuda_trace_tracker_entries");
  t.def("cuda_trace_tracker_entries", [](size_t index) {
    std::shared_ptr<TrackerLog> log;
    {
      std::lock_guard lock(g_logs_mutex);
      TORCH_CHECK_INDEX(index < g_logs.size(), "no test trace tracker ", index);
      log = g_logs[index];
    }
    std::lock_guard lock(log->mutex);
    return log->seen;
  });
}

}  // namespace unipool::torch_ext
