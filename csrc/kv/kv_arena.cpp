// unipool kv: the arena of a KVBlockPool. Reserved and committed once
// (NUMA-bound, touched so the pool, not the first copy, pays the faults),
// then registered with CUDA in pieces of at most max_pin bytes.
#include <sys/sysinfo.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

#include "backend/os/os_memory.hpp"
#include "core/align.hpp"
#include "kv/kv_memory.hpp"
#include "kv/kv_state.hpp"

namespace unipool {
namespace {

// No arena is larger: far beyond any machine, and it keeps every size sum
// and product below in 64 bits.
constexpr uint64_t kMaxArenaBytes = uint64_t{1} << 62;

std::string errno_text(int error) { return error ? std::strerror(error) : "unknown error"; }

}  // namespace

uint64_t kv_check_layout(uint64_t block_bytes, uint64_t num_blocks, uint64_t alignment, uint64_t max_pin,
                         const char* who) {
  const std::string w = who;
  if (block_bytes == 0) throw std::invalid_argument(w + ": block_bytes must be > 0");
  if (num_blocks == 0 || num_blocks > (uint64_t{1} << 31)) {
    throw std::invalid_argument(w + ": num_blocks must be in 1 .. 2^31 (got " + std::to_string(num_blocks) + ")");
  }
  if (!is_power_of_two(alignment) || alignment > (uint64_t{1} << 21)) {
    throw std::invalid_argument(w + ": alignment must be a power of two <= 2 MiB");
  }
  if (max_pin < (uint64_t{2} << 20)) throw std::invalid_argument(w + ": max_pin must be >= 2 MiB");
  // Checked before the round-up, which would wrap a block size near 2^64 to
  // a stride of 0 and a 0-byte arena; then stride x num_blocks cannot wrap.
  if (block_bytes > kMaxArenaBytes) {
    throw std::invalid_argument(w + ": block_bytes must be <= 2^62 (got " + std::to_string(block_bytes) + ")");
  }
  const uint64_t stride = round_up(block_bytes, alignment);
  if (stride > kMaxArenaBytes / num_blocks) {
    throw std::invalid_argument(w + ": the arena, " + std::to_string(num_blocks) + " blocks of stride " +
                                std::to_string(stride) +
                                ", is larger than 2^62 bytes (block_bytes or num_blocks too large)");
  }
  return stride;
}

void kv_check_fits_machine(uint64_t bytes, const char* who) {
  struct sysinfo si {};
  if (sysinfo(&si) != 0) return;  // unknown: the kernel's accounting decides
  const uint64_t ram = uint64_t{si.totalram} * si.mem_unit;
  const uint64_t swap = uint64_t{si.totalswap} * si.mem_unit;
  if (bytes <= ram + swap) return;
  throw std::runtime_error(std::string(who) + ": the arena, " + std::to_string(bytes) +
                           " bytes, is larger than this machine's memory (" + std::to_string(ram) + " bytes of RAM + " +
                           std::to_string(swap) + " bytes of swap): lower num_blocks or block_bytes");
}

void KVBlockPool::map_arena(const KVBlockPoolOptions& options) {
  const uint64_t page = backend::os::page_size();
  mapped_bytes_ = round_up(arena_bytes_, page);
  kv_check_fits_machine(mapped_bytes_, "KVBlockPool");
  base_ = backend::os::reserve(mapped_bytes_, page, true);
  if (!base_) {
    throw std::runtime_error("KVBlockPool: cannot reserve " + std::to_string(mapped_bytes_) +
                             " bytes of address space: " + errno_text(errno));
  }
  backend::os::CommitOptions commit;
  commit.accounted = true;
  commit.numa_node = options.numa_node;
  commit.first_touch = options.first_touch;
  const backend::os::CommitResult r = backend::os::commit(base_, mapped_bytes_, commit);
  if (!r.ok) {
    backend::os::release(base_, mapped_bytes_);
    base_ = nullptr;
    throw std::runtime_error(std::string("KVBlockPool: cannot commit the arena (") + r.what +
                             "): " + errno_text(r.error));
  }
}

void KVBlockPool::pin_arena(const KVBlockPoolOptions& options) {
  KVPinning& p = state_->pinning;
  p.pin(static_cast<char*>(base_), mapped_bytes_, options.pinned, options.max_pin, "KVBlockPool");
  pinned_bytes_ = p.pinned_bytes();
  pinning_state_ = p.state();
}

KVBlockPool::KVBlockPool(const KVBlockPoolOptions& options) : state_(std::make_unique<State>()) {
  stride_ = kv_check_layout(options.block_bytes, options.num_blocks, options.alignment, options.max_pin, "KVBlockPool");
  block_bytes_ = options.block_bytes;
  num_blocks_ = options.num_blocks;
  arena_bytes_ = stride_ * num_blocks_;

  map_arena(options);
  try {
    pin_arena(options);
  } catch (...) {
    unpin_arena();
    backend::os::release(base_, mapped_bytes_);
    throw;
  }
  state_->free.init(num_blocks_, /*all_set=*/true);
  state_->live.assign(state_->free.num_words(), 0);
}

void KVBlockPool::unpin_arena() noexcept {
  state_->pinning.unpin(static_cast<char*>(base_));
  pinned_bytes_ = 0;
}

KVBlockPool::~KVBlockPool() {
  // Pending fences go back to their sources; the memory goes with the arena.
  for (const State::DeferredBatch& b : state_->batches) kv_release_fence(*b.source, b.fence);
  unpin_arena();
  if (base_) backend::os::release(base_, mapped_bytes_);
}

}  // namespace unipool
