// unipool: RegistrationCache, with a registrar that keeps its own book of
// what is registered (as a transfer engine would) and can be told to fail.
// The cache's regions must always equal that book, and cover exactly what
// the pools have mapped: host pinned pieces, device segments and granule
// runs, a KV pool's arena.
#include "unipool/registration_cache.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "device/device_test_support.hpp"
#include "host/test_pinner.hpp"
#include "unipool/host_pool.hpp"
#include "unipool/kv_block_pool.hpp"

namespace unipool::test {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

struct Engine {
  std::mutex mutex;
  std::map<uint64_t, RegisteredRegion> live;  // handle -> region
  uint64_t next = 1, fail_at = 0, calls = 0;  // fail_at: the call numbered so fails

  Registrar registrar() {
    return {[this](void* address, uint64_t bytes, int device) -> uint64_t {
              std::lock_guard lock(mutex);
              if (++calls == fail_at) throw std::runtime_error("engine: injected registration failure");
              live[next] = RegisteredRegion{address, bytes, device, next};
              return next++;
            },
            [this](uint64_t handle) {
              std::lock_guard lock(mutex);
              if (live.erase(handle) == 0) throw std::runtime_error("engine: unknown handle");
            }};
  }
  // The engine's book, by address, equals the cache's regions.
  void expect_matches(const RegistrationCache& cache) {
    std::map<uintptr_t, RegisteredRegion> by_address;
    {
      std::lock_guard lock(mutex);  // not held over the cache's calls: the cache calls us under its lock
      for (const auto& [h, r] : live) by_address[reinterpret_cast<uintptr_t>(r.address)] = r;
    }
    const std::vector<RegisteredRegion> regions = cache.regions();
    ASSERT_EQ(regions.size(), by_address.size());
    auto it = by_address.begin();
    for (const RegisteredRegion& r : regions) {
      EXPECT_EQ(r.address, it->second.address);
      EXPECT_EQ(r.bytes, it->second.bytes);
      EXPECT_EQ(r.handle, it->second.handle);
      ++it;
    }
    EXPECT_EQ(cache.live_regions(), by_address.size());
  }
  uint64_t bytes() {
    std::lock_guard lock(mutex);
    uint64_t n = 0;
    for (const auto& [h, r] : live) n += r.bytes;
    return n;
  }
};

void* at(uintptr_t a) { return reinterpret_cast<void*>(a); }

TEST(RegistrationCache, CutsChunksIntoRegionsAndLocatesEveryByte) {
  Engine engine;
  RegistrationCache cache(engine.registrar(), 4 * kMiB);
  const uintptr_t base = uintptr_t{1} << 40;
  cache.on_map(at(base), 10 * kMiB, 3);
  EXPECT_EQ(cache.registrations(), 3u);  // 4 + 4 + 2 MiB
  engine.expect_matches(cache);
  for (uint64_t off : {uint64_t{0}, 4 * kMiB - 1, 4 * kMiB, 9 * kMiB + 123, 10 * kMiB - 1}) {
    const auto where = cache.locate(at(base + off));
    ASSERT_TRUE(where.has_value()) << off;
    EXPECT_EQ(where->offset, off % (4 * kMiB));
    EXPECT_EQ(where->region.device, 3);
  }
  EXPECT_FALSE(cache.locate(at(base + 10 * kMiB)).has_value());
  EXPECT_FALSE(cache.locate(at(base - 1)).has_value());
  // Whole blocks per region: piece_bytes.
  cache.on_map(at(base + 64 * kMiB), 9 * kMiB, -1, 3 * kMiB);
  EXPECT_EQ(cache.registrations(), 6u);
  engine.expect_matches(cache);
}

TEST(RegistrationCache, RefusesBadChunksAndKeepsNothingOfAFailedOne) {
  Engine engine;
  EXPECT_THROW(RegistrationCache(Registrar{}, 4 * kMiB), std::invalid_argument);
  EXPECT_THROW(RegistrationCache(engine.registrar(), 0), std::invalid_argument);
  RegistrationCache cache(engine.registrar(), 4 * kMiB);
  const uintptr_t base = uintptr_t{1} << 40;
  EXPECT_THROW(cache.on_map(nullptr, kMiB, 0), std::invalid_argument);
  EXPECT_THROW(cache.on_map(at(base), 0, 0), std::invalid_argument);
  EXPECT_THROW(cache.on_map(at(base), kMiB, 0, 8 * kMiB), std::invalid_argument);
  cache.on_map(at(base), 8 * kMiB, 0);
  EXPECT_THROW(cache.on_map(at(base + 7 * kMiB), kMiB, 0), std::invalid_argument);  // overlaps
  EXPECT_THROW(cache.on_map(at(base - kMiB), 2 * kMiB, 0), std::invalid_argument);
  // The second region of a chunk fails: the first goes again, the error goes on.
  engine.fail_at = engine.calls + 2;
  EXPECT_THROW(cache.on_map(at(base + 16 * kMiB), 8 * kMiB, 0), std::runtime_error);
  engine.expect_matches(cache);
  EXPECT_FALSE(cache.locate(at(base + 16 * kMiB)).has_value());
}

TEST(RegistrationCache, UnmappingPartOfAChunkKeepsTheRestRegistered) {
  Engine engine;
  RegistrationCache cache(engine.registrar(), 4 * kMiB);
  const uintptr_t base = uintptr_t{1} << 40;
  cache.on_map(at(base), 10 * kMiB, 0);
  cache.on_map(at(base + 10 * kMiB), 2 * kMiB, 0);
  // [2, 11) MiB goes: the first chunk keeps [0, 2), the second [11, 12).
  cache.before_unmap(at(base + 2 * kMiB), 9 * kMiB);
  engine.expect_matches(cache);
  EXPECT_EQ(engine.bytes(), 3 * kMiB);
  EXPECT_TRUE(cache.locate(at(base + 2 * kMiB - 1)).has_value());
  EXPECT_FALSE(cache.locate(at(base + 2 * kMiB)).has_value());
  EXPECT_FALSE(cache.locate(at(base + 11 * kMiB - 1)).has_value());
  EXPECT_TRUE(cache.locate(at(base + 11 * kMiB)).has_value());
  cache.before_unmap(at(base + 64 * kMiB), kMiB);  // nothing there: nothing changes
  engine.expect_matches(cache);
}

TEST(RegistrationCache, FollowsTheHostPoolsPinnedPieces) {
  UseTestPinner use;
  Engine engine;
  HostPool pool("reserve=1GiB,huge_threshold=8MiB,pinned=on,chunk=4MiB,max_pin=8MiB,huge_cache=0");
  void* early = pool.allocate(64);
  {
    RegistrationCache cache(engine.registrar(), 4 * kMiB);
    ASSERT_EQ(cache.attach(pool), Status::ok);
    ASSERT_TRUE(cache.locate(early).has_value());  // pinned before the attach
    void* large = pool.allocate(6 * kMiB);
    void* huge = pool.allocate(20 * kMiB);
    for (void* p : {large, huge}) ASSERT_TRUE(cache.locate(p).has_value());
    EXPECT_EQ(engine.bytes(), pinner_state().pinned());
    const uint64_t regs = cache.registrations();
    EXPECT_EQ(pool.deallocate(pool.allocate(200000)), Status::ok);  // from pinned memory: nothing new
    EXPECT_EQ(cache.registrations(), regs);
    EXPECT_EQ(pool.deallocate(huge), Status::ok);  // its mapping goes: deregistered first
    EXPECT_EQ(engine.bytes(), pinner_state().pinned());
    // A registration failing inside a hook cannot fail the allocation.
    engine.fail_at = engine.calls + 1;
    void* more = pool.allocate(30 * kMiB);
    ASSERT_NE(more, nullptr);
    EXPECT_EQ(cache.hook_failures(), 1u);
    EXPECT_NE(cache.last_hook_failure().find("injected"), std::string::npos);
    engine.expect_matches(cache);
    EXPECT_EQ(pool.deallocate(more), Status::ok);
    EXPECT_EQ(pool.deallocate(large), Status::ok);
  }
  // The cache detached as it went: the pool's later pins reach nobody.
  EXPECT_TRUE(engine.live.empty());
  void* after = pool.allocate(40 * kMiB);
  EXPECT_NE(after, nullptr);
  EXPECT_TRUE(engine.live.empty());
  EXPECT_EQ(pool.deallocate(after), Status::ok);
  EXPECT_EQ(pool.deallocate(early), Status::ok);
}

TEST(RegistrationCache, FollowsDeviceSegmentsAndExpandableRuns) {
  for (const bool expandable : {false, true}) {
    SCOPED_TRACE(expandable ? "expandable" : "plain");
    Engine engine;
    SimPool sim(expandable);
    RegistrationCache cache(engine.registrar(), 8 * kMiB);
    ASSERT_EQ(cache.attach(*sim.pool), Status::ok);
    std::vector<void*> blocks;
    for (uint64_t n : {kMiB, 30 * kMiB, 3 * kMiB, 70 * kMiB, kMiB / 2}) blocks.push_back(sim.pool->allocate(n, 0));
    const auto reserved = [&] { return static_cast<uint64_t>(sim.pool->stats().reserved_bytes[0].current); };
    EXPECT_EQ(engine.bytes(), reserved());
    for (void* p : blocks) EXPECT_TRUE(cache.locate(p).has_value());
    engine.expect_matches(cache);
    sim.pool->deallocate(blocks[1]);
    sim.pool->deallocate(blocks[3]);
    sim.pool->empty_cache();  // segments, or granule runs, unmapped
    EXPECT_EQ(engine.bytes(), reserved());
    EXPECT_FALSE(cache.locate(blocks[3]).has_value());
    for (void* p : {blocks[0], blocks[2], blocks[4]}) EXPECT_TRUE(cache.locate(p).has_value());
    engine.expect_matches(cache);
    // A pool that mapped memory before the attach is refused.
    Engine other;
    RegistrationCache late(other.registrar());
    EXPECT_EQ(late.attach(*sim.pool), Status::bad_argument);
    cache.detach_all();
    for (void* p : {blocks[0], blocks[2], blocks[4]}) sim.pool->deallocate(p);
  }
}

TEST(RegistrationCache, DestroyedWhileADevicePoolMapsOnAnotherThread) {
  // A device pool calls its hooks with no lock held: the cache's destructor
  // must wait for a call in flight, and later calls must find nothing.
  for (int round = 0; round < 10; ++round) {
    Engine engine;
    SimPool sim(true);
    auto cache = std::make_unique<RegistrationCache>(engine.registrar(), 8 * kMiB);
    ASSERT_EQ(cache->attach(*sim.pool), Status::ok);
    std::atomic<bool> stop{false};
    std::thread churn([&] {
      while (!stop.load()) {
        sim.pool->deallocate(sim.pool->allocate(6 * kMiB, 0));
        sim.pool->empty_cache();
      }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    cache.reset();
    const uint64_t calls = engine.calls;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    stop = true;
    churn.join();
    EXPECT_TRUE(engine.live.empty());  // everything deregistered, nothing registered after
    EXPECT_EQ(engine.calls, calls);
  }
}

TEST(RegistrationCache, RegistersAKVArenaInRegionsOfWholeBlocks) {
  KVBlockPoolOptions o;
  o.block_bytes = 3 * kMiB;
  o.num_blocks = 10;
  o.pinned = HostPinned::off;
  KVBlockPool pool(o);
  Engine engine;
  RegistrationCache cache(engine.registrar(), 8 * kMiB);
  ASSERT_EQ(cache.attach(pool), Status::ok);
  EXPECT_EQ(cache.registrations(), 5u);  // 2 blocks (6 MiB) per region
  for (uint64_t id = 0; id < 10; ++id) {
    const auto where = cache.locate(pool.block(id));
    ASSERT_TRUE(where.has_value());
    EXPECT_EQ(where->offset, id % 2 * pool.stride());
    EXPECT_LE(where->offset + pool.block_bytes(), where->region.bytes);  // no block straddles two
  }
  Engine small;
  RegistrationCache too_small(small.registrar(), kMiB);
  EXPECT_EQ(too_small.attach(pool), Status::bad_argument);
  cache.detach_all();
}

}  // namespace
}  // namespace unipool::test
