// unipool device pool: sleep and wake (device_sleep.hpp) on the simulated
// device with accessible memory, so contents are checked byte for byte and
// memory given back really loses them. Fault injection fails every backend
// call of a sleep and of a wake in turn.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "device_test_support.hpp"
#include "unipool/device_pool.hpp"
#include "unipool/device_sim_backend.hpp"
#include "unipool/host_pool.hpp"

namespace unipool::test {
namespace {

struct Filled {
  void* ptr;
  uint64_t bytes;
  unsigned char seed;
};

void fill(const Filled& f) {
  auto* p = static_cast<unsigned char*>(f.ptr);
  for (uint64_t i = 0; i < f.bytes; ++i) p[i] = static_cast<unsigned char>(f.seed + i * 131 + (i >> 12));
}

bool intact(const Filled& f) {
  const auto* p = static_cast<const unsigned char*>(f.ptr);
  for (uint64_t i = 0; i < f.bytes; ++i) {
    if (p[i] != static_cast<unsigned char>(f.seed + i * 131 + (i >> 12))) return false;
  }
  return true;
}

// By value: the stats are a temporary of the caller's.
std::optional<DeviceTagStats> find_tag(const std::vector<DeviceTagStats>& all, const std::string& tag) {
  for (const DeviceTagStats& s : all) {
    if (s.tag == tag) return s;
  }
  return std::nullopt;
}

// A pool on an accessible sim device, with blocks of three tags: "weights"
// (small and large, filled), "kv" (large) and "default" (filled, never slept).
struct SleepFixture {
  explicit SleepFixture(bool expandable) {
    SimBackendOptions o;
    o.capacity = kGiB;
    o.accessible = true;
    backend = std::make_shared<SimBackend>(o);
    DevicePoolConfig c;
    c.expandable_segments = expandable ? 1 : 0;
    pool = std::make_unique<DevicePool>(backend, 0, c);
  }

  void populate() {
    {
      DeviceTagScope scope("weights");
      for (uint64_t bytes : {uint64_t{4096}, uint64_t{300} * kKiB, uint64_t{3} * kMiB + 512, uint64_t{24} * kMiB}) {
        weights.push_back(Filled{pool->allocate(bytes, kStreamA), bytes, static_cast<unsigned char>(weights.size())});
      }
      // A freed block: its cached memory must go back too.
      pool->deallocate(pool->allocate(2 * kMiB, kStreamA));
    }
    {
      DeviceTagScope scope("kv");
      for (int i = 0; i < 4; ++i) kv.push_back(pool->allocate(6 * kMiB, kStreamA));
    }
    other = Filled{pool->allocate(kMiB, kStreamA), kMiB, 77};
    for (const Filled& f : weights) fill(f);
    fill(other);
  }

  uint64_t reserved(const std::string& tag) const {
    const auto s = find_tag(pool->tag_stats(), tag);
    return s ? s->reserved_bytes : 0;
  }

  bool weights_intact() const {
    for (const Filled& f : weights) {
      if (!intact(f)) return false;
    }
    return true;
  }

