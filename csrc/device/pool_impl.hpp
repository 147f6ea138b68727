// unipool device pool: the state behind DevicePool and the operations on it,
// split over pool_*.cpp by concept (cached allocation, free, growth, release,
// OOM report, snapshot, validation).
//
// Lock scope: `mutex` guards everything below it. It is held for bookkeeping
// only: range allocator calls, the block table, stats, fence polls. Backend
// calls that allocate, map, unmap or free memory, fence waits and user hooks
// run with it released; `inflight` and Arena::transition keep the books
// straight meanwhile.
#pragma once

#include <array>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/compiler.hpp"
#include "device/arena.hpp"
#include "device/block_table.hpp"
#include "device/pending_frees.hpp"
#include "device/size_policy.hpp"
#include "unipool/device_pool.hpp"
#include "unipool/host_pool.hpp"

namespace unipool {

namespace device {

struct Request {
  uint64_t bytes;      // as asked
  uint64_t size;       // 512-rounded
  Kind kind;
  bool oversize;       // >= max_split_size: a whole segment, never split
  StreamHandle stream;
  DeviceTag tag;
};

// Stream states are per stream and tag.
struct StreamKey {
  StreamHandle stream;
  DeviceTag tag;
  bool operator==(const StreamKey&) const = default;
};
struct StreamKeyHash {
  size_t operator()(const StreamKey& k) const noexcept {
    return static_cast<size_t>((static_cast<uint64_t>(k.stream) * 0x9E3779B97F4A7C15ull) ^ k.tag);
  }
};

// A block's contents kept in host memory while its tag sleeps.
struct Staged {
  void* host = nullptr;
  uint64_t bytes = 0;  // the block's requested size: what was copied
  HostPool* pool = nullptr;
};

// Where a tag is in its sleep cycle. `partial`: a sleep or a wake failed part
// way; sleep() finishes the sleep, wake() undoes it, either may be retried.
enum class TagPhase : uint8_t { awake, asleep, partial };

struct TagState {
  TagPhase phase = TagPhase::awake;
  std::unordered_map<uint64_t, Staged> staged;                            // block address -> contents
  uint64_t offloaded_bytes = 0, discarded_bytes = 0, released_bytes = 0;  // by the last sleep
  uint64_t sleeps = 0, wakes = 0;
  double last_sleep_seconds = 0, last_wake_seconds = 0;
};

// Other processes' blocks this pool has open (DevicePool::ipc_open), by
// handle. Shared with the mappings' deleters, which may outlive the pool.
struct IpcMappings {
  std::mutex mutex;
  std::map<std::string, std::weak_ptr<void>> open;
};

// What a growth attempt that failed says, for the OOM report.
struct GrowthFailure {
  bool over_limit = false;
  BackendStatus status;
  // The backend failed with an error other than out-of-memory.
  bool backend_failed() const noexcept { return !over_limit && status.code == BackendStatus::error; }
};

// Memory taken out of the pool under the lock and given back to the backend
// after it is released.
struct Release {
  std::unique_ptr<Arena> segment;  // a whole plain segment, or
  Arena* expandable = nullptr;     // the tail [from, from + bytes) of this one
  uint64_t from = 0;
  uint64_t bytes = 0;
};

// How long a release may wait for streams (pool_release.cpp).
enum class Sync : uint8_t { none, owners, all };

inline size_t stat_index(Kind k) noexcept { return k == Kind::small ? 1 : 2; }

inline void stat_change(DeviceStatArray& a, Kind k, int64_t delta) noexcept {
  if (delta > 0) {
    a[0].increase(delta);
    a[stat_index(k)].increase(delta);
  } else if (delta < 0) {
    a[0].decrease(-delta);
    a[stat_index(k)].decrease(-delta);
  }
}

}  // namespace device

struct DevicePool::Impl {
  using Arena = device::Arena;
  using StreamState = device::StreamState;
  using Request = device::Request;
  using Kind = device::Kind;

  Impl(std::shared_ptr<DeviceBackend> backend, int device, const DevicePoolConfig& config);
  ~Impl();

