// unipool device pool: validate(), every invariant, recounted from scratch.
// Slow on purpose; tests call it after every step.
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "device/pool_impl.hpp"

namespace unipool {

namespace {

bool fail(std::string* why, const std::string& message) {
  if (why != nullptr) *why = "unipool device pool: " + message;
  return false;
}

struct Recount {
  int64_t allocation = 0, active = 0, segment = 0, inactive_split = 0;
  int64_t allocated_bytes = 0, reserved_bytes = 0, active_bytes = 0, inactive_split_bytes = 0,
          requested_bytes = 0;
};

bool check(std::string* why, const char* name, const DeviceStatArray& s, const Recount (&r)[3],
           int64_t Recount::*field) {
  for (size_t i = 0; i < 3; ++i) {
    const int64_t expect = r[i].*field;
    if (s[i].current != expect) {
      return fail(why, std::string("stat ") + name + "[" + std::to_string(i) + "].current is " +
                           std::to_string(s[i].current) + ", recount says " + std::to_string(expect));
    }
    if (s[i].peak < s[i].current) return fail(why, std::string("stat ") + name + " peak below current");
  }
  return true;
}

}  // namespace

// Sleep's books: the mask says which tags are not awake; only those have
// staged contents, each of a live block of the tag, of at most its size.
bool DevicePool::Impl::validate_tags(std::string* why) const {
  for (unsigned t = 0; t < kMaxDeviceTags; ++t) {
    const device::TagState& s = tags[t];
    if (((asleep_mask >> t & 1) != 0) != (s.phase != device::TagPhase::awake)) {
      return fail(why, "the asleep mask disagrees with tag " + std::to_string(t) + "'s phase");
    }
    if (s.phase == device::TagPhase::awake && !s.staged.empty()) return fail(why, "an awake tag has staged contents");
    for (const auto& [address, staged] : s.staged) {
      const uint32_t id = live.find(address);
      if (id == device::kNoIndex || arenas[blocks[id].arena]->tag != t || staged.bytes > blocks[id].size ||
          staged.host == nullptr) {
        return fail(why, "staged contents of tag " + std::to_string(t) + " name no live block of it");
      }
    }
  }
  return true;
}

bool DevicePool::Impl::validate(std::string* why) const {
  std::lock_guard lock(mutex);
  Recount count[3];  // all, small, large
  auto add = [&](Kind k, int64_t Recount::*field, int64_t n) {
    count[0].*field += n;
    count[device::stat_index(k)].*field += n;
  };

  // Arenas: range allocators valid, owned by their stream, expandable ends sane.
  std::unordered_map<uint32_t, uint64_t> used_ranges;  // arena -> used ranges
  for (uint32_t id = 0; id < arenas.size(); ++id) {
    const auto& slot = arenas[id];
    if (slot == nullptr) continue;
    const Arena& a = *slot;
    if (a.id != id) return fail(why, "arena id mismatch at " + std::to_string(id));
    std::string inner;
    if (!a.ranges.validate(&inner)) return fail(why, "arena " + std::to_string(id) + ": " + inner);
    const auto k = static_cast<size_t>(a.kind);
    const StreamState& s = *a.owner;
    if (a.expandable) {
      if (s.expandable[k] != id) return fail(why, "expandable arena not filed under its stream");
      uint64_t mapped = 0, runs = 0;
      for (uint64_t g = 0; g < a.granule_mapped.size(); ++g) {
        if (!a.is_mapped(g)) continue;
        mapped += a.granule;
        if (g == 0 || !a.is_mapped(g - 1)) ++runs;
      }
      if (mapped != a.mapped || runs != a.runs) return fail(why, "expandable arena's mapped bytes or runs miscounted");
      for (const auto& [first, last] : a.slept) {
        for (uint64_t g = first; g < last; ++g) {
          if (a.is_mapped(g)) return fail(why, "a run sleep gave back is mapped");
        }
      }
      // While its tag sleeps, blocks lie on memory given back; awake, never.
      bool unbacked = false;
      a.ranges.for_each_range([&](const RangeInfo& r) {
        if (r.used && !a.range_mapped(r.offset, r.size)) unbacked = true;
      });
      if (unbacked && a.unpublished == 0 && tag_awake(a.tag))
        return fail(why, "a used range lies on unmapped granules");
    } else {
      if (std::find(s.arenas[k].begin(), s.arenas[k].end(), id) == s.arenas[k].end()) {
        return fail(why, "segment not filed under its owner stream");
      }
    }
    if (tag_awake(a.tag) && a.has_slept()) return fail(why, "an awake tag's arena has memory sleep gave back");
    if (a.owner->tag != a.tag) return fail(why, "arena filed under another tag's stream state");
    add(a.kind, &Recount::segment, a.expandable ? static_cast<int64_t>(a.runs) : (a.plain_asleep ? 0 : 1));
    add(a.kind, &Recount::reserved_bytes, static_cast<int64_t>(a.reserved_bytes()));
    add(a.kind, &Recount::inactive_split, a.split_count());
    add(a.kind, &Recount::inactive_split_bytes, a.split_bytes());
    used_ranges[id] = a.ranges.live_allocations() - a.unpublished;
  }
  // Stream lists name live arenas of their kind, once.
  for (const auto& [key, s] : streams) {
    if (s.stream != key.stream || s.tag != key.tag) return fail(why, "stream state keyed wrongly");
    for (size_t k = 0; k < 2; ++k) {
      std::unordered_set<uint32_t> seen;
      for (const uint32_t id : s.arenas[k]) {
        if (id >= arenas.size() || arenas[id] == nullptr || arenas[id]->owner != &s ||
            static_cast<size_t>(arenas[id]->kind) != k || arenas[id]->expandable || !seen.insert(id).second) {
          return fail(why, "a stream's segment list is inconsistent");
        }
      }
      if (s.hint[k] != StreamState::kNoArena && !seen.count(s.hint[k])) return fail(why, "stale segment hint");
      // The fit index files each segment once, in the bucket of its largest free range.
      uint64_t filed = 0;
      for (uint32_t b = 0; b < 64; ++b) {
        const bool empty = s.fit[k].head[b] == device::FitIndex::kEmpty;
        if (empty == ((s.fit[k].mask >> b) & 1)) return fail(why, "fit index mask disagrees with its buckets");
        uint32_t prev = device::FitIndex::kEmpty;
        for (uint32_t id = s.fit[k].head[b]; id != device::FitIndex::kEmpty; id = arenas[id]->fit_next) {
          const Arena& a = *arenas[id];
          if (!seen.count(id) || a.fit_bucket != b || a.fit_prev != prev || a.largest != a.ranges.largest_free() ||
              a.largest >> b != 1 || ++filed > seen.size()) {
            return fail(why, "fit index is inconsistent");
          }
          prev = id;
        }
      }
      for (const uint32_t id : s.arenas[k]) {
        if ((arenas[id]->ranges.largest_free() != 0) != (arenas[id]->fit_bucket != Arena::kNotFiled)) {
          return fail(why, "a segment with free space is missing from the fit index");
        }
      }
      for (size_t i = 1; i < s.arenas[k].size(); ++i) {
        if (arenas[s.arenas[k][i - 1]]->size > arenas[s.arenas[k][i]]->size) {
          return fail(why, "a stream's segment list is not sorted by size");
        }
      }
    }
  }

  // Blocks: each one a live range of its arena, of its size; table and
  // pending queues agree with the block states.
  std::unordered_map<uint32_t, uint64_t> fences_of;  // block -> pending entries
  for (const device::PendingQueue& q : pending.queues()) {
    for (const device::PendingFree& e : q.entries) ++fences_of[e.block];
  }
  uint64_t allocated_blocks = 0;
  std::string problem;
  blocks.for_each([&](uint32_t id, const device::Block& b) {
    if (!problem.empty()) return;
    if (b.arena >= arenas.size() || arenas[b.arena] == nullptr) {
      problem = "block in a released arena";
      return;
    }
    const Arena& a = *arenas[b.arena];
    if (a.ranges.allocation_size(b.offset, b.handle) != b.size) problem = "block is not a live range of its size";
    if (b.address != reinterpret_cast<uint64_t>(a.base) + b.offset) problem = "block address mismatch";
    if (b.requested == 0 || b.requested > b.size) problem = "block requested size out of range";
    if (b.freed) {
      if (b.pending == 0 || fences_of[id] != b.pending) problem = "pending block and its fences disagree";
      if (live.find(b.address) != device::kNoIndex) problem = "freed block still in the address table";
    } else {
      if (b.pending != 0 || fences_of.count(id)) problem = "allocated block has pending fences";
      if (live.find(b.address) != id) problem = "allocated block missing from the address table";
      ++allocated_blocks;
      add(a.kind, &Recount::allocation, 1);
      add(a.kind, &Recount::allocated_bytes, static_cast<int64_t>(b.size));
    }
    add(a.kind, &Recount::active, 1);
    add(a.kind, &Recount::active_bytes, static_cast<int64_t>(b.size));
    add(a.kind, &Recount::requested_bytes, static_cast<int64_t>(b.requested));
    --used_ranges[b.arena];
  });
  if (!problem.empty()) return fail(why, problem);
  for (const auto& [id, left] : used_ranges) {
    if (left != 0) return fail(why, "arena " + std::to_string(id) + " has used ranges no block owns");
  }
  if (live.size() != allocated_blocks) return fail(why, "address table size differs from allocated blocks");
  if (!validate_tags(why)) return false;
  uint64_t pending_entries = 0;
  for (const device::PendingQueue& q : pending.queues()) pending_entries += q.entries.size();
  if (pending_entries != pending.total()) return fail(why, "pending count differs from the queues");

  // Stats against the recount.
  return check(why, "allocation", stats.allocation, count, &Recount::allocation) &&
         check(why, "segment", stats.segment, count, &Recount::segment) &&
         check(why, "active", stats.active, count, &Recount::active) &&
         check(why, "inactive_split", stats.inactive_split, count, &Recount::inactive_split) &&
         check(why, "allocated_bytes", stats.allocated_bytes, count, &Recount::allocated_bytes) &&
         check(why, "reserved_bytes", stats.reserved_bytes, count, &Recount::reserved_bytes) &&
         check(why, "active_bytes", stats.active_bytes, count, &Recount::active_bytes) &&
         check(why, "inactive_split_bytes", stats.inactive_split_bytes, count, &Recount::inactive_split_bytes) &&
         check(why, "requested_bytes", stats.requested_bytes, count, &Recount::requested_bytes);
}

}  // namespace unipool
