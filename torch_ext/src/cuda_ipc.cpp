// unipool torch extension: CUDA IPC of blocks (what torch.multiprocessing
// uses to send CUDA tensors). A block is shared as its segment: the handle
// names the device, the segment's IPC handle (DeviceBackend::ipc_export)
// and its size; the offset is the block's place in it. A receiving process
// opens each segment once and shares the mapping among the tensors that
// point into it; it is closed when the last goes.
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "cuda_allocator.hpp"

namespace unipool::torch_ext {
namespace {

constexpr char kPrefix[] = "unipool-ipc/1:";

struct Opened {
  std::mutex mutex;
  std::map<std::string, std::weak_ptr<void>> segments;  // by handle
};

Opened& opened() {
  static auto* o = new Opened;  // outlives every mapping, whatever the exit order
  return *o;
}

}  // namespace

c10::cuda::CUDACachingAllocator::ShareableHandle UnipoolCudaAllocator::shareIpcHandle(void* ptr) {
  DevicePool* pool = owner_of(ptr, -1);
  TORCH_CHECK(pool != nullptr, "unipool CUDA allocator: shareIpcHandle of ", ptr, ", which is not a live block of it");
  const auto address = reinterpret_cast<uint64_t>(ptr);
  const std::optional<DeviceSegmentInfo> found = segment_holding(*pool, address);
  TORCH_CHECK(found, "unipool CUDA allocator: shareIpcHandle: no segment holds ", ptr);
  const DeviceSegmentInfo& seg = *found;
  TORCH_CHECK(!seg.expandable,
              "unipool CUDA allocator: shareIpcHandle of a block of an expandable segment, "
              "which CUDA IPC of this build cannot share; use backend=cuda_malloc to send CUDA tensors to other "
              "processes");
  DeviceBackend::IpcHandle h;
  const BackendStatus s = pool->backend().ipc_export(pool->device(), reinterpret_cast<void*>(seg.address), &h);
  TORCH_CHECK(s.is_ok(), "unipool CUDA allocator: shareIpcHandle: exporting the segment failed: ", s.message);
  std::string handle(kPrefix);
  handle += static_cast<char>(pool->device());
  handle.append(reinterpret_cast<const char*>(h.bytes), sizeof h.bytes);
  handle.append(reinterpret_cast<const char*>(&seg.total_size), sizeof seg.total_size);
  return {static_cast<ptrdiff_t>(address - seg.address), handle};
}

std::shared_ptr<void> UnipoolCudaAllocator::getIpcDevPtr(std::string handle) {
  constexpr size_t kPrefixBytes = sizeof kPrefix - 1;
  const size_t size = kPrefixBytes + 1 + sizeof(DeviceBackend::IpcHandle) + sizeof(uint64_t);
  TORCH_CHECK(handle.size() == size && handle.compare(0, kPrefixBytes, kPrefix) == 0,
              "unipool CUDA allocator: getIpcDevPtr: not a handle of unipool's CUDA allocator (the sending "
              "process must use it too)");
  const int device = static_cast<unsigned char>(handle[kPrefixBytes]);
  TORCH_CHECK(device < pools_->device_count(), "unipool CUDA allocator: getIpcDevPtr: device ", device,
              " does not exist here");
  DeviceBackend::IpcHandle h;
  std::memcpy(h.bytes, handle.data() + kPrefixBytes + 1, sizeof h.bytes);
  Opened& o = opened();
  std::lock_guard lock(o.mutex);
  if (std::shared_ptr<void> live = o.segments[handle].lock()) return live;
  DeviceBackend* backend = &pools_->pool(device).backend();
  void* base = nullptr;
  const BackendStatus s = backend->ipc_open(device, h, &base);
  TORCH_CHECK(s.is_ok(), "unipool CUDA allocator: getIpcDevPtr: opening the segment failed: ", s.message);
  // Closed under the lock: another thread must not open the same handle
  // again between this close and the entry's removal.
  std::shared_ptr<void> mapped(base, [backend, device, handle](void* p) {
    Opened& owner = opened();
    std::lock_guard relock(owner.mutex);
    (void)backend->ipc_close(device, p);
    const auto it = owner.segments.find(handle);
    if (it != owner.segments.end() && it->second.expired()) owner.segments.erase(it);
  });
  o.segments[handle] = mapped;
  return mapped;
}

}  // namespace unipool::torch_ext
