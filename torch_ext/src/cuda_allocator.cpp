// unipool torch extension: UnipoolCudaAllocator (see cuda_allocator.hpp).
#include "cuda_allocator.hpp"

#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <optional>

#include "core/compiler.hpp"
#include "region_journal.hpp"

namespace unipool::torch_ext {
namespace {

std::atomic<UnipoolCudaAllocator*> g_instance{nullptr};

// The segment of `pool` holding `address`, from its snapshot (O(blocks)).
std::optional<DeviceSegmentInfo> segment_holding(const DevicePool& pool, uint64_t address) {
  for (DeviceSegmentInfo& seg : pool.snapshot().segments) {
    if (address >= seg.address && address < seg.address + seg.total_size) return std::move(seg);
  }
  return std::nullopt;
}

[[noreturn]] void unsupported(const char* method, const char* why) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "unipool CUDA allocator: ", method, " is not supported (", why, ")");
}

void add(c10::CachingAllocator::StatArray& to, const DeviceStatArray& from) {
  for (size_t i = 0; i < to.size(); ++i) {
    to[i].current += from[i].current;
    to[i].peak += from[i].peak;
    to[i].allocated += from[i].allocated;
    to[i].freed += from[i].freed;
  }
}

void add(c10::CachingDeviceAllocator::DeviceStats& to, const DeviceStats& s) {
  add(to.allocation, s.allocation);
  add(to.segment, s.segment);
  add(to.active, s.active);
  add(to.inactive_split, s.inactive_split);
  add(to.allocated_bytes, s.allocated_bytes);
  add(to.reserved_bytes, s.reserved_bytes);
  add(to.active_bytes, s.active_bytes);
  add(to.inactive_split_bytes, s.inactive_split_bytes);
  add(to.requested_bytes, s.requested_bytes);
  to.num_alloc_retries += s.num_alloc_retries;
  to.num_ooms += s.num_ooms;
  to.num_device_alloc += s.num_device_alloc;
  to.num_device_free += s.num_device_free;
  to.num_sync_all_streams += s.num_sync_all_streams;
}

}  // namespace

UnipoolCudaAllocator::UnipoolCudaAllocator(const DevicePoolConfig& config)
    : pools_(std::make_unique<DevicePools>(config)), history_(pools_->device_count()) {
  simulated_ = std::string(pools_->backend().name()) == "sim";
  for (int d = 0; d < pools_->device_count(); ++d) pools_->pool(d).set_segment_hooks(device_region_hooks());
  fractions_.assign(pools_->device_count(), config.memory_fraction);
  g_instance.store(this);
}

UnipoolCudaAllocator* UnipoolCudaAllocator::instance() { return g_instance.load(); }

int UnipoolCudaAllocator::current_device() const {
  return simulated_ ? 0 : static_cast<int>(c10::cuda::current_device());
}

StreamHandle UnipoolCudaAllocator::current_stream(int device) const {
  if (simulated_) return 0;
  return reinterpret_cast<StreamHandle>(
      c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream());
}

StreamHandle UnipoolCudaAllocator::handle_of(c10::Stream stream) const {
  // On the sim backend a stream's id is its token (no CUDA stream exists).
  if (simulated_) return static_cast<StreamHandle>(stream.id());
  return reinterpret_cast<StreamHandle>(c10::cuda::CUDAStream(stream).stream());
}

DevicePool& UnipoolCudaAllocator::pool_for(int device, StreamHandle stream) {
  if (routing_ > 0) {
    std::lock_guard lock(mutex_);
    for (auto& [key, p] : private_) {
      if (key.first != device) continue;
      for (const auto& filter : p.filters) {
        if (filter(reinterpret_cast<cudaStream_t>(stream))) return *p.pool;
      }
    }
  }
  return pools_->pool(device);
}

DevicePool* UnipoolCudaAllocator::owner_of(void* ptr, int device_hint) {
  if (device_hint >= 0 && device_hint < pools_->device_count() && pools_->pool(device_hint).owns(ptr)) {
    return &pools_->pool(device_hint);
  }
  for (int d = 0; d < pools_->device_count(); ++d) {
    if (pools_->pool(d).owns(ptr)) return &pools_->pool(d);
  }
  std::lock_guard lock(mutex_);
  for (auto& [key, p] : private_) {
    if (p.pool->owns(ptr)) return p.pool.get();
  }
  return nullptr;
}

void* UnipoolCudaAllocator::allocate_on(uint64_t bytes, int device, StreamHandle stream) {
  // History off: this one test, and the pool's own on its unset observer.
  if (UNIPOOL_UNLIKELY(history_.gathers_context())) return allocate_with_context(bytes, device, stream);
  return allocate_in(pool_for(device, stream), bytes, stream);
}

