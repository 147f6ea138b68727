// unipool host: the engine's life cycle, pointer lookup and dispatch.
#include "host/engine.hpp"
#include "host/region_pinner.hpp"

#include <sys/resource.h>
#include <time.h>

#include <cstring>

#include <stdexcept>
#include <string>

#include "backend/host_pinner.hpp"
#include "host/engine_fast.hpp"
#include "host/free_link.hpp"

namespace unipool::host {
namespace {

uint64_t make_secret(const void* self) noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  const uint64_t s = mix64(static_cast<uint64_t>(ts.tv_nsec) ^ (static_cast<uint64_t>(ts.tv_sec) << 32) ^
                           reinterpret_cast<uintptr_t>(self));
  return s & ~uint64_t{15};  // keeps cookies distinct from the deferred mark bits
}

backend::os::HugePages to_os(HostHugePages h) noexcept {
  switch (h) {
    case HostHugePages::thp: return backend::os::HugePages::thp;
    case HostHugePages::hugetlb: return backend::os::HugePages::hugetlb;
    case HostHugePages::off:
    case HostHugePages::automatic: break;  // per chunk: ArenaSettings::thp_after
  }
  return backend::os::HugePages::off;
}

// The smallest arena: 64 MiB (the smallest `reserve`) and room for the
// largest large block (config check: huge_threshold <= reserve / 2).
uint64_t min_reserve(const HostPoolConfig& c) noexcept {
  uint64_t floor = round_up(uint64_t{64} << 20, c.chunk);
  if (round_up(2 * c.huge_threshold, c.chunk) > floor) floor = round_up(2 * c.huge_threshold, c.chunk);
  return floor < c.reserve ? floor : c.reserve;
}

// RLIMIT_AS, or ~0 when there is none.
uint64_t address_space_limit() noexcept {
  rlimit as{};
  if (getrlimit(RLIMIT_AS, &as) != 0 || as.rlim_cur == RLIM_INFINITY) return ~uint64_t{0};
  return as.rlim_cur;
}

// Each arena reserves its address space up front. Under an address-space
// limit (RLIMIT_AS: `prlimit --as=8G`, ulimit -v, batch systems) 64 GiB
// cannot be reserved at all, and every program preloaded with the malloc
// face would get NULL from its first malloc where glibc serves it. Arenas
// then reserve a 32nd of the limit (16 arenas at most: half of it, leaving
// the rest to the program, huge blocks and thread stacks); never less than
// 64 MiB and two huge thresholds, so every large block still fits one arena.
// (A `limit` caps commits, not reservations: it needs no smaller arenas.)
uint64_t fit_reserve(const HostPoolConfig& c, uint64_t address_space) noexcept {
  uint64_t r = c.reserve;
  if (address_space / 32 < r) r = address_space / 32;
  r = r / c.chunk * c.chunk;
  const uint64_t floor = min_reserve(c);
  return r > floor ? r : floor;
}

}  // namespace

