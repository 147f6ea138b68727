// unipool torch extension: install() puts unipool in place of torch's CUDA
// caching allocator and pinned host allocator; plus test hooks that drive the
// allocator through torch's own pointer (c10::cuda::CUDACachingAllocator::get()).
#include <c10/core/Allocator.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <unordered_map>

#include "cuda_allocator.hpp"
#include "unipool/device_sim_backend.hpp"
#include "unipool_torch.hpp"

namespace unipool::torch_ext {
namespace {

namespace cca = c10::cuda::CUDACachingAllocator;

std::mutex g_install_mutex;
std::shared_ptr<UnipoolCudaAllocator> g_allocator;

UnipoolCudaAllocator& installed() {
  TORCH_CHECK(g_allocator != nullptr, "unipool: install() has not been called");
  return *g_allocator;
}

// The host pool's configuration for torch's pinned host allocator: what
// torch hands out as pinned must be pinned, so pinned=on unless the
// configuration (given, else UNIPOOL_HOST_CONF) says otherwise, and then
// install() refuses rather than serve pageable memory as pinned. Unless the
// configuration sets it, huge_threshold rises to max_pin: a block above the
// threshold gets a mapping of its own, registered when it is made and
// unregistered when the huge cache lets it go, and pinned requests of tens
// of MiB (a request's KV blocks) come and go too often for that. From the
// registered arenas, KV-sized requests cost 1245 ns per alloc+free instead
// of 2057 and reserve 1.26x what is live instead of 1.47x (bench/kv_offload,
// on the null GPU).
std::string pinned_host_conf(const std::string& given) {
  const char* env = std::getenv("UNIPOOL_HOST_CONF");
  std::string conf = !given.empty() ? given : env != nullptr ? env : "";
  if (conf.find("pinned=") == std::string::npos) conf += conf.empty() ? "pinned=on" : ",pinned=on";
  HostPoolConfig parsed;
  try {
    parsed = HostPoolConfig::parse(conf);
  } catch (const std::exception& e) {
    TORCH_CHECK_VALUE(false, "unipool: bad host_conf: ", e.what());
  }
  TORCH_CHECK_VALUE(parsed.pinned == HostPinned::on, "unipool: host_conf '", conf,
                    "' does not pin (pinned=", to_string(parsed.pinned),
                    "), but torch's pinned host allocator (pin_memory, non_blocking copies) must hand out pinned "
                    "memory: use pinned=on, or leave pinned out");
  if (conf.find("huge_threshold=") == std::string::npos) {
    conf += ",huge_threshold=" + std::to_string(std::min(parsed.max_pin, parsed.reserve / 2));
  }
  return conf;
}

void install(const std::string& device_conf, const std::string& host_conf) {
  std::lock_guard lock(g_install_mutex);
  // Every check that can fail comes before anything is applied, so that a
  // refused install() leaves the process as it was.
  const std::string host = pinned_host_conf(host_conf);
  check_host_pool_config(host);
  if (g_allocator) {
    TORCH_CHECK(device_conf.empty() ||
                    DevicePoolConfig::parse(device_conf).to_string() == g_allocator->pools().config().to_string(),
                "unipool: already installed with '", g_allocator->pools().config().to_string(), "'");
    configure_host_pool(host);
    return;
  }
  cca::CUDAAllocator* current = cca::get();
  TORCH_CHECK(current == nullptr || !current->initialized(),
              "unipool.torch.install() must run before CUDA is initialised, and torch's CUDA allocator (",
              current ? current->name() : std::string("?"),
              ") is already in use. Call unipool.torch.install() first thing in the process, before any CUDA "
              "tensor, or start the process with UNIPOOL_INSTALL=1.");
  DevicePoolConfig config;
  try {
    config = device_conf.empty() ? DevicePoolConfig::from_env() : DevicePoolConfig::parse(device_conf);
  } catch (const std::exception& e) {
    TORCH_CHECK_VALUE(false, "unipool: bad device_conf: ", e.what());
  }
  // Never destroyed (PyTorch's own allocator is not either): torch's
  // shared_ptr to it dies among the static destructors at exit, when the
  // CUDA runtime may already be torn down, so a destructor giving memory
  // back would call CUDA too late; and a tensor freed during that teardown
  // must still find its allocator. Cached memory goes back earlier, in the
  // atexit hook below.
  std::shared_ptr<UnipoolCudaAllocator> allocator(new UnipoolCudaAllocator(config), [](UnipoolCudaAllocator*) {});
  // Only now, once the device side could be made (it throws when the
  // backend has no device): a refused install() leaves the host pool alone.
  configure_host_pool(host);
  torch::cuda::CUDAPluggableAllocator::changeCurrentAllocator(allocator);
  // torch.accelerator's memory calls go through c10::GetAllocator(kCUDA).
  c10::SetAllocator(c10::kCUDA, allocator.get(), /*priority=*/1);
  g_allocator = allocator;
  cuda_hooks().fences = [] { return &installed().pools().backend().fences(); };
  cuda_hooks().stream_handle = [](c10::Stream s) { return installed().handle_of(s); };
  register_host_allocator();
  // Python's atexit runs at the start of interpreter shutdown: threads are
  // joined, CUDA is still up. Cached segments go back to the device there
  // (waiting for their streams, as empty_cache does); live blocks stay.
  py::module_::import("atexit").attr("register")(py::cpp_function([] {
    if (g_allocator) g_allocator->release_cached_at_exit();
  }));
}

// ---- test hooks: everything through torch's allocator pointer ------------
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

}  // namespace

void bind_cuda_allocator(py::module_& m) {
  m.attr("_has_cuda_allocator") = true;
  m.def("install", &install, py::arg("device_conf") = "", py::arg("host_conf") = "");
  m.def("installed", [] { return g_allocator != nullptr; });
  m.def("_torch_allocator_name", [] { return cca::get() ? cca::get()->name() : std::string(); });
  m.def("_torch_get_allocator_is_unipool", [] {
    return g_allocator && cca::get() == g_allocator.get() && c10::GetAllocator(c10::kCUDA) == g_allocator.get();
  });
  m.def("_cuda_allocate", [](size_t n) {
    c10::DataPtr p = cca::get()->allocate(n);
    const uint64_t address = reinterpret_cast<uint64_t>(p.get());
    std::lock_guard lock(g_ptrs_mutex);
    g_ptrs.emplace(++g_next, std::move(p));
    return py::make_tuple(g_next, address);
  });
  m.def("_cuda_record_stream", [](uint64_t handle, int64_t stream_id) {
    std::lock_guard lock(g_ptrs_mutex);
    cca::get()->recordStream(g_ptrs.at(handle), stream_of(stream_id));
  });
  m.def("_cuda_free", [](uint64_t handle) { take(handle); });
  m.def("_cuda_raw_alloc", [](size_t n) { return reinterpret_cast<uint64_t>(cca::raw_alloc(n)); });
  m.def("_cuda_raw_alloc_with_stream", [](size_t n, uint64_t stream) {
    return reinterpret_cast<uint64_t>(cca::raw_alloc_with_stream(n, reinterpret_cast<cudaStream_t>(stream)));
  });
  m.def("_cuda_raw_delete", [](uint64_t p) { cca::raw_delete(reinterpret_cast<void*>(p)); });
  m.def("_cuda_device_stats", &device_stats, py::arg("device") = 0);
  m.def("_cuda_reset_peak", [](int d) { cca::get()->resetPeakStats(static_cast<c10::DeviceIndex>(d)); });
  m.def("_cuda_reset_accumulated", [](int d) { cca::get()->resetAccumulatedStats(static_cast<c10::DeviceIndex>(d)); });
  m.def("_cuda_empty_cache", [] { cca::get()->emptyCache({0, 0}); });
  m.def("_cuda_set_memory_fraction", [](double f, int d) { cca::setMemoryFraction(f, static_cast<c10::DeviceIndex>(d)); });
  m.def("_cuda_get_memory_fraction", [](int d) { return cca::getMemoryFraction(static_cast<c10::DeviceIndex>(d)); });
  m.def("_cuda_cache_info", [](int d) {
    size_t largest = 0;
    cca::cacheInfo(static_cast<c10::DeviceIndex>(d), &largest);
    return largest;
  });
  m.def("_cuda_base_allocation", [](uint64_t p) {
    size_t size = 0;
    void* base = cca::getBaseAllocation(reinterpret_cast<void*>(p), &size);
    return py::make_tuple(reinterpret_cast<uint64_t>(base), size);
  });
  m.def("_cuda_snapshot", [](uint64_t a, uint64_t b) {
    const cca::SnapshotInfo s = cca::snapshot({a, b});
    py::list segs;
    for (const auto& seg : s.segments) {
      py::list blocks;
      for (const auto& bl : seg.blocks) {
        blocks.append(py::dict(py::arg("size") = bl.size, py::arg("requested_size") = bl.requested_size,
                               py::arg("allocated") = bl.allocated, py::arg("active") = bl.active));
      }
      segs.append(py::dict(py::arg("address") = seg.address, py::arg("total_size") = seg.total_size,
                           py::arg("allocated_size") = seg.allocated_size, py::arg("is_large") = seg.is_large,
                           py::arg("pool") = py::make_tuple(seg.owner_private_pool_id.first,
                                                            seg.owner_private_pool_id.second),
                           py::arg("blocks") = blocks));
    }
    return segs;
  }, py::arg("pool0") = 0, py::arg("pool1") = 0);
  m.def("_cuda_pool_create", [](int d, uint64_t a, uint64_t b) {
    cca::createOrIncrefPool(static_cast<c10::DeviceIndex>(d), pool_id(a, b));
  });
  m.def("_cuda_pool_begin", [](int d, uint64_t a, uint64_t b) {
    cca::beginAllocateToPool(static_cast<c10::DeviceIndex>(d), pool_id(a, b), [](cudaStream_t) { return true; });
  });
  m.def("_cuda_pool_end", [](int d, uint64_t a, uint64_t b) {
    cca::endAllocateToPool(static_cast<c10::DeviceIndex>(d), pool_id(a, b));
  });
  m.def("_cuda_pool_release", [](int d, uint64_t a, uint64_t b) {
    cca::releasePool(static_cast<c10::DeviceIndex>(d), pool_id(a, b));
  });
  m.def("_cuda_pool_use_count", [](int d, uint64_t a, uint64_t b) {
    return cca::getPoolUseCount(static_cast<c10::DeviceIndex>(d), pool_id(a, b));
  });
  m.def("_cuda_pool_check_live", [](int d, uint64_t a, uint64_t b, std::vector<uint64_t> ptrs) {
    std::unordered_set<void*> expected;
    for (uint64_t p : ptrs) expected.insert(reinterpret_cast<void*>(p));
    return cca::checkPoolLiveAllocations(static_cast<c10::DeviceIndex>(d), pool_id(a, b), expected);
  });
  m.def("_cuda_call_unsupported", [](const std::string& method) {
    if (method == "shareIpcHandle") cca::shareIpcHandle(nullptr);
    else if (method == "recordHistory") cca::recordHistory(true, nullptr, 0, cca::RecordContext::ALL, false, {});
    else if (method == "attachAllocatorTraceTracker") cca::attachAllocatorTraceTracker(nullptr);
    else if (method == "setUseOnOOM") cca::setUseOnOOM(0, {1, 1}, true);
  });
  m.def("_cuda_pool_empty_cache", [](uint64_t a, uint64_t b) { cca::get()->emptyCache(pool_id(a, b)); });
  m.def("_cuda_pool_validate", [](int d, uint64_t a, uint64_t b) {
    std::string why;
    TORCH_CHECK(installed().validate_private_pool(d, pool_id(a, b), &why), "unipool private pool: ", why);
  });
  m.def("_cuda_exit_releases", [] { return installed().exit_releases(); });
  m.def("_cuda_validate", [] {
    std::string why;
    TORCH_CHECK(installed().pools().validate(&why), "unipool device pools: ", why);
    std::lock_guard lock(g_install_mutex);
  });
  m.def("_sim_complete_all", [] {
    auto* sim = dynamic_cast<SimBackend*>(&installed().pools().backend());
    TORCH_CHECK(sim != nullptr, "not the sim backend");
    sim->manual_fences().complete_all();
  });
  m.def("_sim_used_bytes", [] {
    auto* sim = dynamic_cast<SimBackend*>(&installed().pools().backend());
    TORCH_CHECK(sim != nullptr, "not the sim backend");
    return sim->used_bytes(0);
  });
  m.def("_sim_outstanding_fences", [] {
    auto* sim = dynamic_cast<SimBackend*>(&installed().pools().backend());
    TORCH_CHECK(sim != nullptr, "not the sim backend");
    return sim->manual_fences().outstanding();
  });
}

}  // namespace unipool::torch_ext
