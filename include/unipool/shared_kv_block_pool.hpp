// unipool: a KV block pool shared by the processes of one node, which
// survives any of them being killed.
//
//   // the cache server, or the first worker:
//   auto pool = unipool::SharedKVBlockPool::create("node0-kv", {.block_bytes = 2 << 20, .num_blocks = 4096});
//   // every other worker of the node:
//   auto pool = unipool::SharedKVBlockPool::attach("node0-kv");
//   uint32_t ids[64];
//   pool->allocate(64, ids);             // as KVBlockPool: lowest free ids, batched
//   pool->hand_over(ids, 64, decode_pid);  // prefill worker -> decode worker
//   pool->take_over(ids, 64);            // in the decode worker: the blocks are its own now
//   pool->deallocate(ids, 64);
//
// The calls and their checks are KVBlockPool's (a double free, an id out of
// range or repeated is refused and changes nothing), and so are the ids and
// the block addresses: block(id) is base() + id * stride() in every process,
// each at its own base.
//
// Memory: one memfd holds the blocks and the pool's books. Nothing is named
// in a file system: the kernel frees the memory with the last mapping, so no
// file is left behind however the processes end. The creator (and, with
// SharedKVLifetime::while_attached, every member after it) passes the memfd
// to attaching processes over an abstract Unix socket named by the pool's
// name, to processes of its own user only. Each process maps it and pins its
// own mapping in pieces of max_pin bytes.
//
// Crash safety. Every block records the member that owns it. A process that
// dies, by SIGKILL or otherwise, never blocks the others:
// - the pool's lock is a robust process-shared mutex: the next locker is
//   told its holder died (the kernel's robust futex list) and repairs the
//   books: a call interrupted inside the lock is undone from a journal, and
//   the free and live bitmaps are rebuilt from the owners;
// - a member's death is found with a pidfd (and the process start time, so
//   a reused pid is not mistaken for the member): its blocks (live, waiting
//   on a fence, or handed over and not yet taken) are freed, and so are the
//   blocks handed to it that it had not taken. reclaim_dead() does this, and
//   so do attach(), an allocation that finds too few free blocks, and the
//   recovery after a holder's death.
// Detaching (the destructor) frees the caller's blocks the same way.
//
// Handing blocks over: hand_over() marks blocks the caller owns as in
// transit to another member; that member's take_over() makes them its own.
// Until then they belong to the giver, so a block is never owned by a
// process that does not know of it: if either side dies first, the blocks
// are freed, and take_over() refuses them.
//
// All members must share one pid namespace and one network namespace (the
// socket is abstract). A process forked from a member is not a member: its
// calls are refused; it attaches itself.
//
// Thread safety: every member is thread-safe except validate(), which wants
// no concurrent calls from this process (other processes may run).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "unipool/fence.hpp"
#include "unipool/host_config.hpp"
#include "unipool/kv_pool.hpp"
#include "unipool/status.hpp"

namespace unipool {

enum class SharedKVLifetime : uint8_t {
  // The pool lives while any process has it attached: when its creator
  // exits, another member goes on serving attaches.
  while_attached,
  // The pool closes when its creator exits (or dies): no more attaches, and
  // allocation is refused (frees are still taken). The memory goes with the
  // last member's mapping.
  creator,
};

struct SharedKVBlockPoolOptions {
  uint64_t block_bytes = 0;                     // bytes of one block (> 0)
  uint64_t num_blocks = 0;                      // blocks in the pool (1 .. 2^31)
  uint64_t alignment = 256;                     // blocks start at multiples of it (a power of two)
  HostPinned pinned = HostPinned::best_effort;  // the creator's own mapping
  int numa_node = -1;                           // bind the memory to this node; -1 = no binding
  uint64_t max_pin = uint64_t{16} << 30;        // largest single pinning registration
  SharedKVLifetime lifetime = SharedKVLifetime::while_attached;
  uint32_t max_members = 64;  // processes attached at once (1 .. 255)
};

struct SharedKVAttachOptions {
  HostPinned pinned = HostPinned::best_effort;  // this process's mapping
  uint64_t max_pin = uint64_t{16} << 30;
  // The layout the caller expects; 0 accepts the pool's. A pool of another
  // layout is refused, naming both.
  uint64_t block_bytes = 0;
  uint64_t num_blocks = 0;
};

// What create() and attach() throw when the pool refuses the caller rather
// than the system refusing memory: a name taken or served by nobody, a
// layout or version other than expected, a full or closed pool.
class SharedKVRefused : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct SharedKVBlockPoolStats : KVBlockPoolStats {
  uint64_t transit_blocks = 0;    // handed over, not yet taken over (also live)
  uint64_t reclaimed_blocks = 0;  // freed because their owner died or detached
  uint64_t owned_blocks = 0;      // live or deferred blocks this process owns
  uint64_t members = 0;           // processes attached
  uint64_t dead_members = 0;      // members found dead and reclaimed
  uint64_t recoveries = 0;        // times a locker repaired the books after its holder died
};

class SharedKVBlockPool final : public KVPool {
 public:
  // Creates the pool `name` ([A-Za-z0-9._-], 1 to 64 characters) and
  // attaches the caller. Throws std::invalid_argument for bad options and
  // std::runtime_error when the memory cannot be had, SharedKVRefused when
  // the name is taken by a live pool.
  static std::unique_ptr<SharedKVBlockPool> create(std::string_view name, const SharedKVBlockPoolOptions& options);
  // Attaches to the pool `name`. Throws SharedKVRefused when no process
  // serves it, its layout or version differs from what this library (or
  // `options`) expects, it has max_members members or it is closed; and
  // std::runtime_error when the memory cannot be mapped.
  static std::unique_ptr<SharedKVBlockPool> attach(std::string_view name, const SharedKVAttachOptions& options = {});
  // Detaches: frees the caller's blocks (as if it had died), stops serving
  // attaches, unpins and unmaps.
  ~SharedKVBlockPool() override;

