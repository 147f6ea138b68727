// unipool torch extension: cudagraph-tree checkpoints of graph pools
// (getCheckpointState / setCheckpointPoolState of UnipoolCudaAllocator).
//
// torch.compile(mode="reduce-overhead") records CUDA graphs into one private
// pool along a tree of paths (torch/_inductor/cudagraph_trees.py). After
// recording a graph it takes torch._C._cuda_getCheckpointState(device, pool);
// before recording a sibling branch it calls _cuda_setCheckpointPoolState,
// which puts the pool back in that state and hands the CheckpointDelta to
// torch's Python binding (torch/csrc/cuda/Module.cpp): every pointer in
// ptrs_freed may be the block of a stale storage whose deleter it removes;
// every DataPtr in dataptrs_allocd either becomes the data of a live
// storage rebuilt without a deleter (_construct_storage_from_data_pointer),
// so that storage frees the block when it dies, or is released without
// running its deleter, the block staying allocated for cudagraph trees to
// free with _cuda_cudaCachingAllocator_raw_delete.
//
// PyTorch's own allocator frees every block allocated in the pool and
// re-allocates every block of the checkpoint, so a block allocated both now
// and in the checkpoint is listed in both; DevicePool::restore keeps such a
// block in place, and this file lists it in both too.
#include <c10/util/Exception.h>

#include "cuda_allocator.hpp"

namespace unipool::torch_ext {

namespace cca = c10::cuda::CUDACachingAllocator;

namespace {

// What getCheckpointState hands torch: the pool's checkpoint and whose it is.
struct UnipoolCheckpointState final : cca::AllocatorState {
  c10::DeviceIndex device = 0;
  MempoolId_t pool{0, 0};
  DeviceCheckpoint checkpoint;
};

}  // namespace

std::shared_ptr<cca::AllocatorState> UnipoolCudaAllocator::getCheckpointState(c10::DeviceIndex device,
                                                                               MempoolId_t id) {
  std::lock_guard lock(mutex_);
  auto it = private_.find({device, id});
  TORCH_CHECK(it != private_.end() && it->second.pool != nullptr,
              "unipool CUDA allocator: getCheckpointState: could not find private pool (", id.first, ", ",
              id.second, ") on device ", static_cast<int>(device));
  auto state = std::make_shared<UnipoolCheckpointState>();
  state->device = device;
  state->pool = id;
  state->checkpoint = it->second.pool->checkpoint();
  return state;
}

cca::CheckpointDelta UnipoolCudaAllocator::setCheckpointPoolState(c10::DeviceIndex device,
                                                                  std::shared_ptr<cca::AllocatorState> pps) {
  auto state = std::dynamic_pointer_cast<UnipoolCheckpointState>(pps);
  TORCH_CHECK(state != nullptr,
              "unipool CUDA allocator: setCheckpointPoolState needs a state from this allocator's "
              "getCheckpointState");
  TORCH_CHECK(state->device == device, "unipool CUDA allocator: setCheckpointPoolState on device ",
              static_cast<int>(device), " with a checkpoint of device ", static_cast<int>(state->device));
  DeviceRestoreResult restored;
  {
    // Held across the restore: releasePool cannot drop the pool meanwhile.
    std::lock_guard lock(mutex_);
    auto it = private_.find({device, state->pool});
    TORCH_CHECK(it != private_.end() && it->second.pool != nullptr,
                "unipool CUDA allocator: setCheckpointPoolState: could not find private pool (", state->pool.first,
                ", ", state->pool.second, ") on device ", static_cast<int>(device), " (released since?)");
    try {
      restored = it->second.pool->restore(state->checkpoint);
    } catch (const DevicePoolError& e) {
      TORCH_CHECK(false, "unipool CUDA allocator: setCheckpointPoolState: ", e.what());
    }
  }
  cca::CheckpointDelta delta;
  const c10::Device dev(c10::kCUDA, device);
  delta.ptrs_freed = restored.freed;
  delta.ptrs_freed.insert(delta.ptrs_freed.end(), restored.kept.begin(), restored.kept.end());
  for (const auto* list : {&restored.allocated, &restored.kept}) {
    for (void* p : *list) delta.dataptrs_allocd.emplace_back(p, p, &delete_fn, dev);
  }
  return delta;
}

}  // namespace unipool::torch_ext
