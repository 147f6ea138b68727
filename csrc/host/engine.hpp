// unipool host: the engine behind unipool::HostPool.
//
// Paths by size (docs/host_pool.md):
//   small/middle  thread heaps (heap.hpp) over segments (layout.hpp), or the
//                 shared class lists when thread caches are off
//   large         blocks with a 64-byte header, from the arenas, the ones up
//                 to 256 KiB through the threads' large caches (large_cache.hpp)
//   huge          own mappings, in the books of huge_blocks.hpp with a small cache
//
// Locks, always taken in this order: registry (thread_state.cpp) -> heaps_lock_
// -> shared_[c].lock -> segments_.lock() -> setup_lock_ -> arenas_[i].mutex (one at
// a time; several only in validate() and fork, by index) -> huge_.lock();
// deferred_.lock() and the pinning thread's lock are never held while another is taken; the
// region pinner's lock (region_pinner.hpp) comes after any of the others but
// the history's lock (history.hpp), which is taken last of all, under any of them. The fast paths of
// engine_fast.hpp take none.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "host/arena.hpp"
#include "host/counters.hpp"
#include "host/deferred_frees.hpp"
#include "host/errors.hpp"
#include "host/heap.hpp"
#include "host/history.hpp"
#include "host/huge_blocks.hpp"
#include "host/huge_table.hpp"
#include "host/layout.hpp"
#include "host/lock.hpp"
#include "host/pin_thread.hpp"
#include "host/segment_store.hpp"
#include "host/size_classes.hpp"
#include "host/thread_state.hpp"
#include "unipool/fence.hpp"
#include "unipool/host_config.hpp"
#include "unipool/host_pool.hpp"
#include "unipool/host_stats.hpp"

namespace unipool::backend {
class HostPinner;
}

namespace unipool::host {

class RegionPinner;

inline constexpr uint32_t kMaxArenas = 16;
static_assert(kMaxArenas <= PinThread::kMaxArenas, "the pinning thread's queue has a bit per arena");
// Threads spread their large blocks over this many arenas, each with its own
// lock (engine_large.cpp).
inline constexpr uint32_t kLargeShards = 8;
inline constexpr uint32_t kNoArena = ~uint32_t{0};
inline constexpr uint64_t kLargeHeader = 64;
inline constexpr uint8_t kNoClass = 255;  // a page a heap keeps empty

// The header in front of every large block.
struct LargeHeader {
  uintptr_t magic;       // kLargeLive / kLargeCached / kLargeFreed ^ user address ^ secret
  uint64_t handle;       // the range allocator's
  uint64_t offset;       // of the block in its arena
  uint64_t extent;       // bytes the block occupies in the arena
  uint64_t requested;
  uint32_t arena;
  uint32_t pad;          // user address - block start (64, or the alignment)
  uint8_t pinned;
};
static_assert(sizeof(LargeHeader) <= kLargeHeader);
inline constexpr uintptr_t kLargeLive = 0x756e69706f6f6c4cull;   // "unipoolL"
inline constexpr uintptr_t kLargeFreed = 0x756e69706f6f6c46ull;  // "unipoolF"
inline constexpr uintptr_t kLargeCached = 0x756e69706f6f6c43ull;  // "unipoolC": in a large cache

// What arena_allocate() carved, read under the arena's lock.
struct ArenaGrant {
  RangeAllocation range;
  uint32_t index = 0;   // arena
  uint64_t extent = 0;  // bytes the range occupies
  bool pinned = false;  // every chunk under it is pinned
  bool fresh = false;   // never handed out since committed: reads zero
};

// The shared list of one size class: pages owned by no thread.
struct alignas(64) SharedClass {
  // A futex lock, not a pthread mutex: validate() and fork_prepare() hold
  // every class's lock at once, and ThreadSanitizer's deadlock detector
  // follows at most 64 pthread mutexes held by one thread (64 classes, with
  // the pages, heaps and setup locks, passed it).
  mutable FutexMutex lock;     // validate() takes it on a const pool
  Page* page = &g_empty_page;  // current page
  PageList avail;
  PageList full;
  std::atomic<uint32_t> adoptable{0};     // pages on avail a heap may take
  std::atomic<uint64_t> allocs{0};        // by the shared path (under the lock)
  std::atomic<uint64_t> frees{0};         // by threads without a heap in this pool
  std::atomic<uint64_t> retired_allocs{0};  // counts of heaps given back
  std::atomic<uint64_t> retired_frees{0};
  std::atomic<uint64_t> refills{0};
  std::atomic<bool> remote_hint{false};   // a shared page got a lock-free push
};

class Engine {
 public:
  explicit Engine(const HostPoolConfig& config);  // throws std::invalid_argument / std::runtime_error
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // ---- fast paths: engine_fast.hpp ----
  inline void* pop_fast(uint32_t cls) noexcept;  // nullptr: take the slow path
  inline void* allocate(size_t size) noexcept;
  // The fast paths alone, for the malloc face: a block, or nullptr when
  // only allocate() can tell (size 0, large, nothing cached or on the page).
  inline void* allocate_fast(size_t size) noexcept;
  // The fast paths' code for one mode. hardened=on runs an out-of-line copy
  // (a tail call at the top of allocate), so the default mode's inlined code
  // keeps no register across a call it does not make.
  template <bool kHardened>
  inline void* pop_fast_as(uint32_t cls) noexcept;
  template <bool kHardened>
  inline void* allocate_as(size_t size) noexcept;
  void* allocate_hardened(size_t size) noexcept;
  inline void* allocate_aligned(size_t size, size_t alignment) noexcept;
  inline void* allocate_aligned_fast(size_t size, size_t alignment) noexcept;  // a power of two > 16
  inline Status free(void* p) noexcept;
  // This thread's free of its own live block: true when done; false, with
  // nothing done, for any other pointer (nullptr too), which free() judges.
  inline bool free_owned(void* p) noexcept;
  // The word of p's live bit as the test read it (owned_live_block), and
  // whether other threads' frees were pending on its page.
  struct LiveWord {
    uint64_t* word;
    uint64_t bits;
    uint64_t mask;
    bool remote_pending;
  };
  inline HeapClassHot* owned_live_block(const void* p, LiveWord* live) const noexcept;

