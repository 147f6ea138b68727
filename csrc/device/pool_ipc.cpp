// unipool device pool: blocks shared with other processes of the host
// (CUDA IPC), and their blocks mapped here. What is shared is the
// backend's business (DeviceBackend::ipc_export): a whole cudaMalloc
// segment, or the VMM granules that hold the block.
#include <string>

#include "device/pool_impl.hpp"
#include "unipool/device_error.hpp"

namespace unipool {

DeviceBackend::IpcHandle DevicePool::ipc_export(const void* ptr) {
  Impl& p = *impl_;
  void* base = nullptr;
  uint64_t offset = 0;
  uint64_t size = 0;
  {
    std::lock_guard lock(p.mutex);
    const uint32_t id = p.live.find(reinterpret_cast<uint64_t>(ptr));
    if (id == device::kNoIndex) {
      throw DevicePoolError(Status::not_live, "unipool: ipc_export of a pointer that is not a live block's start");
    }
    const device::Block& b = p.blocks[id];
    const device::Arena& a = *p.arenas[b.arena];
    base = a.base;
    offset = b.address - reinterpret_cast<uint64_t>(a.base);
    size = b.size;
  }
  // The block stays live (the caller holds it) while the lock is released:
  // its segment and granules cannot go.
  DeviceBackend::IpcHandle h;
  const BackendStatus s = p.backend->ipc_export(p.device, base, offset, size, &h);
  if (!s.is_ok()) throw DevicePoolError(Status::backend_error, std::string("unipool: ipc_export: ") + s.message);
  return h;
}

namespace {

// The mapping's deleter closes it under the lock: another thread must not
// take the entry for a live mapping between this close and its removal.
std::shared_ptr<void> shared_mapping(void* base, const std::shared_ptr<DeviceBackend>& backend, int device,
                                     const std::shared_ptr<device::IpcMappings>& mappings, const std::string& handle) {
  return std::shared_ptr<void>(base, [backend, device, mappings, handle](void* at) {
    std::lock_guard lock(mappings->mutex);
    (void)backend->ipc_close(device, at);
    const auto it = mappings->open.find(handle);
    if (it != mappings->open.end() && it->second.expired()) mappings->open.erase(it);
  });
}

}  // namespace

std::shared_ptr<void> DevicePool::ipc_open(const std::string& handle) {
  Impl& p = *impl_;
  device::IpcMappings& m = *p.ipc_mappings;
  {
    std::lock_guard lock(m.mutex);
    if (const auto it = m.open.find(handle); it != m.open.end()) {
      if (std::shared_ptr<void> live = it->second.lock()) return live;
    }
  }
  // Opened without the lock (it may wait on the sending process), so two
  // threads may open one handle at once: the first to file it wins, and
  // the other closes its own (cudaIpc counts opens of one handle; VMM
  // imports are mappings of their own).
  void* base = nullptr;
  const BackendStatus s = p.backend->ipc_open(p.device, {handle}, &base);
  if (!s.is_ok()) throw DevicePoolError(Status::backend_error, std::string("unipool: ipc_open: ") + s.message);
  // Both made before the lock is taken, so they are destroyed after it is
  // released: the deleter takes it.
  std::shared_ptr<void> mapped = shared_mapping(base, p.backend, p.device, p.ipc_mappings, handle);
  std::shared_ptr<void> winner;
  std::lock_guard lock(m.mutex);
  if (const auto it = m.open.find(handle); it != m.open.end()) winner = it->second.lock();
  if (winner) return winner;  // `mapped` closes once the lock is released
  m.open[handle] = mapped;
  return mapped;
}

}  // namespace unipool
