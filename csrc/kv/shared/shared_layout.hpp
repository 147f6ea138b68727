// unipool kv shared: the layout of a SharedKVBlockPool's memfd.
//
//   [Header][owners: u32 per block][journal ids: u32 per block]
//   [journal previous owners: u32 per block][free bitmap][live bitmap]
//   [blocks, page-aligned]
//
// Ground truth is the owners array: one word per block, naming the member
// that owns it, whether it waits on a fence, and to whom it is handed. The
// bitmaps and the counts of live and deferred blocks are an index over it,
// kept in step by every call and rebuilt from it after a holder of the lock
// died (they may then be half updated). The owners and the cumulative
// counters change only under an open journal entry, so that a call cut
// short is finished (or, for a hand-over, undone) whole.
#pragma once

#include <pthread.h>
#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace unipool::kv_shared {

inline constexpr uint64_t kMagic = 0x314b56706c6e7575;  // "uunlpVK1"
// Raised whenever the layout below changes: a process of another version is
// refused at attach.
inline constexpr uint32_t kLayoutVersion = 1;
inline constexpr uint32_t kMaxMembers = 255;  // member + 1 fits a byte of an owner word

// An owner word: bits 0-7 the owning member + 1 (0: free), bits 8-15 the
// member + 1 it is handed to (0: not in transit), bit 16 set while it waits
// on its owner's fence.
namespace owner {
inline constexpr uint32_t kFree = 0;
inline constexpr uint32_t kDeferred = uint32_t{1} << 16;
inline uint32_t live(uint32_t member) noexcept { return member + 1; }
inline uint32_t member(uint32_t word) noexcept { return (word & 0xff) - 1; }  // word != kFree
inline bool is_free(uint32_t word) noexcept { return word == kFree; }
inline bool is_deferred(uint32_t word) noexcept { return word & kDeferred; }
inline bool in_transit(uint32_t word) noexcept { return (word >> 8) & 0xff; }
inline uint32_t receiver(uint32_t word) noexcept { return ((word >> 8) & 0xff) - 1; }  // in_transit(word)
inline uint32_t handed(uint32_t word, uint32_t to) noexcept { return (word & 0xff) | ((to + 1) << 8); }
}  // namespace owner

// Cumulative counters and the index's counts; a journal entry saves them.
struct Counters {
  uint64_t live = 0, deferred = 0, peak_live = 0;
  uint64_t allocs = 0, frees = 0, reclaimed = 0, failed_allocs = 0, misuse_errors = 0;
};

enum class MemberState : uint32_t { empty = 0, attached = 1 };

struct Member {
  MemberState state;
  pid_t pid;
  uint64_t start_time;  // /proc/<pid>/stat field 22: a reused pid has another
};

enum class JournalState : uint32_t { idle = 0, apply = 1, undo = 2, reclaim = 3 };

// Ids whose owner words all become `target`: the run [first, first + count),
// or the ids journal_ids[at, at + count).
struct JournalGroup {
  uint32_t target;
  uint32_t run;
  uint64_t first, count, at;
};

// The call in progress under the lock.
// apply: the owner words of the groups become their targets, in order, and
//   the counters become `counters`; recovery finishes it (every call that
//   hands out or takes back blocks).
// undo: ids journal_ids[0, n) had owner words journal_previous[0, n) and the
//   counters were `counters`; recovery puts them back (hand-overs, which
//   check each block as they move it).
// reclaim: member `member` is being reclaimed, n blocks, from `counters`;
//   recovery finishes it.
struct Journal {
  std::atomic<JournalState> state;
  uint32_t member;
  uint64_t n;
  uint32_t num_groups;
  JournalGroup groups[2];
  Counters counters;
};

struct alignas(64) Header {
  // Written once by the creator, read by attach before anything else.
  uint64_t magic;
  uint32_t version;
  uint32_t header_bytes;  // sizeof(Header): catches a build with another layout
  uint64_t block_bytes, stride, num_blocks, alignment;
  uint64_t owners_offset, journal_ids_offset, journal_previous_offset;
  uint64_t free_offset, live_offset, data_offset, total_bytes;
  uint32_t lifetime;  // SharedKVLifetime
  uint32_t max_members;
  uint32_t creator;  // the creator's member index
  std::atomic<uint32_t> closed;

  pthread_mutex_t lock;        // robust, process-shared: everything below
  pthread_mutex_t serve_lock;  // robust, held by the member serving attaches
  // The member holding `lock` (kMaxMembers: none, or one not yet joined),
  // so that a locker told the holder died knows whose death to wait for.
  uint32_t lock_holder;
  Journal journal;
  Counters counters;
  uint64_t dead_members, recoveries;
  Member members[kMaxMembers];
};

// Where each part lies for a pool of this shape.
struct Offsets {
  uint64_t owners, journal_ids, journal_previous, free, live, data, total;
};
Offsets layout_offsets(uint64_t num_blocks, uint64_t stride, uint64_t alignment, uint64_t page) noexcept;

}  // namespace unipool::kv_shared
