// unipool torch extension: the host pool's region hooks, queued for Python
// (unipool.nixl.HostAgent). The hooks run where the pool pins, possibly with
// its locks held and on the pinning thread: calling into Python there could
// wait for the GIL while its holder waits for the pool. So the hooks only
// queue, under the journal's own lock, and Python applies the queue when it
// next looks a block up (drain). A piece pinned and unpinned between two
// drains cancels out and is never seen by Python.
#include <torch/csrc/utils/pybind.h>

#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "unipool_torch.hpp"

namespace unipool::torch_ext {
namespace {

struct Journal {
  std::mutex mutex;
  // (mapped?, address, bytes), in the order the pool told them.
  std::vector<std::tuple<bool, uintptr_t, uint64_t>> events;

  void mapped(const HostRegionEvent& e) {
    std::lock_guard lock(mutex);
    events.emplace_back(true, reinterpret_cast<uintptr_t>(e.address), e.bytes);
  }
  void unmapping(const HostRegionEvent& e) {
    const auto address = reinterpret_cast<uintptr_t>(e.address);
    std::lock_guard lock(mutex);
    for (auto it = events.rbegin(); it != events.rend(); ++it) {
      if (std::get<0>(*it) && std::get<1>(*it) == address) {  // mapped since the last drain
        events.erase(std::next(it).base());
        return;
      }
    }
    events.emplace_back(false, address, e.bytes);
  }
};

std::mutex g_attach_mutex;
std::shared_ptr<Journal> g_attached;  // the one journal the host pool reports to

std::shared_ptr<Journal> attach() {
  std::lock_guard lock(g_attach_mutex);
  if (g_attached) {
    throw std::invalid_argument(
        "unipool: the host pool already reports its regions to an attached agent; close() it first");
  }
  auto journal = std::make_shared<Journal>();
  std::weak_ptr<Journal> weak = journal;
  const Status s = host_pool().set_region_hooks({[weak](const HostRegionEvent& e) {
                                                   if (auto j = weak.lock()) j->mapped(e);
                                                 },
                                                 [weak](const HostRegionEvent& e) {
                                                   if (auto j = weak.lock()) j->unmapping(e);
                                                 }});
  if (s != Status::ok) throw std::invalid_argument(HostPool::last_error());
  g_attached = journal;
  return journal;
}

void detach(const std::shared_ptr<Journal>& journal) {
  std::lock_guard lock(g_attach_mutex);
  if (g_attached != journal) return;  // detached already
  host_pool().set_region_hooks({});
  g_attached.reset();
}

py::list drain(Journal& journal) {
  std::vector<std::tuple<bool, uintptr_t, uint64_t>> events;
  {
    std::lock_guard lock(journal.mutex);
    events.swap(journal.events);
  }
  py::list out;
  for (const auto& [mapped, address, bytes] : events) out.append(py::make_tuple(mapped, address, bytes));
  return out;
}

}  // namespace

void bind_region_journal(py::module_& m) {
  py::class_<Journal, std::shared_ptr<Journal>>(m, "_HostRegionJournal")
      .def("drain", &drain, "[(mapped, address, bytes), ...] told since the last drain, oldest first")
      .def("detach", &detach);
  m.def("_host_region_journal", &attach,
        "attaches a journal to the host pool's region hooks; the pinned pieces live now come first");
}

}  // namespace unipool::torch_ext