Engine::Engine(const HostPoolConfig& config) : config_(config) {
  const char* why = nullptr;
  if (config_.check(&why) != Status::ok) throw std::invalid_argument(std::string("unipool host pool: ") + why);
  secret_ = make_secret(this);
  hardened_ = config_.hardened;
  middle_max_ = config_.middle_max_or_default();
  while (middle_classes_ < kNumClasses && kClassSize[middle_classes_] <= middle_max_) ++middle_classes_;
  huge_threshold_ = config_.huge_threshold;
  switch (config_.thread_cache) {
    case HostThreadCache::unlimited:
      heap_cache_limit_ = ~uint64_t{0};
      segments_.set_cache_limit(~uint64_t{0});
      break;
    case HostThreadCache::performance:
      heap_cache_limit_ = uint64_t{4} << 20;
      segments_.set_cache_limit(4);
      break;
    case HostThreadCache::size:
    case HostThreadCache::none:
      heap_cache_limit_ = 0;
      segments_.set_cache_limit(0);
      break;
  }
  const bool lean = config_.thread_cache == HostThreadCache::size || config_.thread_cache == HostThreadCache::none;
  retain_ = config_.retain != ~uint64_t{0} ? config_.retain : (lean ? 0 : uint64_t{256} << 20);
  // With a limit every arena allocation is serialized (engine_large.cpp):
  // shards would only add arenas. So they would when the arenas of all
  // shards took over a quarter of the allowed address space (RLIMIT_AS):
  // there the program's own mappings come first.
  const uint64_t address_space = address_space_limit();
  arena_settings_.reserve = fit_reserve(config_, address_space);
  const bool tight = kLargeShards * arena_settings_.reserve > address_space / 4;
  shards_ = config_.limit != 0 || tight ? 1 : kLargeShards;
  arena_settings_.min_reserve = min_reserve(config_);
  if (address_space / 32 < arena_settings_.min_reserve) shrink_for_address_space();
  huge_.set_cache_limits(config_.huge_cache, config_.huge_cache_bytes);
  arena_settings_.chunk = config_.chunk;
  arena_settings_.max_pin = config_.max_pin;
  arena_settings_.pinned = config_.pinned;
  arena_settings_.commit.huge_pages = to_os(config_.huge_pages);
  arena_settings_.thp_after = config_.huge_pages == HostHugePages::automatic ? kHostAutoThpAfter : ~uint64_t{0};
  arena_settings_.commit.numa_node = config_.numa_node;
  arena_settings_.commit.first_touch = config_.first_touch == 1 || (config_.first_touch == -1 && config_.numa_node >= 0);
  uint64_t generation = 0;
  if (!registry_add(this, &registry_slot_, &generation)) {
    throw std::runtime_error("unipool host pool: too many pools alive at once (at most 127)");
  }
  for (uint32_t c = 0; c < kNumClasses; ++c)
    block_cache_limit_[c] = block_cache_limit(config_.thread_cache, config_.hardened, kClassSize[c]);
  if (config_.thread_cache != HostThreadCache::none) {
    slot_ = registry_slot_;
    generation_ = generation;
  }
}

// A very small address-space limit (tens of MiB: no 64 MiB arena fits
// beside the program's own mappings): glibc still runs such programs, so
// the pool makes do with arenas of two segments, and blocks above one
// segment become mappings of their own.
void Engine::shrink_for_address_space() noexcept {
  tiny_address_space_ = true;
  if (huge_threshold_ > kSegmentSize) huge_threshold_ = kSegmentSize;
  arena_settings_.min_reserve = round_up(2 * kSegmentSize, config_.chunk);
  arena_settings_.reserve = arena_settings_.min_reserve;
}

Engine::~Engine() {
  // First: the thread appends to the arenas; joined, it has no claim left,
  // and the arenas unregister what it pinned with the rest.
  pin_.stop();
  registry_remove(registry_slot_);
  deferred_.drain([](const DeferredEntry& e) {
    try {
      e.source->release(e.fence);
    } catch (...) {
    }
  });
  huge_.drain([this](const HugeEntry& e) { unmap_huge(reinterpret_cast<char*>(e.ptr), e.map_bytes, e.pinned); });
  drop_huge_cache();
  for (uint32_t i = 0; i < arena_count_.load(std::memory_order_relaxed); ++i) arenas_[i].destroy(arena_settings_);
  for (Heap* list : {heaps_, free_heaps_}) {
    while (list != nullptr) {
      Heap* next = list->next;
      backend::os::unmap_metadata(list, sizeof(Heap));
      list = next;
    }
  }
  InternalScope internal;
  pinner_.reset();
}

// ---- where a pointer is ---------------------------------------------------------

Engine::Located Engine::locate(const void* p) const noexcept {
  const auto a = reinterpret_cast<uintptr_t>(p);
  const uint32_t count = arena_count_.load(std::memory_order_acquire);
  for (uint32_t i = 0; i < count; ++i) {
    const Arena& arena = arenas_[i];
    if (!arena.contains(a)) continue;
    Located loc;
    loc.arena = const_cast<Arena*>(&arena);
    loc.arena_index = i;
    if (arena.slot_kind(a) == kSlotSegment) {
      loc.kind = Kind::small;
      loc.page = Segment::of(p)->page_of(p);
    } else {
      loc.kind = Kind::large;
    }
    return loc;
  }
  Located loc;
  loc.kind = Kind::huge;
  return loc;
}

