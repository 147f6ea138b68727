// unipool torch extension: CUDA IPC of blocks (what torch.multiprocessing
// uses to send CUDA tensors). The handle names the device and what the
// backend shares (DeviceBackend::ipc_export): the block's whole segment
// for cudaMalloc segments, the granules holding the block for CUDA VMM
// memory (expandable segments, and cuda_vmm's plain segments); the offset
// is the block's place in what is shared. A receiving process opens each
// handle once and shares the mapping among the tensors that point into it;
// it is closed when the last goes.
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "cuda_allocator.hpp"

namespace unipool::torch_ext {
namespace {

constexpr char kPrefix[] = "unipool-ipc/2:";

struct Opened {
  std::mutex mutex;
  std::map<std::string, std::weak_ptr<void>> mappings;  // by handle
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
  uint64_t block_size = 0;
  for (const DeviceBlockInfo& b : found->blocks) {
    if (b.address == address) block_size = b.size;
  }
  DeviceBackend::IpcHandle h;
  const BackendStatus s = pool->backend().ipc_export(pool->device(), reinterpret_cast<void*>(found->address),
                                                     address - found->address, block_size, &h);
  TORCH_CHECK(s.is_ok(), "unipool CUDA allocator: shareIpcHandle: exporting the block failed: ", s.message);
  std::string handle(kPrefix);
  handle += static_cast<char>(pool->device());
  handle += h.bytes;
  return {static_cast<ptrdiff_t>(h.offset), handle};
}

std::shared_ptr<void> UnipoolCudaAllocator::getIpcDevPtr(std::string handle) {
  constexpr size_t kPrefixBytes = sizeof kPrefix - 1;
  TORCH_CHECK(handle.size() > kPrefixBytes + 1 && handle.compare(0, kPrefixBytes, kPrefix) == 0,
              "unipool CUDA allocator: getIpcDevPtr: not a handle of unipool's CUDA allocator (the sending "
              "process must use it too)");
  const int device = static_cast<unsigned char>(handle[kPrefixBytes]);
  TORCH_CHECK(device < pools_->device_count(), "unipool CUDA allocator: getIpcDevPtr: device ", device,
              " does not exist here");
  const DeviceBackend::IpcHandle h{handle.substr(kPrefixBytes + 1)};
  Opened& o = opened();
  std::lock_guard lock(o.mutex);
  if (const auto it = o.mappings.find(handle); it != o.mappings.end()) {
    if (std::shared_ptr<void> live = it->second.lock()) return live;
  }
  DeviceBackend* backend = &pools_->pool(device).backend();
  void* base = nullptr;
  const BackendStatus s = backend->ipc_open(device, h, &base);
  TORCH_CHECK(s.is_ok(), "unipool CUDA allocator: getIpcDevPtr: opening the shared memory failed: ", s.message);
  // Closed under the lock: another thread must not open the same handle
  // again between this close and the entry's removal.
  std::shared_ptr<void> mapped(base, [backend, device, handle](void* p) {
    Opened& owner = opened();
    std::lock_guard relock(owner.mutex);
    (void)backend->ipc_close(device, p);
    const auto it = owner.mappings.find(handle);
    if (it != owner.mappings.end() && it->second.expired()) owner.mappings.erase(it);
  });
  o.mappings[handle] = mapped;
  return mapped;
}

}  // namespace unipool::torch_ext
