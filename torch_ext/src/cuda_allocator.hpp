// unipool torch extension: unipool as torch's CUDA allocator, a
// c10::cuda::CUDACachingAllocator::CUDAAllocator over unipool::DevicePools.
// torch.cuda.MemPool / CUDA graph pools are private DevicePools on the same
// backend, chosen by the stream filter torch gives beginAllocateToPool.
#pragma once

#include <c10/cuda/CUDACachingAllocator.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "memory_history.hpp"
#include "unipool/device_checkpoint.hpp"
#include "unipool/device_pool.hpp"

namespace unipool::torch_ext {

using c10::cuda::CUDACachingAllocator::CUDAAllocator;
using c10::MempoolId_t;

class UnipoolCudaAllocator final : public CUDAAllocator {
 public:
  explicit UnipoolCudaAllocator(const DevicePoolConfig& config);
  static UnipoolCudaAllocator* instance();  // the installed one, or nullptr

  DevicePools& pools() { return *pools_; }
  bool simulated() const { return simulated_; }

  // c10::Allocator / DeviceAllocator
  c10::DataPtr allocate(size_t n) override;
  c10::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;
  bool initialized() override { return true; }
  void emptyCache(MempoolId_t mempool_id) override;
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override;

  // CUDAAllocator
  void* raw_alloc(size_t nbytes) override;
  void* raw_alloc_with_stream(size_t nbytes, cudaStream_t stream) override;
  void raw_delete(void* ptr) override;
  void init(int device_count) override {}
  double getMemoryFraction(c10::DeviceIndex device) override;
  void setMemoryFraction(double fraction, c10::DeviceIndex device) override;
  std::vector<c10::cuda::CUDACachingAllocator::StreamSegmentSize> getExpandableSegmentSizes(
      c10::DeviceIndex device) override;
  void enable(bool value) override { enabled_ = value; }
  bool isEnabled() const override { return enabled_; }
  void cacheInfo(c10::DeviceIndex device, size_t* largestBlock) override;
  void* getBaseAllocation(void* ptr, size_t* size) override;
  void recordStream(const c10::DataPtr& ptr, c10::cuda::CUDAStream stream) override;
  c10::cuda::CUDACachingAllocator::SnapshotInfo snapshot(MempoolId_t mempool_id, bool include_traces) override;
  void beginAllocateToPool(c10::DeviceIndex device, MempoolId_t mempool_id,
                           std::function<bool(cudaStream_t)> filter) override;
  void endAllocateToPool(c10::DeviceIndex device, MempoolId_t mempool_id) override;
  void releasePool(c10::DeviceIndex device, MempoolId_t mempool_id) override;
  int getPoolUseCount(c10::DeviceIndex device, MempoolId_t mempool_id) override;
  void createOrIncrefPool(c10::DeviceIndex device, MempoolId_t mempool_id,
                          std::shared_ptr<CUDAAllocator> allocator) override;
  // MemPool(use_on_oom=True) asks that the default pool may borrow from
  // this one when it runs out: not supported, said at construction. False
  // (what ~MemPool passes) is the state every pool is in: a no-op, since
  // torch calls it from a destructor, where an exception would terminate.
  void setUseOnOOM(c10::DeviceIndex device, MempoolId_t mempool_id, bool use_on_oom) override;
  // MemPool(no_split=True): not supported (a pool's blocks share segments).
  void setNoSplit(c10::DeviceIndex device, MempoolId_t mempool_id) override;
  bool checkPoolLiveAllocations(c10::DeviceIndex device, MempoolId_t mempool_id,
                                const std::unordered_set<void*>& expected_live_allocations) override;
  c10::cuda::CUDACachingAllocator::ShareableHandle shareIpcHandle(void* ptr) override;
  std::shared_ptr<void> getIpcDevPtr(std::string handle) override;
  bool isHistoryEnabled() override { return history_.enabled(); }
  std::shared_ptr<c10::GatheredContext> getContextForPointer(const void* ptr) override;
  void recordHistory(bool enabled, c10::cuda::CUDACachingAllocator::CreateContextFn context_recorder,
                     size_t alloc_trace_max_entries, c10::cuda::CUDACachingAllocator::RecordContext when,
                     bool clearHistory, const std::vector<std::string>& skip_actions) override;
  void attachOutOfMemoryObserver(c10::cuda::CUDACachingAllocator::OutOfMemoryObserver observer) override;
  void attachOomRejectionObserver(c10::cuda::CUDACachingAllocator::OomRejectionObserver observer) override {}
  void attachAllocatorTraceTracker(c10::cuda::CUDACachingAllocator::AllocatorTraceTracker tracker) override;
  void enablePeerAccess(c10::DeviceIndex dev, c10::DeviceIndex dev_to_access) override;
  cudaError_t memcpyAsync(void* dst, int dstDevice, const void* src, int srcDevice, size_t count,
                          cudaStream_t stream, bool p2p_enabled) override;
  std::shared_ptr<c10::cuda::CUDACachingAllocator::AllocatorState> getCheckpointState(c10::DeviceIndex device,
                                                                                      MempoolId_t id) override;
  c10::cuda::CUDACachingAllocator::CheckpointDelta setCheckpointPoolState(
      c10::DeviceIndex device, std::shared_ptr<c10::cuda::CUDACachingAllocator::AllocatorState> pps) override;
  std::string name() override { return "unipool"; }