  // KVBlockPool's calls, with its checks and statuses. The blocks allocated
  // are owned by the caller. Any member may free any live block.
  // Status::bad_argument also when called from a process forked from the
  // member (not attached itself), and out_of_space when the pool is closed.
  Status allocate(size_t n, uint32_t* out) noexcept override;
  Status allocate(size_t n, int64_t* out) noexcept override;
  Status allocate(size_t n, int32_t* out) noexcept override;
  Status deallocate(const uint32_t* ids, size_t n) noexcept override;
  Status deallocate(const int64_t* ids, size_t n) noexcept override;
  Status deallocate(const int32_t* ids, size_t n) noexcept override;
  template <class FreeId, class OutId>
  Status deallocate_and_allocate(const FreeId* ids_to_free, size_t n_free, size_t n, OutId* out) noexcept;
  // Frees the ids once `fence` completes. The fence belongs to this process:
  // until then the blocks stay owned by it (and are freed if it dies).
  Status deallocate_after(const int64_t* ids, size_t n, FenceSource& source, FenceId fence) noexcept override;
  Status deallocate_after(const uint32_t* ids, size_t n, FenceSource& source, FenceId fence) noexcept override;
  size_t collect_deferred() noexcept override;

  // Marks live blocks the caller owns as handed to the member process `to`
  // (attached, not the caller). Status::not_live, changing nothing, when an
  // id is not live, not the caller's, already in transit or repeated;
  // Status::bad_argument when `to` is not a live member.
  Status hand_over(const uint32_t* ids, size_t n, pid_t to) noexcept;
  Status hand_over(const int64_t* ids, size_t n, pid_t to) noexcept;
  // Makes blocks handed to the caller its own. Status::not_live, changing
  // nothing, when an id is not in transit to the caller (never handed, taken
  // already, or freed because its giver died).
  Status take_over(const uint32_t* ids, size_t n) noexcept;
  Status take_over(const int64_t* ids, size_t n) noexcept;
  // The blocks in transit to the caller (a restarted receiver finds its
  // hand-overs here), lowest first.
  std::vector<uint32_t> handed_to_me() const;

  // Finds members that died and frees their blocks; returns the blocks freed.
  size_t reclaim_dead() noexcept;
  // Whether the pool is closed: SharedKVLifetime::creator and the creator
  // detached or died. Checked now (a dead creator is reclaimed); allocation
  // reads the flag this sets, and so does reclaim_dead().
  bool closed() noexcept;
  // The process owning block id (0 when free).
  pid_t owner_of(uint64_t id) const noexcept;
  std::vector<pid_t> member_pids() const;

  const std::string& name() const noexcept { return name_; }
  size_t free_blocks() const noexcept override;
  bool is_live(uint64_t id) const noexcept override;

  // KVPool::stats() and what only a shared pool has.
  SharedKVBlockPoolStats stats() const noexcept;
  void reset_peak_stats() noexcept override;
  // Every invariant of the shared books: each block's owner is a member and
  // its state (free, live, deferred, in transit) agrees with both bitmaps and
  // every count; the summaries agree; allocations = frees + reclaimed + live
  // + deferred; no call is half done; this process's deferred batches hold
  // its deferred blocks.
  bool validate(std::string* why = nullptr) const override;

  struct Local;  // csrc/kv/shared/shared_state.hpp: this process's view of the mapping
  // The internals, for tests that damage or inspect the shared books.
  Local& local() const noexcept { return *local_; }

 private:
  SharedKVBlockPool();
  void finish_open(const std::string& name, HostPinned pinned, uint64_t max_pin);
  KVBlockPoolStats pool_stats() const noexcept override { return stats(); }
  Status free_and_alloc_any(const void* ids_to_free, IdKind free_kind, size_t n_free, size_t n, void* out,
                            IdKind out_kind) noexcept override {
    return dispatch_free_and_alloc(*this, ids_to_free, free_kind, n_free, n, out, out_kind);
  }

  std::string name_;
  std::unique_ptr<Local> local_;
};

}  // namespace unipool
