#include "backend/cuda/cuda_backend_base.hpp"

#include <cuda_runtime_api.h>

#include <cstring>

#include "backend/cuda/cuda_status.hpp"
#include "backend/cuda/device_guard.hpp"

namespace unipool::backend::cuda {

int CudaBackendBase::device_count() {
  int count = 0;
  return runtime_status(cudaGetDeviceCount(&count)).is_ok() ? count : 0;
}

BackendStatus CudaBackendBase::memory_info(int device, uint64_t* free_bytes, uint64_t* total_bytes) {
  if (free_bytes == nullptr || total_bytes == nullptr) return usage_error("unipool: memory_info needs two outputs");
  DeviceGuard guard(device);
  if (!guard.ok()) return guard.status();
  size_t free_now = 0;
  size_t total = 0;
  const BackendStatus status = runtime_status(cudaMemGetInfo(&free_now, &total));
  if (status.is_ok()) {
    *free_bytes = free_now;
    *total_bytes = total;
  }
  return status;
}

}  // namespace unipool::backend::cuda

namespace unipool::backend::cuda {

CudaBackendBase::~CudaBackendBase() {
  for (size_t d = 0; d < copy_streams_.size(); ++d) {
    if (copy_streams_[d] == nullptr) continue;
    DeviceGuard guard(static_cast<int>(d));
    if (guard.ok()) (void)cudaStreamDestroy(copy_streams_[d]);
  }
}

BackendStatus CudaBackendBase::synchronize(int device) {
  DeviceGuard guard(device);
  if (!guard.ok()) return guard.status();
  return runtime_status(cudaDeviceSynchronize());
}

BackendStatus CudaBackendBase::ipc_export(int device, void* segment, uint64_t offset, uint64_t /*bytes*/,
                                          IpcHandle* out) {
  if (out == nullptr) return usage_error("unipool: ipc_export needs an output");
  DeviceGuard guard(device);
  if (!guard.ok()) return guard.status();
  cudaIpcMemHandle_t h;
  const BackendStatus status = runtime_status(cudaIpcGetMemHandle(&h, segment));
  if (!status.is_ok()) return status;
  out->bytes.assign(1, kCudaIpcHandle);
  out->bytes.append(reinterpret_cast<const char*>(&h), sizeof h);
  out->offset = offset;  // the whole segment is shared
  return status;
}

BackendStatus CudaBackendBase::ipc_open(int device, const IpcHandle& handle, void** base) {
  if (base == nullptr) return usage_error("unipool: ipc_open needs an output");
  cudaIpcMemHandle_t h;
  if (handle.bytes.size() != 1 + sizeof h || handle.bytes[0] != kCudaIpcHandle) {
    return usage_error(!handle.bytes.empty() && handle.bytes[0] == kVmmHandle
                           ? "unipool: the memory was shared from CUDA VMM mappings (backend cuda_vmm), which only "
                             "a cuda_vmm backend with VMM support opens"
                           : "unipool: not an IPC handle of a unipool device backend");
  }
  DeviceGuard guard(device);
  if (!guard.ok()) return guard.status();
  std::memcpy(&h, handle.bytes.data() + 1, sizeof h);
  return runtime_status(cudaIpcOpenMemHandle(base, h, cudaIpcMemLazyEnablePeerAccess));
}

BackendStatus CudaBackendBase::ipc_close(int device, void* base) {
  DeviceGuard guard(device);
  if (!guard.ok()) return guard.status();
  return runtime_status(cudaIpcCloseMemHandle(base));
}

// Copy mutex held, `device` current.
BackendStatus CudaBackendBase::copy_stream(int device, cudaStream_t* out) {
  if (static_cast<size_t>(device) >= copy_streams_.size()) copy_streams_.resize(static_cast<size_t>(device) + 1);
  cudaStream_t& stream = copy_streams_[static_cast<size_t>(device)];
  if (stream == nullptr) {
    if (BackendStatus s = runtime_status(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)); !s.is_ok()) {
      stream = nullptr;
      return s;
    }
  }
  *out = stream;
  return BackendStatus::success();
}

BackendStatus CudaBackendBase::copy(int device, const DeviceCopy* copies, size_t count, CopyDirection direction) {
  if (count != 0 && copies == nullptr) return usage_error("unipool: copy of a null batch");
  std::lock_guard lock(copy_mutex_);
  DeviceGuard guard(device);
  if (!guard.ok()) return guard.status();
  cudaStream_t stream = nullptr;
  if (BackendStatus s = copy_stream(device, &stream); !s.is_ok()) return s;
  const cudaMemcpyKind kind = direction == CopyDirection::to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice;
  BackendStatus status;
  for (size_t i = 0; i < count && status.is_ok(); ++i) {
    status = runtime_status(cudaMemcpyAsync(copies[i].dst, copies[i].src, copies[i].bytes, kind, stream));
  }
  // Even after a failed enqueue: what was queued must be done before the
  // caller touches (or frees) the buffers.
  const BackendStatus synced = runtime_status(cudaStreamSynchronize(stream));
  return status.is_ok() ? synced : status;
}

}  // namespace unipool::backend::cuda
