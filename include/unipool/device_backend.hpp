// unipool: where device memory comes from.
//
// The device pool never calls CUDA itself: it asks a DeviceBackend for
// segments and fences. Backends (csrc/backend/): "cuda_malloc" (cudaMalloc /
// cudaFree), "cuda_vmm" (one reserved virtual range per device, physical
// granules mapped with cuMemCreate/cuMemMap as the pool grows), "nccl"
// (ncclMemAlloc / ncclMemFree) and "sim" (a simulated device on the CPU whose
// address space is PROT_NONE, so host code touching "device" memory faults).
// A runtime may implement its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "unipool/fence.hpp"

namespace unipool {

// What a backend call did. `native` is the CUDA / driver / NCCL error code and
// `message` the library's static text for it (cudaGetErrorString and friends).
struct BackendStatus {
  enum Code : uint8_t { ok, out_of_memory, error };
  Code code = ok;
  int native = 0;
  const char* message = "";

  bool is_ok() const noexcept { return code == ok; }
  static BackendStatus success() noexcept { return {}; }
};

enum class CopyDirection : uint8_t { to_host, to_device };

// One copy of a batch: `bytes` from `src` to `dst`.
struct DeviceCopy {
  void* dst = nullptr;
  const void* src = nullptr;
  uint64_t bytes = 0;
};

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;

  virtual const char* name() const noexcept = 0;
  virtual int device_count() = 0;
  // Free and total bytes of the device, as the driver reports them.
  virtual BackendStatus memory_info(int device, uint64_t* free_bytes, uint64_t* total_bytes) = 0;

  // Plain segments: one backend allocation each.
  virtual BackendStatus allocate(int device, uint64_t bytes, void** out) = 0;
  virtual BackendStatus deallocate(int device, void* ptr, uint64_t bytes) = 0;

  // Expandable segments: reserve a virtual range once, then map and unmap
  // physical memory inside it in multiples of granularity(). Backends without
  // virtual memory management keep these defaults and the pool falls back to
  // plain segments.
  virtual bool supports_expandable() const noexcept { return false; }
  virtual uint64_t granularity(int /*device*/) { return uint64_t{2} << 20; }
  virtual BackendStatus reserve(int device, uint64_t bytes, void** base);
  virtual BackendStatus map(int device, void* base, uint64_t offset, uint64_t bytes);
  virtual BackendStatus unmap(int device, void* base, uint64_t offset, uint64_t bytes);
  virtual BackendStatus unreserve(int device, void* base, uint64_t bytes);

  // Sleep (DevicePool::sleep): a backend that returns true lets unmap() and
  // map() work on plain segments too (base: the segment's address), so that
  // memory can be given back and taken again at the very same addresses.
  // cudaMalloc cannot do that; the CUDA VMM API can.
  virtual bool supports_sleep() const noexcept { return false; }
  // Returns once all work queued on `device` is done (cudaDeviceSynchronize).
  virtual BackendStatus synchronize(int device);
  // Copies between device and host memory in one batch on the backend's own
  // copy stream, and returns once every copy is done. All or nothing is not
  // promised: on failure the destinations' contents are undefined.
  virtual BackendStatus copy(int device, const DeviceCopy* copies, size_t count, CopyDirection direction);

  // Sharing device memory with other processes of this host (what
  // torch.multiprocessing uses). ipc_export shares at least
  // [segment + offset, + bytes), where `segment` is a plain segment's base
  // (or, with CUDA VMM, any address of a segment or reservation): the
  // handle's bytes go to another process, where ipc_open maps the shared
  // range at an address of its own, until ipc_close(that address); the
  // requested range starts `offset` bytes into that mapping (IpcHandle::
  // offset, for the exporter to send along). cudaMalloc segments are shared
  // whole (cudaIpc; the exporter must keep the segment allocated while any
  // process has it open). CUDA VMM memory is shared granule by granule
  // (cuMemExportToShareableHandle), and an opened mapping keeps its memory
  // alive whatever the exporter does. Backends without it ("sim") refuse.
  struct IpcHandle {
    std::string bytes;
    uint64_t offset = 0;
  };
  virtual BackendStatus ipc_export(int device, void* segment, uint64_t offset, uint64_t bytes, IpcHandle* out);
  virtual BackendStatus ipc_open(int device, const IpcHandle& handle, void** base);
  virtual BackendStatus ipc_close(int device, void* base);

  // Fences on this backend's streams (CUDA events; manual ones on "sim").
  virtual FenceSource& fences() = 0;
};

}  // namespace unipool
