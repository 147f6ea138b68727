// unipool: what every KV block pool offers, so code written for one works
// with the other: KVBlockPool (one process) and SharedKVBlockPool (the
// processes of a node). Like an RMM memory resource, a caller may hold a
// KVPool& and not know which it has; a caller that names the concrete type
// calls it directly (both are final, so the compiler devirtualizes).
//
// Blocks are uniform, handed out by id, lowest free id first; block(id) is
// base() + id * stride(). Every call is thread-safe except validate(); a
// refused call changes nothing and sets last_error().
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "unipool/fence.hpp"
#include "unipool/host_config.hpp"
#include "unipool/status.hpp"

namespace unipool {

struct KVBlockPoolStats {
  uint64_t num_blocks = 0;
  uint64_t block_bytes = 0;
  uint64_t stride = 0;
  uint64_t free_blocks = 0;
  uint64_t live_blocks = 0;      // handed out, not freed
  uint64_t deferred_blocks = 0;  // freed with free_after, fence pending
  uint64_t peak_live_blocks = 0;
  uint64_t requested_bytes = 0;  // num_blocks * block_bytes
  uint64_t reserved_bytes = 0;   // committed arena bytes (page-rounded)
  uint64_t pinned_bytes = 0;
  uint64_t allocs = 0;         // blocks handed out since construction
  uint64_t frees = 0;          // blocks returned (deferred ones once reclaimed)
  uint64_t failed_allocs = 0;  // alloc calls refused for lack of blocks
  uint64_t misuse_errors = 0;  // free calls refused (double free, bad id)
};

class KVPool {
 public:
  virtual ~KVPool() = default;

  // Writes n free ids to out. Status::out_of_space when fewer than n are free
  // (after reclaiming completed deferrals): nothing is taken. n == 0 is ok.
  virtual Status allocate(size_t n, uint32_t* out) noexcept = 0;
  virtual Status allocate(size_t n, int64_t* out) noexcept = 0;
  virtual Status allocate(size_t n, int32_t* out) noexcept = 0;
  // Returns ids. Status::not_live when any id is out of range, not allocated
  // (a double free) or repeated in the batch: then nothing is freed and
  // last_error() names the id.
  virtual Status deallocate(const uint32_t* ids, size_t n) noexcept = 0;
  virtual Status deallocate(const int64_t* ids, size_t n) noexcept = 0;
  virtual Status deallocate(const int32_t* ids, size_t n) noexcept = 0;
  // Frees the ids once `fence` of `source` completes; until then they are not
  // handed out. The pool owns the fence from here on; Status::bad_argument
  // for fence 0 or one `source` does not know.
  virtual Status deallocate_after(const int64_t* ids, size_t n, FenceSource& source, FenceId fence) noexcept = 0;
  virtual Status deallocate_after(const uint32_t* ids, size_t n, FenceSource& source, FenceId fence) noexcept = 0;
  // Frees the deferred batches whose fences completed; returns the blocks freed.
  virtual size_t collect_deferred() noexcept = 0;

  // Frees `ids_to_free`, then allocates n blocks into `out`, under one lock;
  // `out` may alias `ids_to_free`. Refused whole with Status::not_live (a bad
  // free id) or Status::out_of_space. FreeId, OutId: int64_t, int32_t or
  // uint32_t.
  template <class FreeId, class OutId>
  Status deallocate_and_allocate(const FreeId* ids_to_free, size_t n_free, size_t n, OutId* out) noexcept;

  void* base() const noexcept { return base_; }
  void* block(uint64_t id) const noexcept { return static_cast<char*>(base_) + id * stride_; }
  uint64_t block_bytes() const noexcept { return block_bytes_; }
  uint64_t stride() const noexcept { return stride_; }
  uint64_t num_blocks() const noexcept { return num_blocks_; }
  uint64_t arena_bytes() const noexcept { return stride_ * num_blocks_; }
  // Whether the arena is pinned, and why not (to_string() for the text).
  PinningState pinning_state() const noexcept { return pinning_state_; }
  bool pinned() const noexcept { return pinning_state_ == PinningState::pinned; }

  virtual size_t free_blocks() const noexcept = 0;
  // Whether id is a block handed out and not yet freed.
  virtual bool is_live(uint64_t id) const noexcept = 0;
  KVBlockPoolStats stats() const noexcept { return pool_stats(); }
  virtual void reset_peak_stats() noexcept = 0;
  // Every invariant of the pool's books (see each pool); for tests.
  virtual bool validate(std::string* why = nullptr) const = 0;

  // This thread's last error message ("" if none), from either pool.
  static const char* last_error() noexcept;

  // The id types, for free_and_alloc_any.
  enum class IdKind : uint8_t { i64, i32, u32 };

 protected:
  KVPool() = default;
  KVPool(const KVPool&) = delete;
  KVPool& operator=(const KVPool&) = delete;

  template <class Id>
  static constexpr IdKind id_kind() noexcept {
    return sizeof(Id) == 8 ? IdKind::i64 : static_cast<Id>(-1) < 0 ? IdKind::i32 : IdKind::u32;
  }
  virtual KVBlockPoolStats pool_stats() const noexcept = 0;
  // deallocate_and_allocate with the id types as values.
  virtual Status free_and_alloc_any(const void* ids_to_free, IdKind free_kind, size_t n_free, size_t n, void* out,
                                    IdKind out_kind) noexcept = 0;
  // Calls pool.deallocate_and_allocate<F, O> for the kinds given.
  template <class Pool>
  static Status dispatch_free_and_alloc(Pool& pool, const void* f, IdKind fk, size_t nf, size_t n, void* o,
                                        IdKind ok) noexcept {
    auto with_out = [&](auto* typed_free) -> Status {
      switch (ok) {
        case IdKind::i64: return pool.deallocate_and_allocate(typed_free, nf, n, static_cast<int64_t*>(o));
        case IdKind::i32: return pool.deallocate_and_allocate(typed_free, nf, n, static_cast<int32_t*>(o));
        case IdKind::u32: return pool.deallocate_and_allocate(typed_free, nf, n, static_cast<uint32_t*>(o));
      }
      return Status::bad_argument;
    };
    switch (fk) {
      case IdKind::i64: return with_out(static_cast<const int64_t*>(f));
      case IdKind::i32: return with_out(static_cast<const int32_t*>(f));
      case IdKind::u32: return with_out(static_cast<const uint32_t*>(f));
    }
    return Status::bad_argument;
  }

  void* base_ = nullptr;
  uint64_t block_bytes_ = 0, stride_ = 0, num_blocks_ = 0;
  PinningState pinning_state_ = PinningState::pageable;
};

template <class FreeId, class OutId>
Status KVPool::deallocate_and_allocate(const FreeId* ids_to_free, size_t n_free, size_t n, OutId* out) noexcept {
  return free_and_alloc_any(ids_to_free, id_kind<FreeId>(), n_free, n, out, id_kind<OutId>());
}

}  // namespace unipool