// The stack is taken before the pool's lock (the recorder may take the GIL);
// the pool's observer finds it in the scope.
void* UnipoolCudaAllocator::allocate_with_context(uint64_t bytes, int device, StreamHandle stream) {
  const ContextScope scope(history_.gather(RecordContext::STATE), TraceCall::allocate);
  return allocate_in(pool_for(device, stream), bytes, stream);
}

void* UnipoolCudaAllocator::allocate_in(DevicePool& pool, uint64_t bytes, StreamHandle stream) {
  try {
    return pool.allocate(bytes, stream);
  } catch (const OutOfMemoryError& e) {
    TORCH_CHECK_WITH(OutOfMemoryError, false, e.what());
  } catch (const DevicePoolError& e) {
    TORCH_CHECK(false, "unipool CUDA allocator: ", e.what());
  }
}

void UnipoolCudaAllocator::delete_fn(void* ptr) {
  if (ptr) instance()->raw_delete(ptr);
}

c10::DataPtr UnipoolCudaAllocator::allocate(size_t n) {
  const int device = current_device();
  const c10::Device dev(c10::kCUDA, static_cast<c10::DeviceIndex>(device));
  if (n == 0) return {nullptr, nullptr, &delete_fn, dev};
  void* p = allocate_on(n, device, current_stream(device));
  return {p, p, &delete_fn, dev};
}

c10::DeleterFnPtr UnipoolCudaAllocator::raw_deleter() const { return &delete_fn; }

void UnipoolCudaAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  TORCH_CHECK(!simulated_, "unipool CUDA allocator: copy_data on the sim backend (its memory is not accessible)");
  C10_CUDA_CHECK(cudaMemcpy(dest, src, count, cudaMemcpyDeviceToDevice));
}

void* UnipoolCudaAllocator::raw_alloc(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  const int device = current_device();
  return allocate_on(nbytes, device, current_stream(device));
}

void* UnipoolCudaAllocator::raw_alloc_with_stream(size_t nbytes, cudaStream_t stream) {
  if (nbytes == 0) return nullptr;
  return allocate_on(nbytes, current_device(), reinterpret_cast<StreamHandle>(stream));
}

void UnipoolCudaAllocator::raw_delete(void* ptr) {
  if (!ptr) return;
  DevicePool* pool = owner_of(ptr, -1);
  TORCH_CHECK(pool != nullptr, "unipool CUDA allocator: free of ", ptr,
              " which is not a live block (double free, or memory from elsewhere)");
  if (UNIPOOL_UNLIKELY(history_.gathers_context())) {
    const ContextScope scope(history_.gather(RecordContext::ALL), TraceCall::free);
    pool->deallocate(ptr);
    return;
  }
  pool->deallocate(ptr);
}

void UnipoolCudaAllocator::recordStream(const c10::DataPtr& ptr, c10::cuda::CUDAStream stream) {
  if (!ptr.get()) return;
  DevicePool* pool = owner_of(ptr.get(), ptr.device().index());
  TORCH_CHECK(pool != nullptr, "unipool CUDA allocator: recordStream on memory it did not allocate");
  pool->record_stream(ptr.get(), handle_of(stream.unwrap()));
}

void UnipoolCudaAllocator::emptyCache(MempoolId_t mempool_id) {
  std::optional<ContextScope> scope;
  if (history_.gathers_context()) scope.emplace(history_.gather(RecordContext::ALL), TraceCall::release);
  if (mempool_id == MempoolId_t{0, 0}) {
    pools_->empty_cache();
    return;
  }
  std::lock_guard lock(mutex_);
  for (auto& [key, p] : private_) {
    if (key.second == mempool_id) p.pool->empty_cache();
  }
}

c10::CachingDeviceAllocator::DeviceStats UnipoolCudaAllocator::getDeviceStats(c10::DeviceIndex device) {
  c10::CachingDeviceAllocator::DeviceStats out;
  add(out, pools_->pool(device).stats());
  std::lock_guard lock(mutex_);
  for (auto& [key, p] : private_) {
    if (key.first != device) continue;
    const DeviceStats s = p.pool->stats();
    add(out, s);
    auto& by_pool = out.reserved_bytes_by_private_pools[key.second];
    add(by_pool, s.reserved_bytes);
  }
  return out;
}

