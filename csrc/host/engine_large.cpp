// unipool host: large blocks from the arenas' range allocators (exact sizes,
// or their large-cache class's: large_cache.hpp), each behind a 64-byte
// header that names its range.
#include "backend/host_pinner.hpp"
#include "host/engine.hpp"
#include "host/history_pinner.hpp"
#include "host/pinner_factory.hpp"
#include "host/region_pinner.hpp"

namespace unipool::host {
namespace {
std::atomic<PinnerFactory> g_pinner_factory{nullptr};
}  // namespace

void set_pinner_factory(PinnerFactory factory) noexcept { g_pinner_factory.store(factory); }

std::unique_ptr<backend::HostPinner> make_pinner() {
  const PinnerFactory factory = g_pinner_factory.load();
  return factory ? factory() : backend::make_default_host_pinner();
}

uint64_t Engine::headroom() const noexcept {
  if (config_.limit == 0) return ~uint64_t{0};
  // Chunks the pinning thread claimed count as committed already.
  const uint64_t committed = counters_.committed.get() + pin_.pending();
  return committed >= config_.limit ? 0 : config_.limit - committed;
}

void Engine::ensure_pinner() noexcept {
  if (pinner_checked_.load(std::memory_order_acquire)) return;
  LockGuard lock(setup_lock_);
  if (pinner_checked_.load(std::memory_order_relaxed)) return;
  if (config_.pinned != HostPinned::off) {
    // The CUDA runtime allocates as it starts: those requests are served on
    // the side (t_internal), never from this pool's locked paths.
    InternalScope internal;
    try {
      auto regions = std::make_unique<RegionPinner>(std::make_unique<HistoryPinner>(make_pinner(), &history_));
      regions_ = regions.get();
      pinner_ = std::move(regions);
      pin_available_ = pinner_ != nullptr && pinner_->available();
    } catch (...) {
      pin_available_ = false;
    }
    if (pin_available_) arena_settings_.pinner = pinner_.get();
    if (pin_available_ && config_.pin_thread) start_pin_thread();
  }
  pinner_checked_.store(true, std::memory_order_release);
}

Status Engine::set_region_hooks(HostRegionHooks hooks) {
  ensure_pinner();
  if (!pin_available_) {
    return fail(Status::bad_argument,
                config_.pinned == HostPinned::off
                    ? "unipool host pool: region hooks need a pinned pool; this one has pinned=off"
                    : "unipool host pool: region hooks need a pinned pool; no CUDA device can "
                      "pin this one's memory");
  }
  regions_->set_hooks(std::move(hooks));
  return Status::ok;
}

// ---- arenas and shards ---------------------------------------------------------------

bool Engine::add_arena(Message* why) noexcept {
  const uint32_t count = arena_count_.load(std::memory_order_relaxed);
  if (count == kMaxArenas) {
    why->add("every arena's reserved address space is full");
    return false;
  }
  if (!arenas_[count].init(arena_settings_)) {
    why->add("cannot reserve ").add_dec(arena_settings_.reserve).add(" bytes of address space");
    return false;
  }
  if (count == 0) {
    arena0_slots_.store(arenas_[0].slots(), std::memory_order_relaxed);
    arena0_base_.store(reinterpret_cast<uintptr_t>(arenas_[0].base()), std::memory_order_release);
    LockGuard deferred(deferred_.lock());
    arena0_reserved_ = arenas_[0].reserved();
    refresh_fast_span();
  }
  arena_count_.store(count + 1, std::memory_order_release);
  return true;
}

// Shard 0 is arena 0 (with the segments); shard s > 0 gets an arena of its
// own on first use, or shares arena 0 when no arena is left (kNoArena).
// shard_arena_[s] == 0 means "not set up yet".
uint32_t Engine::arena_of_shard(uint32_t shard) noexcept {
  if (shard == 0) return 0;
  uint32_t a = shard_arena_[shard].load(std::memory_order_acquire);
  if (a == 0) {
    LockGuard lock(setup_lock_);
    a = shard_arena_[shard].load(std::memory_order_relaxed);
    if (a == 0) {
      Message why;
      const uint32_t count = arena_count_.load(std::memory_order_relaxed);
      a = count > 0 && add_arena(&why) ? count : kNoArena;
      shard_arena_[shard].store(a, std::memory_order_release);
    }
  }
  return a == kNoArena ? 0 : a;
}

Status Engine::try_arena(uint32_t i, uint64_t size, uint64_t alignment, ArenaGrant* out, Message* why,
                         ArenaBlocked* blocked, bool used_only) noexcept {
  FutexMutex& m = arenas_[i].mutex();
  m.lock();
  Arena& arena = arenas_[i];
  ArenaDelta delta;
  const Status s = used_only ? arena.allocate_used(size, alignment, arena_settings_, &out->range, &delta, blocked)
                             : arena.allocate(size, alignment, headroom(), arena_settings_, &out->range, &delta, why,
                                              blocked, &out->fresh);
  if (used_only) out->fresh = false;
  if (s == Status::ok) {
    out->index = i;
    out->extent = out->range.extent;
    out->pinned = arena.range_pinned(out->range.offset, out->extent);
  }
  want_ahead(i);
  m.unlock();
  counters_.apply(delta);
  return s;
}

// pinned=on promises pinned memory: with no CUDA device to pin with there is
// none to give, so memory is refused, saying so, rather than served pageable
// (a non_blocking copy from it would silently be synchronous).
bool Engine::cannot_pin(Message* why) const noexcept {
  if (config_.pinned != HostPinned::on || pin_available_) return false;
  const char* reason = pinner_ != nullptr ? pinner_->unavailable_reason() : nullptr;
  why->add("pinned=on, but ")
      .add(reason != nullptr ? reason : "there is no CUDA device to pin with")
      .add(" (pinned=best_effort serves pageable memory then)");
  return true;
}

// try_arena, and while the chunks at the arena's end are being registered
// ahead, wait for them (no lock held: the pinning thread appends them under
// the setup and arena locks) and try again: they are usually what this
// request needs. `serial`: the caller holds setup_lock_ (a limit is set).
UNIPOOL_NO_THREAD_SAFETY_ANALYSIS Status Engine::try_arena_waiting(uint32_t i, uint64_t size, uint64_t alignment,
                                                                   ArenaGrant* out, Message* why, ArenaBlocked* blocked,
                                                                   bool serial) noexcept {
  Status s = try_arena(i, size, alignment, out, why, blocked);
  while (*blocked == ArenaBlocked::pinning) {
    pin_.count_wait();
    if (serial) setup_lock_.unlock();
    pin_.wait_for_claim(i);
    if (serial) setup_lock_.lock();
    *why = Message{};
    s = try_arena(i, size, alignment, out, why, blocked);
  }
  return s;
}

// setup_lock_ is taken with a limit only, or around add_arena (not analysed).
UNIPOOL_NO_THREAD_SAFETY_ANALYSIS Status Engine::arena_allocate(uint32_t preferred, uint64_t size, uint64_t alignment,
                                                                ArenaGrant* out, Message* why) noexcept {
  ensure_pinner();
  if (cannot_pin(why)) return Status::backend_error;
  // With a limit, checking the headroom and growing must be one step.
  const bool serial = config_.limit != 0;
  if (serial) setup_lock_.lock();
  Status result = Status::out_of_space;
  for (int round = 0; round < 3; ++round) {
    const uint32_t count = arena_count_.load(std::memory_order_acquire);
    const uint32_t first = preferred < count ? preferred : 0;
    bool all_full = true;
    bool limited = false;  // some arena would have to grow past the limit
    for (uint32_t k = 0; k < count && all_full; ++k) {
      // The preferred arena first, then the others in order.
      const uint32_t i = k == 0 ? first : (k <= first ? k - 1 : k);
      Message attempt;
      ArenaBlocked blocked = ArenaBlocked::no;
      const Status s = try_arena_waiting(i, size, alignment, out, &attempt, &blocked, serial);
      if (s == Status::ok) {
        if (serial) setup_lock_.unlock();
        return Status::ok;
      }
      if (blocked == ArenaBlocked::full || (blocked == ArenaBlocked::limit && limited)) continue;
      *why = attempt;
      result = s;
      // Past the limit, another arena may still hold a free range that fits
      // without growing: go on looking. Any other failure is final.
      if (blocked == ArenaBlocked::limit) limited = true;
      else all_full = false;
    }
    if (limited) break;  // a new arena would have to grow past the limit too
    if (!all_full) break;
    if (size + alignment > arena_settings_.reserve) {
      why->add("larger than an arena (reserve=").add_dec(arena_settings_.reserve).add(")");
      result = Status::too_large;
      break;
    }
    if (!serial) setup_lock_.lock();
    // Another thread may have added one since we looked: then just retry.
    const bool added = arena_count_.load(std::memory_order_relaxed) != count || add_arena(why);
    if (!serial) setup_lock_.unlock();
    if (!added) {
      result = Status::out_of_space;
      break;
    }
    if (round == 2) why->add("no arena could hold the request");
  }
  if (serial) setup_lock_.unlock();
  return result;
}

// ---- the thread's tally of large blocks -----------------------------------------------

Heap* Engine::large_heap() const noexcept {
  if (slot_ == 0) return nullptr;
  const HeapRef& ref = t_thread->heaps[slot_];
  return ref.generation == generation_ ? ref.heap : nullptr;
}

void Engine::account_large(Heap* heap, int64_t blocks, int64_t requested, int64_t extent) noexcept {
  if (heap == nullptr) {
    counters_.large_blocks.fetch_add(static_cast<uint64_t>(blocks), std::memory_order_relaxed);
    counters_.requested.add(requested);
    counters_.allocated.add(extent);
    return;
  }
  heap->large_cache.live += blocks;
  LargeTally& t = heap->large;
  shift(t.blocks, blocks);
  shift(t.requested, requested);
  shift(t.extent, extent);
  const int64_t drift = t.extent.load(std::memory_order_relaxed);
  if (drift >= kLargeFoldBytes || drift <= -kLargeFoldBytes) {
    fold_large(heap);
  } else if (extent > 0) {
    // Growth that could be a new peak is folded at once (two loads of lines
    // that only folds write), so peaks stay exact but for other threads'
    // unfolded growth at the same moment.
    const int64_t req = t.requested.load(std::memory_order_relaxed);
    if (counters_.allocated.now.load(std::memory_order_relaxed) + drift >
            counters_.allocated.peak.load(std::memory_order_relaxed) ||
        counters_.requested.now.load(std::memory_order_relaxed) + req >
            counters_.requested.peak.load(std::memory_order_relaxed)) {
      fold_large(heap);
    }
  }
}

void Engine::fold_large(Heap* heap) noexcept {
  LargeTally& t = heap->large;
  const int64_t blocks = t.blocks.load(std::memory_order_relaxed);
  const int64_t requested = t.requested.load(std::memory_order_relaxed);
  const int64_t extent = t.extent.load(std::memory_order_relaxed);
  if (blocks == 0 && requested == 0 && extent == 0) return;
  t.blocks.store(0, std::memory_order_relaxed);
  t.requested.store(0, std::memory_order_relaxed);
  t.extent.store(0, std::memory_order_relaxed);
  counters_.large_blocks.fetch_add(static_cast<uint64_t>(blocks), std::memory_order_relaxed);
  counters_.requested.add(requested);
  counters_.allocated.add(extent);
}

Engine::LargeSums Engine::count_large_tallies() const noexcept {
  LargeSums sum;
  for (const Heap* h = heaps_; h != nullptr; h = h->next) {
    sum.blocks += h->large.blocks.load(std::memory_order_relaxed);
    sum.requested += h->large.requested.load(std::memory_order_relaxed);
    sum.extent += h->large.extent.load(std::memory_order_relaxed);
    sum.cached_blocks += h->large_cache.blocks.load(std::memory_order_relaxed);
    sum.cached_extent += h->large_cache.extent.load(std::memory_order_relaxed);
  }
  return sum;
}

// ---- blocks ------------------------------------------------------------------------------

// Threads spread their large blocks over the shards' arenas by the order
// they started (the first thread, and every shards_-th after it, on arena 0
// with the segments), so threads that allocate large blocks together do not
// queue on one lock. Decided once per thread (and remembered in its heap): a
// thread that moved later would leave pages it touched behind (more page
// faults).
uint32_t Engine::large_arena_of(Heap* heap) noexcept {
  if (heap != nullptr && heap->large_arena != 0) return heap->large_arena - 1;
  ThreadState* thread = current_thread_state();
  const uint32_t shard = thread != nullptr ? thread->seed % shards_ : 0;
  const uint32_t arena = arena_of_shard(shard);
  if (heap != nullptr) heap->large_arena = arena + 1;
  return arena;
}

// A range of `bytes` for a large block: the thread's arena first, at once
// (the first thing arena_allocate would try); arena_allocate itself, with
// its pinner set-up, limit, waits for the pinning thread, other arenas and
// new arenas, only when the arena is full or being pinned ahead, or for the
// first request and with a limit. Any other failure is final, as it would
// be there. While the thread's large cache holds blocks, memory handed out
// before comes first; when none fits, the cache goes back to the arenas
// before any memory new to the program is taken (new pages cost a fault
// each, and the arena would grow around the cached blocks).
Status Engine::large_range(Heap* heap, uint64_t bytes, uint64_t range_alignment, ArenaGrant* g, Message* why) noexcept {
  const uint32_t preferred = large_arena_of(heap);
  Status s = Status::out_of_space;
  ArenaBlocked blocked = ArenaBlocked::full;
  if (config_.limit == 0 && pinner_checked_.load(std::memory_order_acquire) &&
      preferred < arena_count_.load(std::memory_order_acquire)) {
    if (heap != nullptr && heap->large_cache.blocks.load(std::memory_order_relaxed) != 0) {
      if (try_arena(preferred, bytes, range_alignment, g, why, &blocked, /*used_only=*/true) == Status::ok) {
        return Status::ok;
      }
      large_cache_drain_all(heap);
      *why = Message{};
    }
    s = try_arena(preferred, bytes, range_alignment, g, why, &blocked);
  }
  if (s != Status::ok && blocked != ArenaBlocked::no) {
    // With a limit the fast step above is skipped: the cache goes back
    // before the arena grows under the limit.
    if (heap != nullptr && heap->large_cache.blocks.load(std::memory_order_relaxed) != 0) large_cache_drain_all(heap);
    *why = Message{};
    s = arena_allocate(preferred, bytes, range_alignment, g, why);
  }
  return s;
}

void* Engine::allocate_large(size_t size, size_t alignment, bool* fresh) noexcept {
  const uint64_t pad = alignment > kLargeHeader ? alignment : kLargeHeader;
  const uint64_t range_alignment = alignment > kLargeHeader ? alignment : 0;
  // The thread's heap, made if this is its first block of the pool: a
  // thread of large blocks only then keeps its tally there, rather than
  // update the pool's gauges with locked instructions at every block.
  Heap* heap = large_heap();
  if (heap == nullptr) heap = heap_for_thread();
  if (heap != nullptr) check_drain_epoch(heap);  // the pool asked for every cache
  // A block of the class from the thread's large cache, else a new one of
  // the class's size, so that it can go into the cache when freed.
  const uint64_t fit = large_cache_fit(heap, size, alignment);
  if (fit != 0) {
    if (void* p = large_cache_take(heap, size)) {
      if (fresh != nullptr) *fresh = false;
      return p;
    }
  }
  ArenaGrant g;
  Message why;
  const Status s = large_range(heap, (fit != 0 ? fit : size) + pad, range_alignment, &g, &why);
  if (s != Status::ok) {
    fail(s, Message{}.add("unipool host pool: cannot allocate ").add_dec(size).add(" bytes: ").add(why.c_str()));
    return nullptr;
  }
  Arena& arena = arenas_[g.index];
  char* user = arena.base() + g.range.offset + pad;
  auto* h = reinterpret_cast<LargeHeader*>(user - kLargeHeader);
  h->handle = g.range.handle;
  h->offset = g.range.offset;
  h->extent = g.extent;
  h->requested = size;
  h->arena = g.index;
  h->pad = static_cast<uint32_t>(pad);
  h->pinned = g.pinned ? 1 : 0;
  __atomic_store_n(&h->magic, kLargeLive ^ reinterpret_cast<uintptr_t>(user) ^ secret_, __ATOMIC_RELEASE);
  account_large(heap, 1, static_cast<int64_t>(size), static_cast<int64_t>(g.extent));
  if (fresh != nullptr) *fresh = g.fresh;
  return user;
}

LargeHeader* Engine::large_header_as(Arena* arena, const void* p, uintptr_t state) const noexcept {
  const auto a = reinterpret_cast<uintptr_t>(p);
  const auto base = reinterpret_cast<uintptr_t>(arena->base());
  // The header must lie in the committed prefix, where reading is safe.
  if (a % kLargeHeader != 0 || a - base < kLargeHeader || a - base > arena->committed_end()) return nullptr;
  auto* h = reinterpret_cast<LargeHeader*>(a - kLargeHeader);
  if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != (state ^ a ^ secret_)) return nullptr;
  // A header is only believed when the range allocator agrees: a live range
  // with that handle, at that offset, of that extent, `pad` below p.
  if (h->offset + h->pad != a - base) return nullptr;
  if (arena->ranges().allocation_size(h->offset, h->handle) != h->extent) return nullptr;
  return h;
}