  std::shared_ptr<SimBackend> backend;
  std::unique_ptr<DevicePool> pool;
  HostPool host{HostPoolConfig{}};
  std::vector<Filled> weights;
  std::vector<void*> kv;
  Filled other{};
};

const DeviceSleepRequest kRequest{{"weights"}, {"kv"}};

class SleepTest : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(Segments, SleepTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "expandable" : "plain"; });

TEST_P(SleepTest, OffloadedContentsComeBackBitForBitAtTheSameAddresses) {
  SleepFixture f(GetParam());
  f.populate();
  const uint64_t weights_reserved = f.reserved("weights"), kv_reserved = f.reserved("kv");
  const uint64_t used_before = f.backend->used_bytes(0);
  const uint64_t host_before = f.host.stats().allocated_bytes;

  const DeviceSleepResult slept = f.pool->sleep(kRequest, &f.host);
  EXPECT_EQ(slept.released_bytes, weights_reserved + kv_reserved);
  EXPECT_EQ(slept.offloaded_bytes, 4096 + 300 * kKiB + 3 * kMiB + 512 + 24 * kMiB);
  EXPECT_EQ(slept.discarded_bytes, 4 * 6 * kMiB);
  EXPECT_EQ(f.backend->used_bytes(0), used_before - slept.released_bytes);
  EXPECT_EQ(f.reserved("weights"), 0u);
  EXPECT_EQ(f.reserved("kv"), 0u);
  EXPECT_EQ(f.pool->stats().reserved_bytes[0].current, static_cast<int64_t>(f.reserved("default")));
  EXPECT_TRUE(intact(f.other)) << "another tag's memory was touched";
  EXPECT_EQ(find_tag(f.pool->tag_stats(), "weights")->state, "asleep");
  EXPECT_GE(f.host.stats().allocated_bytes, host_before + slept.offloaded_bytes);
  EXPECT_POOL_VALID(*f.pool);
  EXPECT_TRUE(f.pool->owns(f.weights[0].ptr)) << "blocks stay live while asleep";

  const DeviceSleepResult woken = f.pool->wake();
  EXPECT_EQ(woken.released_bytes, slept.released_bytes);
  EXPECT_EQ(woken.offloaded_bytes, slept.offloaded_bytes);
  EXPECT_TRUE(f.weights_intact());
  for (void* p : f.kv) std::memset(p, 0xAB, 6 * kMiB);  // mapped again, at the same address
  EXPECT_EQ(f.backend->used_bytes(0), used_before);
  EXPECT_EQ(f.reserved("weights"), weights_reserved);
  EXPECT_EQ(f.host.stats().allocated_bytes, host_before) << "host memory of the offload was not given back";
  const auto w = find_tag(f.pool->tag_stats(), "weights");
  EXPECT_EQ(w->state, "awake");
  EXPECT_EQ(w->sleeps, 1u);
  EXPECT_EQ(w->wakes, 1u);
  EXPECT_EQ(w->host_bytes, 0u);
  EXPECT_POOL_VALID(*f.pool);
  // A second cycle works the same.
  f.pool->sleep(kRequest, &f.host);
  f.pool->wake({"weights", "kv"});
  EXPECT_TRUE(f.weights_intact());
  EXPECT_POOL_VALID(*f.pool);
}

TEST_P(SleepTest, SleepingTagRefusesAllocationsOthersDoNot) {
  SleepFixture f(GetParam());
  f.populate();
  f.pool->sleep(kRequest, &f.host);
  try {
    f.pool->allocate(kMiB, kStreamA, device_tag("weights"));
    FAIL() << "allocation from a sleeping tag succeeded";
  } catch (const DevicePoolError& e) {
    EXPECT_EQ(e.status(), Status::asleep);
    EXPECT_NE(std::string(e.what()).find("'weights'"), std::string::npos) << e.what();
  }
  void* p = f.pool->allocate(kMiB, kStreamA);  // "default" is awake
  f.pool->deallocate(p);
  f.pool->empty_cache();  // leaves sleeping memory alone
  EXPECT_POOL_VALID(*f.pool);
  f.pool->wake();
  EXPECT_TRUE(f.weights_intact());
}

TEST_P(SleepTest, BlocksFreedWhileAsleepDropTheirHostCopy) {
  SleepFixture f(GetParam());
  f.populate();
  const uint64_t host_before = f.host.stats().allocated_bytes;
  f.pool->sleep(kRequest, &f.host);
  const uint64_t staged = find_tag(f.pool->tag_stats(), "weights")->host_bytes;
  f.pool->deallocate(f.weights.back().ptr);
  EXPECT_EQ(find_tag(f.pool->tag_stats(), "weights")->host_bytes, staged - f.weights.back().bytes);
  f.weights.pop_back();
  for (void* p : f.kv) f.pool->deallocate(p);
  EXPECT_POOL_VALID(*f.pool);
  f.pool->wake();
  EXPECT_TRUE(f.weights_intact());
  EXPECT_EQ(f.host.stats().allocated_bytes, host_before);
  EXPECT_POOL_VALID(*f.pool);
}

TEST_P(SleepTest, MisuseIsRefusedWithAClearError) {
  SleepFixture f(GetParam());
  f.populate();
  auto status_of = [](auto&& call) {
    try {
      call();
    } catch (const DevicePoolError& e) {
      return e.status();
    }
    return Status::ok;
  };
  EXPECT_EQ(status_of([&] { f.pool->wake({"weights"}); }), Status::asleep);  // awake
  EXPECT_EQ(status_of([&] { f.pool->wake(); }), Status::asleep);             // nothing asleep
  EXPECT_EQ(status_of([&] { f.pool->wake({"never-made"}); }), Status::asleep);
  EXPECT_EQ(status_of([&] { f.pool->sleep({}, &f.host); }), Status::bad_argument);
  EXPECT_EQ(status_of([&] { f.pool->sleep({{"kv"}, {"kv"}}, &f.host); }), Status::bad_argument);
  EXPECT_EQ(status_of([&] { f.pool->sleep({{""}, {}}, &f.host); }), Status::bad_argument);
  f.pool->sleep(kRequest, &f.host);
  EXPECT_EQ(status_of([&] { f.pool->sleep(kRequest, &f.host); }), Status::asleep);
  EXPECT_EQ(status_of([&] { f.pool->restore(f.pool->checkpoint()); }), Status::asleep);
  EXPECT_POOL_VALID(*f.pool);
  f.pool->wake();
  EXPECT_TRUE(f.weights_intact());
}

TEST_P(SleepTest, HooksSeeEveryRunGoAndComeBack) {
  SleepFixture f(GetParam());
  uint64_t mapped = 0, unmapped = 0;
  f.pool->set_segment_hooks({[&](const DeviceSegmentEvent& e) { mapped += e.bytes; },
                             [&](const DeviceSegmentEvent& e) { unmapped += e.bytes; }});
  f.populate();
  const uint64_t before = mapped;
  const DeviceSleepResult slept = f.pool->sleep(kRequest, &f.host);
  EXPECT_EQ(unmapped, slept.released_bytes);
  f.pool->wake();
  EXPECT_EQ(mapped - before, slept.released_bytes);
}

TEST_P(SleepTest, SnapshotAndStatsShowTags) {
  SleepFixture f(GetParam());
  f.populate();
  uint64_t weights_segments = 0;
  for (const DeviceSegmentInfo& s : f.pool->snapshot().segments) {
    weights_segments += s.tag == "weights";
    for (const DeviceBlockInfo& b : s.blocks) {
      if (b.address == reinterpret_cast<uint64_t>(f.other.ptr)) {
        EXPECT_EQ(s.tag, "default");
      }
    }
  }
  EXPECT_GT(weights_segments, 0u);
  EXPECT_NE(f.pool->snapshot_json().find("\"tag\": \"kv\""), std::string::npos);
  const auto w = find_tag(f.pool->tag_stats(), "weights");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->blocks, 4u);
  f.pool->sleep(kRequest, &f.host);
  for (const DeviceSegmentInfo& s : f.pool->snapshot().segments) EXPECT_NE(s.tag, "weights");
  const Recount r = recount(f.pool->snapshot());
  EXPECT_EQ(r.v[kReservedBytes][0], f.pool->stats().reserved_bytes[0].current);
  f.pool->wake();
}

