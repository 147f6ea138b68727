// unipool torch extension: region_journal.hpp. One journal per kind of
// memory (host, device) can be attached at a time: the agent that attached
// it applies its events, in order, at each drain.
#include "region_journal.hpp"

#include <torch/csrc/utils/pybind.h>

#include <iterator>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "unipool/registration_cache.hpp"
#include "unipool_torch.hpp"

namespace unipool::torch_ext {
namespace {

struct Event {
  bool mapped;
  int device;
  uintptr_t address;
  uint64_t bytes;
};

// The events told since the last drain. A range mapped and then unmapped
// whole, with no event touching it in between, cancels out: Python never
// sees it. Only the latest event overlapping the unmap can be its map.
struct Journal {
  std::mutex mutex;
  std::vector<Event> events;

  void push(const Event& e) {
    std::lock_guard lock(mutex);
    if (!e.mapped) {
      for (auto it = events.rbegin(); it != events.rend(); ++it) {
        if (it->device != e.device || it->address >= e.address + e.bytes || e.address >= it->address + it->bytes) {
          continue;
        }
        if (it->mapped && it->address == e.address && it->bytes == e.bytes) {
          events.erase(std::next(it).base());
          return;
        }
        break;
      }
    }
    events.push_back(e);
  }
};

py::list drain(Journal& journal) {
  std::vector<Event> events;
  {
    std::lock_guard lock(journal.mutex);
    events.swap(journal.events);
  }
  py::list out;
  for (const Event& e : events) out.append(py::make_tuple(e.mapped, e.address, e.bytes, e.device));
  return out;
}

// ---- host: the pool's own hooks replay what is pinned when installed ----

std::mutex g_host_mutex;
std::shared_ptr<Journal> g_host;

std::shared_ptr<Journal> attach_host() {
  std::lock_guard lock(g_host_mutex);
  if (g_host) {
    throw std::invalid_argument(
        "unipool: the host pool already reports its regions to an attached agent; close() it first");
  }
  auto journal = std::make_shared<Journal>();
  std::weak_ptr<Journal> weak = journal;
  auto tell = [weak](bool mapped) {
    return [weak, mapped](const HostRegionEvent& e) {
      if (auto j = weak.lock()) j->push({mapped, 0, reinterpret_cast<uintptr_t>(e.address), e.bytes});
    };
  };
  if (host_pool().set_region_hooks({tell(true), tell(false)}) != Status::ok) {
    throw std::invalid_argument(HostPool::last_error());
  }
  g_host = journal;
  return journal;
}

void detach_host(const std::shared_ptr<Journal>& journal) {
  std::lock_guard lock(g_host_mutex);
  if (g_host != journal) return;  // detached already
  host_pool().set_region_hooks({});
  g_host.reset();
}

// ---- device: a book of mapped ranges, kept from the pools' creation -----

// The mapped ranges exactly as the hooks told them: a RegistrationCache
// whose registrar registers nothing keeps them, partial unmaps included
// (expandable segments give granules back in runs of their own).
struct DeviceBook {
  std::mutex mutex;
  RegistrationCache live{Registrar{[](void*, uint64_t, int) { return uint64_t{0}; }, [](uint64_t) {}}};
  std::shared_ptr<Journal> journal;

  void mapped(const DeviceSegmentEvent& e) {
    std::lock_guard lock(mutex);
    live.on_map(e.address, e.bytes, e.device);
    if (journal) journal->push({true, e.device, reinterpret_cast<uintptr_t>(e.address), e.bytes});
  }
  void unmapping(const DeviceSegmentEvent& e) {
    std::lock_guard lock(mutex);
    live.before_unmap(e.address, e.bytes);
    if (journal) journal->push({false, e.device, reinterpret_cast<uintptr_t>(e.address), e.bytes});
  }
};

DeviceBook& device_book() {
  static DeviceBook* book = new DeviceBook;  // never destroyed: pools may unmap at exit
  return *book;
}

std::shared_ptr<Journal> attach_device() {
  DeviceBook& book = device_book();
  std::lock_guard lock(book.mutex);
  if (book.journal) {
    throw std::invalid_argument(
        "unipool: the device pools already report their segments to an attached agent; close() it first");
  }
  book.journal = std::make_shared<Journal>();
  for (const RegisteredRegion& r : book.live.regions()) {
    book.journal->push({true, r.device, reinterpret_cast<uintptr_t>(r.address), r.bytes});
  }
  return book.journal;
}

void detach_device(const std::shared_ptr<Journal>& journal) {
  DeviceBook& book = device_book();
  std::lock_guard lock(book.mutex);
  if (book.journal == journal) book.journal.reset();
}

}  // namespace

DeviceSegmentHooks device_region_hooks() {
  return {[](const DeviceSegmentEvent& e) { device_book().mapped(e); },
          [](const DeviceSegmentEvent& e) { device_book().unmapping(e); }};
}

void bind_region_journal(py::module_& m) {
  py::class_<Journal, std::shared_ptr<Journal>>(m, "_RegionJournal")
      .def("drain", &drain, "[(mapped, address, bytes, device), ...] told since the last drain, oldest first");
  m.def("_host_region_journal", &attach_host,
        "attaches a journal to the host pool's region hooks; the pinned pieces live now come first");
  m.def("_host_region_detach", &detach_host);
  m.def("_device_region_journal", &attach_device,
        "attaches a journal to the device pools' segments; the ranges mapped now come first");
  m.def("_device_region_detach", &detach_device);
}

}  // namespace unipool::torch_ext
