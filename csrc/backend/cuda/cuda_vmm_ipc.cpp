// unipool backend/cuda: CUDA VMM memory shared with other processes. A
// handle names this process's descriptor server and, per granule, the id
// of its exported descriptor; the opener fetches the descriptors, imports
// them (cuMemImportFromShareableHandle) and maps them in a reservation of
// its own. An imported handle holds the memory, so it outlives whatever the
// exporter unmaps, until the opener closes it.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "backend/cuda/cuda_status.hpp"
#include "backend/cuda/cuda_vmm_backend.hpp"
#include "backend/cuda/device_guard.hpp"
#include "backend/os/descriptor_server.hpp"

namespace unipool::backend::cuda {
namespace {

// After the kind byte: this, the server's name, then `count` ids.
struct VmmShare {
  uint64_t granularity;
  uint32_t count;
  uint32_t name_bytes;
};

constexpr uint32_t kMaxGranules = uint32_t{1} << 16;
constexpr uint64_t kMaxGranularity = uint64_t{1} << 40;  // so granularity * count cannot wrap

// A handle's contents.
struct Shared {
  uint64_t granularity = 0;
  std::string server;
  std::vector<uint64_t> ids;
};

// False if `b` (another process's bytes: anything) is not a VMM handle.
bool parse(const std::string& b, Shared* out) {
  VmmShare share{};
  if (b.size() < 1 + sizeof share) return false;
  std::memcpy(&share, b.data() + 1, sizeof share);
  const uint64_t g = share.granularity;
  if (share.count == 0 || share.count > kMaxGranules || g == 0 || g % 4096 != 0 || g > kMaxGranularity ||
      b.size() != 1 + sizeof share + uint64_t{share.name_bytes} + uint64_t{share.count} * sizeof(uint64_t)) {
    return false;
  }
  out->granularity = g;
  out->server = b.substr(1 + sizeof share, share.name_bytes);
  out->ids.resize(share.count);
  std::memcpy(out->ids.data(), b.data() + 1 + sizeof share + share.name_bytes, share.count * sizeof(uint64_t));
  return true;
}

}  // namespace

BackendStatus CudaVmmBackend::ipc_export(int device, void* segment, uint64_t offset, uint64_t bytes, IpcHandle* out) {
  if (!expandable_) return CudaBackendBase::ipc_export(device, segment, offset, bytes, out);
  if (out == nullptr) return usage_error("unipool cuda_vmm: ipc_export needs an output");
  std::lock_guard lock(mutex_);
  const auto at = reinterpret_cast<uintptr_t>(segment);
  auto it = reservations_.upper_bound(at);
  if (it == reservations_.begin() || at - std::prev(it)->first >= std::prev(it)->second.bytes) {
    return usage_error("unipool cuda_vmm: ipc_export of an address outside this backend's memory");
  }
  --it;
  Reservation& r = it->second;
  if (r.device != device) return usage_error("unipool cuda_vmm: ipc_export of another device's memory");
  if (!shareable_[static_cast<size_t>(device)]) {
    return usage_error(
        "unipool cuda_vmm: the driver cannot export this device's memory (no POSIX file descriptor "
        "handles); use backend=cuda_malloc to share it through cudaIpc");
  }
  // From here on, offsets are from the reservation's base.
  const uint64_t begin = at - it->first;
  const uint64_t g = r.granularity;
  if (bytes == 0 || offset > r.bytes - begin || bytes > r.bytes - begin - offset) {
    return usage_error("unipool cuda_vmm: ipc_export of a range outside the segment");
  }
  const uint64_t first = (begin + offset) / g;
  const uint64_t end = (begin + offset + bytes + g - 1) / g;
  if (end - first > kMaxGranules) return usage_error("unipool cuda_vmm: ipc_export of more than 65536 granules");
  for (uint64_t i = first; i < end; ++i) {
    if (!r.granules[i].mapped) return usage_error("unipool cuda_vmm: ipc_export of a range not (entirely) mapped");
  }
  forget_inherited_exports_locked();
  std::string server;
  std::string ids;
  for (uint64_t i = first; i < end; ++i) {
    if (BackendStatus s = export_granule_locked(r.granules[i], &server); !s.is_ok()) return s;
    ids.append(reinterpret_cast<const char*>(&r.granules[i].fd_id), sizeof(uint64_t));
  }
  const VmmShare share{g, static_cast<uint32_t>(end - first), static_cast<uint32_t>(server.size())};
  out->bytes.assign(1, kVmmHandle);
  out->bytes.append(reinterpret_cast<const char*>(&share), sizeof share);
  out->bytes += server;
  out->bytes += ids;
  out->offset = begin + offset - first * g;
  return BackendStatus::success();
}

// Once per granule: the descriptor server keeps the descriptor, lent to any
// process that asks, until the granule is unmapped (unexport_locked).
BackendStatus CudaVmmBackend::export_granule_locked(Granule& g, std::string* server) {
  if (g.fd_id != 0) {
    *server = server_;
    return BackendStatus::success();
  }
  int fd = -1;
  if (BackendStatus s =
          driver(api_.export_to_shareable_handle(&fd, g.handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
      !s.is_ok()) {
    return s;
  }
  if (BackendStatus s = os::publish_descriptor(fd, &g.fd_id, server); !s.is_ok()) return s;
  server_ = *server;
  return BackendStatus::success();
}

// A fork child's server has another name, or none yet: the ids the
// granules carry are its parent's.
void CudaVmmBackend::forget_inherited_exports_locked() {
  if (server_.empty() || server_ == os::descriptor_server_name()) return;
  for (auto& [base, r] : reservations_) {
    for (Granule& g : r.granules) g.fd_id = 0;
  }
  server_.clear();
}

void CudaVmmBackend::unexport_locked(Granule& g) noexcept {
  if (g.fd_id == 0) return;
  os::withdraw_descriptor(g.fd_id);
  g.fd_id = 0;
}

BackendStatus CudaVmmBackend::ipc_open(int device, const IpcHandle& handle, void** base) {
  if (handle.bytes.empty() || handle.bytes[0] != kVmmHandle) return CudaBackendBase::ipc_open(device, handle, base);
  if (base == nullptr) return usage_error("unipool cuda_vmm: ipc_open needs an output");
  *base = nullptr;
  if (BackendStatus status = usable(); !status.is_ok()) return status;
  Shared share;
  if (!parse(handle.bytes, &share)) return usage_error("unipool cuda_vmm: ipc_open of a malformed handle");
  Imported imported{device, share.granularity, {}};
  // A batch of descriptors at a time, each closed once imported, so this
  // process needs room for kMaxFetch of them, not one per granule.
  BackendStatus status;
  for (size_t at = 0; at < share.ids.size() && status.is_ok(); at += os::kMaxFetch) {
    int fds[os::kMaxFetch];
    const size_t n = std::min(os::kMaxFetch, share.ids.size() - at);
    status = os::fetch_descriptors(share.server, share.ids.data() + at, n, fds);
    if (!status.is_ok()) break;
    std::lock_guard lock(mutex_);
    DeviceGuard guard(device);
    if (!guard.ok()) status = guard.status();
    for (size_t i = 0; i < n; ++i) {
      CUmemGenericAllocationHandle h = 0;
      if (status.is_ok()) {
        status = driver(api_.import_from_shareable_handle(&h, reinterpret_cast<void*>(static_cast<intptr_t>(fds[i])),
                                                          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
      }
      if (status.is_ok()) imported.handles.push_back(h);
      close(fds[i]);  // the imported handle holds the memory
    }
  }
  std::lock_guard lock(mutex_);
  DeviceGuard guard(device);
  if (status.is_ok()) status = guard.ok() ? map_imported_locked(imported, base) : guard.status();
  if (!status.is_ok()) {
    for (const CUmemGenericAllocationHandle h : imported.handles) release_handle_locked(h);
  }
  return status;
}

// Reserves a range for the imported granules, maps them and lets the
// device use them; all or nothing (the caller releases the handles on
// failure).
BackendStatus CudaVmmBackend::map_imported_locked(Imported& imported, void** base) {
  const auto size = static_cast<size_t>(imported.granularity);
  const size_t count = imported.handles.size();
  CUdeviceptr ptr = 0;
  BackendStatus status = driver(api_.address_reserve(&ptr, size * count, size, 0, 0));
  if (!status.is_ok()) return status;
  size_t mapped = 0;
  while (status.is_ok() && mapped < count) {
    status = driver(api_.map(ptr + mapped * size, size, 0, imported.handles[mapped], 0));
    if (status.is_ok()) ++mapped;
  }
  if (status.is_ok()) status = allow_access_locked(imported.device, ptr, size * count);
  if (!status.is_ok()) {
    if (mapped != 0) (void)api_.unmap(ptr, size * mapped);
    (void)api_.address_free(ptr, size * count);
    return status;
  }
  imported_.emplace(static_cast<uintptr_t>(ptr), std::move(imported));
  *base = reinterpret_cast<void*>(ptr);
  return status;
}

// Unmapping first: if it fails, the mapping is whole and the caller may
// close it again. Then the handles and the range go, whatever happens.
BackendStatus CudaVmmBackend::close_imported_locked(uintptr_t base, const Imported& imported) {
  const auto bytes = static_cast<size_t>(imported.granularity * imported.handles.size());
  if (BackendStatus s = driver(api_.unmap(static_cast<CUdeviceptr>(base), bytes)); !s.is_ok()) return s;
  for (const CUmemGenericAllocationHandle h : imported.handles) release_handle_locked(h);
  (void)api_.address_free(static_cast<CUdeviceptr>(base), bytes);
  return BackendStatus::success();
}

BackendStatus CudaVmmBackend::ipc_close(int device, void* base) {
  {
    std::lock_guard lock(mutex_);
    const auto it = imported_.find(reinterpret_cast<uintptr_t>(base));
    if (it != imported_.end()) {
      if (it->second.device != device) return usage_error("unipool cuda_vmm: ipc_close on another device");
      DeviceGuard guard(device);
      if (!guard.ok()) return guard.status();
      const BackendStatus status = close_imported_locked(it->first, it->second);
      if (status.is_ok()) imported_.erase(it);
      return status;
    }
  }
  return CudaBackendBase::ipc_close(device, base);
}

}  // namespace unipool::backend::cuda
