// unipool host: region hooks (HostPool::set_region_hooks), through the test
// pinner. What the hooks were told must always equal what is pinned: every
// piece reported once by on_map and once by before_unmap, in growth, huge
// blocks, the pinning thread's chunks ahead, failed growths rolled back,
// replays at install time and installs racing with allocating threads.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "host_test_util.hpp"
#include "test_pinner.hpp"

namespace unipool::test {
namespace {

// What a transfer engine's registration cache would hold.
struct Recorder {
  std::mutex mutex;
  std::map<uintptr_t, uint64_t> live;
  uint64_t maps = 0, unmaps = 0, double_maps = 0, unknown_unmaps = 0, largest = 0;

  HostRegionHooks hooks() {
    return {[this](const HostRegionEvent& e) {
              std::lock_guard lock(mutex);
              ++maps;
              largest = std::max(largest, e.bytes);
              if (!live.emplace(reinterpret_cast<uintptr_t>(e.address), e.bytes).second) ++double_maps;
            },
            [this](const HostRegionEvent& e) {
              std::lock_guard lock(mutex);
              ++unmaps;
              const auto it = live.find(reinterpret_cast<uintptr_t>(e.address));
              if (it == live.end() || it->second != e.bytes) {
                ++unknown_unmaps;
              } else {
                live.erase(it);
              }
            }};
  }
  // The hooks' book equals the pinner's, piece for piece.
  void expect_matches_pinner() {
    std::lock_guard lock(mutex);
    std::lock_guard pinned(pinner_state().mutex);
    EXPECT_EQ(live, pinner_state().ranges);
    EXPECT_EQ(double_maps, 0u);
    EXPECT_EQ(unknown_unmaps, 0u);
  }
};

TEST(HostRegionHooks, ReportEveryPieceOnceAsItIsPinnedAndUnpinned) {
  UseTestPinner use;
  Recorder rec;
  {
    HostPool pool(conf("pinned=on,chunk=4MiB,max_pin=8MiB,huge_cache=0"));
    ASSERT_EQ(pool.set_region_hooks(rec.hooks()), Status::ok);
    std::vector<void*> blocks;
    // Small, middle, large (an arena growth in 8 MiB pieces) and huge (its own mapping).
    for (size_t size : {size_t{100}, size_t{20000}, size_t{300000}, size_t{6} << 20, size_t{20} << 20}) {
      void* p = pool.allocate(size);
      ASSERT_NE(p, nullptr) << HostPool::last_error();
      blocks.push_back(p);
      rec.expect_matches_pinner();
    }
    EXPECT_LE(rec.largest, uint64_t{8} << 20);
    EXPECT_EQ(rec.maps, pool.stats().pin_registrations);
    const uint64_t maps = rec.maps;
    // Blocks served from memory already pinned register nothing.
    for (int i = 0; i < 100; ++i) EXPECT_EQ(pool.deallocate(pool.allocate(20000)), Status::ok);
    EXPECT_EQ(rec.maps, maps);
    // The huge block's mapping goes when it is freed (no huge cache).
    EXPECT_EQ(pool.deallocate(blocks.back()), Status::ok);
    blocks.pop_back();
    EXPECT_GE(rec.unmaps, 3u);  // 20 MiB in pieces of at most 8 MiB
    rec.expect_matches_pinner();
    for (void* p : blocks) EXPECT_EQ(pool.deallocate(p), Status::ok);
    EXPECT_VALID(pool);
  }
  // The pool's destruction unpins the rest, each told first.
  EXPECT_TRUE(rec.live.empty());
  rec.expect_matches_pinner();
  EXPECT_EQ(rec.maps, rec.unmaps);
}

TEST(HostRegionHooks, InstallReplaysWhatIsPinnedAndEmptyHooksDetach) {
  UseTestPinner use;
  HostPool pool(conf("pinned=on,chunk=4MiB,max_pin=8MiB"));
  void* a = pool.allocate(size_t{12} << 20);
  void* b = pool.allocate(64);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  Recorder rec;
  ASSERT_EQ(pool.set_region_hooks(rec.hooks()), Status::ok);
  EXPECT_GT(rec.maps, 1u);
  rec.expect_matches_pinner();
  // A second install replays to the new hooks and tells the old ones nothing.
  Recorder next;
  ASSERT_EQ(pool.set_region_hooks(next.hooks()), Status::ok);
  next.expect_matches_pinner();
  EXPECT_EQ(rec.unmaps, 0u);
  ASSERT_EQ(pool.set_region_hooks({}), Status::ok);
  const uint64_t told = next.maps;
  void* c = pool.allocate(size_t{30} << 20);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(next.maps, told);
  for (void* p : {a, b, c}) EXPECT_EQ(pool.deallocate(p), Status::ok);
  EXPECT_VALID(pool);
}

TEST(HostRegionHooks, SeeChunksPinnedAheadAndGrowthsRolledBack) {
  UseTestPinner use;
  Recorder rec;
  {
    HostPool pool(conf("pinned=on,pin_thread=on,chunk=4MiB,max_pin=16MiB"));
    ASSERT_EQ(pool.set_region_hooks(rec.hooks()), Status::ok);
    void* p = pool.allocate(size_t{5} << 20);
    ASSERT_NE(p, nullptr);
    pool.wait_for_pinning();
    EXPECT_GT(pool.stats().pin_thread_registrations, 0u);
    rec.expect_matches_pinner();
    // A growth whose second piece fails is undone: its first piece is told
    // before_unmap as it is unpinned again.
    const uint64_t unmaps = rec.unmaps;
    pinner_state().fail_only = pinner_state().calls + 2;
    EXPECT_EQ(pool.allocate(size_t{100} << 20), nullptr);
    EXPECT_GT(rec.unmaps, unmaps);
    rec.expect_matches_pinner();
    pinner_state().fail_only = 0;
    EXPECT_EQ(pool.deallocate(p), Status::ok);
    EXPECT_VALID(pool);
  }
  EXPECT_TRUE(rec.live.empty());
}

TEST(HostRegionHooks, InstallsRacingWithAllocatingThreadsMissNothing) {
  UseTestPinner use;
  HostPool pool(conf("pinned=on,chunk=4MiB,max_pin=4MiB,huge_cache=0"));
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&pool, &stop, t] {
      std::vector<void*> held;
      for (int i = 0; !stop.load(); ++i) {
        // Huge blocks come and go (pin, unpin); large ones grow the arenas.
        held.push_back(pool.allocate(((i + t) % 3 == 0 ? size_t{9} : size_t{2}) << 20));
        if (held.size() > 4) {
          EXPECT_EQ(pool.deallocate(held.front()), Status::ok);
          held.erase(held.begin());
        }
      }
      for (void* p : held) EXPECT_EQ(pool.deallocate(p), Status::ok);
    });
  }
  std::vector<std::unique_ptr<Recorder>> recorders;
  for (int round = 0; round < 20; ++round) {
    recorders.push_back(std::make_unique<Recorder>());
    ASSERT_EQ(pool.set_region_hooks(recorders.back()->hooks()), Status::ok);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  stop = true;
  for (std::thread& t : threads) t.join();
  // The last recorder saw the replay and every later event: its book is exact.
  recorders.back()->expect_matches_pinner();
  EXPECT_GT(recorders.back()->unmaps, 0u);
  EXPECT_VALID(pool);
  ASSERT_EQ(pool.set_region_hooks({}), Status::ok);  // the recorders go first
}

TEST(HostRegionHooks, RefusedByAPoolThatPinsNothing) {
  UseTestPinner use;
  {
    HostPool pageable(conf("pinned=off"));
    EXPECT_EQ(pageable.set_region_hooks({}), Status::bad_argument);
    EXPECT_NE(std::string(HostPool::last_error()).find("pinned=off"), std::string::npos) << HostPool::last_error();
  }
  pinner_state().available = false;
  HostPool no_gpu(conf("pinned=best_effort"));
  EXPECT_EQ(no_gpu.set_region_hooks({}), Status::bad_argument);
  EXPECT_NE(std::string(HostPool::last_error()).find("no CUDA device"), std::string::npos) << HostPool::last_error();
}

}  // namespace
}  // namespace unipool::test
