// unipool: a checkpoint of a device pool, which blocks were allocated where,
// and what putting the pool back in that state changed.
//
// PyTorch's cudagraph trees (torch.compile(mode="reduce-overhead")) record
// CUDA graphs into one private pool along a tree of paths. After recording a
// graph they checkpoint the pool; before recording a sibling branch they put
// the pool back in the state it had after the parent, because replays do not
// go through the allocator and the parent's live outputs must keep their
// addresses. DevicePool::checkpoint() and DevicePool::restore() are that pair
// (docs/device_pool.md, "Checkpoints").
#pragma once

#include <cstdint>
#include <vector>

#include "unipool/fence.hpp"

namespace unipool {

// One allocated block: where, how big, for which stream.
struct DeviceCheckpointBlock {
  uint64_t address = 0;
  uint64_t size = 0;       // extent (512-rounded, or the whole never-split segment)
  uint64_t requested = 0;  // what the caller asked for
  StreamHandle stream = 0;                  // allocated on
  std::vector<StreamHandle> other_streams;  // given to record_stream
};

// A plain segment, or the reserved range of an expandable segment, with the
// blocks allocated in it (address order).
struct DeviceCheckpointSegment {
  uint64_t address = 0;
  uint64_t size = 0;  // plain: the segment; expandable: the whole reservation
  bool expandable = false;
  bool small = false;
  std::vector<DeviceCheckpointBlock> blocks;
};

struct DeviceCheckpoint {
  int device = -1;
  uint64_t pool = 0;  // the pool it was taken of; restore() refuses any other
  std::vector<DeviceCheckpointSegment> segments;  // by address

  uint64_t allocated_blocks() const noexcept {
    uint64_t n = 0;
    for (const DeviceCheckpointSegment& s : segments) n += s.blocks.size();
    return n;
  }
  uint64_t allocated_bytes() const noexcept {
    uint64_t n = 0;
    for (const DeviceCheckpointSegment& s : segments) {
      for (const DeviceCheckpointBlock& b : s.blocks) n += b.size;
    }
    return n;
  }
};

// What restore() did. A block live before and after at the same address,
// size, stream and requested size is kept as it is; every other block live
// before was freed, and every other block of the checkpoint was allocated
// again at its address. PyTorch's CheckpointDelta counts a kept block both
// as freed and as allocated (its allocator frees and re-allocates it).
struct DeviceRestoreResult {
  std::vector<void*> freed;
  std::vector<void*> allocated;
  std::vector<void*> kept;
};

}  // namespace unipool
