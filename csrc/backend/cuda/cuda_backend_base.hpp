// unipool backend/cuda: what every CUDA device backend shares: device
// count, memory info (under a device guard), event fences, synchronization
// and batched copies on a copy stream of the backend's own.
#pragma once

#include <cuda_runtime_api.h>

#include <mutex>
#include <vector>

#include "backend/cuda/cuda_event_fences.hpp"
#include "unipool/device_backend.hpp"

namespace unipool::backend::cuda {

class CudaBackendBase : public DeviceBackend {
 public:
  // 0 when there is no driver or no device (the error is cleared).
  int device_count() override;
  BackendStatus memory_info(int device, uint64_t* free_bytes, uint64_t* total_bytes) override;
  FenceSource& fences() override { return fences_; }
  BackendStatus synchronize(int device) override;
  // cudaIpcGetMemHandle / cudaIpcOpenMemHandle / cudaIpcCloseMemHandle, on
  // the device given: the whole segment is shared, whatever the range.
  BackendStatus ipc_export(int device, void* segment, uint64_t offset, uint64_t bytes, IpcHandle* out) override;
  BackendStatus ipc_open(int device, const IpcHandle& handle, void** base) override;
  BackendStatus ipc_close(int device, void* base) override;
  // cudaMemcpyAsync of each copy on the device's copy stream (made on first
  // use, non-blocking, so it never waits on the legacy default stream), then
  // one cudaStreamSynchronize.
  BackendStatus copy(int device, const DeviceCopy* copies, size_t count, CopyDirection direction) override;
  ~CudaBackendBase() override;

 protected:
  // The first byte of an IpcHandle: how the memory is shared.
  static constexpr char kCudaIpcHandle = 'C';
  static constexpr char kVmmHandle = 'V';

 private:
  BackendStatus copy_stream(int device, cudaStream_t* out);

  CudaEventFenceSource fences_;
  std::mutex copy_mutex_;                   // one batch at a time per backend; guards copy_streams_
  std::vector<cudaStream_t> copy_streams_;  // per device; null until first used
};

}  // namespace unipool::backend::cuda