// Every free overwrites a block's magic before its range is given back, so a
// live magic (keyed by the pool's secret and the address) is found only in
// front of a live block; the bounds keep the read inside committed memory.
const LargeHeader* Engine::large_header_unlocked(const Arena* arena, const void* p) const noexcept {
  const auto a = reinterpret_cast<uintptr_t>(p);
  const auto base = reinterpret_cast<uintptr_t>(arena->base());
  const uint64_t end = arena->committed_end_unlocked();
  if (a % kLargeHeader != 0 || a - base < kLargeHeader || a - base > end) return nullptr;
  const auto* h = reinterpret_cast<const LargeHeader*>(a - kLargeHeader);
  if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != (kLargeLive ^ a ^ secret_)) return nullptr;
  if (h->offset + h->pad != a - base || h->extent <= h->pad || h->offset + h->extent > end) return nullptr;
  return h;
}

// Why a free found no live block at p (the arena's lock held).
Status Engine::refuse_large_free(Arena* arena, const void* p) const noexcept {
  const auto a = reinterpret_cast<uintptr_t>(p);
  const auto base = reinterpret_cast<uintptr_t>(arena->base());
  if (a % kLargeHeader == 0 && a - base >= kLargeHeader && a - base <= arena->committed_end()) {
    const uintptr_t magic =
        __atomic_load_n(&reinterpret_cast<const LargeHeader*>(a - kLargeHeader)->magic, __ATOMIC_ACQUIRE) ^ a ^ secret_;
    if (magic == kLargeFreed || magic == kLargeCached) {
      return misuse("double free (the large block is already free)", p);
    }
  }
  return misuse("free of a pointer that is not a live block of this pool (foreign or interior)", p);
}

