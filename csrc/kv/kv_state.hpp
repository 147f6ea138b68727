// unipool kv: the bookkeeping of a KVBlockPool behind its one lock.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/host_pinner.hpp"
#include "unipool/fence.hpp"
#include "unipool/kv_block_pool.hpp"

namespace unipool {

struct KVBlockPool::State {
  // Per-block state byte; `freeing` marks ids of the batch being checked, so
  // an id repeated within one batch is caught without a second structure.
  enum : uint8_t { free_block = 0, live = 1, deferred = 2, freeing = 3 };

  // A batch freed with free_after: its ids sit in `deferred_ids` from `first`.
  struct DeferredBatch {
    FenceSource* source;
    FenceId fence;
    size_t first;
    size_t count;
  };

  mutable std::mutex mutex;
  std::vector<uint32_t> free_ids;    // the free-id stack; top = back()
  std::vector<uint8_t> block_state;  // one byte per block
  std::vector<DeferredBatch> batches;
  std::vector<uint32_t> deferred_ids;
  uint64_t live_count = 0, peak_live = 0, deferred_count = 0;
  uint64_t allocs = 0, frees = 0, failed_allocs = 0, misuse_errors = 0;

  std::unique_ptr<backend::HostPinner> pinner;
  std::vector<void*> pinned_pieces;

  // Frees completed deferred batches; mutex held. Returns blocks freed.
  size_t reclaim_completed();
};

// Sets this thread's KVBlockPool::last_error() (printf-style).
void kv_set_error(const char* format, ...) noexcept __attribute__((format(printf, 1, 2)));

}  // namespace unipool