void UnipoolCudaAllocator::resetAccumulatedStats(c10::DeviceIndex device) {
  pools_->pool(device).reset_accumulated_stats();
  std::lock_guard lock(mutex_);
  for (auto& [key, p] : private_) {
    if (key.first == device) p.pool->reset_accumulated_stats();
  }
}

void UnipoolCudaAllocator::resetPeakStats(c10::DeviceIndex device) {
  pools_->pool(device).reset_peak_stats();
  std::lock_guard lock(mutex_);
  for (auto& [key, p] : private_) {
    if (key.first == device) p.pool->reset_peak_stats();
  }
}

std::pair<size_t, size_t> UnipoolCudaAllocator::getMemoryInfo(c10::DeviceIndex device) {
  uint64_t free_bytes = 0, total = 0;
  const BackendStatus s = pools_->backend().memory_info(device, &free_bytes, &total);
  TORCH_CHECK(s.is_ok(), "unipool CUDA allocator: memory info of device ", static_cast<int>(device), ": ", s.message);
  return {free_bytes, total};
}

double UnipoolCudaAllocator::getMemoryFraction(c10::DeviceIndex device) {
  TORCH_CHECK_INDEX(device >= 0 && device < static_cast<int>(fractions_.size()), "device ", static_cast<int>(device));
  return fractions_[device] > 0 ? fractions_[device] : 1.0;
}

void UnipoolCudaAllocator::setMemoryFraction(double fraction, c10::DeviceIndex device) {
  TORCH_CHECK_VALUE(fraction > 0 && fraction <= 1, "memory fraction must be in (0, 1], got ", fraction);
  pools_->pool(device).set_memory_fraction(fraction);
  fractions_[device] = fraction;
}

std::vector<c10::cuda::CUDACachingAllocator::StreamSegmentSize> UnipoolCudaAllocator::getExpandableSegmentSizes(
    c10::DeviceIndex device) {
  std::vector<c10::cuda::CUDACachingAllocator::StreamSegmentSize> out;
  for (const DeviceSegmentInfo& seg : pools_->pool(device).snapshot().segments) {
    if (seg.expandable) out.emplace_back(reinterpret_cast<cudaStream_t>(seg.stream), seg.small, seg.total_size);
  }
  return out;
}

void UnipoolCudaAllocator::cacheInfo(c10::DeviceIndex device, size_t* largestBlock) {
  uint64_t largest = 0;
  for (const DeviceSegmentInfo& seg : pools_->pool(device).snapshot().segments) {
    for (const DeviceBlockInfo& b : seg.blocks) {
      if (b.state == DeviceBlockInfo::inactive && b.size > largest) largest = b.size;
    }
  }
  *largestBlock = largest;
}

void* UnipoolCudaAllocator::getBaseAllocation(void* ptr, size_t* size) {
  for (int d = 0; d < pools_->device_count(); ++d) {
    if (const auto seg = segment_holding(pools_->pool(d), reinterpret_cast<uint64_t>(ptr))) {
      if (size) *size = seg->total_size;
      return reinterpret_cast<void*>(seg->address);
    }
  }
  TORCH_CHECK(false, "unipool CUDA allocator: getBaseAllocation of ", ptr, " which is not in its memory");
}

void UnipoolCudaAllocator::add_segments(
    c10::cuda::CUDACachingAllocator::SnapshotInfo& out, DevicePool& pool, MempoolId_t owner,
    const std::unordered_map<uint64_t, std::shared_ptr<c10::GatheredContext>>& contexts) {
  for (const DeviceSegmentInfo& seg : pool.snapshot().segments) {
    c10::CachingDeviceAllocator::SegmentInfo s;
    s.device = static_cast<c10::DeviceIndex>(seg.device);
    s.address = seg.address;
    s.total_size = seg.total_size;
    s.requested_size = seg.requested_size;
    s.allocated_size = seg.allocated_size;
    s.active_size = seg.active_size;
    s.stream = reinterpret_cast<void*>(seg.stream);
    s.is_large = !seg.small;
    s.is_expandable = seg.expandable;
    s.owner_private_pool_id = owner;
    for (const DeviceBlockInfo& b : seg.blocks) {
      c10::CachingDeviceAllocator::BlockInfo bi;
      bi.size = b.size;
      bi.requested_size = b.requested_size;
      bi.allocated = b.state == DeviceBlockInfo::active_allocated;
      bi.active = b.state != DeviceBlockInfo::inactive;
      if (bi.active && !contexts.empty()) {
        auto it = contexts.find(b.address);
        if (it != contexts.end()) bi.context_when_allocated = it->second;
      }
      s.blocks.push_back(std::move(bi));
    }
    out.segments.push_back(std::move(s));
  }
}

