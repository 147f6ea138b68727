// unipool torch extension: install() puts unipool in place of torch's CUDA
// caching allocator and pinned host allocator.
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

}  // namespace

UnipoolCudaAllocator& installed() {
  TORCH_CHECK(g_allocator != nullptr, "unipool: install() has not been called");
  return *g_allocator;
}

bool is_installed(const c10::Allocator* a) { return g_allocator != nullptr && a == g_allocator.get(); }

void bind_cuda_sleep(py::module_& m);   // cuda_sleep.cpp
void bind_device_tags(py::module_& m);  // cuda_sleep.cpp

void bind_cuda_allocator(py::module_& m) {
  m.attr("_has_cuda_allocator") = true;
  bind_cuda_sleep(m);
  bind_device_tags(m);
  m.def("install", &install, py::arg("device_conf") = "", py::arg("host_conf") = "");
  m.def("installed", [] { return g_allocator != nullptr; });
}

}  // namespace unipool::torch_ext
