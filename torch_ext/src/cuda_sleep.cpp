// unipool torch extension: sleep and wake of the CUDA allocator's pools, and
// the Python bindings of tags (unipool.torch.tag, sleep, wake, tag_stats).
//
// The pools are the default one of each device and every private pool
// (torch.cuda.graph's pools and MemPools), so a graph captured under a tag
// gives its memory back with the tag and replays at the same addresses after
// wake. Offloaded contents go to the pinned host pool torch's pinned
// allocator uses, so the copies run at pinned bandwidth.
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <map>
#include <stdexcept>

#include "cuda_allocator.hpp"
#include "unipool/host_pool.hpp"
#include "unipool_torch.hpp"

namespace unipool::torch_ext {

namespace {

// unipool.torch.AsleepError: a tag asleep (or awake, for wake) where it
// must not be.
struct AsleepError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The device pool's errors as Python's: a ValueError for misuse, a
// MemoryError for host memory, AsleepError, a RuntimeError otherwise.
template <class F>
auto translated(F&& f) {
  try {
    return f();
  } catch (const DevicePoolError& e) {
    switch (e.status()) {
      case Status::asleep: throw AsleepError(e.what());
      case Status::bad_argument: throw py::value_error(e.what());
      case Status::out_of_space: PyErr_SetString(PyExc_MemoryError, e.what()); throw py::error_already_set();
      default: throw std::runtime_error(e.what());
    }
  }
}

py::dict result_dict(const DeviceSleepResult& r) {
  py::dict d;
  d["offloaded_bytes"] = r.offloaded_bytes;
  d["discarded_bytes"] = r.discarded_bytes;
  d["released_bytes"] = r.released_bytes;
  d["seconds"] = r.seconds;
  return d;
}

py::dict tag_dict(const DeviceTagStats& t) {
  py::dict d;
  d["state"] = t.state;
  d["allocated_bytes"] = t.allocated_bytes;
  d["blocks"] = t.blocks;
  d["reserved_bytes"] = t.reserved_bytes;
  d["offloaded_bytes"] = t.offloaded_bytes;
  d["discarded_bytes"] = t.discarded_bytes;
  d["released_bytes"] = t.released_bytes;
  d["host_bytes"] = t.host_bytes;
  d["sleeps"] = t.sleeps;
  d["wakes"] = t.wakes;
  d["last_sleep_seconds"] = t.last_sleep_seconds;
  d["last_wake_seconds"] = t.last_wake_seconds;
  return d;
}

// One tag's stats over several pools: bytes add up; the state is the
// common one, or "partial" when the pools disagree.
void merge(DeviceTagStats& into, const DeviceTagStats& t) {
  into.state = into.state.empty() || into.state == t.state ? t.state : "partial";
  into.allocated_bytes += t.allocated_bytes;
  into.blocks += t.blocks;
  into.reserved_bytes += t.reserved_bytes;
  into.offloaded_bytes += t.offloaded_bytes;
  into.discarded_bytes += t.discarded_bytes;
  into.released_bytes += t.released_bytes;
  into.host_bytes += t.host_bytes;
  into.sleeps = std::max(into.sleeps, t.sleeps);
  into.wakes = std::max(into.wakes, t.wakes);
  into.last_sleep_seconds = std::max(into.last_sleep_seconds, t.last_sleep_seconds);
  into.last_wake_seconds = std::max(into.last_wake_seconds, t.last_wake_seconds);
}

}  // namespace

std::vector<DevicePool*> UnipoolCudaAllocator::every_pool_locked(int device) {
  std::vector<DevicePool*> all;
  for (int d = 0; d < pools_->device_count(); ++d) {
    if (device == -1 || d == device) all.push_back(&pools_->pool(d));
  }
  for (auto& [key, p] : private_) {
    if (p.pool != nullptr && (device == -1 || key.first == device)) all.push_back(p.pool.get());
  }
  return all;
}

DeviceSleepResult UnipoolCudaAllocator::sleep(const DeviceSleepRequest& request, HostPool* host) {
  std::lock_guard lock(mutex_);
  return sleep_pools(every_pool_locked(-1), request, host);
}

DeviceSleepResult UnipoolCudaAllocator::wake(const std::vector<std::string>& tags) {
  std::lock_guard lock(mutex_);
  return wake_pools(every_pool_locked(-1), tags);
}

std::vector<DeviceTagStats> UnipoolCudaAllocator::tag_stats(int device) {
  std::lock_guard lock(mutex_);
  std::map<std::string, DeviceTagStats> by_tag;
  for (DevicePool* p : every_pool_locked(device)) {
    for (const DeviceTagStats& t : p->tag_stats()) merge(by_tag[t.tag], t);
  }
  std::vector<DeviceTagStats> out;
  for (auto& [name, t] : by_tag) {
    t.tag = name;
    out.push_back(std::move(t));
  }
  return out;
}

void bind_cuda_sleep(py::module_& m) {
  py::register_exception<AsleepError>(m, "AsleepError", PyExc_RuntimeError);
  m.def("_sleep", [](const std::vector<std::string>& offload, const std::vector<std::string>& discard) {
    return translated([&] {
      DeviceSleepResult r;
      {
        py::gil_scoped_release no_gil;  // copies of GiBs: let other Python threads run
        r = installed().sleep(DeviceSleepRequest{offload, discard}, &host_pool());
      }
      return result_dict(r);
    });
  });
  m.def("_wake", [](const std::vector<std::string>& tags) {
    return translated([&] {
      DeviceSleepResult r;
      {
        py::gil_scoped_release no_gil;
        r = installed().wake(tags);
      }
      return result_dict(r);
    });
  });
  m.def("_tag_stats", [](int device) {
    return translated([&] {
      TORCH_CHECK_VALUE(device >= 0 && device < installed().pools().device_count(), "unipool.torch.tag_stats: device ",
                        device, " does not exist");
      py::dict out;
      for (const DeviceTagStats& t : installed().tag_stats(device)) out[py::str(t.tag)] = tag_dict(t);
      return out;
    });
  });
}

// Tags are the core's, process-wide: they work before install() too.
void bind_device_tags(py::module_& m) {
  m.def("_set_device_tag", [](const std::string& name) {
    return translated([&] { return static_cast<int>(set_current_device_tag(device_tag(name))); });
  });
  m.def("_restore_device_tag",
        [](int tag) { translated([&] { set_current_device_tag(static_cast<DeviceTag>(tag)); }); });
  m.def("_current_device_tag", [] { return device_tag_name(current_device_tag()); });
}

}  // namespace unipool::torch_ext