Status Engine::misuse(const char* what, const void* p) const noexcept {
  counters_.misuse.fetch_add(1, std::memory_order_relaxed);
  return fail(Status::not_live, Message{}.add("unipool host pool: ").add(what).add(" (pointer ").add_ptr(p).add(")"));
}

Status Engine::check_block(Page* page, const void* p) const noexcept {
  const uint64_t off = page->page_offset_of(p);
  const uint64_t extended = page->extended.load(std::memory_order_relaxed);
  if (page->owner.load(std::memory_order_relaxed) == kOwnerNone || extended == 0 ||
      off >= extended * page->block_size) {
    return misuse("free of a pointer inside the pool that no allocation returned", p);
  }
  const uint64_t idx = (off * page->reciprocal) >> 32;
  if (idx * page->block_size != off) {
    return misuse("free of an interior pointer (not the start of its block)", p);
  }
  // Free: on a list (its cookie) or in its owner's block cache (its bit).
  // Only the owner reads the bit here: for another thread it is a line the
  // owner keeps writing. A block of the owner's cache that another thread
  // frees again is caught when the owner collects it (collect_remote), or
  // here when it was cached with its cookie (owned_live_block).
  const auto* b = static_cast<const Block*>(p);
  const bool owner = page->owner.load(std::memory_order_relaxed) == reinterpret_cast<uintptr_t>(t_thread);
  if (b->cookie == (reinterpret_cast<uintptr_t>(p) ^ secret_) || (owner && !block_is_live(p))) {
    return misuse("double free (the block is already free)", p);
  }
  return Status::ok;
}

// ---- dispatch ----------------------------------------------------------------------

void* Engine::allocate_hardened(size_t size) noexcept { return allocate_as<true>(size); }

// A refusal for lack of memory is retried once when this thread's block
// cache gave blocks back (they may free a page, and with it a segment).
void* Engine::allocate_slow(size_t size, size_t alignment, bool* fresh) noexcept {
  void* p = allocate_slow_once(size, alignment, fresh);
  if (p == nullptr && relieve_pressure()) p = allocate_slow_once(size, alignment, fresh);
  return p;
}

void* Engine::allocate_slow_once(size_t size, size_t alignment, bool* fresh) noexcept {
  if (fresh != nullptr) *fresh = false;
  if (size == 0) {
    fail(Status::zero_size, "unipool host pool: allocation of 0 bytes");
    return nullptr;
  }
  if (alignment != 0 && !is_power_of_two(alignment)) {
    fail(Status::bad_alignment,
         Message{}.add("unipool host pool: alignment ").add_dec(alignment).add(" is not a power of two"));
    return nullptr;
  }
  if (alignment <= 16) alignment = 0;
  if (size > (uint64_t{1} << 56) || alignment > (uint64_t{1} << 40)) {
    fail(Status::too_large, Message{}.add("unipool host pool: allocation of ").add_dec(size).add(" bytes is too large"));
    return nullptr;
  }
  ensure_fork_handlers();
  if (t_internal != 0) return allocate_huge(size, alignment, true, fresh);
  maybe_collect_deferred();
  if (size <= middle_max_ && alignment <= kMaxClassAlignment) {
    const uint32_t cls = alignment != 0 ? aligned_class(size, alignment) : class_of(size);
    if (cls < middle_classes_) {
      if (Heap* heap = heap_for_thread()) {
        const uint32_t cached = heap->hot[cls].cached();
        if (cached != 0) return take_cached(heap->hot[cls], cached);
        Page* page = heap->hot[cls].page;
        if (page->free != nullptr) {
          Block* b = pop_block(page);
          if (b != nullptr) bump(heap->hot[cls].allocs);
          return b;
        }
        return heap_alloc_slow(heap, cls);
      }
      return shared_alloc(cls);
    }
  }
  // An arena's base is aligned to a segment only, so its offsets cannot give
  // a larger alignment (and a large block's pad must fit 32 bits): such
  // blocks get a mapping of their own, which reserve() aligns to anything.
  if (size > huge_threshold_ || alignment > kSegmentSize) return allocate_huge(size, alignment, false, fresh);
  void* p = allocate_large(size, alignment, fresh);
  // Under a tiny address-space limit a new arena may not fit where a mapping
  // of the block's own size still does (glibc serves it that way).
  if (p == nullptr && tiny_address_space_) p = allocate_huge(size, alignment, false, fresh);
  return p;
}