  // ---- pool_allocate.cpp
  void* allocate(uint64_t bytes, StreamHandle stream, DeviceTag tag);
  void* from_cache(const Request& r);  // lock held
  void* carve_own(StreamState& s, const Request& r);
  void* steal(StreamState& s, const Request& r);
  void* carve_in(Arena& a, const Request& r);
  void* publish(Arena& a, const RangeAllocation& range, uint64_t extent, const Request& r);
  StreamState& stream_state(StreamHandle stream, DeviceTag tag);
  void own(StreamState& s, Arena& a);  // files a plain segment under s, by size
  void disown(Arena& a);
  void refit(Arena& a);  // after a's free ranges changed (plain segments)
  void fit_unlink(Arena& a);
  void* best_fit(StreamState& s, const Request& r);
  static bool in_tightest_bucket(const device::FitIndex& index, const Arena& a, uint64_t size);

  // ---- pool_free.cpp
  Status deallocate(void* ptr, std::string* why);
  // Frees live block `id` (lock held): fences on the streams other than its
  // arena's owner that used it, unless `synchronized` (the caller waited for
  // them), then back to its arena once they complete.
  void release_block(uint32_t id, bool synchronized);
  Status record_stream(void* ptr, StreamHandle stream, std::string* why);
  void poll_pending();
  void finish_free(uint32_t block_id);
  bool settled(const Arena& a);
  void request_marker(StreamState& s);
  FenceId fresh_marker(StreamState& s);
  void release_fence(FenceId fence);
  std::string explain_bad_pointer(uint64_t address) const;

  // ---- pool_growth.cpp
  void* grow(const Request& r, device::GrowthFailure* why);
  void* grow_segment(const Request& r, device::GrowthFailure* why);
  void* grow_expandable(const Request& r, device::GrowthFailure* why);
  size_t map_runs(Arena& a, const std::vector<std::pair<uint64_t, uint64_t>>& runs, BackendStatus* status);  // no lock
  void count_mapped(Arena& a, const std::vector<std::pair<uint64_t, uint64_t>>& runs, size_t done);
  Arena* expandable_arena(const Request& r, device::GrowthFailure* why);
  bool within_limit(uint64_t more) const;  // lock held
  // Marks granules [first, last) of `a` (un)mapped and keeps the segment
  // count, one per maximal mapped run (lock held).
  void set_granules(Arena& a, uint64_t first, uint64_t last, bool on);
  uint32_t add_arena(std::unique_ptr<Arena> arena);

  // ---- pool_release.cpp
  // Gives fully free plain segments and free expandable tails back, waiting
  // for streams as `sync` allows (see pool_release.cpp).
  void release_cached(device::Sync sync);
  bool releasable(const Arena& a) const;
  bool wait_for(const std::vector<FenceId>& fences, std::unique_lock<std::mutex>& lock);
  std::vector<device::Release> take_releasable();  // lock held
  void give_back(std::vector<device::Release>& items);  // lock not held
  void release_all();  // destruction

  // ---- oom_report.cpp
  [[noreturn]] void out_of_memory(const Request& r, const device::GrowthFailure& why);
  // DevicePoolError(Status::backend_error): the backend failed, not for lack of memory.
  [[noreturn]] void backend_error(const Request& r, const device::GrowthFailure& why);
  uint64_t largest_free_block() const;  // lock held

  // ---- pool_checkpoint.cpp
  DeviceCheckpoint checkpoint() const;
  DeviceRestoreResult restore(const DeviceCheckpoint& cp);
  void* carve_at(Arena& a, const DeviceCheckpointBlock& b);  // lock held

