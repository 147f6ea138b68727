// unipool device pool: the snapshot, segment by segment. A plain segment is
// one entry; an expandable arena is one entry for its mapped part [0, mapped).
#include <algorithm>
#include <map>
#include <unordered_map>

#include "device/pool_impl.hpp"

namespace unipool {

DeviceSnapshot DevicePool::Impl::snapshot() const {
  std::lock_guard lock(mutex);
  // Blocks by arena and offset, to name the used ranges.
  std::unordered_map<uint32_t, std::map<uint64_t, const device::Block*>> by_arena;
  blocks.for_each([&](uint32_t, const device::Block& b) { by_arena[b.arena][b.offset] = &b; });

  DeviceSnapshot snap;
  for (const auto& slot : arenas) {
    if (slot == nullptr) continue;
    const Arena& a = *slot;
    const uint64_t end = a.expandable ? a.mapped : a.size;
    if (end == 0) continue;
    DeviceSegmentInfo seg;
    seg.device = device;
    seg.address = reinterpret_cast<uint64_t>(a.base);
    seg.total_size = end;
    seg.stream = a.owner->stream;
    seg.small = a.kind == Kind::small;
    seg.expandable = a.expandable;
    const auto& named = by_arena[a.id];
    a.ranges.for_each_range([&](const RangeInfo& r) {
      if (r.offset >= end) return;
      DeviceBlockInfo info;
      info.address = seg.address + r.offset;
      info.size = std::min(r.offset + r.size, end) - r.offset;
      if (r.used) {
        const auto it = named.find(r.offset);
        if (it != named.end()) {
          const device::Block& b = *it->second;
          info.state = b.freed ? DeviceBlockInfo::active_pending_free : DeviceBlockInfo::active_allocated;
          info.requested_size = b.requested;
          info.stream = b.stream;
        } else {
          // Carved by a thread still mapping its granules: about to be handed out.
          info.state = DeviceBlockInfo::active_allocated;
          info.stream = a.owner->stream;
        }
        seg.active_size += info.size;
        seg.requested_size += info.requested_size;
        if (info.state == DeviceBlockInfo::active_allocated) seg.allocated_size += info.size;
      }
      seg.blocks.push_back(info);
    });
    snap.segments.push_back(std::move(seg));
  }
  std::sort(snap.segments.begin(), snap.segments.end(),
            [](const DeviceSegmentInfo& x, const DeviceSegmentInfo& y) { return x.address < y.address; });
  return snap;
}

}  // namespace unipool
