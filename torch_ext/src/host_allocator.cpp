// unipool torch extension: the pinned host allocator (at::HostAllocator) over
// the host pool. Exact sizes (the pool's, no power-of-two rounding). A block
// whose DataPtr was used by a copy on a stream (record_event) goes back to the
// pool only after a fence recorded on that stream at free time completes, as
// torch's own allocator does; a ctx it did not create is refused (false).
#include <ATen/core/CachingHostAllocator.h>
#include <torch/csrc/utils/pybind.h>

#include <c10/core/impl/VirtualGuardImpl.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "unipool_torch.hpp"

namespace unipool::torch_ext {
namespace {

// One fence standing for several (a block used on several streams): complete
// when all are. Ids are indexes into `groups_` plus one.
class FenceGroups final : public FenceSource {
 public:
  FenceId make(FenceSource& inner, std::vector<FenceId> fences) {
    std::lock_guard lock(mutex_);
    groups_[++next_] = Group{&inner, std::move(fences)};
    return next_;
  }
  FenceId record(int, StreamHandle) override { return kNoFence; }
  bool completed(FenceId id) override {
    std::lock_guard lock(mutex_);
    const Group& g = groups_.at(id);
    for (FenceId f : g.fences) {
      if (!g.inner->completed(f)) return false;
    }
    return true;
  }
  void wait(FenceId id) override {
    Group g;
    {
      std::lock_guard lock(mutex_);
      g = groups_.at(id);
    }
    for (FenceId f : g.fences) g.inner->wait(f);
  }
  void release(FenceId id) override {
    std::lock_guard lock(mutex_);
    const Group& g = groups_.at(id);
    for (FenceId f : g.fences) g.inner->release(f);
    groups_.erase(id);
  }

 private:
  struct Group {
    FenceSource* inner = nullptr;
    std::vector<FenceId> fences;
  };
  std::mutex mutex_;
  std::unordered_map<FenceId, Group> groups_;
  FenceId next_ = 0;
};

struct StreamUse {
  int device;
  StreamHandle stream;
};

// CUDA graph pools of pinned memory. A block allocated while a graph
// captures into a pool (torch.cuda.graph: a filter takes the current
// stream) is read or written by the graph's copies at every replay, so once
// freed it is held, not reused, until the pool's last user releases it, as
// PyTorch's own pinned allocator does.
class HostGraphPools {
 public:
  void begin(c10::MempoolId_t id, std::function<bool(c10::Stream)> filter) {
    std::lock_guard lock(mutex_);
    for (const auto& [pool, f] : captures_) {
      TORCH_CHECK(pool != id, "unipool pinned host allocator: already allocating to this graph pool");
    }
    ++pools_[id].use_count;
    captures_.emplace_back(id, std::move(filter));
    capturing_.store(true);
  }

  void end(c10::MempoolId_t id) {
    std::lock_guard lock(mutex_);
    const auto it = std::find_if(captures_.begin(), captures_.end(), [&](const auto& c) { return c.first == id; });
    TORCH_CHECK(it != captures_.end(), "unipool pinned host allocator: end_allocate_to_pool without a begin");
    captures_.erase(it);
    capturing_.store(!captures_.empty());
  }

  // The pool a block allocated now belongs to, if a capture takes the
  // current stream.
  std::optional<c10::MempoolId_t> pool_for_allocation() {
    if (!capturing_.load()) return std::nullopt;
    c10::impl::VirtualGuardImpl cuda(c10::DeviceType::CUDA);
    const c10::Stream stream = cuda.getStream(cuda.getDevice());
    std::lock_guard lock(mutex_);
    for (const auto& [pool, filter] : captures_) {
      if (filter(stream)) return pool;
    }
    return std::nullopt;
  }

  // True if `p`, freed, is kept for its pool.
  bool hold(c10::MempoolId_t id, void* p) {
    std::lock_guard lock(mutex_);
    const auto it = pools_.find(id);
    if (it == pools_.end()) return false;
    it->second.held.push_back(p);
    return true;
  }

  // Drops a reference; at the last, the pool goes and its held blocks are
  // returned for freeing.
  std::vector<void*> release(c10::MempoolId_t id) {
    std::lock_guard lock(mutex_);
    const auto it = pools_.find(id);
    TORCH_CHECK(it != pools_.end() && it->second.use_count > 0,
                "unipool pinned host allocator: release_pool of an unknown graph pool");
    if (--it->second.use_count > 0) return {};
    std::vector<void*> held = std::move(it->second.held);
    pools_.erase(it);
    return held;
  }