  // ---- pool_sleep.cpp, pool_wake.cpp (device_sleep.hpp). Tags in `mask`
  // (bit t: tag t) that are asleep already are skipped; `offload` is the
  // mask of those whose contents are kept.
  DeviceSleepResult sleep(uint64_t mask, uint64_t offload, HostPool& host);
  DeviceSleepResult wake(uint64_t mask);
  device::TagPhase phase(DeviceTag tag) const;
  [[noreturn]] void refuse_asleep(DeviceTag tag) const;      // an allocation from a tag not awake
  void drop_staged(const device::Block& b, const Arena& a);  // lock held: a block of a sleeping tag freed
  bool tag_awake(DeviceTag tag) const noexcept { return (asleep_mask >> tag & 1) == 0; }
  std::vector<DeviceTagStats> tag_stats() const;
  // Their steps (lock held unless the name of a backend call says otherwise).
  std::vector<Arena*> claim_arenas(uint64_t mask, std::unique_lock<std::mutex>& lock);
  void end_transition(const std::vector<Arena*>& claimed);
  void set_phase(uint64_t mask, device::TagPhase phase);
  void settle_for_sleep(std::unique_lock<std::mutex>& lock);
  void plan_offload(uint64_t mask, uint64_t offload, std::vector<DeviceCopy>& copies, uint64_t* discarded);
  void stage(std::vector<DeviceCopy>& copies, HostPool& host);  // lock not held
  void keep_staged(const std::vector<DeviceCopy>& copies, HostPool& host);
  uint64_t unmap_arena(Arena& a);  // lock not held
  uint64_t map_arena(Arena& a);    // lock not held
  void count_sleep_run(Arena& a, std::pair<uint64_t, uint64_t> run, uint64_t bytes, bool mapped);
  std::vector<DeviceCopy> staged_copies(uint64_t mask) const;
  void free_staged(uint64_t mask);

  // ---- pool_snapshot.cpp / pool_validate.cpp
  DeviceSnapshot snapshot() const;
  bool validate(std::string* why) const;
  bool validate_tags(std::string* why) const;

  // ---- pool_trace.cpp
  // Tells the trace observer about an event (lock held). The test of the
  // observer is inline and the call out of line: with no observer, the only
  // cost on the hot path is this one branch.
  UNIPOOL_ALWAYS_INLINE void trace(DeviceTraceAction action, uint64_t address, uint64_t size, uint64_t requested,
                                   StreamHandle stream) const {
    if (UNIPOOL_UNLIKELY(static_cast<bool>(trace_observer))) emit_trace(action, address, size, requested, stream);
  }
  void emit_trace(DeviceTraceAction action, uint64_t address, uint64_t size, uint64_t requested,
                  StreamHandle stream) const;

  // hooks, outside the lock
  void fire_map(void* address, uint64_t bytes, bool expandable) const;
  void fire_unmap(void* address, uint64_t bytes, bool expandable) const;
  uint64_t effective_limit() const;  // lock held

  // ---- immutable after construction
  const uint64_t serial;  // unique in the process: names the pool in its checkpoints
  std::shared_ptr<DeviceBackend> backend;
  const int device;
  const DevicePoolConfig config;
  bool use_expandable = false;
  uint64_t granule = 0;
  uint64_t device_total = 0;
  uint64_t reserve_bytes = 0;  // of each expandable arena
  const std::shared_ptr<device::IpcMappings> ipc_mappings = std::make_shared<device::IpcMappings>();

  // ---- guarded by mutex
  mutable std::mutex mutex;
  std::condition_variable transition_done;
  std::vector<std::unique_ptr<Arena>> arenas;  // by id; null for a released id
  std::vector<uint32_t> spare_arena_ids;
  std::unordered_map<device::StreamKey, StreamState, device::StreamKeyHash> streams;
  StreamState* last_stream = nullptr;
  device::BlockSlab blocks;
  device::AddressMap live;  // allocated blocks by address
  device::PendingFrees pending;
  DeviceStats stats;
  uint64_t free_seq = 0;
  uint64_t inflight = 0;  // bytes being allocated / mapped outside the lock
  double memory_fraction = 0.0;
  uint64_t memory_limit = 0;
  uint32_t waiters = 0;                  // threads waiting on fences, lock released
  std::vector<FenceId> deferred_fences;  // released once waiters is 0
  std::shared_ptr<const DeviceSegmentHooks> hooks;
  std::shared_ptr<const DeviceOomObserver> oom_observer;
  DeviceTraceObserver trace_observer;  // empty: no trace (the default)
  uint64_t asleep_mask = 0;            // bit t: tag t is not awake (phase asleep or partial)
  std::array<device::TagState, kMaxDeviceTags> tags;

  // Serializes the creation of expandable arenas (a reserve call each), so
  // two threads never reserve for the same stream and kind.
  std::mutex reserve_mutex;
};

}  // namespace unipool
