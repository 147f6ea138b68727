// unipool: the KV-cache offload block pool. One large host arena (pinned
// where a GPU is present) cut into uniform blocks, handed out by id, the way
// vLLM, SGLang and LMCache offload KV blocks: no fragmentation (every block
// is the same size), one registration of the whole buffer, batched calls.
//
//   unipool::KVBlockPool pool({.block_bytes = 2 << 20, .num_blocks = 4096});
//   uint32_t ids[64];
//   pool.allocate(64, ids);              // Status::out_of_space: nothing taken
//   void* p = pool.block(ids[0]);       // block_bytes bytes at base + id * stride
//   pool.deallocate_after(ids, 64, fences, fences.record(device, stream));
//   pool.deallocate(ids, 64);           // Status::not_live: double free, nothing freed
//
// Free and live blocks are two bitmaps (one bit per block) with summary
// levels over the free one, so alloc finds the lowest free block in O(1) and
// takes a whole word of 64 free blocks at once (writing consecutive ids),
// and free proves a run of consecutive ids, or an ascending batch, live a
// word at a time (any other order id by id). A double free, an out-of-range
// id and an id repeated within one batch are refused; a refused batch
// changes nothing.
//
// Reuse order: lowest free id first. The live blocks stay packed at the low
// end of the arena (fewer pages and TLB entries touched, long free runs
// above them), and ids handed out together are mostly consecutive, so
// batched copies coalesce into few large copies.
//
// Thread safety: every member is thread-safe except validate(), which wants
// no concurrent calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "unipool/fence.hpp"
#include "unipool/host_config.hpp"
#include "unipool/kv_pool.hpp"
#include "unipool/status.hpp"

namespace unipool {

struct KVBlockPoolOptions {
  uint64_t block_bytes = 0;  // bytes of one block (> 0)
  uint64_t num_blocks = 0;   // blocks in the arena (1 .. 2^31)
  // Blocks start at multiples of `alignment` (a power of two): the stride is
  // block_bytes rounded up to it. The default keeps a stride equal to the
  // block size for every block size that is a multiple of 256 (KV blocks are).
  uint64_t alignment = 256;
  // off: pageable; on: the arena must be pinned (construction fails if it
  // cannot be); best_effort: pinned where a CUDA device is present.
  HostPinned pinned = HostPinned::best_effort;
  int numa_node = -1;       // bind the arena to this node; -1 = no binding
  bool first_touch = true;  // fault every page in at construction
  // Largest single pinning registration (cudaHostRegister); a larger arena
  // is registered in pieces (very large single registrations fail or take
  // minutes, as vLLM and LMCache report).
  uint64_t max_pin = uint64_t{16} << 30;
};

class KVBlockPool final : public KVPool {
 public:
  // Reserves, commits (NUMA-bound, touched) and pins the arena. Throws
  // std::invalid_argument for bad options and std::runtime_error when the
  // memory cannot be had (the message says which call failed).
  explicit KVBlockPool(const KVBlockPoolOptions& options);
  ~KVBlockPool() override;

  // Writes n free ids to out. Status::out_of_space when fewer than n are free
  // (after reclaiming completed deferrals): nothing is taken. n == 0 is ok.
  Status allocate(size_t n, uint32_t* out) noexcept override;
  Status allocate(size_t n, int64_t* out) noexcept override;
  Status allocate(size_t n, int32_t* out) noexcept override;
  // Returns ids. Status::not_live when any id is out of range, not allocated
  // (a double free) or repeated in the batch: then nothing is freed and
  // last_error() names the id.
  Status deallocate(const uint32_t* ids, size_t n) noexcept override;
  Status deallocate(const int64_t* ids, size_t n) noexcept override;
  Status deallocate(const int32_t* ids, size_t n) noexcept override;
  // Frees `ids_to_free` and then allocates n blocks into `out`, under one lock:
  // the step of an offload manager that evicts blocks to make room for the
  // ones it stores (the freed blocks may come straight back). `out` may be
  // `ids_to_free` itself (all ids are read before any is written). Refused with
  // Status::not_live (a bad free id, as free()) or Status::out_of_space (fewer
  // than n free even with the freed ones): then nothing is freed or taken.
  // FreeId, OutId: int64_t, int32_t or uint32_t.
  template <class FreeId, class OutId>
  Status deallocate_and_allocate(const FreeId* ids_to_free, size_t n_free, size_t n, OutId* out) noexcept;
  // Frees the ids once `fence` of `source` completes; until then they are not
  // handed out. The pool owns the fence from here on (released to `source`,
  // which must outlive the pool or the deferral); an empty batch releases it
  // at once. The same checks as free(), and Status::bad_argument for fence 0
  // or a fence `source` does not know (its completed() throws: never
  // recorded, or released): then nothing is freed and the fence is not taken.
  Status deallocate_after(const int64_t* ids, size_t n, FenceSource& source, FenceId fence) noexcept override;
  Status deallocate_after(const uint32_t* ids, size_t n, FenceSource& source, FenceId fence) noexcept override;
  // Frees the deferred batches whose fences completed; returns the blocks
  // freed. A fence whose source throws for it has been lost (nothing is left
  // to wait for) and counts as completed; nothing a source throws escapes.
  size_t collect_deferred() noexcept override;

  size_t free_blocks() const noexcept override;
  // Whether id is a block handed out and not yet freed.
  bool is_live(uint64_t id) const noexcept override;

  void reset_peak_stats() noexcept override;
  // Every invariant: each block is free, live or deferred, never two of them;
  // the summary levels agree with the free bitmap; the counts add up to
  // num_blocks and to the bitmaps; deferred batches hold the deferred blocks.
  bool validate(std::string* why = nullptr) const override;

  struct State;  // csrc/kv/kv_state.hpp

 private:
  KVBlockPoolStats pool_stats() const noexcept override;
  Status free_and_alloc_any(const void* ids_to_free, IdKind free_kind, size_t n_free, size_t n, void* out,
                            IdKind out_kind) noexcept override {
    return dispatch_free_and_alloc(*this, ids_to_free, free_kind, n_free, n, out, out_kind);
  }
  template <class Id>
  Status alloc_ids(size_t n, Id* out) noexcept;
  template <class Id>
  Status free_ids(const Id* ids, size_t n, FenceSource* source, FenceId fence) noexcept;
  // Fails an alloc of n with `available` free: counts it and sets last_error().
  Status refuse_alloc(size_t n, size_t available, size_t being_freed) noexcept;
  template <class Id>
  Status refuse_free(const Id* ids, size_t n, const char* call) noexcept;
  // Fails a free_after whose fence is 0 or unknown to its source.
  Status refuse_fence(FenceId fence) noexcept;
  void map_arena(const KVBlockPoolOptions& options);
  void pin_arena(const KVBlockPoolOptions& options);
  void unpin_arena() noexcept;

  uint64_t arena_bytes_ = 0, mapped_bytes_ = 0, pinned_bytes_ = 0;
  std::unique_ptr<State> state_;
};

}  // namespace unipool