  // ---- slow paths and the rest ----
  // *fresh (if given): the block is new memory from the OS, never handed out
  // since, so it reads zero.
  void* allocate_slow(size_t size, size_t alignment, bool* fresh = nullptr) noexcept;
  // A block of `size` zero bytes (calloc): cleared unless fresh.
  void* allocate_zeroed(size_t size) noexcept;
  Status free_slow(void* p) noexcept;
  Status free_after(void* p, FenceSource& source, FenceId fence) noexcept;
  // HostPool::reallocate: nullptr with the reason set, p still live.
  void* reallocate(void* p, size_t size) noexcept;
  size_t collect_deferred() noexcept;
  size_t usable_size(const void* p) const noexcept;
  bool is_pinned(const void* p) const noexcept;
  void flush_thread_cache() noexcept;
  void trim() noexcept;
  // HostPool::set_region_hooks.
  Status set_region_hooks(HostRegionHooks hooks);
  HostPoolStats stats() const noexcept;
  void reset_peak_stats() noexcept;
  PinningState pinning_state() const noexcept;
  const HostPoolConfig& config() const noexcept { return config_; }
  History& history() noexcept { return history_; }
  const History& history() const noexcept { return history_; }
  bool validate(std::string* why) const;
  // Returns when the pinning thread has nothing asked of it and nothing in
  // flight (at once without one).
  void wait_for_pinning() const noexcept;

  // Thread exit (registry lock held) and fork (thread_state.cpp).
  void retire_heap(Heap* heap) noexcept;
  void fork_prepare() noexcept;
  void fork_release(bool child) noexcept;

 private:
  friend struct EngineAccess;

  // What a pointer is, found without touching its memory.
  enum class Kind : uint8_t { none, small, large, huge };
  struct Located {
    Kind kind = Kind::none;
    Arena* arena = nullptr;
    Page* page = nullptr;
    uint32_t arena_index = 0;
  };
  Located locate(const void* p) const noexcept;
  // Checks that p is a live small/middle block of `page`: Status::ok or
  // not_live with the reason recorded.
  Status check_block(Page* page, const void* p) const noexcept;
  Status free_located(void* p) noexcept;  // free_slow() past the deferral check
  void* allocate_slow_once(size_t size, size_t alignment, bool* fresh) noexcept;  // allocate_slow without the retry