c10::cuda::CUDACachingAllocator::SnapshotInfo UnipoolCudaAllocator::snapshot(MempoolId_t mempool_id,
                                                                             bool include_traces) {
  c10::cuda::CUDACachingAllocator::SnapshotInfo out;
  const auto contexts = history_.block_contexts();
  const bool all = mempool_id == MempoolId_t{0, 0};
  if (all) {
    for (int d = 0; d < pools_->device_count(); ++d) add_segments(out, pools_->pool(d), {0, 0}, contexts);
  }
  {
    std::lock_guard lock(mutex_);
    for (auto& [key, p] : private_) {
      if (all || key.second == mempool_id) add_segments(out, *p.pool, key.second, contexts);
    }
  }
  // Marks where in the history this snapshot stands, as torch does.
  if (history_.enabled()) {
    std::vector<uint64_t> active(pools_->device_count());
    for (const auto& seg : out.segments) active[seg.device] += seg.active_size;
    for (int d = 0; d < pools_->device_count(); ++d) history_.record_snapshot(d, active[d]);
  }
  if (include_traces) {
    out.device_traces = history_.traces();
  } else {
    out.device_traces.resize(pools_->device_count());
  }
  return out;
}

void UnipoolCudaAllocator::createOrIncrefPool(c10::DeviceIndex device, MempoolId_t mempool_id,
                                              std::shared_ptr<CUDAAllocator> allocator) {
  TORCH_CHECK(allocator == nullptr || allocator.get() == this,
              "unipool CUDA allocator: createOrIncrefPool with another allocator is not supported");
  std::lock_guard lock(mutex_);
  PrivatePool& p = private_[{device, mempool_id}];
  if (!p.pool) {
    // Same backend as the default pools (which outlive every private pool):
    // a non-owning alias.
    std::shared_ptr<DeviceBackend> backend(std::shared_ptr<void>{}, &pools_->backend());
    p.pool = std::make_unique<DevicePool>(std::move(backend), device, pools_->config());
    p.pool->set_segment_hooks(device_region_hooks());
    if (history_.observing()) p.pool->set_trace_observer(history_.observer(mempool_id));
  }
  ++p.use_count;
}

int UnipoolCudaAllocator::getPoolUseCount(c10::DeviceIndex device, MempoolId_t mempool_id) {
  std::lock_guard lock(mutex_);
  auto it = private_.find({device, mempool_id});
  return it == private_.end() ? 0 : it->second.use_count;
}

void UnipoolCudaAllocator::beginAllocateToPool(c10::DeviceIndex device, MempoolId_t mempool_id,
                                               std::function<bool(cudaStream_t)> filter) {
  // A reference of its own, as PyTorch's allocator takes: the releasePool
  // that follows endAllocateToPool (use_mem_pool, graph capture) gives it back.
  createOrIncrefPool(device, mempool_id, nullptr);
  std::lock_guard lock(mutex_);
  private_[{device, mempool_id}].filters.push_back(std::move(filter));
  ++routing_;
}

void UnipoolCudaAllocator::endAllocateToPool(c10::DeviceIndex device, MempoolId_t mempool_id) {
  std::lock_guard lock(mutex_);
  auto it = private_.find({device, mempool_id});
  TORCH_CHECK(it != private_.end() && !it->second.filters.empty(),
              "unipool CUDA allocator: endAllocateToPool without beginAllocateToPool");
  it->second.filters.pop_back();
  --routing_;
}

void UnipoolCudaAllocator::releasePool(c10::DeviceIndex device, MempoolId_t mempool_id) {
  std::unique_ptr<DevicePool> dead;
  {
    std::lock_guard lock(mutex_);
    auto it = private_.find({device, mempool_id});
    if (it == private_.end()) return;
    if (--it->second.use_count > 0) return;
    // The pool goes once no block of it is live; its cached memory goes now.
    it->second.pool->empty_cache();
    if (it->second.pool->stats().allocation[0].current == 0) {
      routing_ -= static_cast<int>(it->second.filters.size());
      dead = std::move(it->second.pool);
      private_.erase(it);
    }
  }
}

bool UnipoolCudaAllocator::checkPoolLiveAllocations(c10::DeviceIndex device, MempoolId_t mempool_id,
                                                    const std::unordered_set<void*>& expected) {
  std::lock_guard lock(mutex_);
  auto it = private_.find({device, mempool_id});
  if (it == private_.end()) return expected.empty();
  size_t live = 0;
  for (const DeviceSegmentInfo& seg : it->second.pool->snapshot().segments) {
    for (const DeviceBlockInfo& b : seg.blocks) {
      if (b.state != DeviceBlockInfo::active_allocated) continue;
      if (!expected.count(reinterpret_cast<void*>(b.address))) return false;
      ++live;
    }
  }
  return live == expected.size();
}