void* Engine::allocate_zeroed(size_t size) noexcept {
  bool fresh = false;
  // Small and middle blocks come from free lists: always cleared. A large or
  // huge block new from the OS reads zero: clearing it would only fault in
  // every page (a big calloc the program then touches sparsely).
  void* p = size - 1 < middle_max_ ? allocate(size) : allocate_slow(size, 0, &fresh);
  if (p != nullptr && !fresh) std::memset(p, 0, size);
  return p;
}

// A block that still fits, wasting at most half of it, stays; a huge block
// is resized by the kernel where it can be (resize_huge), a large one in its
// arena (resize_large: into the free range after it, or its tail given
// back); anything else moves: a new block, the bytes copied, the old one
// freed.
void* Engine::reallocate(void* p, size_t size) noexcept {
  if (p == nullptr) return allocate(size);
  const size_t usable = usable_size(p);
  if (usable == 0) {
    misuse("reallocate of a pointer that is not a live block of this pool (foreign, interior or freed)", p);
    return nullptr;
  }
  if (size == 0) return allocate(size);  // refused, and says why; p stays
  const Located loc = locate(p);
  if (loc.kind == Kind::huge) {
    if (void* resized = resize_huge(p, size)) return resized;
  }
  if (size <= usable && size >= usable / 2) return p;
  if (loc.kind == Kind::large && size > middle_max_) {
    if (void* resized = resize_large(loc.arena_index, p, size)) return resized;
  }
  void* moved = allocate(size);
  if (moved == nullptr) return nullptr;
  std::memcpy(moved, p, size < usable ? size : usable);
  free(p);
  return moved;
}

Status Engine::free_slow(void* p) noexcept {
  if (p == nullptr) return Status::ok;
  if (deferred_.count() != 0 && is_deferred(p)) {
    return misuse("free of a block already freed with free_after (double free)", p);
  }
  return free_located(p);
}

Status Engine::free_located(void* p) noexcept {
  const Located loc = locate(p);
  switch (loc.kind) {
    case Kind::small: {
      const Status s = check_block(loc.page, p);
      if (s != Status::ok) return s;
      return free_block(loc.page, static_cast<Block*>(p));
    }
    case Kind::large: return free_large(loc.arena_index, p);
    case Kind::huge:
    case Kind::none: break;
  }
  return free_huge(p);
}

Engine::Footprint Engine::footprint(const void* p) const noexcept {
  const Located loc = locate(p);
  if (loc.kind == Kind::small) {
    // Small blocks count their class size as requested too (see stats()).
    if (check_block(loc.page, p) != Status::ok) return {};
    return {loc.page->block_size, loc.page->block_size};
  }
  if (loc.kind == Kind::large) {
    FutexGuard lock(loc.arena->mutex());
    const LargeHeader* h = large_header(loc.arena, p);
    return h ? Footprint{h->extent, h->requested} : Footprint{};
  }
  HugeEntry e;
  return huge_.find(p, &e) ? Footprint{e.map_bytes, e.requested} : Footprint{};
}

size_t Engine::usable_size(const void* p) const noexcept {
  if (p == nullptr) return 0;
  if (deferred_.count() != 0 && is_deferred(p)) return 0;
  // This thread's own live block: the free path's proof, no page descriptor.
  LiveWord live;
  if (const HeapClassHot* hot = owned_live_block(p, &live)) return hot->block_size;
  const Located loc = locate(p);
  if (loc.kind == Kind::small) {
    // No error recorded here: asking is not misuse.
    const Page* page = loc.page;
    const uint64_t off = page->page_offset_of(p);
    const uint64_t extended = page->extended.load(std::memory_order_relaxed);
    if (page->owner.load(std::memory_order_relaxed) == kOwnerNone || off >= extended * page->block_size) return 0;
    if (((off * page->reciprocal) >> 32) * page->block_size != off) return 0;
    if (static_cast<const Block*>(p)->cookie == (reinterpret_cast<uintptr_t>(p) ^ secret_)) return 0;
    if (!block_is_live(p)) return 0;  // in its owner's block cache
    return page->block_size;
  }
  if (loc.kind == Kind::large) {
    // No lock: the malloc face asks on every realloc and malloc_usable_size.
    const LargeHeader* h = large_header_unlocked(loc.arena, p);
    return h ? h->extent - h->pad : 0;
  }
  HugeEntry e;
  return huge_.find(p, &e) ? e.map_bytes : 0;
}

