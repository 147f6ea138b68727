// unipool kv shared: freeing after a fence, and handing blocks from one
// member to another.
#include <cstdio>

#include "kv/kv_state.hpp"
#include "kv/shared/shared_state.hpp"

namespace unipool {

using kv_shared::Lock;
namespace owner = kv_shared::owner;

namespace {

pid_t pid_of(const SharedKVBlockPool::Local& l, uint32_t member) noexcept { return l.header->members[member].pid; }

// Why block id cannot move (`who`: the pid the reason names, or 0); the
// journal entry is already undone.
Status refuse_move(SharedKVBlockPool::Local& l, long long id, const char* call, const char* what, pid_t who) noexcept {
  ++l.counters().misuse_errors;
  if (who) {
    kv_set_error("SharedKVBlockPool.%s: block %lld %s (pid %d); nothing was moved", call, id, what,
                 static_cast<int>(who));
  } else {
    kv_set_error("SharedKVBlockPool.%s: block %lld %s; nothing was moved", call, id, what);
  }
  return Status::not_live;
}

// A batch longer than the pool repeats an id (and would overrun the journal).
bool too_many(SharedKVBlockPool::Local& l, size_t n, const char* call) noexcept {
  if (n <= l.num_blocks()) return false;
  ++l.counters().misuse_errors;
  kv_set_error("SharedKVBlockPool.%s: %zu ids in a pool of %llu blocks: some repeat; nothing was moved", call, n,
               static_cast<unsigned long long>(l.num_blocks()));
  return true;
}

// Ids past the pool end are refused before the journal reads their owners.
template <class Id>
bool in_range(SharedKVBlockPool::Local& l, const Id* ids, size_t n, const char* call) noexcept {
  for (size_t i = 0; i < n; ++i) {
    if (static_cast<uint64_t>(ids[i]) < l.num_blocks()) continue;
    ++l.counters().misuse_errors;
    kv_set_error("SharedKVBlockPool.%s: block %lld is out of range (pool of %llu blocks); nothing was moved", call,
                 static_cast<long long>(ids[i]), static_cast<unsigned long long>(l.num_blocks()));
    return false;
  }
  return true;
}

template <class Id>
Status hand_over_ids(SharedKVBlockPool::Local& l, const Id* ids, size_t n, pid_t to) noexcept {
  if (!kv_shared::attached_here(l, "hand_over")) return Status::bad_argument;
  Lock lock(l);
  const kv_shared::Header& h = *l.header;
  uint32_t m = 0;
  // Another member of that pid (a process may attach twice).
  while (m < h.max_members &&
         !(h.members[m].state == kv_shared::MemberState::attached && h.members[m].pid == to && m != l.member)) {
    ++m;
  }
  if (m == h.max_members) {
    ++l.counters().misuse_errors;
    kv_set_error(
        "SharedKVBlockPool.hand_over: pid %d is not attached to the pool (other than as the caller); "
        "nothing was moved",
        static_cast<int>(to));
    return Status::bad_argument;
  }
  if (too_many(l, n, "hand_over") || !in_range(l, ids, n, "hand_over")) return Status::not_live;
  kv_shared::begin_undo(l, ids, n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t w = l.owners[static_cast<uint64_t>(ids[i])];
    const char* what = owner::is_free(w)              ? "is not allocated"
                       : owner::is_deferred(w)        ? "is freed (waiting on a fence)"
                       : owner::member(w) != l.member ? "is not the caller's"
                       : owner::in_transit(w)         ? "is already handed over, or repeated in the batch"
                                                      : nullptr;
    if (what) {
      const pid_t who = owner::is_free(w) || owner::is_deferred(w) ? 0
                        : owner::member(w) != l.member             ? pid_of(l, owner::member(w))
                                                                   : pid_of(l, owner::receiver(w));
      kv_shared::undo_journal(l);
      return refuse_move(l, static_cast<long long>(ids[i]), "hand_over", what, who);
    }
    l.owners[static_cast<uint64_t>(ids[i])] = owner::handed(w, m);
    if (i == n / 2) kv_shared::hook(kv_shared::HookPoint::mid_batch);
  }
  kv_shared::end_journal(l);
  return Status::ok;
}

template <class Id>
Status take_over_ids(SharedKVBlockPool::Local& l, const Id* ids, size_t n) noexcept {
  if (!kv_shared::attached_here(l, "take_over")) return Status::bad_argument;
  Lock lock(l);
  if (too_many(l, n, "take_over") || !in_range(l, ids, n, "take_over")) return Status::not_live;
  kv_shared::begin_undo(l, ids, n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t w = l.owners[static_cast<uint64_t>(ids[i])];
    if (owner::is_free(w) || owner::is_deferred(w) || !owner::in_transit(w) || owner::receiver(w) != l.member) {
      kv_shared::undo_journal(l);
      return refuse_move(l, static_cast<long long>(ids[i]), "take_over",
                         owner::is_free(w) ? "is not allocated (if its giver died, its blocks were freed)"
                                           : "is not handed to the caller, or repeated in the batch",
                         0);
    }
    l.owners[static_cast<uint64_t>(ids[i])] = owner::live(l.member);
    if (i == n / 2) kv_shared::hook(kv_shared::HookPoint::mid_batch);
  }
  kv_shared::end_journal(l);
  return Status::ok;
}

}  // namespace

Status SharedKVBlockPool::hand_over(const uint32_t* ids, size_t n, pid_t to) noexcept {
  return hand_over_ids(*local_, ids, n, to);
}
Status SharedKVBlockPool::hand_over(const int64_t* ids, size_t n, pid_t to) noexcept {
  return hand_over_ids(*local_, ids, n, to);
}
Status SharedKVBlockPool::take_over(const uint32_t* ids, size_t n) noexcept { return take_over_ids(*local_, ids, n); }
Status SharedKVBlockPool::take_over(const int64_t* ids, size_t n) noexcept { return take_over_ids(*local_, ids, n); }
std::vector<uint32_t> SharedKVBlockPool::handed_to_me() const {
  Local& l = *local_;
  std::vector<uint32_t> ids;
  Lock lock(l);
  for (uint64_t id = 0; id < l.num_blocks(); ++id) {
    const uint32_t w = l.owners[id];
    if (!owner::is_free(w) && owner::in_transit(w) && owner::receiver(w) == l.member)
      ids.push_back(static_cast<uint32_t>(id));
  }
  return ids;
}

}  // namespace unipool
