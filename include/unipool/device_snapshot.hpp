// unipool: a picture of a device pool's segments and blocks, as a structure
// and as JSON in the shape of torch.cuda.memory._snapshot()["segments"].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "unipool/fence.hpp"

namespace unipool {

struct DeviceBlockInfo {
  enum State : uint8_t {
    active_allocated,     // handed out
    active_pending_free,  // freed, waiting for fences on other streams
    inactive,             // free
  };
  uint64_t address = 0;
  uint64_t size = 0;
  uint64_t requested_size = 0;  // 0 for an inactive block
  State state = inactive;
  StreamHandle stream = 0;      // the stream it was allocated on (active blocks)
};

struct DeviceSegmentInfo {
  int device = 0;
  uint64_t address = 0;
  uint64_t total_size = 0;
  StreamHandle stream = 0;      // the stream that owns the segment's free blocks
  bool small = false;           // segment_type "small" or "large"
  bool expandable = false;      // a mapped run of an expandable segment
  std::string tag = "default";  // of every block in it (device_tags.hpp)
  uint64_t allocated_size = 0;
  uint64_t active_size = 0;
  uint64_t requested_size = 0;
  std::vector<DeviceBlockInfo> blocks;  // address order; they tile the segment
};

struct DeviceSnapshot {
  std::vector<DeviceSegmentInfo> segments;  // by address
};

const char* to_string(DeviceBlockInfo::State state) noexcept;
// {"segments": [...], "device_traces": [[] per device]}; addresses as integers.
std::string to_json(const DeviceSnapshot& snapshot, int device_count = 1);

}  // namespace unipool
