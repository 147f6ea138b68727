// unipool kv shared: one process's view of a SharedKVBlockPool.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "kv/kv_id_bitmap.hpp"
#include "kv/kv_pinning.hpp"
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
// Lock held. Rebuilds the bitmaps and the live, deferred and transit counts
// from the owners.
void rebuild_index(Local& l) noexcept;
// Lock held. Frees member m's blocks and the blocks handed to it, and
// empties its slot; returns the blocks freed.
uint64_t reclaim_member(Local& l, uint32_t m, bool died) noexcept;
// Lock held. Reclaims every member found dead; returns the blocks freed.
uint64_t reclaim_dead_members(Local& l) noexcept;

// Lock held: the journal (see shared_layout.hpp). begin_undo saves the
// owner words of ids[0, n) and the counters, end() closes the entry, undo()
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
  j.saved = l.header->counters;
  j.state.store(JournalState::undo, std::memory_order_release);
  // The owner writes that follow must not move above the state: a kill
  // between them would leave changes no entry describes.
  std::atomic_signal_fence(std::memory_order_seq_cst);
}
// Adds ids[0, n) to the open entry (a second step of the same call).
template <class Id>
void extend_undo(Local& l, const Id* ids, size_t n) noexcept {
  Journal& j = l.header->journal;
  const size_t at = j.n;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t id = static_cast<uint32_t>(ids[i]);
    l.journal_ids[at + i] = id;
    l.journal_previous[at + i] = l.owners[id];
  }
  std::atomic_signal_fence(std::memory_order_seq_cst);
  j.n = at + n;
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