  // ---- small and middle (engine_small.cpp, engine_pages.cpp) ----
  Heap* heap_for_thread() noexcept;
  void* heap_alloc_slow(Heap* heap, uint32_t cls) noexcept;
  template <class Queue>
  void* alloc_from_queue(Queue& q) noexcept;  // heap_alloc_slow's and shared_alloc's loop
  template <class Queue>
  Page* reclaim_full(Queue& q, bool* damaged) noexcept;
  void heap_free_slow(Heap* heap, Page* page) noexcept;
  void shed_page(Heap* heap, Page* page) noexcept;
  uint32_t shed_threshold(uint32_t cls, uint32_t capacity) const noexcept;  // Page::shed_at
  void* shared_alloc(uint32_t cls) noexcept;
  Status free_block(Page* page, Block* block) noexcept;  // after the checks: counted, then given back
  void count_free(uint32_t cls) noexcept;
  // A free block back to its page, however it is owned (counted already).
  // `self`: the thread giving it back (a heap's thread, or none).
  void give_back(uintptr_t self, Page* page, Block* block) noexcept;
  void give_back_shared(uintptr_t self, Page* page, Block* block) noexcept;
  // A chain first -> ... -> last (linked already) onto the page's remote list.
  void push_remote(Page* page, Block* first, Block* last) noexcept;

  // ---- the block cache (block_cache.hpp, engine_cache.cpp) ----
  inline void* take_cached(HeapClassHot& hot, uint32_t cached) noexcept;  // the top block (cached: hot.cached() != 0)
  inline void cache_push(HeapClassHot& hot, Block* b, uint32_t cached) noexcept;  // cached: hot.cached()
  // An owner's free that finds its class's cache full (the older half of
  // the cache, then the block, to the pages) or has none (hardened=on: the
  // block alone).
  void free_uncached(Page* page, Block* b) noexcept;
  void drain_cache(Heap* heap, uint32_t cls, uint32_t n) noexcept;  // the oldest n back to their pages
  void drain_caches(Heap* heap) noexcept;                           // every class
  // The cached blocks of `page` back to its local list (before it leaves its heap).
  void drain_page(Heap* heap, Page* page) noexcept;
  // After a refusal for lack of memory: this thread's cache back, the
  // others' asked for. True when a retry may succeed.
  bool relieve_pressure() noexcept;
  void check_drain_epoch(Heap* heap) noexcept;
  Page* acquire_page(Heap* heap, uint32_t cls) noexcept;
  Page* take_shared_page(uint32_t cls, ThreadState* thread, Heap* heap) noexcept;
  void release_page(Page* page) noexcept;  // empty page back to its segment
  void set_owner(Page* page, Heap* heap, uintptr_t owner) noexcept;
  void retire_empty_page(Heap* heap, Page* page) noexcept;
  // A segment of `kind` added to the store, every page free: a cached one
  // re-formatted, else a new range, from arena 0 first (where the fast free
  // path looks), else any other; nullptr (reported) when no arena has room.
  Segment* new_segment(uint8_t kind) noexcept UNIPOOL_REQUIRES(segments_.lock());
  // Its range back to its arena (the store no longer holds it).
  void release_segment(Segment* segment) noexcept UNIPOOL_REQUIRES(segments_.lock());
  // huge_pages=auto for dense segments (blocks up to 1 KiB; engine_pages.cpp).
  bool wants_huge_pages(uint32_t arena, uint64_t offset, bool dense) const noexcept;
  void advise_segment(Segment* segment, bool dense) noexcept;
  Segment* take_cached_segment(bool dense) noexcept UNIPOOL_REQUIRES(segments_.lock());
  void format_page(Page* page, uint32_t cls) noexcept;
  bool extend_page(Page* page) noexcept;
  // Moves the remote frees to the local list; *damaged (if given) is set when
  // a damaged block ended the walk (reported, dropped).
  uint32_t collect_remote(Page* page, bool* damaged = nullptr) noexcept;
  void flush_class(Heap* heap, uint32_t cls) noexcept;
  void maybe_flush_class(Heap* heap, uint32_t cls) noexcept;
  static constexpr int64_t kFlushBytes = 64 << 10;  // live-count drift folded at once
  void abandon_pages(Heap* heap) noexcept;
  // nullptr (reported) when the block at the head of the list fails its checks.
  Block* pop_block(Page* page) noexcept;