bool Engine::is_pinned(const void* p) const noexcept {
  if (usable_size(p) == 0) return false;
  const Located loc = locate(p);
  if (loc.kind == Kind::small) {
    const Segment* seg = Segment::of(p);
    FutexGuard lock(arenas_[loc.arena_index].mutex());
    return loc.arena->range_pinned(seg->range_offset, kSegmentSize);
  }
  if (loc.kind == Kind::large) {
    FutexGuard lock(loc.arena->mutex());
    const LargeHeader* h = large_header(loc.arena, p);
    return h != nullptr && h->pinned != 0;
  }
  HugeEntry e;
  return huge_.find(p, &e) && e.pinned;
}

// ---- maintenance ----------------------------------------------------------------------

void Engine::trim() noexcept {
  drain_epoch_.fetch_add(1, std::memory_order_relaxed);  // the other threads' block caches, at their next slow call
  flush_thread_cache();
  collect_deferred();
  drop_huge_cache();
  {
    // Cached segments go back to their arenas first.
    LockGuard lock(segments_.lock());
    const auto any = [](const Segment&) { return true; };
    while (Segment* seg = segments_.take_cached_locked(any)) {
      segments_.forget_locked(seg);
      release_segment(seg);
    }
  }
  ArenaDelta delta;
  for (uint32_t i = 0; i < arena_count_.load(std::memory_order_acquire); ++i) {
    FutexGuard lock(arenas_[i].mutex());
    arenas_[i].trim(0, &delta);
  }
  counters_.apply(delta);
}

PinningState Engine::pinning_state() const noexcept {
  if (config_.pinned == HostPinned::off) return PinningState::pageable;
  // Looked up now if no allocation did yet: "pinned" before the first
  // allocation of a pool that cannot pin would be a promise it cannot keep.
  const_cast<Engine*>(this)->ensure_pinner();
  if (!pin_available_) return PinningState::pageable_no_gpu;
  if (counters_.pin_failures.load(std::memory_order_relaxed) != 0) return PinningState::partially_pinned;
  return PinningState::pinned;
}

// ---- fork ---------------------------------------------------------------------------

// Every lock, held across fork() until fork_release (not analysed).
UNIPOOL_NO_THREAD_SAFETY_ANALYSIS void Engine::fork_prepare() noexcept {
  heaps_lock_.lock();
  for (SharedClass& sc : shared_) sc.lock.lock();
  segments_.lock().lock();
  setup_lock_.lock();
  for (const Arena& a : arenas_) a.mutex().lock();
  huge_.lock().lock();
  deferred_.lock().lock();
  pin_.fork_lock();
  if (regions_ != nullptr) regions_->fork_lock();
  history_.fork_lock();
}

UNIPOOL_NO_THREAD_SAFETY_ANALYSIS void Engine::fork_release(bool child) noexcept {
  history_.fork_unlock();
  if (regions_ != nullptr) regions_->fork_unlock();
  if (child) {
    // The child has no pinning thread: a claim will never be appended (the
    // range is committed again when an allocation grows over it).
    for (Arena& a : arenas_) a.drop_ahead();
  }
  pin_.after_fork(child);  // unlocks the thread's lock
  deferred_.lock().unlock();
  huge_.lock().unlock();
  for (uint32_t i = kMaxArenas; i-- > 0;) arenas_[i].mutex().unlock();
  setup_lock_.unlock();
  segments_.lock().unlock();
  for (uint32_t c = kNumClasses; c-- > 0;) shared_[c].lock.unlock();
  heaps_lock_.unlock();
  if (!child) return;
  // The child has one thread: the heaps of the others will never be used
  // again. Give their pages to the shared lists, so frees find an owner.
  for (;;) {
    Heap* orphan = nullptr;
    {
      LockGuard lock(heaps_lock_);
      for (Heap* h = heaps_; h != nullptr; h = h->next) {
        if (h->thread != t_thread) {
          orphan = h;
          break;
        }
      }
    }
    if (orphan == nullptr) break;
    retire_heap(orphan);
  }
}

}  // namespace unipool::host
