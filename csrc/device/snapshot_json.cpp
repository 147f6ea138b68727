// unipool device pool: the snapshot as JSON, written by hand (the core has no
// dependencies), in the shape of torch.cuda.memory._snapshot():
//   {"segments": [{"device", "address", "total_size", "stream", "segment_type",
//                  "allocated_size", "active_size", "requested_size",
//                  "is_expandable", "tag", "blocks": [{"address", "size",
//                  "requested_size", "state", "stream"}]}],
//    "device_traces": [[], ...]}
#include <string>

#include "unipool/device_snapshot.hpp"

namespace unipool {

const char* to_string(DeviceBlockInfo::State state) noexcept {
  switch (state) {
    case DeviceBlockInfo::active_allocated: return "active_allocated";
    case DeviceBlockInfo::active_pending_free: return "active_pending_free";
    case DeviceBlockInfo::inactive: return "inactive";
  }
  return "inactive";
}

namespace {

void field(std::string& out, const char* name, uint64_t value, bool comma = true) {
  out += '"';
  out += name;
  out += "\": ";
  out += std::to_string(value);
  if (comma) out += ", ";
}

}  // namespace

std::string to_json(const DeviceSnapshot& snapshot, int device_count) {
  std::string out = "{\"segments\": [";
  bool first_segment = true;
  for (const DeviceSegmentInfo& s : snapshot.segments) {
    if (!first_segment) out += ", ";
    first_segment = false;
    out += "{";
    field(out, "device", static_cast<uint64_t>(s.device));
    field(out, "address", s.address);
    field(out, "total_size", s.total_size);
    field(out, "stream", static_cast<uint64_t>(s.stream));
    out += "\"segment_type\": ";
    out += s.small ? "\"small\", " : "\"large\", ";
    field(out, "allocated_size", s.allocated_size);
    field(out, "active_size", s.active_size);
    field(out, "requested_size", s.requested_size);
    out += "\"is_expandable\": ";
    out += s.expandable ? "true, " : "false, ";
    out += "\"tag\": \"" + s.tag + "\", ";  // names are plain text: device_tag() takes no quotes apart
    out += "\"blocks\": [";
    bool first_block = true;
    for (const DeviceBlockInfo& b : s.blocks) {
      if (!first_block) out += ", ";
      first_block = false;
      out += "{";
      field(out, "address", b.address);
      field(out, "size", b.size);
      field(out, "requested_size", b.requested_size);
      out += "\"state\": \"";
      out += to_string(b.state);
      out += "\", ";
      field(out, "stream", static_cast<uint64_t>(b.stream), false);
      out += "}";
    }
    out += "]}";
  }
  out += "], \"device_traces\": [";
  for (int d = 0; d < device_count; ++d) out += d == 0 ? "[]" : ", []";
  out += "]}";
  return out;
}

}  // namespace unipool