void UnipoolCudaAllocator::setUseOnOOM(c10::DeviceIndex, MempoolId_t, bool use_on_oom) {
  if (use_on_oom) unsupported("setUseOnOOM", "a private pool's memory is never lent to the default pool on OOM");
}

void UnipoolCudaAllocator::setNoSplit(c10::DeviceIndex, MempoolId_t) {
  unsupported("setNoSplit", "blocks of a pool share its segments");
}

void UnipoolCudaAllocator::recordHistory(bool enabled, c10::cuda::CUDACachingAllocator::CreateContextFn recorder,
                                         size_t max_entries, c10::cuda::CUDACachingAllocator::RecordContext when,
                                         bool clear_history, const std::vector<std::string>& skip_actions) {
  history_.configure(enabled, recorder, max_entries, when, clear_history, skip_actions);
  sync_trace_observers();
}

std::shared_ptr<c10::GatheredContext> UnipoolCudaAllocator::getContextForPointer(const void* ptr) {
  return history_.block_context(reinterpret_cast<uint64_t>(ptr));
}

void UnipoolCudaAllocator::sync_trace_observers() {
  const bool on = history_.observing();
  for (int d = 0; d < pools_->device_count(); ++d) {
    pools_->pool(d).set_trace_observer(on ? history_.observer({0, 0}) : DeviceTraceObserver{});
  }
  std::lock_guard lock(mutex_);
  for (auto& [key, p] : private_) {
    p.pool->set_trace_observer(on ? history_.observer(key.second) : DeviceTraceObserver{});
  }
}

void UnipoolCudaAllocator::attachOutOfMemoryObserver(c10::cuda::CUDACachingAllocator::OutOfMemoryObserver observer) {
  for (int d = 0; d < pools_->device_count(); ++d) {
    pools_->pool(d).set_oom_observer([observer](const DeviceOomInfo& info) {
      observer(info.device, info.allocated, info.device_total, info.device_free);
    });
  }
}

void UnipoolCudaAllocator::attachAllocatorTraceTracker(c10::cuda::CUDACachingAllocator::AllocatorTraceTracker tracker) {
  history_.add_tracker(std::move(tracker));
  sync_trace_observers();
}

void UnipoolCudaAllocator::enablePeerAccess(c10::DeviceIndex dev, c10::DeviceIndex dev_to_access) {
  if (simulated_) return;
  c10::cuda::CUDAGuard guard(dev);
  const cudaError_t err = cudaDeviceEnablePeerAccess(dev_to_access, 0);
  if (err == cudaErrorPeerAccessAlreadyEnabled) {
    (void)cudaGetLastError();
    return;
  }
  C10_CUDA_CHECK(err);
}

cudaError_t UnipoolCudaAllocator::memcpyAsync(void* dst, int dstDevice, const void* src, int srcDevice, size_t count,
                                              cudaStream_t stream, bool p2p_enabled) {
  // Memory mapped through VMM cannot go through cudaMemcpyAsync between
  // devices without peer access: use the peer copy then.
  if (p2p_enabled || dstDevice == srcDevice) return cudaMemcpyAsync(dst, src, count, cudaMemcpyDeviceToDevice, stream);
  return cudaMemcpyPeerAsync(dst, dstDevice, src, srcDevice, count, stream);
}

void UnipoolCudaAllocator::release_cached_at_exit() noexcept {
  // Each pool on its own: one that fails (a sticky CUDA error) must not keep
  // the others from releasing; nothing may escape into Python's shutdown.
  for (int d = 0; d < pools_->device_count(); ++d) {
    try {
      pools_->pool(d).empty_cache();
    } catch (...) {
    }
  }
  std::lock_guard lock(mutex_);
  for (auto& [key, p] : private_) {
    try {
      if (p.pool) p.pool->empty_cache();
    } catch (...) {
    }
  }
  ++exit_releases_;
}

bool UnipoolCudaAllocator::validate_private_pool(int device, MempoolId_t id, std::string* why) {
  std::lock_guard lock(mutex_);
  auto it = private_.find({device, id});
  if (it == private_.end() || !it->second.pool) {
    if (why) *why = "no such private pool";
    return false;
  }
  return it->second.pool->validate(why);
}

// getCheckpointState / setCheckpointPoolState: cuda_checkpoint.cpp.

}  // namespace unipool::torch_ext