// Every backend call of a sleep fails in turn; after each failure the pool
// is valid, and retrying (sleep to finish, then wake) brings every
// offloaded byte back and every host byte home.
TEST_P(SleepTest, AFaultAtEverySleepCallLeavesAConsistentPool) {
  int before_unmap = 0, after_unmap = 0;  // failures that left the tag awake / partial
  for (uint64_t k = 0;; ++k) {
    SCOPED_TRACE("failing sleep call " + std::to_string(k));
    SleepFixture f(GetParam());
    f.populate();
    const uint64_t host_before = f.host.stats().allocated_bytes;
    f.backend->fail_call_at(k, BackendStatus::error);
    bool failed = false;
    try {
      f.pool->sleep(kRequest, &f.host);
    } catch (const DevicePoolError& e) {
      failed = true;
      EXPECT_POOL_VALID(*f.pool);
      const std::string state = find_tag(f.pool->tag_stats(), "weights")->state;
      EXPECT_TRUE(state == "awake" || state == "partial") << state;
      ++(state == "awake" ? before_unmap : after_unmap);
      if (state == "awake") {
        EXPECT_TRUE(f.weights_intact());
        EXPECT_EQ(f.host.stats().allocated_bytes, host_before);
      }
      f.backend->clear_faults();
      if (state == "partial") f.pool->sleep(kRequest, &f.host);  // finishes
    }
    f.backend->clear_faults();
    if (find_tag(f.pool->tag_stats(), "weights")->state != "awake") f.pool->wake();
    EXPECT_TRUE(f.weights_intact());
    EXPECT_EQ(f.host.stats().allocated_bytes, host_before);
    EXPECT_POOL_VALID(*f.pool);
    if (!failed) break;
  }
  EXPECT_EQ(before_unmap, 2) << "synchronize and the copy batch";
  EXPECT_GE(after_unmap, 2) << "one unmap per run";
}