// A freed block's range back to its arena (the arena's lock held).
void Engine::give_range_back(Arena* arena, const LargeHeader* h) noexcept {
  arena->free(h->offset, h->handle);
  ArenaDelta delta;
  arena->maybe_trim(retain_, &delta);
  counters_.apply(delta);
}

Status Engine::free_large(uint32_t arena_index, void* p) noexcept {
  const auto a = reinterpret_cast<uintptr_t>(p);
  Arena* arena = &arenas_[arena_index];
  if (Heap* heap = large_heap(); heap != nullptr && large_cache_put(heap, arena_index, p)) return Status::ok;
  uint64_t extent = 0, requested = 0;
  {
    FutexGuard lock(arena->mutex());
    LargeHeader* h = large_header(arena, p);
    // Live to freed in one atomic step: another thread caching the same
    // block at once (large_cache_put takes no lock) makes it fail, as a
    // second free.
    uintptr_t live = kLargeLive ^ a ^ secret_;
    if (h == nullptr || !__atomic_compare_exchange_n(&h->magic, &live, kLargeFreed ^ a ^ secret_, false,
                                                     __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
      return refuse_large_free(arena, p);
    }
    extent = h->extent;
    requested = h->requested;
    give_range_back(arena, h);
  }
  account_large(large_heap(), -1, -static_cast<int64_t>(requested), -static_cast<int64_t>(extent));
  return Status::ok;
}

void* Engine::resize_large(uint32_t arena_index, void* p, size_t size) noexcept {
  if (size > huge_threshold_) return nullptr;  // a huge block now: a mapping of its own
  Arena* arena = &arenas_[arena_index];
  int64_t requested = 0, extent = 0;
  {
    FutexGuard lock(arena->mutex());
    LargeHeader* h = large_header(arena, p);
    if (h == nullptr) return nullptr;
    ArenaDelta delta;
    if (arena->resize(h->offset, h->handle, size + h->pad, arena_settings_, &delta) != Status::ok) return nullptr;
    const uint64_t now = arena->ranges().allocation_size(h->offset, h->handle);
    requested = static_cast<int64_t>(size) - static_cast<int64_t>(h->requested);
    extent = static_cast<int64_t>(now) - static_cast<int64_t>(h->extent);
    h->extent = now;
    h->requested = size;
    h->pinned = arena->range_pinned(h->offset, now) ? 1 : 0;
    if (extent < 0) arena->maybe_trim(retain_, &delta);
    counters_.apply(delta);
  }
  account_large(large_heap(), 0, requested, extent);
  return p;
}

}  // namespace unipool::host
