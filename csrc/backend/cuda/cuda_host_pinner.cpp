// unipool backend/cuda: page-locks host ranges with cudaHostRegister so
// copies from and to them run asynchronously at full PCIe/NVLink speed.
//
// The pinner reaches the CUDA runtime through dlopen, on its first call: a
// process whose pools never pin (the malloc face under the default
// pinned=off) never loads libcudart, which costs a preloaded /bin/true twice
// its start-up time and 2 MiB. A runtime already in the process (linked by
// libunipool.so, loaded by torch, or the null GPU's) is the one used.
#include "backend/cuda/cuda_host_pinner.hpp"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdio>
#include <string>

#include "backend/cuda/cuda_status.hpp"

namespace unipool::backend {
namespace {

// The runtime calls the pinner makes, or why they cannot be made.
struct RuntimeCalls {
  decltype(&cudaGetDeviceCount) device_count = nullptr;
  decltype(&cudaHostRegister) host_register = nullptr;
  decltype(&cudaHostUnregister) host_unregister = nullptr;
  cuda::RuntimeErrorCalls errors{};
  // Why the runtime cannot be used ("" when every call was found). Not
  // cuda::intern: its object links the runtime.
  char load_error[256] = "";

  bool loaded() const noexcept { return load_error[0] == '\0'; }
  void refuse(const std::string& soname, const char* why) noexcept {
    std::snprintf(load_error, sizeof(load_error), "unipool: cannot pin host memory: %s %s", soname.c_str(), why);
  }
};

template <class Fn>
bool find(void* library, const char* name, Fn* fn) {
  *fn = reinterpret_cast<Fn>(dlsym(library, name));
  return *fn != nullptr;
}

// Where the runtime is found, first hit wins:
//   1. the caller's scope: the process's global symbols and this object's
//      own dependencies (libunipool.so links the runtime, test binaries the
//      null GPU's, a CUDA program its own);
//   2. a runtime another library loaded privately (torch): RTLD_NOLOAD;
//   3. the runtime, loaded now.
// false when none is found. (RTLD_DEFAULT is a null handle.)
bool open_library(const std::string& soname, void** library) {
  *library = RTLD_DEFAULT;
  if (dlsym(RTLD_DEFAULT, "cudaHostRegister") != nullptr) return true;
  *library = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (*library == nullptr) *library = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  return *library != nullptr;
}

RuntimeCalls open_runtime() {
  // The soname of the toolkit unipool was built with: libcudart.so.13.
  const std::string soname = "libcudart.so." + std::to_string(CUDART_VERSION / 1000);
  RuntimeCalls calls;
  void* library = nullptr;
  if (!open_library(soname, &library)) {
    const char* why = dlerror();
    calls.refuse(soname, (std::string("could not be loaded: ") + (why != nullptr ? why : "dlopen failed")).c_str());
    return calls;
  }
  // Never closed: pinned ranges must be unpinned by the same runtime.
  const bool found = find(library, "cudaGetDeviceCount", &calls.device_count) &&
                     find(library, "cudaHostRegister", &calls.host_register) &&
                     find(library, "cudaHostUnregister", &calls.host_unregister) &&
                     find(library, "cudaGetLastError", &calls.errors.clear) &&
                     find(library, "cudaGetErrorString", &calls.errors.describe);
  if (!found) calls.refuse(soname, "lacks a runtime call");
  return calls;
}

// Opened once per process, by the first pinner to be asked anything.
const RuntimeCalls& runtime() {
  static const RuntimeCalls calls = open_runtime();
  return calls;
}

class CudaHostPinner final : public HostPinner {
 public:
  const char* name() const noexcept override { return "cuda"; }

  bool available() override {
    const RuntimeCalls& rt = runtime();
    if (!rt.loaded()) return false;
    int count = 0;
    const cudaError_t err = rt.device_count(&count);
    // No driver or no device leaves an error pending; don't let it leak out.
    if (err != cudaSuccess) {
      (void)cuda::runtime_status(err, rt.errors);
      return false;
    }
    return count >= 1;
  }

  const char* unavailable_reason() const noexcept override {
    const RuntimeCalls& rt = runtime();
    return rt.loaded() ? nullptr : rt.load_error;
  }

  BackendStatus pin(void* ptr, uint64_t bytes) override {
    if (ptr == nullptr || bytes == 0) return cuda::usage_error("unipool: cannot pin a null or empty host range");
    const RuntimeCalls& rt = runtime();
    if (!rt.loaded()) return cuda::usage_error(rt.load_error);
    return cuda::runtime_status(rt.host_register(ptr, static_cast<size_t>(bytes), cudaHostRegisterDefault), rt.errors);
  }

  BackendStatus unpin(void* ptr) override {
    if (ptr == nullptr) return cuda::usage_error("unipool: cannot unpin a null pointer");
    const RuntimeCalls& rt = runtime();
    if (!rt.loaded()) return cuda::usage_error(rt.load_error);
    return cuda::runtime_status(rt.host_unregister(ptr), rt.errors);
  }
};

}  // namespace

std::unique_ptr<HostPinner> make_cuda_host_pinner() { return std::make_unique<CudaHostPinner>(); }

}  // namespace unipool::backend