TEST_P(SleepTest, AFaultAtEveryWakeCallLeavesAConsistentPool) {
  for (uint64_t k = 0;; ++k) {
    SCOPED_TRACE("failing wake call " + std::to_string(k));
    SleepFixture f(GetParam());
    f.populate();
    const uint64_t host_before = f.host.stats().allocated_bytes;
    f.pool->sleep(kRequest, &f.host);
    f.backend->fail_call_at(k, BackendStatus::out_of_memory);
    bool failed = false;
    try {
      f.pool->wake();
    } catch (const DevicePoolError& e) {
      failed = true;
      EXPECT_POOL_VALID(*f.pool);
      EXPECT_EQ(find_tag(f.pool->tag_stats(), "weights")->state, "partial");
      EXPECT_THROW(f.pool->allocate(kMiB, kStreamA, device_tag("weights")), DevicePoolError);
      f.backend->clear_faults();
      f.pool->wake();  // retried
    }
    EXPECT_EQ(find_tag(f.pool->tag_stats(), "weights")->state, "awake");
    EXPECT_TRUE(f.weights_intact());
    EXPECT_EQ(f.host.stats().allocated_bytes, host_before);
    EXPECT_POOL_VALID(*f.pool);
    if (!failed) break;
  }
}

TEST(SleepBackend, ABackendThatCannotKeepAddressesIsRefused) {
  SimBackendOptions o;
  o.expandable = false;  // as cuda_malloc: no VMM
  auto backend = std::make_shared<SimBackend>(o);
  DevicePool pool(backend, 0, DevicePoolConfig{});
  DeviceTagScope scope("weights");
  void* p = pool.allocate(kMiB);
  try {
    pool.sleep({{"weights"}, {}});
    FAIL() << "sleep on a backend without VMM succeeded";
  } catch (const DevicePoolError& e) {
    EXPECT_EQ(e.status(), Status::bad_argument);
    EXPECT_NE(std::string(e.what()).find("cuda_vmm"), std::string::npos) << e.what();
  }
  pool.deallocate(p);
  EXPECT_POOL_VALID(pool);
}

TEST(SleepPools, ATagAsleepOnSomeDevicesOnlyIsFinishedOnTheOthers) {
  SimBackendOptions o;
  o.devices = 2;
  o.accessible = true;
  auto backend = std::make_shared<SimBackend>(o);
  DevicePools pools(backend, DevicePoolConfig{});
  HostPool host{HostPoolConfig{}};
  DeviceTagScope scope("weights");
  Filled a{pools.allocate(2 * kMiB, 0), 2 * kMiB, 1}, b{pools.allocate(2 * kMiB, 1), 2 * kMiB, 2};
  fill(a);
  fill(b);
  pools.pool(0).sleep({{"weights"}, {}}, &host);  // device 0 only
  const DeviceSleepResult r = pools.sleep({{"weights"}, {}}, &host);
  EXPECT_EQ(r.offloaded_bytes, 2 * kMiB) << "device 1 only";
  EXPECT_THROW(pools.sleep({{"weights"}, {}}, &host), DevicePoolError);
  pools.wake();
  EXPECT_TRUE(intact(a));
  EXPECT_TRUE(intact(b));
  EXPECT_TRUE(pools.validate());
}

TEST(DeviceTags, NamesAreCheckedAndInterned) {
  EXPECT_EQ(device_tag("default"), kDefaultDeviceTag);
  const DeviceTag t = device_tag("tags-test");
  EXPECT_EQ(device_tag("tags-test"), t);
  EXPECT_EQ(device_tag_name(t), "tags-test");
  EXPECT_THROW(device_tag(""), DevicePoolError);
  EXPECT_THROW(device_tag(std::string(65, 'x')), DevicePoolError);
  EXPECT_THROW(set_current_device_tag(kMaxDeviceTags - 1), DevicePoolError);
  EXPECT_FALSE(device_tag_made(kMaxDeviceTags - 1));
  SimPool sim(true);
  try {
    sim.pool->allocate(kMiB, kStreamA, static_cast<DeviceTag>(kMaxDeviceTags - 1));
    ADD_FAILURE() << "an allocation under a tag never made succeeded";
  } catch (const DevicePoolError& e) {
    EXPECT_EQ(e.status(), Status::bad_argument);
    EXPECT_NE(std::string(e.what()).find("never made"), std::string::npos) << e.what();
  }
  EXPECT_POOL_VALID(*sim.pool);
  {
    DeviceTagScope scope(t);
    EXPECT_EQ(current_device_tag(), t);
  }
  EXPECT_EQ(current_device_tag(), kDefaultDeviceTag);
  // The 65th tag is refused; in a child, as names are never taken back.
  EXPECT_EXIT(
      {
        for (unsigned i = 0; i <= kMaxDeviceTags; ++i) {
          try {
            device_tag("many-" + std::to_string(i));
          } catch (const DevicePoolError& e) {
            const bool clear = e.status() == Status::bad_argument &&
                               std::string(e.what()).find("too many device tags") != std::string::npos;
            std::exit(clear ? 0 : 2);
          }
        }
        std::exit(1);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace unipool::test