  // ---- free-list links (free_link.hpp; reports: engine_corruption.cpp) ----
  inline void set_link(const Page* page, Block* block, const Block* next) const noexcept;
  // The page's local list, one block at a time, written once for the fast
  // and the slow paths. The caller owns the page (its owner thread, or the
  // shared class's lock) and checked the block: push_local takes a live
  // block back (returns the page's live blocks after), take_local hands out
  // the head `b` whose checked successor is `next`.
  inline uint32_t push_local(Page* page, Block* block) noexcept;
  inline void take_local(Page* page, Block* b, Block* next) noexcept;
  // The owner's free onto the page's list, then the heap's look at the page
  // when it emptied, left the full list or reached shed_at.
  inline void free_local(Heap* heap, Page* page, Block* b) noexcept;
  // The block after `block` on its list, checked as the mode asks before
  // anyone follows it; false: `block` was written after it was freed.
  inline bool next_of(const Page* page, const Block* block, Block** next) const noexcept;
  template <bool kHardened>
  inline bool next_as(const Page* page, const Block* block, Block** next) const noexcept;
  // Every check, whatever the mode (slow paths, validate()).
  inline bool next_checked(const Page* page, const Block* block, Block** next) const noexcept;
  // Counts and reports a free block found written after it was freed (the
  // caller drops it and the rest of its list, never following the link).
  // double_free: the block was already free for its owner when another
  // thread freed it (found when the owner collects remote frees).
  void report_corruption(const Page* page, const Block* block, bool double_free = false) const noexcept;
  void report_large_corruption(const void* block) const noexcept;
  void report_corruption(const Message& what) const noexcept;

  // ---- large (engine_large.cpp) ----
  void* allocate_large(size_t size, size_t alignment, bool* fresh) noexcept;
  Status free_large(uint32_t arena_index, void* p) noexcept;
  // reallocate's first try for a large block: p grown into the free range
  // after it or shrunk in place; nullptr: copy instead.
  void* resize_large(uint32_t arena_index, void* p, size_t size) noexcept;
  LargeHeader* large_header(Arena* arena, const void* p) const noexcept UNIPOOL_REQUIRES(arena->mutex()) {
    return large_header_as(arena, p, kLargeLive);
  }
  // p's header if its magic says `state` (kLargeLive, kLargeCached) and the
  // range allocator agrees.
  LargeHeader* large_header_as(Arena* arena, const void* p, uintptr_t state) const noexcept
      UNIPOOL_REQUIRES(arena->mutex());
  // The same checks but the range allocator's (no lock): for usable_size().
  const LargeHeader* large_header_unlocked(const Arena* arena, const void* p) const noexcept;
  // A range, from arena `preferred` first, then any other; adds an arena when
  // all are full. Takes each arena's lock in turn.
  Status arena_allocate(uint32_t preferred, uint64_t size, uint64_t alignment, ArenaGrant* out, Message* why) noexcept;
  // used_only: only memory the arena handed out before (Arena::allocate_used).
  Status try_arena(uint32_t i, uint64_t size, uint64_t alignment, ArenaGrant* out, Message* why, ArenaBlocked* blocked,
                   bool used_only = false) noexcept;
  Status large_range(Heap* heap, uint64_t bytes, uint64_t range_alignment, ArenaGrant* g, Message* why) noexcept;
  Status try_arena_waiting(uint32_t i, uint64_t size, uint64_t alignment, ArenaGrant* out, Message* why,
                           ArenaBlocked* blocked, bool serial) noexcept;
  bool add_arena(Message* why) noexcept UNIPOOL_REQUIRES(setup_lock_);
  void shrink_for_address_space() noexcept;  // constructor: arenas for a tiny RLIMIT_AS
  uint32_t arena_of_shard(uint32_t shard) noexcept;
  // Live large blocks changed by (blocks, requested, extent): into the
  // calling thread's heap tally, folded at kLargeFoldBytes, or straight into
  // the gauges for a thread without a heap.
  void account_large(Heap* heap, int64_t blocks, int64_t requested, int64_t extent) noexcept;
  Heap* large_heap() const noexcept;  // the calling thread's heap of this pool, or null
  // ---- the threads' large caches (engine_large_cache.cpp, large_cache.hpp) ----
  // The arena bytes a request of `size` takes to fit its class of the
  // heap's large cache; 0 when the cache cannot hold it.
  uint64_t large_cache_fit(Heap* heap, size_t size, size_t alignment) const noexcept;
  void* large_cache_take(Heap* heap, size_t size) noexcept;                // nullptr: none cached
  bool large_cache_put(Heap* heap, uint32_t arena_index, void* p) noexcept;  // false: free it the locked way
  void large_cache_drain(Heap* heap, uint32_t cls, uint32_t n) noexcept;   // the n oldest of class cls
  void large_cache_make_room(Heap* heap, uint32_t cls) noexcept;
  bool is_class_block(const LargeHeader* h, const void* p, uint32_t cls) const noexcept;
  void large_cache_drain_all(Heap* heap) noexcept;
  bool large_cache_release(void* p, uint32_t cls) noexcept;
  Status refuse_large_free(Arena* arena, const void* p) const noexcept UNIPOOL_REQUIRES(arena->mutex());
  void give_range_back(Arena* arena, const LargeHeader* h) noexcept UNIPOOL_REQUIRES(arena->mutex());
  uint32_t large_arena_of(Heap* heap) noexcept;  // the arena of the thread's shard
  void fold_large(Heap* heap) noexcept;
  struct LargeSums {
    int64_t blocks = 0, requested = 0, extent = 0;
    int64_t cached_blocks = 0, cached_extent = 0;  // in the heaps' large caches
  };
  LargeSums count_large_tallies() const noexcept UNIPOOL_REQUIRES(heaps_lock_);
  void ensure_pinner() noexcept;
  // pinned=on with no device to pin with: true, with the reason in `why`.
  bool cannot_pin(Message* why) const noexcept;
  uint64_t headroom() const noexcept;

