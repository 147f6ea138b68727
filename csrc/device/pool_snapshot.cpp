// unipool device pool: the snapshot, segment by segment. A plain segment is
// one entry; an expandable arena one entry per run of mapped granules.
#include <algorithm>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include "device/pool_impl.hpp"

namespace unipool {

namespace {

using BlocksAt = std::map<uint64_t, const device::Block*>;  // offset -> block, of one arena
using Extent = std::pair<uint64_t, uint64_t>;               // [begin, end) offsets

// The segments of an arena: the whole plain segment (none while it sleeps),
// or each run of mapped granules of an expandable one.
std::vector<Extent> extents_of(const device::Arena& a) {
  std::vector<Extent> extents;
  if (!a.expandable) {
    if (!a.plain_asleep) extents.emplace_back(0, a.size);
    return extents;
  }
  a.mapped_runs(extents);
  for (Extent& e : extents) e = Extent{e.first * a.granule, e.second * a.granule};
  return extents;
}

// The block a used range is: allocated or pending free, by its block record.
void describe_used(const device::Arena& a, const BlocksAt& named, const RangeInfo& r, DeviceBlockInfo* info) {
  const auto it = named.find(r.offset);
  if (it != named.end()) {
    const device::Block& b = *it->second;
    info->state = b.freed ? DeviceBlockInfo::active_pending_free : DeviceBlockInfo::active_allocated;
    info->requested_size = b.requested;
    info->stream = b.stream;
  } else {
    // Carved by a thread still mapping its granules: about to be handed out.
    info->state = DeviceBlockInfo::active_allocated;
    info->stream = a.owner->stream;
  }
}

// Fills `seg` with the ranges that overlap [begin, end), clipped to it;
// *next is the first range that may (ranges are in address order).
void add_blocks(const device::Arena& a, const BlocksAt& named, const std::vector<RangeInfo>& ranges,
                const Extent& extent, size_t* next, DeviceSegmentInfo* seg) {
  const auto [begin, end] = extent;
  while (*next < ranges.size() && ranges[*next].offset + ranges[*next].size <= begin) ++*next;
  for (size_t i = *next; i < ranges.size() && ranges[i].offset < end; ++i) {
    const RangeInfo& r = ranges[i];
    const uint64_t lo = std::max(r.offset, begin), hi = std::min(r.offset + r.size, end);
    DeviceBlockInfo info;
    info.address = reinterpret_cast<uint64_t>(a.base) + lo;
    info.size = hi - lo;
    if (r.used) {
      describe_used(a, named, r, &info);
      seg->active_size += info.size;
      seg->requested_size += info.requested_size;
      if (info.state == DeviceBlockInfo::active_allocated) seg->allocated_size += info.size;
    }
    seg->blocks.push_back(info);
  }
}

}  // namespace

DeviceSnapshot DevicePool::Impl::snapshot() const {
  std::lock_guard lock(mutex);
  // Blocks by arena and offset, to name the used ranges.
  std::unordered_map<uint32_t, BlocksAt> by_arena;
  blocks.for_each([&](uint32_t, const device::Block& b) { by_arena[b.arena][b.offset] = &b; });

  DeviceSnapshot snap;
  for (const auto& slot : arenas) {
    if (slot == nullptr) continue;
    const Arena& a = *slot;
    std::vector<RangeInfo> ranges;
    a.ranges.for_each_range([&](const RangeInfo& r) { ranges.push_back(r); });
    size_t next_range = 0;
    for (const Extent& extent : extents_of(a)) {
      DeviceSegmentInfo seg;
      seg.device = device;
      seg.address = reinterpret_cast<uint64_t>(a.base) + extent.first;
      seg.total_size = extent.second - extent.first;
      seg.stream = a.owner->stream;
      seg.small = a.kind == Kind::small;
      seg.expandable = a.expandable;
      seg.tag = device_tag_name(a.tag);
      add_blocks(a, by_arena[a.id], ranges, extent, &next_range, &seg);
      snap.segments.push_back(std::move(seg));
    }
  }
  std::sort(snap.segments.begin(), snap.segments.end(),
            [](const DeviceSegmentInfo& x, const DeviceSegmentInfo& y) { return x.address < y.address; });
  return snap;
}

}  // namespace unipool
