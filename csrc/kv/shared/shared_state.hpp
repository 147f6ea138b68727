// unipool kv shared: one process's view of a SharedKVBlockPool.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "kv/kv_id_bitmap.hpp"
#include "kv/kv_pinning.hpp"
#include "kv/kv_simd.hpp"
#include "kv/shared/shared_layout.hpp"
#include "unipool/fence.hpp"
#include "unipool/shared_kv_block_pool.hpp"

namespace unipool::kv_shared {

class Server;  // shared_server.hpp

// The index over the owners, in the mapping, as kv_ids.hpp's State.
struct Index {
  struct Words {
    uint64_t* words = nullptr;
    uint64_t* data() const noexcept { return words; }
    uint64_t& operator[](size_t i) const noexcept { return words[i]; }
  };
  KVIdBitmap free;
  Words live;
};

// Bumped in every child of fork(): a pool attached before the fork is not
// the child's (its member is the parent).
uint64_t fork_generation() noexcept;
void watch_forks() noexcept;

}  // namespace unipool::kv_shared

namespace unipool {

struct SharedKVBlockPool::Local {
  // A batch freed with deallocate_after: its blocks stay this member's,
  // marked deferred, until the fence completes.
  struct Batch {
    FenceSource* source;
    FenceId fence;
    std::vector<uint32_t> ids;
  };

  int fd = -1;
  char* map = nullptr;
  uint64_t map_bytes = 0;
  kv_shared::Header* header = nullptr;
  uint32_t* owners = nullptr;
  uint32_t* journal_ids = nullptr;
  uint32_t* journal_previous = nullptr;
  kv_shared::Index index;
  uint32_t member = kv_shared::kMaxMembers;  // this process's slot; kMaxMembers until it joins
  uint64_t fork_generation = 0;
  std::vector<Batch> batches;  // under the pool's lock
  KVPinning pinning;
  std::unique_ptr<kv_shared::Server> server;

  ~Local();
  uint64_t num_blocks() const noexcept { return header->num_blocks; }
  kv_shared::Counters& counters() noexcept { return header->counters; }
};

namespace kv_shared {

using Local = SharedKVBlockPool::Local;

// A process forked from a member shares its mapping but is not the member:
// false, with last_error() naming `call`, in such a process.
bool attached_here(const Local& l, const char* call) noexcept;

// The pool's lock. Taking it after its holder died repairs the books first
// (recover()), so a holder of a Lock always sees them whole.
class Lock {
 public:
  explicit Lock(Local& l) noexcept;
  ~Lock();
  Lock(const Lock&) = delete;
  Lock& operator=(const Lock&) = delete;

 private:
  Local& l_;
};

// Lock held. Undoes or finishes the journal's entry, rebuilds the index from
// the owners and reclaims every dead member.
void recover(Local& l) noexcept;
// Lock held. Rebuilds the bitmaps and the live and deferred counts from the
// owners.
void rebuild_index(Local& l) noexcept;
// Lock held. Frees member m's blocks and the blocks handed to it, and
// empties its slot; returns the blocks freed.
uint64_t reclaim_member(Local& l, uint32_t m, bool died) noexcept;
// Lock held. Reclaims every member found dead; returns the blocks freed.
uint64_t reclaim_dead_members(Local& l) noexcept;

// Lock held: the journal (shared_layout.hpp).
//
// A call that hands out or takes back blocks adds one or two groups (ids and
// the owner word they all get), then commit() records the counters it ends
// with and applies the groups: owner words written only once the entry is
// whole, so a kill at any point leaves either nothing or an entry recovery
// can finish.
template <class Id>
void add_group(Local& l, const Id* ids, size_t n, uint32_t target) noexcept {
  Journal& j = l.header->journal;
  JournalGroup& g = j.groups[j.num_groups];
  const uint64_t at = j.num_groups ? j.groups[0].at + (j.groups[0].run ? 0 : j.groups[0].count) : 0;
  const bool run = n != 0 && static_cast<uint64_t>(ids[n - 1]) - static_cast<uint64_t>(ids[0]) == n - 1 &&
                   kv::all_in_run(ids, static_cast<uint64_t>(ids[0]), n);
  g = {target, run, n ? static_cast<uint64_t>(ids[0]) : 0, n, at};
  if (!run) {
    for (size_t i = 0; i < n; ++i) l.journal_ids[at + i] = static_cast<uint32_t>(ids[i]);
  }
  ++j.num_groups;
}
// Opens the entry with the counters the call ends with, applies it, closes it.
void commit(Local& l, const Counters& after) noexcept;
// Lock held: applies an open apply entry's groups (commit, and recovery).
void apply_groups(Local& l) noexcept;

// The undo entry of a hand-over: begin_undo saves the owner words of
// ids[0, n) and the counters, end_journal() closes the entry, undo_journal()
// puts them back (a refusal after begin, or recovery).
template <class Id>
void begin_undo(Local& l, const Id* ids, size_t n) noexcept {
  Journal& j = l.header->journal;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t id = static_cast<uint32_t>(ids[i]);
    l.journal_ids[i] = id;
    l.journal_previous[i] = l.owners[id];
  }
  j.n = n;
  j.counters = l.header->counters;
  j.state.store(JournalState::undo, std::memory_order_release);
  // The owner writes that follow must not move above the state: a kill
  // between them would leave changes no entry describes.
  std::atomic_signal_fence(std::memory_order_seq_cst);
}
void end_journal(Local& l) noexcept;
void undo_journal(Local& l) noexcept;

// A hook the tests set to stop or kill a process at a named point.
enum class HookPoint { locked, mid_batch, reclaiming };
using TestHook = void (*)(HookPoint);
void set_test_hook(TestHook hook) noexcept;
void hook(HookPoint at) noexcept;

}  // namespace kv_shared
}  // namespace unipool
