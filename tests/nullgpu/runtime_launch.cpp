// unipool null GPU: what nvcc-compiled host code calls. A program's device
// code registers itself at load time (__cudaRegisterFatBinary & co.); the
// null GPU accepts it and keeps only its variables, whose host shadows
// stand in for device memory. Kernel launches do nothing and succeed, on a
// valid stream with a sane configuration, so a wrong launch still fails.
#include <cstring>

#include "nullgpu/state.hpp"

using unipool::nullgpu::detail::Call;
using unipool::nullgpu::detail::Family;
using unipool::nullgpu::detail::Needs;
using unipool::nullgpu::detail::State;
using unipool::nullgpu::detail::stream_device;

namespace {

constexpr int kMaxThreadsPerBlock = 1024;
constexpr int kMaxThreadsPerSm = 2048;
constexpr size_t kSharedPerBlock = 48 << 10;
constexpr size_t kSharedPerBlockOptin = 227 << 10;

// The launch configuration of <<<...>>>: pushed by the call site, popped by
// the kernel's host stub. Per thread, as launches are.
struct CallConfiguration {
  dim3 grid, block;
  size_t shared = 0;
  cudaStream_t stream = nullptr;
};
thread_local std::vector<CallConfiguration> t_configurations;

void* g_fatbin_handle = nullptr;  // what every __cudaRegisterFatBinary returns a pointer to

cudaError_t launch(Call& call, const void* func, dim3 grid, dim3 block, size_t shared, cudaStream_t stream) {
  if (call.refused()) return call.runtime_refusal();
  if (stream_device(call.s, stream) < 0) return call.fail(cudaErrorInvalidResourceHandle);
  if (func == nullptr) return call.fail(cudaErrorInvalidDeviceFunction);
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || threads == 0 || threads > kMaxThreadsPerBlock ||
      grid.y > 65535 || grid.z > 65535 || shared > kSharedPerBlockOptin) {
    return call.fail(cudaErrorInvalidConfiguration);
  }
  return cudaSuccess;  // the kernel does nothing
}

}  // namespace

extern "C" {

void** __cudaRegisterFatBinary(void*) { return &g_fatbin_handle; }
void __cudaRegisterFatBinaryEnd(void**) {}
void __cudaUnregisterFatBinary(void**) {}
void __cudaRegisterFunction(void**, const char*, char*, const char*, int, uint3*, uint3*, dim3*, dim3*, int*) {}
void __cudaRegisterManagedVar(void**, void**, char*, const char*, int, size_t, int, int) {}
char __cudaInitModule(void**) { return 1; }

// A device variable's address is its host shadow: device memory is host
// memory here, so cudaMemcpyToSymbol and cudaGetSymbolAddress work on it.
void __cudaRegisterVar(void**, char* hostVar, char*, const char*, int, size_t size, int, int) {
  auto& s = unipool::nullgpu::detail::state();
  std::lock_guard lock(s.mutex);
  s.symbols[reinterpret_cast<uintptr_t>(hostVar)] = size;
}

unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem, cudaStream_t stream) {
  t_configurations.push_back(CallConfiguration{gridDim, blockDim, sharedMem, stream});
  return 0;
}

cudaError_t __cudaPopCallConfiguration(dim3* gridDim, dim3* blockDim, size_t* sharedMem, void* stream) {
  if (t_configurations.empty()) return cudaErrorMissingConfiguration;
  const CallConfiguration c = t_configurations.back();
  t_configurations.pop_back();
  *gridDim = c.grid;
  *blockDim = c.block;
  *sharedMem = c.shared;
  *static_cast<cudaStream_t*>(stream) = c.stream;
  return cudaSuccess;
}

// The kernel handle of a host stub: the stub's address serves.
cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* func) {
  if (kernel == nullptr || func == nullptr) return cudaErrorInvalidValue;
  *kernel = reinterpret_cast<cudaKernel_t>(const_cast<void*>(func));
  return cudaSuccess;
}

cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void**, size_t sharedMem,
                               cudaStream_t stream) {
  Call call("__cudaLaunchKernel", Family::runtime);
  return launch(call, reinterpret_cast<const void*>(kernel), gridDim, blockDim, sharedMem, stream);
}

cudaError_t cudaLaunchKernel(const void* func, dim3 gridDim, dim3 blockDim, void**, size_t sharedMem,
                             cudaStream_t stream) {
  Call call("cudaLaunchKernel", Family::runtime);
  return launch(call, func, gridDim, blockDim, sharedMem, stream);
}

cudaError_t cudaLaunchCooperativeKernel(const void* func, dim3 gridDim, dim3 blockDim, void**, size_t sharedMem,
                                        cudaStream_t stream) {
  Call call("cudaLaunchCooperativeKernel", Family::runtime);
  return launch(call, func, gridDim, blockDim, sharedMem, stream);
}

cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func, void**) {
  Call call("cudaLaunchKernelExC", Family::runtime);
  if (!call.refused() && config == nullptr) return call.fail(cudaErrorInvalidValue);
  if (call.refused()) return call.runtime_refusal();
  return launch(call, func, config->gridDim, config->blockDim, config->dynamicSmemBytes, config->stream);
}

cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes* attr, const void* func) {
  Call call("cudaFuncGetAttributes", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (attr == nullptr || func == nullptr) return call.fail(cudaErrorInvalidDeviceFunction);
  *attr = cudaFuncAttributes{};
  attr->maxThreadsPerBlock = kMaxThreadsPerBlock;
  attr->numRegs = 32;
  attr->maxDynamicSharedSizeBytes = static_cast<int>(kSharedPerBlock);
  attr->ptxVersion = attr->binaryVersion = call.s.config.compute_major * 10 + call.s.config.compute_minor;
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* func, enum cudaFuncAttribute attr, int value) {
  Call call("cudaFuncSetAttribute", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (func == nullptr) return call.fail(cudaErrorInvalidDeviceFunction);
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize && (value < 0 || size_t(value) > kSharedPerBlockOptin)) {
    return call.fail(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

cudaError_t cudaFuncSetCacheConfig(const void* func, enum cudaFuncCache) {
  Call call("cudaFuncSetCacheConfig", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  return func != nullptr ? cudaSuccess : call.fail(cudaErrorInvalidDeviceFunction);
}

cudaError_t cudaKernelSetAttributeForDevice(cudaKernel_t kernel, enum cudaFuncAttribute, int, int device) {
  Call call("cudaKernelSetAttributeForDevice", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (kernel == nullptr) return call.fail(cudaErrorInvalidDeviceFunction);
  return call.s.valid_device(device) ? cudaSuccess : call.fail(cudaErrorInvalidDevice);
}

// As many blocks as the SM's thread budget allows: the only limit modelled.
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* numBlocks, const void* func, int blockSize,
                                                                   size_t, unsigned int) {
  Call call("cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (numBlocks == nullptr || func == nullptr || blockSize <= 0) return call.fail(cudaErrorInvalidValue);
  *numBlocks = std::min(32, kMaxThreadsPerSm / std::min(blockSize, kMaxThreadsPerBlock));
  return cudaSuccess;
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* numBlocks, const void* func, int blockSize,
                                                          size_t dynamicSMemSize) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize, dynamicSMemSize, 0);
}

cudaError_t cudaGetSymbolAddress(void** devPtr, const void* symbol) {
  Call call("cudaGetSymbolAddress", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (devPtr == nullptr || call.s.symbols.count(reinterpret_cast<uintptr_t>(symbol)) == 0) {
    return call.fail(cudaErrorInvalidSymbol);
  }
  *devPtr = const_cast<void*>(symbol);
  return cudaSuccess;
}

cudaError_t cudaGetSymbolSize(size_t* size, const void* symbol) {
  Call call("cudaGetSymbolSize", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  const auto it = call.s.symbols.find(reinterpret_cast<uintptr_t>(symbol));
  if (size == nullptr || it == call.s.symbols.end()) return call.fail(cudaErrorInvalidSymbol);
  *size = it->second;
  return cudaSuccess;
}

cudaError_t cudaMemcpyToSymbol(const void* symbol, const void* src, size_t count, size_t offset,
                               enum cudaMemcpyKind) {
  Call call("cudaMemcpyToSymbol", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  const auto it = call.s.symbols.find(reinterpret_cast<uintptr_t>(symbol));
  if (it == call.s.symbols.end()) return call.fail(cudaErrorInvalidSymbol);
  if (offset > it->second || count > it->second - offset || (count != 0 && src == nullptr)) {
    return call.fail(cudaErrorInvalidValue);
  }
  if (count != 0) std::memmove(static_cast<char*>(const_cast<void*>(symbol)) + offset, src, count);
  return cudaSuccess;
}

cudaError_t cudaMemcpyFromSymbol(void* dst, const void* symbol, size_t count, size_t offset, enum cudaMemcpyKind) {
  Call call("cudaMemcpyFromSymbol", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  const auto it = call.s.symbols.find(reinterpret_cast<uintptr_t>(symbol));
  if (it == call.s.symbols.end()) return call.fail(cudaErrorInvalidSymbol);
  if (offset > it->second || count > it->second - offset || (count != 0 && dst == nullptr)) {
    return call.fail(cudaErrorInvalidValue);
  }
  if (count != 0) std::memmove(dst, static_cast<const char*>(symbol) + offset, count);
  return cudaSuccess;
}

cudaError_t cudaProfilerStart(void) {
  Call call("cudaProfilerStart", Family::runtime, Needs::nothing);
  return call.refused() ? call.runtime_refusal() : cudaSuccess;
}

cudaError_t cudaProfilerStop(void) {
  Call call("cudaProfilerStop", Family::runtime, Needs::nothing);
  return call.refused() ? call.runtime_refusal() : cudaSuccess;
}

}  // extern "C"