 private:
  struct Pool {
    int use_count = 0;
    std::vector<void*> held;
  };
  std::mutex mutex_;
  std::map<c10::MempoolId_t, Pool> pools_;
  std::vector<std::pair<c10::MempoolId_t, std::function<bool(c10::Stream)>>> captures_;
  std::atomic<bool> capturing_{false};
};

class UnipoolHostAllocator final : public at::HostAllocator {
 public:
  at::DataPtr allocate(size_t n) override {
    if (n == 0) return {nullptr, nullptr, &raw_delete, c10::Device(c10::kCPU)};
    HostPool& pool = host_pool();
    void* p = pool.allocate(n);
    TORCH_CHECK_WITH(OutOfMemoryError, p != nullptr, "unipool pinned host allocator: cannot allocate ", n,
                     " bytes: ", HostPool::last_error());
    const int64_t usable = static_cast<int64_t>(pool.usable_size(p));
    const std::optional<c10::MempoolId_t> graph_pool = graph_pools_.pool_for_allocation();
    {
      std::lock_guard lock(mutex_);
      live_.emplace(p, Live{usable, {}, graph_pool});
      stats_.active_requests.increase(1);
      stats_.active_bytes.increase(usable);
      stats_.allocations.increase(1);
      stats_.allocated_bytes.increase(usable);
    }
    return {p, p, &raw_delete, c10::Device(c10::kCPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &raw_delete; }

  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }

  bool record_event(void* ptr, void* ctx, c10::Stream stream) override {
    if (ptr == nullptr || ctx != ptr) return false;  // not a DataPtr this allocator made
    std::lock_guard lock(mutex_);
    auto it = live_.find(ctx);
    if (it == live_.end()) return false;
    const StreamUse use{stream.device_index(), stream_handle(stream)};
    for (const StreamUse& u : it->second.streams) {
      if (u.device == use.device && u.stream == use.stream) return true;
    }
    it->second.streams.push_back(use);
    return true;
  }

  void empty_cache() override {
    host_pool().collect_deferred();
    host_pool().trim();
  }

  void begin_allocate_to_pool(c10::MempoolId_t id, std::function<bool(c10::Stream)> filter) override {
    graph_pools_.begin(id, std::move(filter));
  }
  void end_allocate_to_pool(c10::MempoolId_t id) override { graph_pools_.end(id); }
  void release_pool(c10::MempoolId_t id) override {
    for (void* p : graph_pools_.release(id)) host_pool().deallocate(p);
  }

  at::HostStats get_stats() override {
    std::lock_guard lock(mutex_);
    at::HostStats s = stats_;
    const HostPoolStats pool = host_pool().stats();
    s.num_host_alloc = static_cast<int64_t>(pool.pin_registrations);
    return s;
  }
  void reset_accumulated_stats() override {
    std::lock_guard lock(mutex_);
    for (c10::CachingAllocator::Stat* st : {&stats_.active_requests, &stats_.active_bytes, &stats_.allocations,
                                            &stats_.allocated_bytes}) {
      st->reset_accumulated();
    }
    stats_.num_host_free = 0;
  }
  void reset_peak_stats() override {
    std::lock_guard lock(mutex_);
    for (c10::CachingAllocator::Stat* st : {&stats_.active_requests, &stats_.active_bytes, &stats_.allocations,
                                            &stats_.allocated_bytes}) {
      st->reset_peak();
    }
    host_pool().reset_peak_stats();
  }

  static UnipoolHostAllocator& instance() {
    static auto* a = new UnipoolHostAllocator();  // never destroyed: pinned tensors may outlive everything
    return *a;
  }

 private:
  struct Live {
    int64_t usable;
    std::vector<StreamUse> streams;
    std::optional<c10::MempoolId_t> graph_pool;  // allocated during a capture into it
  };

  static void raw_delete(void* p) {
    if (p) instance().release(p);
  }

  void release(void* p) {
    Live live;
    {
      std::lock_guard lock(mutex_);
      auto it = live_.find(p);
      TORCH_INTERNAL_ASSERT(it != live_.end(), "unipool pinned host allocator: free of an unknown block");
      live = std::move(it->second);
      live_.erase(it);
      stats_.active_requests.decrease(1);
      stats_.active_bytes.decrease(live.usable);
      stats_.allocations.decrease(1);
      stats_.allocated_bytes.decrease(live.usable);
      ++stats_.num_host_free;
    }
    if (live.graph_pool && graph_pools_.hold(*live.graph_pool, p)) return;
    FenceSource* fences = cuda_hooks().fences ? cuda_hooks().fences() : nullptr;
    if (live.streams.empty() || fences == nullptr) {
      host_pool().deallocate(p);
      return;
    }
    std::vector<FenceId> ids;
    for (const StreamUse& u : live.streams) {
      const FenceId f = fences->record(u.device, u.stream);
      if (f != kNoFence) ids.push_back(f);
    }
    if (ids.empty()) {
      host_pool().deallocate(p);  // no fence could be recorded: the backend error is in its last_error
    } else if (ids.size() == 1) {
      host_pool().deallocate_after(p, *fences, ids[0]);
    } else {
      host_pool().deallocate_after(p, groups_, groups_.make(*fences, std::move(ids)));
    }
  }

  std::mutex mutex_;
  std::unordered_map<void*, Live> live_;
  at::HostStats stats_;
  FenceGroups groups_;
  HostGraphPools graph_pools_;
};

bool g_registered = false;

// Test hooks: DataPtrs from the allocator torch has registered for kCUDA,
// kept here by handle, so Python can drive it without a GPU (pin_memory()
// itself needs a driver).
std::mutex g_hook_mutex;
std::unordered_map<uint64_t, at::DataPtr> g_hook_ptrs;
uint64_t g_hook_next = 0;

py::dict host_stats_dict(const at::HostStats& s) {
  py::dict d;
  auto stat = [&](const char* name, const c10::CachingAllocator::Stat& st) {
    d[(std::string(name) + ".current").c_str()] = st.current;
    d[(std::string(name) + ".peak").c_str()] = st.peak;
    d[(std::string(name) + ".allocated").c_str()] = st.allocated;
    d[(std::string(name) + ".freed").c_str()] = st.freed;
  };
  stat("active_requests", s.active_requests);
  stat("active_bytes", s.active_bytes);
  stat("allocations", s.allocations);
  stat("allocated_bytes", s.allocated_bytes);
  d["num_host_alloc"] = s.num_host_alloc;
  d["num_host_free"] = s.num_host_free;
  return d;
}

}  // namespace

void register_host_allocator() {
  at::setHostAllocator(at::kCUDA, &UnipoolHostAllocator::instance(), /*priority=*/1);
  g_registered = true;
}

bool host_allocator_registered() {
  return g_registered && at::getHostAllocator(at::kCUDA) == &UnipoolHostAllocator::instance();
}

// Test hooks (unipool._testing): torch's pinned host allocator, called as
// torch calls it.
void bind_host_allocator_testing(py::module_& t) {
  t.def("host_allocator_is_unipool", &host_allocator_registered);
  t.def("host_alloc", [](size_t n) {
    at::DataPtr p = at::getHostAllocator(at::kCUDA)->allocate(n);
    const uint64_t address = reinterpret_cast<uint64_t>(p.get());
    std::lock_guard lock(g_hook_mutex);
    g_hook_ptrs.emplace(++g_hook_next, std::move(p));
    return py::make_tuple(g_hook_next, address);
  });
  t.def("host_record_event", [](uint64_t handle, int64_t stream_id, bool foreign_ctx) {
    std::lock_guard lock(g_hook_mutex);
    at::DataPtr& p = g_hook_ptrs.at(handle);
    int other = 0;
    void* ctx = foreign_ctx ? static_cast<void*>(&other) : p.get_context();
    c10::Stream stream(c10::Stream::UNSAFE, c10::Device(c10::kCUDA, 0), stream_id);
    return at::getHostAllocator(at::kCUDA)->record_event(p.get(), ctx, stream);
  });
  t.def("host_free", [](uint64_t handle) {
    at::DataPtr p;
    {
      std::lock_guard lock(g_hook_mutex);
      auto it = g_hook_ptrs.find(handle);
      TORCH_CHECK(it != g_hook_ptrs.end(), "unknown handle");
      p = std::move(it->second);
      g_hook_ptrs.erase(it);
    }
  });
  t.def("host_allocator_stats", [] { return host_stats_dict(at::getHostAllocator(at::kCUDA)->get_stats()); });
  t.def("host_allocator_reset_peak", [] { at::getHostAllocator(at::kCUDA)->reset_peak_stats(); });
  t.def("host_allocator_reset_accumulated", [] { at::getHostAllocator(at::kCUDA)->reset_accumulated_stats(); });
  t.def("host_allocator_empty_cache", [] { at::getHostAllocator(at::kCUDA)->empty_cache(); });
}

}  // namespace unipool::torch_ext