  // ---- the pinning thread (engine_pin_thread.cpp) ----
  void start_pin_thread() noexcept UNIPOOL_REQUIRES(setup_lock_);
  bool pin_ahead(uint32_t arena) noexcept;  // the thread's job: one claim; true: the arena wants more
  // Arena `i` (its lock held) may want chunks ahead: tell the thread.
  void want_ahead(uint32_t i) noexcept;
  bool validate_paused(std::string* why) const;

  // ---- huge (engine_huge.cpp) ----
  void* allocate_huge(size_t size, size_t alignment, bool internal, bool* fresh = nullptr) noexcept;
  bool map_new_huge(size_t size, uint64_t bytes, uint64_t align, HugeEntry* e) noexcept;
  bool pin_huge(HugeEntry* e) noexcept;
  Status free_huge(void* p) noexcept;
  void* resize_huge(void* p, size_t size) noexcept;  // nullptr: copy instead
  void unmap_huge(char* base, uint64_t bytes, bool pinned) noexcept;
  void unmap_huge_mappings(const HugeMapping* mappings, uint32_t n) noexcept;
  // A new committed mapping of `bytes` (for a request of `size`), counted;
  // nullptr, with the reason set, when the limit or the OS refuses.
  char* map_huge(size_t size, uint64_t bytes, uint64_t align, bool internal) noexcept;
  void fail_commit(size_t size, uint64_t bytes, const backend::os::CommitResult& c) const noexcept;
  void drop_huge_cache() noexcept;

  // ---- deferred (engine_deferred.cpp) ----
  void maybe_collect_deferred() noexcept;
  // Live small/middle blocks per class from the counters, and the bytes not
  // yet folded into the gauges.
  // cached (if given): blocks in the heaps' block caches, added per class.
  void count_small(int64_t live[kNumClasses], uint64_t refills[kNumClasses], int64_t* unflushed,
                   uint64_t* cached = nullptr) const noexcept UNIPOOL_REQUIRES(heaps_lock_);
  // stats(), in parts (engine_stats.cpp).
  struct LiveSums {
    int64_t small_bytes = 0;  // live small and middle blocks, at their class sizes
    LargeSums large;          // large tallies not folded into the gauges yet
  };
  struct SegmentSums {
    uint64_t bytes = 0, overhead = 0;
  };
  LiveSums count_live(HostPoolStats& st) const noexcept;
  SegmentSums count_segments(HostPoolStats& st) const noexcept;
  void count_arenas(HostPoolStats& st) const noexcept;
  void fill_bytes(HostPoolStats& st, const LiveSums& live, const SegmentSums& segments) const noexcept;
  void fill_counters(HostPoolStats& st, const LiveSums& live) const noexcept;
  bool validate_pages(const int64_t live[kNumClasses], Message* why) const UNIPOOL_REQUIRES(segments_.lock());
  bool validate_caches(int64_t cached[kNumClasses], Message* why) const;
  bool validate_large_caches(Message* why) const UNIPOOL_REQUIRES(heaps_lock_);
  struct LargeRecount {
    uint64_t blocks = 0, extent = 0, cached_blocks = 0, cached_extent = 0;
  };
  bool recount_large(LargeRecount* out, Message* why) const;
  int64_t free_list_length(const Page& page, const Block* head, bool local, Message* why) const;
  bool is_deferred(const void* p) const noexcept;
  void refresh_fast_span() noexcept UNIPOOL_REQUIRES(deferred_.lock());
  // A live block's footprint (what it holds of the pool) and the size its
  // user asked for; {0, 0} if it is not live.
  struct Footprint {
    uint64_t bytes = 0;
    uint64_t requested = 0;
  };
  Footprint footprint(const void* p) const noexcept;

