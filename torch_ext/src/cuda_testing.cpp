// unipool torch extension: test hooks of the CUDA allocator, for
// unipool._testing. They drive the allocator through torch's own pointer
// (c10::cuda::CUDACachingAllocator::get()), as torch's code does.
#include <c10/core/Allocator.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/utils/pybind.h>

#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "cuda_allocator.hpp"
#include "unipool/device_sim_backend.hpp"
#include "unipool_torch.hpp"

namespace unipool::torch_ext {
namespace {

namespace cca = c10::cuda::CUDACachingAllocator;

std::mutex g_ptrs_mutex;
std::unordered_map<uint64_t, c10::DataPtr> g_ptrs;
uint64_t g_next = 0;

c10::DataPtr take(uint64_t handle) {
  std::lock_guard lock(g_ptrs_mutex);
  auto it = g_ptrs.find(handle);
  TORCH_CHECK(it != g_ptrs.end(), "unknown handle ", handle);
  c10::DataPtr p = std::move(it->second);
  g_ptrs.erase(it);
  return p;
}

py::dict device_stats(int device) {
  const c10::CachingDeviceAllocator::DeviceStats s = cca::get()->getDeviceStats(static_cast<c10::DeviceIndex>(device));
  py::dict d;
  const char* pools[] = {"all", "small_pool", "large_pool"};
  auto put = [&](const char* name, const c10::CachingAllocator::StatArray& a) {
    for (size_t i = 0; i < a.size(); ++i) {
      const std::string base = std::string(name) + "." + pools[i] + ".";
      d[(base + "current").c_str()] = a[i].current;
      d[(base + "peak").c_str()] = a[i].peak;
      d[(base + "allocated").c_str()] = a[i].allocated;
      d[(base + "freed").c_str()] = a[i].freed;
    }
  };
  put("allocation", s.allocation);
  put("segment", s.segment);
  put("active", s.active);
  put("inactive_split", s.inactive_split);
  put("allocated_bytes", s.allocated_bytes);
  put("reserved_bytes", s.reserved_bytes);
  put("active_bytes", s.active_bytes);
  put("inactive_split_bytes", s.inactive_split_bytes);
  put("requested_bytes", s.requested_bytes);
  d["num_alloc_retries"] = s.num_alloc_retries;
  d["num_ooms"] = s.num_ooms;
  d["num_sync_all_streams"] = s.num_sync_all_streams;
  d["num_device_alloc"] = s.num_device_alloc;
  d["num_device_free"] = s.num_device_free;
  return d;
}

c10::cuda::CUDAStream stream_of(int64_t id) {
  return c10::cuda::CUDAStream(c10::cuda::CUDAStream::UNCHECKED,
                               c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::kCUDA, 0), id));
}

MempoolId_t pool_id(uint64_t a, uint64_t b) { return {a, b}; }

// Allocations, frees and statistics through torch's allocator pointer.
void bind_calls(py::module_& t) {
  t.def("torch_allocator_name", [] { return cca::get() ? cca::get()->name() : std::string(); });
  t.def("torch_get_allocator_is_unipool",
        [] { return is_installed(cca::get()) && is_installed(c10::GetAllocator(c10::kCUDA)); });
  t.def("cuda_allocate", [](size_t n) {
    c10::DataPtr p = cca::get()->allocate(n);
    const uint64_t address = reinterpret_cast<uint64_t>(p.get());
    std::lock_guard lock(g_ptrs_mutex);
    g_ptrs.emplace(++g_next, std::move(p));
    return py::make_tuple(g_next, address);
  });
  t.def("cuda_record_stream", [](uint64_t handle, int64_t stream_id) {
    std::lock_guard lock(g_ptrs_mutex);
    cca::get()->recordStream(g_ptrs.at(handle), stream_of(stream_id));
  });
  t.def("cuda_free", [](uint64_t handle) { take(handle); });
  t.def("cuda_raw_alloc", [](size_t n) { return reinterpret_cast<uint64_t>(cca::raw_alloc(n)); });
  t.def("cuda_raw_alloc_with_stream", [](size_t n, uint64_t stream) {
    return reinterpret_cast<uint64_t>(cca::raw_alloc_with_stream(n, reinterpret_cast<cudaStream_t>(stream)));
  });
  t.def("cuda_raw_delete", [](uint64_t p) { cca::raw_delete(reinterpret_cast<void*>(p)); });
  t.def("cuda_device_stats", &device_stats, py::arg("device") = 0);
  t.def("cuda_reset_peak", [](int d) { cca::get()->resetPeakStats(static_cast<c10::DeviceIndex>(d)); });
  t.def("cuda_reset_accumulated", [](int d) { cca::get()->resetAccumulatedStats(static_cast<c10::DeviceIndex>(d)); });
  t.def("cuda_empty_cache", [] { cca::get()->emptyCache({0, 0}); });
  t.def("cuda_set_memory_fraction",
        [](double f, int d) { cca::setMemoryFraction(f, static_cast<c10::DeviceIndex>(d)); });
  t.def("cuda_get_memory_fraction", [](int d) { return cca::getMemoryFraction(static_cast<c10::DeviceIndex>(d)); });
  t.def("cuda_cache_info", [](int d) {
    size_t largest = 0;
    cca::cacheInfo(static_cast<c10::DeviceIndex>(d), &largest);
    return largest;
  });
  t.def("cuda_base_allocation", [](uint64_t p) {
    size_t size = 0;
    void* base = cca::getBaseAllocation(reinterpret_cast<void*>(p), &size);
    return py::make_tuple(reinterpret_cast<uint64_t>(base), size);
  });
}

