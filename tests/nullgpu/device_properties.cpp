// unipool null GPU: what the device says about itself. Its figures are
// those of a recent data-centre GPU (compute capability, SM count and
// capacity from the configuration), so that libraries that size their
// launches by them (torch's kernels, cuBLAS heuristics) pick ordinary paths.
#include <cstdio>
#include <cstring>

#include "nullgpu/state.hpp"

namespace unipool::nullgpu::detail {
namespace {

constexpr int kMaxThreadsPerBlock = 1024;
constexpr int kMaxThreadsPerSm = 2048;
constexpr int kSharedPerBlock = 48 << 10;
constexpr int kSharedPerBlockOptin = 227 << 10;
constexpr int kSharedPerSm = 228 << 10;
constexpr int kRegisters = 64 << 10;
constexpr int kL2Bytes = 50 << 20;

}  // namespace

int device_attribute(const Config& c, int attribute) {
  switch (attribute) {
    case cudaDevAttrMaxThreadsPerBlock: return kMaxThreadsPerBlock;
    case cudaDevAttrMaxBlockDimX: case cudaDevAttrMaxBlockDimY: return 1024;
    case cudaDevAttrMaxBlockDimZ: return 64;
    case cudaDevAttrMaxGridDimX: return 0x7fffffff;
    case cudaDevAttrMaxGridDimY: case cudaDevAttrMaxGridDimZ: return 65535;
    case cudaDevAttrMaxSharedMemoryPerBlock: return kSharedPerBlock;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: return kSharedPerBlockOptin;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: return kSharedPerSm;
    case cudaDevAttrMaxRegistersPerBlock: case cudaDevAttrMaxRegistersPerMultiprocessor: return kRegisters;
    case cudaDevAttrWarpSize: return 32;
    case cudaDevAttrMultiProcessorCount: return c.sm_count;
    case cudaDevAttrMaxThreadsPerMultiProcessor: return kMaxThreadsPerSm;
    case cudaDevAttrMaxBlocksPerMultiprocessor: return 32;
    case cudaDevAttrComputeCapabilityMajor: return c.compute_major;
    case cudaDevAttrComputeCapabilityMinor: return c.compute_minor;
    case cudaDevAttrL2CacheSize: return kL2Bytes;
    case cudaDevAttrClockRate: return 1980000;
    case cudaDevAttrMemoryClockRate: return 2619000;
    case cudaDevAttrGlobalMemoryBusWidth: return 5120;
    case cudaDevAttrAsyncEngineCount: return 3;
    case cudaDevAttrUnifiedAddressing: case cudaDevAttrCanMapHostMemory: case cudaDevAttrConcurrentKernels:
    case cudaDevAttrStreamPrioritiesSupported: case cudaDevAttrCooperativeLaunch: case cudaDevAttrHostRegisterSupported:
    case cudaDevAttrCanUseHostPointerForRegisteredMem: case cudaDevAttrComputePreemptionSupported:
    case cudaDevAttrGlobalL1CacheSupported: case cudaDevAttrLocalL1CacheSupported: case cudaDevAttrManagedMemory:
      return 1;
    case cudaDevAttrMemoryPoolsSupported: case cudaDevAttrClusterLaunch: return 1;
    case cudaDevAttrPciBusId: return 1;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: return c.vmm_supported ? 1 : 0;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: return c.ipc ? 1 : 0;
    default: return 0;
  }
}

void fill_properties(const Config& c, int device, cudaDeviceProp* p) {
  std::memset(p, 0, sizeof(*p));
  std::snprintf(p->name, sizeof(p->name), "unipool null GPU (sm_%d%d, no compute)", c.compute_major, c.compute_minor);
  p->uuid.bytes[0] = static_cast<char>(0x4e);  // 'N', then the device number: unique per device
  p->uuid.bytes[15] = static_cast<char>(device);
  p->totalGlobalMem = static_cast<size_t>(c.capacity);
  p->sharedMemPerBlock = kSharedPerBlock;
  p->sharedMemPerBlockOptin = kSharedPerBlockOptin;
  p->sharedMemPerMultiprocessor = kSharedPerSm;
  p->regsPerBlock = p->regsPerMultiprocessor = kRegisters;
  p->warpSize = 32;
  p->memPitch = SIZE_MAX;
  p->maxThreadsPerBlock = kMaxThreadsPerBlock;
  p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 0x7fffffff;
  p->maxGridSize[1] = p->maxGridSize[2] = 65535;
  p->totalConstMem = 64 << 10;
  p->major = c.compute_major;
  p->minor = c.compute_minor;
  p->multiProcessorCount = c.sm_count;
  p->maxThreadsPerMultiProcessor = kMaxThreadsPerSm;
  p->maxBlocksPerMultiProcessor = 32;
  p->l2CacheSize = kL2Bytes;
  p->memoryBusWidth = 5120;
  p->asyncEngineCount = 3;
  p->pciBusID = device + 1;
  p->canMapHostMemory = p->unifiedAddressing = p->concurrentKernels = p->managedMemory = 1;
  p->streamPrioritiesSupported = p->cooperativeLaunch = p->hostRegisterSupported = 1;
  p->canUseHostPointerForRegisteredMem = p->memoryPoolsSupported = p->clusterLaunch = 1;
  p->hostNumaId = -1;
}

}  // namespace unipool::nullgpu::detail