  // ---- misuse ----
  Status misuse(const char* what, const void* p) const noexcept;

  // ---- read by the fast paths: one cache line ----
  alignas(64) uint64_t middle_max_ = 0;
  uint32_t middle_classes_ = 0;         // classes of at most middle_max_: [0, middle_classes_)
  uint64_t generation_ = ~uint64_t{0};  // heaps are used iff slot_ != 0
  uint32_t slot_ = 0;                   // heap slot: 0 when thread caches are off
  bool hardened_ = false;               // config_.hardened, here for the fast paths' line
  uint64_t secret_ = 0;
  // Arena 0's bounds and slot map. fast_span_ is its size while no deferred
  // free is pending and 0 otherwise, so one compare sends every free to the
  // slow path (which checks the deferred table) while deferrals exist.
  std::atomic<uintptr_t> arena0_base_{0};
  std::atomic<uint64_t> fast_span_{0};
  std::atomic<const std::atomic<uint8_t>*> arena0_slots_{nullptr};

  alignas(64) HostPoolConfig config_;
  uint64_t arena0_reserved_ = 0;  // under deferred_.lock()
  uint64_t huge_threshold_ = 0;
  bool tiny_address_space_ = false;  // shrink_for_address_space() ran
  uint64_t heap_cache_limit_ = 0;    // empty-page bytes a heap keeps
  uint64_t retain_ = 0;
  uint32_t registry_slot_ = 0;

  Arena arenas_[kMaxArenas];
  std::atomic<uint32_t> arena_count_{0};
  ArenaSettings arena_settings_;
  History history_;  // before pinner_, which records into it
  std::unique_ptr<backend::HostPinner> pinner_;
  RegionPinner* regions_ = nullptr;          // pinner_'s outer layer, set with it
  std::atomic<bool> pinner_checked_{false};  // release-stored after pin_available_ and the settings
  bool pin_available_ = false;
  // Pinner set-up and adding arenas; with a `limit`, every arena allocation
  // (so the headroom check and the growth are one step).
  mutable Mutex setup_lock_;
  std::atomic<uint32_t> shard_arena_[kLargeShards] = {};  // arena of each shard, kNoArena until used
  uint32_t shards_ = kLargeShards;  // 1 with a limit

  SegmentStore segments_;  // the segments held and their free pages; its lock guards page formats

  SharedClass shared_[kNumClasses];
  // Bumped to ask every heap to empty its block cache at its next slow call.
  std::atomic<uint32_t> drain_epoch_{0};
  uint32_t block_cache_limit_[kNumClasses] = {};  // per class, from the policy (block_cache.hpp)

  // Heaps.
  mutable Mutex heaps_lock_;
  Heap* heaps_ = nullptr;       // live heaps
  Heap* free_heaps_ = nullptr;  // recycled
  std::atomic<uint64_t> refills_retired_[kNumClasses] = {};

  HugeBlocks huge_;  // the books of huge blocks and their cache

  // Deferred frees (see fast_span_).
  DeferredFrees deferred_;  // the records of deferred frees

  // The running figures. Mutable: const queries count too (stats()
  // refreshes `cached`, a misuse report counts itself).
  mutable HostCounters counters_;

  mutable PinThread pin_;
  mutable Message first_corruption_;  // written once, by the report that counted the first
};

}  // namespace unipool::host