// Snapshots and private pools (MemPool, CUDA graphs).
void bind_pools(py::module_& t) {
  t.def(
      "cuda_snapshot",
      [](uint64_t a, uint64_t b) {
        const cca::SnapshotInfo s = cca::snapshot({a, b});
        py::list segs;
        for (const auto& seg : s.segments) {
          py::list blocks;
          for (const auto& bl : seg.blocks) {
            blocks.append(py::dict(py::arg("size") = bl.size, py::arg("requested_size") = bl.requested_size,
                                   py::arg("allocated") = bl.allocated, py::arg("active") = bl.active));
          }
          segs.append(py::dict(
              py::arg("address") = seg.address, py::arg("total_size") = seg.total_size,
              py::arg("allocated_size") = seg.allocated_size, py::arg("is_large") = seg.is_large,
              py::arg("pool") = py::make_tuple(seg.owner_private_pool_id.first, seg.owner_private_pool_id.second),
              py::arg("blocks") = blocks));
        }
        return segs;
      },
      py::arg("pool0") = 0, py::arg("pool1") = 0);
  t.def("cuda_pool_create", [](int d, uint64_t a, uint64_t b) {
    cca::createOrIncrefPool(static_cast<c10::DeviceIndex>(d), pool_id(a, b));
  });
  t.def("cuda_pool_begin", [](int d, uint64_t a, uint64_t b) {
    cca::beginAllocateToPool(static_cast<c10::DeviceIndex>(d), pool_id(a, b), [](cudaStream_t) { return true; });
  });
  t.def("cuda_pool_end",
        [](int d, uint64_t a, uint64_t b) { cca::endAllocateToPool(static_cast<c10::DeviceIndex>(d), pool_id(a, b)); });
  t.def("cuda_pool_release",
        [](int d, uint64_t a, uint64_t b) { cca::releasePool(static_cast<c10::DeviceIndex>(d), pool_id(a, b)); });
  t.def("cuda_pool_use_count", [](int d, uint64_t a, uint64_t b) {
    return cca::getPoolUseCount(static_cast<c10::DeviceIndex>(d), pool_id(a, b));
  });
  t.def("cuda_pool_check_live", [](int d, uint64_t a, uint64_t b, std::vector<uint64_t> ptrs) {
    std::unordered_set<void*> expected;
    for (uint64_t p : ptrs) expected.insert(reinterpret_cast<void*>(p));
    return cca::checkPoolLiveAllocations(static_cast<c10::DeviceIndex>(d), pool_id(a, b), expected);
  });
  t.def("cuda_call_unsupported", [](const std::string& method) {
    if (method == "shareIpcHandle")
      cca::shareIpcHandle(nullptr);
    else if (method == "setUseOnOOM")
      cca::setUseOnOOM(0, {1, 1}, true);
  });
  t.def("cuda_pool_empty_cache", [](uint64_t a, uint64_t b) { cca::get()->emptyCache(pool_id(a, b)); });
  t.def("cuda_pool_validate", [](int d, uint64_t a, uint64_t b) {
    std::string why;
    TORCH_CHECK(installed().validate_private_pool(d, pool_id(a, b), &why), "unipool private pool: ", why);
  });
  t.def("cuda_exit_releases", [] { return installed().exit_releases(); });
  t.def("cuda_validate", [] {
    std::string why;
    TORCH_CHECK(installed().pools().validate(&why), "unipool device pools: ", why);
  });
}

// The sim backend's manual fences and capacity.
void bind_sim(py::module_& t) {
  t.def("sim_complete_all", [] {
    auto* sim = dynamic_cast<SimBackend*>(&installed().pools().backend());
    TORCH_CHECK(sim != nullptr, "not the sim backend");
    sim->manual_fences().complete_all();
  });
  t.def("sim_used_bytes", [] {
    auto* sim = dynamic_cast<SimBackend*>(&installed().pools().backend());
    TORCH_CHECK(sim != nullptr, "not the sim backend");
    return sim->used_bytes(0);
  });
  t.def("sim_outstanding_fences", [] {
    auto* sim = dynamic_cast<SimBackend*>(&installed().pools().backend());
    TORCH_CHECK(sim != nullptr, "not the sim backend");
    return sim->manual_fences().outstanding();
  });
}

}  // namespace

void bind_cuda_trace_testing(py::module_& t);  // cuda_trace_testing.cpp

void bind_cuda_testing(py::module_& t) {
  bind_calls(t);
  bind_pools(t);
  bind_sim(t);
  bind_cuda_trace_testing(t);
}

}  // namespace unipool::torch_ext