  // The atexit hook (registered by install()): every pool, default and
  // private, gives its cached segments back (empty_cache: waits for their
  // streams); live blocks stay. Never throws. exit_releases() counts runs.
  void release_cached_at_exit() noexcept;
  int exit_releases() const { return exit_releases_; }
  // validate() of private pool (device, id); false with *why if it is not there.
  bool validate_private_pool(int device, MempoolId_t id, std::string* why);

  // Sleep and wake (unipool/device_sleep.hpp) of every pool, default and
  // private (CUDA graph pools, MemPools): cuda_sleep.cpp. Private pools are
  // held (not released) meanwhile. Throws DevicePoolError.
  DeviceSleepResult sleep(const DeviceSleepRequest& request, HostPool* host);
  DeviceSleepResult wake(const std::vector<std::string>& tags);
  // Device `device`'s tags over its default and private pools, summed.
  std::vector<DeviceTagStats> tag_stats(int device);

  // The device and stream an allocation without explicit ones uses: torch's
  // current ones, or device 0 / the default stream on the sim backend.
  int current_device() const;
  StreamHandle current_stream(int device) const;
  StreamHandle handle_of(c10::Stream stream) const;

 private:
  struct PrivatePool {
    std::unique_ptr<DevicePool> pool;
    int use_count = 0;
    std::vector<std::function<bool(cudaStream_t)>> filters;  // active allocate-to-pool contexts
  };
  using PoolKey = std::pair<int, MempoolId_t>;

  void* allocate_on(uint64_t bytes, int device, StreamHandle stream);
  void* allocate_in(DevicePool& pool, uint64_t bytes, StreamHandle stream);
  void* allocate_with_context(uint64_t bytes, int device, StreamHandle stream);  // history gathers stacks
  // Gives every pool, default and private, the history's observer while it
  // observes, and none otherwise (so the pools' hot paths stay bare).
  void sync_trace_observers();
  // Lock held. The allocator's snapshot of one pool, with block contexts.
  void add_segments(c10::cuda::CUDACachingAllocator::SnapshotInfo& out, DevicePool& pool, MempoolId_t owner,
                    const std::unordered_map<uint64_t, std::shared_ptr<c10::GatheredContext>>& contexts);
  DevicePool& pool_for(int device, StreamHandle stream);  // a private pool if a filter takes the stream
  DevicePool* owner_of(void* ptr, int device_hint);
  std::vector<DevicePool*> every_pool_locked(int device);  // -1: every device
  static void delete_fn(void* ptr);

  std::unique_ptr<DevicePools> pools_;
  bool simulated_ = false;
  bool enabled_ = true;
  std::vector<double> fractions_;
  mutable std::mutex mutex_;  // private pools
  std::map<PoolKey, PrivatePool> private_;
  int routing_ = 0;  // active allocate-to-pool contexts, any device
  std::atomic<int> exit_releases_{0};
  MemoryHistory history_;
};

// The allocator install() put in place (cuda_install.cpp); before install()
// a c10::Error says so.
UnipoolCudaAllocator& installed();
// Whether `a` is that allocator (false before install()).
bool is_installed(const c10::Allocator* a);

}  // namespace unipool::torch_ext
