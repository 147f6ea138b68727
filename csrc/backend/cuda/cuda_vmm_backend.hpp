// unipool backend/cuda: "cuda_vmm", expandable segments on the CUDA virtual
// memory management API. A segment is a reserved virtual range; the pool
// grows it by mapping physical memory one granule (one cuMemCreate handle)
// at a time, so any granule-aligned sub-range can be unmapped again and its
// memory returned to the device, without moving a byte. This is the
// mechanism of PyTorch's expandable_segments.
#pragma once

#include <cuda.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend_base.hpp"
#include "backend/cuda/cuda_driver_api.hpp"

namespace unipool::backend::cuda {

class CudaVmmBackend final : public CudaBackendBase {
 public:
  CudaVmmBackend();
  // Unmaps and frees whatever the pool left behind.
  ~CudaVmmBackend() override;

  const char* name() const noexcept override { return "cuda_vmm"; }
  // False when the driver API could not be resolved, there is no device,
  // or a device lacks VMM; the expandable calls then fail with that reason
  // and plain segments come from cudaMalloc, so "cuda_vmm" works (as
  // "cuda_malloc") wherever CUDA does.
  bool supports_expandable() const noexcept override { return expandable_; }
  // The driver's recommended granularity, at least 2 MiB and a multiple of
  // its minimum; DeviceBackend's default when not expandable; 0 if the
  // driver fails to answer.
  uint64_t granularity(int device) override;

  // A plain segment: a reservation of `bytes` rounded up to the
  // granularity, mapped whole; deallocate() unmaps and frees it. Without
  // VMM: cudaMalloc / cudaFree.
  BackendStatus allocate(int device, uint64_t bytes, void** out) override;
  BackendStatus deallocate(int device, void* ptr, uint64_t bytes) override;
  // With VMM (cuda_vmm_ipc.cpp): the granules holding the range, each
  // exported once as a POSIX descriptor (cuMemExportToShareableHandle) and
  // lent by this process's descriptor server until the granule is
  // unmapped. ipc_open fetches them, imports them and maps them in a
  // reservation of its own; the memory lives while any process maps it.
  // Without VMM, CudaBackendBase's cudaIpc; ipc_open and ipc_close take
  // either kind of handle.
  BackendStatus ipc_export(int device, void* segment, uint64_t offset, uint64_t bytes, IpcHandle* out) override;
  BackendStatus ipc_open(int device, const IpcHandle& handle, void** base) override;
  BackendStatus ipc_close(int device, void* base) override;

  // With VMM, plain segments are reservations too: sleep may unmap and map
  // them again in place.
  bool supports_sleep() const noexcept override { return expandable_; }

  // Sizes and offsets are multiples of granularity(device); `base` is an
  // expandable reservation or a plain segment. map() is all or
  // nothing. unmap() needs the whole range mapped; it does not synchronize:
  // the caller's fences must guarantee no pending work touches the range.
  // unreserve() needs the whole reservation unmapped.
  BackendStatus reserve(int device, uint64_t bytes, void** base) override;
  BackendStatus map(int device, void* base, uint64_t offset, uint64_t bytes) override;
  BackendStatus unmap(int device, void* base, uint64_t offset, uint64_t bytes) override;
  BackendStatus unreserve(int device, void* base, uint64_t bytes) override;

 private:
  struct Granule {
    CUmemGenericAllocationHandle handle = 0;
    bool mapped = false;
    uint64_t fd_id = 0;  // exported by ipc_export: its descriptor's id at the server, until unmapped
  };
  struct Reservation {
    int device;
    uint64_t bytes;
    uint64_t granularity;
    bool plain;  // made by allocate()
    std::vector<Granule> granules;
    uint64_t mapped = 0;  // granules mapped
  };
  using Reservations = std::map<uintptr_t, Reservation>;
  // Another process's memory, mapped by ipc_open: one handle per granule.
  struct Imported {
    int device;
    uint64_t granularity;
    std::vector<CUmemGenericAllocationHandle> handles;
  };

  // Plain segments without VMM.
  static BackendStatus runtime_allocate(int device, uint64_t bytes, void** out);
  static BackendStatus runtime_deallocate(int device, void* ptr);

  BackendStatus driver(CUresult result) const noexcept;
  BackendStatus usable() const noexcept;
  uint64_t granularity_locked(int device);
  // The reservation at `base` on `device` of the expected kind, or a reason.
  Reservations::iterator find_locked(int device, void* base, bool plain, BackendStatus* why);
  // Granule range [first, first + count) of `r` for an (offset, bytes) pair.
  static BackendStatus granule_range(const Reservation& r, uint64_t offset, uint64_t bytes, uint64_t* first,
                                     uint64_t* count) noexcept;
  BackendStatus reserve_locked(int device, uint64_t bytes, bool plain, void** base);
  BackendStatus map_locked(Reservation& r, uintptr_t base, uint64_t first, uint64_t count);
  BackendStatus unmap_locked(Reservation& r, uintptr_t base, uint64_t first, uint64_t count);
  using GranuleOp = BackendStatus (CudaVmmBackend::*)(Reservation&, uintptr_t, uint64_t, uint64_t);
  BackendStatus on_granules(int device, void* base, uint64_t offset, uint64_t bytes, GranuleOp op);
  BackendStatus unmap_all_locked(Reservation& r, uintptr_t base);
  BackendStatus unreserve_locked(Reservations::iterator it);
  void release_handle_locked(CUmemGenericAllocationHandle handle);
  // cuMemCreate of one granule, exportable when the device allows it.
  BackendStatus create_granule(int device, uint64_t bytes, CUmemGenericAllocationHandle* handle);
  // Closes a granule's exported descriptor, if any; the mutex is held.
  static void unexport_locked(Granule& g) noexcept;
  BackendStatus export_granule_locked(Granule& g, std::string* server);
  BackendStatus map_imported_locked(Imported& imported, void** base);
  BackendStatus close_imported_locked(uintptr_t base, const Imported& imported);
  // The device `device` reads and writes [at, at + bytes).
  BackendStatus allow_access_locked(int device, CUdeviceptr at, uint64_t bytes);
  // In a fork child: the granules' ids are the parent's server's (whose
  // descriptors the child closed at the fork); forget them.
  void forget_inherited_exports_locked();
  void retry_orphans_locked();

  DriverApi api_;
  bool expandable_ = false;
  const char* unsupported_ = "";  // why not expandable (interned): the text of every refusal

  std::mutex mutex_;  // one lock for the bookkeeping and the driver calls that change it
  Reservations reservations_;
  std::vector<uint64_t> granularity_;  // per device; 0 until asked
  std::vector<bool> shareable_;        // per device: POSIX descriptor handles work
  std::map<uintptr_t, Imported> imported_;  // by the address ipc_open returned
  std::string server_;                      // this process's descriptor server, once one was started
  // Unmapped handles whose cuMemRelease failed; retried by every later call.
  std::vector<CUmemGenericAllocationHandle> orphans_;
};

}  // namespace unipool::backend::cuda
