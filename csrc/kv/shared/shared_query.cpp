// unipool kv shared: what the pool holds, and reclaiming dead members.
#include <cerrno>

#include "kv/kv_state.hpp"
#include "kv/shared/shared_members.hpp"
#include "kv/shared/shared_state.hpp"

namespace unipool {

using kv_shared::Lock;
namespace owner = kv_shared::owner;

size_t SharedKVBlockPool::free_blocks() const noexcept {
  Lock lock(*local_);
  return local_->index.free.count();
}

bool SharedKVBlockPool::is_live(uint64_t id) const noexcept {
  Lock lock(*local_);
  return id < num_blocks_ && ((local_->index.live[id / 64] >> (id % 64)) & 1);
}

pid_t SharedKVBlockPool::owner_of(uint64_t id) const noexcept {
  const Local& l = *local_;
  Lock lock(*local_);
  if (id >= num_blocks_ || owner::is_free(l.owners[id])) return 0;
  return l.header->members[owner::member(l.owners[id])].pid;
}

std::vector<pid_t> SharedKVBlockPool::member_pids() const {
  const kv_shared::Header& h = *local_->header;
  std::vector<pid_t> pids;
  Lock lock(*local_);
  for (uint32_t m = 0; m < h.max_members; ++m) {
    if (h.members[m].state == kv_shared::MemberState::attached) pids.push_back(h.members[m].pid);
  }
  return pids;
}

size_t SharedKVBlockPool::reclaim_dead() noexcept {
  if (!kv_shared::attached_here(*local_, "reclaim_dead")) return 0;
  Lock lock(*local_);
  return kv_shared::reclaim_dead_members(*local_);
}

// With SharedKVLifetime::creator: whether the creator is still attached
// and alive, checked now; a dead one is reclaimed, which closes the pool.
bool SharedKVBlockPool::closed() noexcept {
  kv_shared::Header& h = *local_->header;
  if (h.closed.load(std::memory_order_acquire)) return true;
  if (h.lifetime != static_cast<uint32_t>(SharedKVLifetime::creator)) return false;
  Lock lock(*local_);
  const kv_shared::Member& creator = h.members[h.creator];
  if (creator.state != kv_shared::MemberState::attached) {
    h.closed.store(1, std::memory_order_release);
  } else if (h.creator != local_->member && !kv_shared::member_alive(creator)) {
    kv_shared::reclaim_member(*local_, h.creator, /*died=*/true);
  }
  return h.closed.load(std::memory_order_acquire);
}

SharedKVBlockPoolStats SharedKVBlockPool::stats() const noexcept {
  const Local& l = *local_;
  const kv_shared::Header& h = *l.header;
  SharedKVBlockPoolStats st;
  Lock lock(*local_);
  const kv_shared::Counters& c = h.counters;
  st.num_blocks = num_blocks_;
  st.block_bytes = block_bytes_;
  st.stride = stride_;
  st.free_blocks = l.index.free.count();
  st.live_blocks = c.live;
  st.deferred_blocks = c.deferred;
  st.peak_live_blocks = c.peak_live;
  st.requested_bytes = block_bytes_ * num_blocks_;
  st.reserved_bytes = h.total_bytes;
  st.pinned_bytes = l.pinning.pinned_bytes();
  st.allocs = c.allocs;
  st.frees = c.frees;
  st.failed_allocs = c.failed_allocs;
  st.misuse_errors = c.misuse_errors;
  st.reclaimed_blocks = c.reclaimed;
  for (uint64_t id = 0; id < num_blocks_; ++id) {
    const uint32_t w = l.owners[id];
    st.owned_blocks += !owner::is_free(w) && owner::member(w) == l.member;
    st.transit_blocks += !owner::is_free(w) && owner::in_transit(w);
  }
  for (uint32_t m = 0; m < h.max_members; ++m) st.members += h.members[m].state == kv_shared::MemberState::attached;
  st.dead_members = h.dead_members;
  st.recoveries = h.recoveries;
  return st;
}

void SharedKVBlockPool::reset_peak_stats() noexcept {
  Lock lock(*local_);
  local_->counters().peak_live = local_->counters().live;
}

}  // namespace unipool
