// The trace observer: every block and segment change reaches it, in order,
// with the addresses and sizes the pool's snapshot shows; deferred frees
// complete only after their fences; the observer can be removed at any time.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "device_test_support.hpp"
#include "unipool/device_trace.hpp"

namespace unipool::test {
namespace {

using Action = DeviceTraceAction;

struct Recorder {
  std::vector<DeviceTraceEvent> events;
  DeviceTraceObserver observer() {
    return [this](const DeviceTraceEvent& e) { events.push_back(e); };
  }
  std::vector<std::string> actions() const {
    std::vector<std::string> out;
    for (const DeviceTraceEvent& e : events) out.emplace_back(to_string(e.action));
    return out;
  }
};

uint64_t addr(const void* p) { return reinterpret_cast<uint64_t>(p); }

using Actions = std::vector<std::string>;

TEST(DevicePoolTrace, PlainSegmentAllocFreeAndRelease) {
  SimPool sim(false);
  Recorder rec;
  sim.pool->set_trace_observer(rec.observer());
  void* p = sim.pool->allocate(3 * kMiB + 1, kStreamA);
  ASSERT_EQ(rec.actions(), (Actions{"segment_alloc", "alloc"}));
  const DeviceTraceEvent seg = rec.events[0], a = rec.events[1];
  EXPECT_EQ(seg.size, 20 * kMiB);  // 1-10 MiB requests get a 20 MiB segment
  EXPECT_EQ(seg.requested, 0u);
  EXPECT_EQ(seg.stream, kStreamA);
  EXPECT_EQ(a.address, addr(p));
  EXPECT_EQ(a.size, 3 * kMiB + 512);  // rounded to 512 bytes
  EXPECT_EQ(a.requested, 3 * kMiB + 1);
  EXPECT_EQ(a.stream, kStreamA);
  EXPECT_EQ(a.device, 0);
  EXPECT_GE(a.address, seg.address);
  EXPECT_LE(a.address + a.size, seg.address + seg.size);

  sim.pool->deallocate(p);  // used on its owner stream only: complete at once
  ASSERT_EQ(rec.actions(), (Actions{"segment_alloc", "alloc", "free_requested", "free_completed"}));
  for (size_t i : {2u, 3u}) {
    EXPECT_EQ(rec.events[i].address, a.address);
    EXPECT_EQ(rec.events[i].size, a.size);
    EXPECT_EQ(rec.events[i].requested, a.requested);
  }
  sim.pool->empty_cache();
  ASSERT_EQ(rec.events.size(), 5u);
  EXPECT_EQ(rec.events[4].action, Action::segment_free);
  EXPECT_EQ(rec.events[4].address, seg.address);
  EXPECT_EQ(rec.events[4].size, seg.size);
  EXPECT_POOL_VALID(*sim.pool);
}

TEST(DevicePoolTrace, FreeOnOtherStreamsCompletesAfterTheirFences) {
  SimPool sim(false);
  ManualFenceSource& fences = sim.backend->manual_fences();
  Recorder rec;
  sim.pool->set_trace_observer(rec.observer());
  void* p = sim.pool->allocate(4 * kMiB, kStreamA);
  sim.pool->record_stream(p, kStreamB);
  sim.pool->deallocate(p);
  EXPECT_EQ(rec.actions(), (Actions{"segment_alloc", "alloc", "free_requested"}));
  void* q = sim.pool->allocate(kMiB, kStreamA);  // polls: B's fence is pending
  EXPECT_EQ(rec.actions().back(), "alloc");
  EXPECT_EQ(rec.events.back().address, addr(q));
  fences.complete_stream(kStreamB);
  sim.pool->deallocate(q);                      // completes at once (own stream)
  void* r = sim.pool->allocate(512, kStreamA);  // this allocation polls and completes p's free first
  const Actions all = rec.actions();
  const Actions tail(all.end() - 5, all.end());
  // q's free, then p's free completed by the poll, then the small pool's
  // segment and r.
  EXPECT_EQ(tail, (Actions{"free_requested", "free_completed", "free_completed", "segment_alloc", "alloc"}));
  EXPECT_EQ(rec.events[rec.events.size() - 3].address, addr(p));
  sim.pool->deallocate(r);
  EXPECT_POOL_VALID(*sim.pool);
}

TEST(DevicePoolTrace, ExpandableGrowthMapsAndReleaseUnmaps) {
  SimPool sim(true);
  Recorder rec;
  sim.pool->set_trace_observer(rec.observer());
  void* p = sim.pool->allocate(5 * kMiB, kStreamA);
  ASSERT_EQ(rec.actions(), (Actions{"segment_map", "alloc"}));
  const DeviceTraceEvent map = rec.events[0];
  EXPECT_EQ(map.address, addr(p));  // the first block starts the reservation
  EXPECT_EQ(map.size, 6 * kMiB);    // three 2 MiB granules
  sim.pool->deallocate(p);
  sim.pool->empty_cache();
  ASSERT_EQ(rec.actions(), (Actions{"segment_map", "alloc", "free_requested", "free_completed", "segment_unmap"}));
  EXPECT_EQ(rec.events[4].address, map.address);
  EXPECT_EQ(rec.events[4].size, map.size);
  EXPECT_POOL_VALID(*sim.pool);
}

TEST(DevicePoolTrace, OutOfMemoryIsReportedBeforeTheThrow) {
  SimPool sim(false, 64 * kMiB);
  Recorder rec;
  sim.pool->set_trace_observer(rec.observer());
  EXPECT_THROW(sim.pool->allocate(100 * kMiB, kStreamB), OutOfMemoryError);
  ASSERT_EQ(rec.actions(), (Actions{"oom"}));
  EXPECT_EQ(rec.events[0].requested, 100 * kMiB);
  EXPECT_EQ(rec.events[0].size, 100 * kMiB);
  EXPECT_EQ(rec.events[0].stream, kStreamB);
  EXPECT_EQ(rec.events[0].address, 64 * kMiB);  // the device's free bytes, as PyTorch reports them
}

TEST(DevicePoolTrace, RemovedOrThrowingObserversLeaveThePoolAlone) {
  SimPool sim(false);
  int calls = 0;
  sim.pool->set_trace_observer([&](const DeviceTraceEvent&) {
    ++calls;
    throw std::runtime_error("observer failure");
  });
  void* p = sim.pool->allocate(kMiB, kStreamA);
  EXPECT_EQ(calls, 2);  // segment_alloc, alloc: each threw, the allocation stands
  sim.pool->set_trace_observer({});
  sim.pool->deallocate(p);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(sim.pool->stats().allocation[0].current, 0);
  EXPECT_POOL_VALID(*sim.pool);
}

// Replaying the events of a mixed workload gives exactly the live blocks and
// segments of the snapshot: nothing is missed or reported twice.
TEST(DevicePoolTrace, ReplayMatchesTheSnapshot) {
  for (const bool expandable : {false, true}) {
    SimPool sim(expandable, 256 * kMiB);
    ManualFenceSource& fences = sim.backend->manual_fences();
    std::map<uint64_t, uint64_t> active;  // address -> size
    int64_t traced_reserved = 0;
    sim.pool->set_trace_observer([&](const DeviceTraceEvent& e) {
      switch (e.action) {
        case Action::alloc: EXPECT_TRUE(active.emplace(e.address, e.size).second); break;
        case Action::free_requested: EXPECT_EQ(active.count(e.address), 1u); break;
        case Action::free_completed: EXPECT_EQ(active.erase(e.address), 1u); break;
        case Action::segment_alloc:
        case Action::segment_map: traced_reserved += static_cast<int64_t>(e.size); break;
        case Action::segment_free:
        case Action::segment_unmap: traced_reserved -= static_cast<int64_t>(e.size); break;
        case Action::oom: break;
      }
    });
    std::vector<void*> live;
    const StreamHandle streams[] = {kStreamA, kStreamB};
    for (int i = 0; i < 400; ++i) {
      const uint64_t size = (static_cast<uint64_t>(i * 7919) % 97 + 1) * 64 * 1024;
      live.push_back(sim.pool->allocate(size, streams[i % 2]));
      if (i % 5 == 0) sim.pool->record_stream(live.back(), streams[(i + 1) % 2]);
      if (live.size() > 12) {
        sim.pool->deallocate(live[i % live.size()]);
        live.erase(live.begin() + static_cast<long>(i % live.size()));
      }
      if (i % 50 == 49) fences.complete_all();
      if (i % 100 == 99) sim.pool->empty_cache();
    }
    const DeviceSnapshot snap = sim.pool->snapshot();
    std::map<uint64_t, uint64_t> snap_active;
    int64_t reserved = 0;
    for (const DeviceSegmentInfo& s : snap.segments) {
      reserved += static_cast<int64_t>(s.total_size);
      for (const DeviceBlockInfo& b : s.blocks) {
        if (b.state != DeviceBlockInfo::inactive) snap_active[b.address] = b.size;
      }
    }
    EXPECT_EQ(active, snap_active) << "expandable=" << expandable;
    EXPECT_EQ(traced_reserved, reserved) << "expandable=" << expandable;
    EXPECT_EQ(reserved, sim.pool->stats().reserved_bytes[0].current);
    for (void* p : live) sim.pool->deallocate(p);
    EXPECT_POOL_VALID(*sim.pool);
  }
}

// Threads allocate and free while another sets and clears the observer: the
// observer runs under the pool's lock, so its plain counters need no lock of
// their own (TSan checks that), and the pool's books stay exact.
TEST(DevicePoolTrace, ObserverSwapsWhileThreadsAllocate) {
  SimPool sim(false);
  int64_t allocs = 0, completed = 0;  // guarded by the pool's lock
  std::atomic<bool> stop{false};
  std::vector<std::thread> workers;
  for (int t = 0; t < 3; ++t) {
    workers.emplace_back([&, t] {
      const StreamHandle stream = t == 0 ? kStreamA : kStreamB;
      for (int i = 0; i < 2000; ++i) {
        void* p = sim.pool->allocate(static_cast<uint64_t>(i % 7 + 1) * 4096, stream);
        sim.pool->deallocate(p);
      }
    });
  }
  std::thread toggler([&] {
    for (int i = 0; !stop.load(); ++i) {
      if (i % 2 == 0) {
        sim.pool->set_trace_observer([&](const DeviceTraceEvent& e) {
          if (e.action == Action::alloc) ++allocs;
          if (e.action == Action::free_completed) ++completed;
        });
      } else {
        sim.pool->set_trace_observer({});
      }
    }
  });
  for (std::thread& w : workers) w.join();
  stop = true;
  toggler.join();
  sim.pool->set_trace_observer({});
  (void)allocs, (void)completed;  // how many depends on the toggler's timing
  EXPECT_EQ(sim.pool->stats().allocation[0].current, 0);
  EXPECT_POOL_VALID(*sim.pool);
}

TEST(DevicePoolTrace, ActionNamesArePyTorchs) {
  EXPECT_STREQ(to_string(Action::alloc), "alloc");
  EXPECT_STREQ(to_string(Action::free_requested), "free_requested");
  EXPECT_STREQ(to_string(Action::free_completed), "free_completed");
  EXPECT_STREQ(to_string(Action::segment_alloc), "segment_alloc");
  EXPECT_STREQ(to_string(Action::segment_free), "segment_free");
  EXPECT_STREQ(to_string(Action::segment_map), "segment_map");
  EXPECT_STREQ(to_string(Action::segment_unmap), "segment_unmap");
  EXPECT_STREQ(to_string(Action::oom), "oom");
}

}  // namespace
}  // namespace unipool::test
