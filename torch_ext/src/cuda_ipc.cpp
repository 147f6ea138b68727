// unipool torch extension: CUDA IPC of blocks (what torch.multiprocessing
// uses to send CUDA tensors). The handle names the device and what the
// backend shares (DeviceBackend::ipc_export): the block's whole segment
// for cudaMalloc segments, the granules holding the block for CUDA VMM
// memory (expandable segments, and cuda_vmm's plain segments); the offset
// is the block's place in what is shared (DevicePool::ipc_export and
// ipc_open).
#include <string>

#include "cuda_allocator.hpp"
#include "unipool/device_error.hpp"

namespace unipool::torch_ext {
namespace {

constexpr char kPrefix[] = "unipool-ipc/2:";

}  // namespace

c10::cuda::CUDACachingAllocator::ShareableHandle UnipoolCudaAllocator::shareIpcHandle(void* ptr) {
  DevicePool* pool = owner_of(ptr, -1);
  TORCH_CHECK(pool != nullptr, "unipool CUDA allocator: shareIpcHandle of ", ptr, ", which is not a live block of it");
  DeviceBackend::IpcHandle h;
  try {
    h = pool->ipc_export(ptr);
  } catch (const DevicePoolError& e) {
    TORCH_CHECK(false, "unipool CUDA allocator: shareIpcHandle: ", e.what());
  }
  std::string handle(kPrefix);
  handle += static_cast<char>(pool->device());
  handle += h.bytes;
  return {static_cast<ptrdiff_t>(h.offset), handle};
}

// Every tensor pointing into one handle's memory shares one mapping, held
// by the device's pool until the last of them goes.
std::shared_ptr<void> UnipoolCudaAllocator::getIpcDevPtr(std::string handle) {
  constexpr size_t kPrefixBytes = sizeof kPrefix - 1;
  TORCH_CHECK(handle.size() > kPrefixBytes + 1 && handle.compare(0, kPrefixBytes, kPrefix) == 0,
              "unipool CUDA allocator: getIpcDevPtr: not a handle of unipool's CUDA allocator (the sending "
              "process must use it too)");
  const int device = static_cast<unsigned char>(handle[kPrefixBytes]);
  TORCH_CHECK(device < pools_->device_count(), "unipool CUDA allocator: getIpcDevPtr: device ", device,
              " does not exist here");
  try {
    return pools_->pool(device).ipc_open(handle.substr(kPrefixBytes + 1));
  } catch (const DevicePoolError& e) {
    TORCH_CHECK(false, "unipool CUDA allocator: getIpcDevPtr: ", e.what());
  }
}

}  // namespace unipool::torch_ext
