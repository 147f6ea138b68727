// DevicePool and DevicePools: bad input to each public member that takes
// some, and where its case is (file: test). Members without input (stats,
// snapshot, snapshot_json, empty_cache, reset_*_stats, memory_limit,
// checkpoint, device, expandable, backend, config, device_count) have
// nothing to refuse.
//
//   DevicePool::DevicePool         here: DevicePoolBadInput.ConstructorRefusesNoBackendAndMissingDevices;
//                                  device_pool_misuse_test: DevicePoolMisuse.BadMemoryFraction (config)
//   DevicePool::allocate           device_pool_misuse_test: DevicePoolMisuse.BadSizes;
//                                  here: DevicePoolBadInput.MemoryLimitBelowWhatIsInUse
//   DevicePool::deallocate         device_pool_misuse_test: DevicePoolMisuse.DoubleFreeInteriorForeign,
//                                  DevicePoolMisuse.DoubleFreeWhilePending
//   DevicePool::try_deallocate     device_pool_misuse_test: DevicePoolMisuse.DoubleFreeInteriorForeign
//   DevicePool::record_stream      device_pool_misuse_test: DevicePoolMisuse.DoubleFreeInteriorForeign
//   DevicePool::owns, in_pool_memory, requested_size
//                                  here: DevicePoolBadInput.QueriesOfPointersThatAreNotLiveBlocks
//   DevicePool::set_memory_fraction  device_pool_misuse_test: DevicePoolMisuse.BadMemoryFraction;
//                                  here: DevicePoolBadInput.FractionThatIsNotANumber
//   DevicePool::set_memory_limit   here: DevicePoolBadInput.MemoryLimitBelowWhatIsInUse
//   DevicePool::set_segment_hooks, set_oom_observer
//                                  here: DevicePoolBadInput.EmptyHooksAndObserverAreNotCalled
//   DevicePool::restore            device_pool_checkpoint_test: Checkpoint.ACheckpointOfAnotherPoolIsRefused
//   DevicePool::validate           here: DevicePoolBadInput.ValidateWithoutAReason
//   DevicePools::DevicePools, create  here: DevicePoolsBadInput.CreateRefusesBadConfigs;
//                                  device_config_test: DeviceConfig.ErrorsNameTheKey
//   DevicePools::pool, allocate, deallocate, record_stream
//                                  here: DevicePoolsBadInput.DevicesThatDoNotExist
//   DevicePools::validate          here: DevicePoolsBadInput.DevicesThatDoNotExist
#include <gtest/gtest.h>

#include <limits>
#include <stdexcept>
#include <string>

#include "device_test_support.hpp"

namespace unipool::test {
namespace {

// f() throws DevicePoolError with `status` and a message containing `text`.
template <class F>
::testing::AssertionResult Throws(F&& f, Status status, const std::string& text) {
  try {
    f();
  } catch (const DevicePoolError& e) {
    if (e.status() == status && std::string(e.what()).find(text) != std::string::npos) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << "status " << to_string(e.status()) << ", message '" << e.what() << "'";
  }
  return ::testing::AssertionFailure() << "nothing thrown; expected '" << text << "'";
}

TEST(DevicePoolBadInput, ConstructorRefusesNoBackendAndMissingDevices) {
  auto backend = std::make_shared<SimBackend>(SimBackendOptions{});
  EXPECT_TRUE(Throws([] { DevicePool p(nullptr, 0); }, Status::bad_argument, "needs a backend"));
  EXPECT_TRUE(Throws([&] { DevicePool p(backend, 1); }, Status::bad_argument, "device 1 does not exist"));
  EXPECT_TRUE(Throws([&] { DevicePool p(backend, -1); }, Status::bad_argument, "device -1 does not exist"));
  DevicePool ok(backend, 0);
  EXPECT_POOL_VALID(ok);
}

TEST(DevicePoolBadInput, QueriesOfPointersThatAreNotLiveBlocks) {
  SimPool sim(false);
  DevicePool& pool = *sim.pool;
  auto* p = static_cast<char*>(pool.allocate(4096, kStreamA));
  void* freed = pool.allocate(1000, kStreamA);
  pool.deallocate(freed);
  int on_stack = 0;
  for (const void* q : {static_cast<const void*>(nullptr), static_cast<const void*>(&on_stack),
                        static_cast<const void*>(p + 512), static_cast<const void*>(freed)}) {
    EXPECT_FALSE(pool.owns(q)) << q;
    EXPECT_EQ(pool.requested_size(q), 0u) << q;
  }
  EXPECT_FALSE(pool.in_pool_memory(nullptr));
  EXPECT_FALSE(pool.in_pool_memory(&on_stack));
  EXPECT_TRUE(pool.in_pool_memory(p + 512));  // inside a segment, though not a block's start
  EXPECT_EQ(pool.requested_size(p), 4096u);
  pool.deallocate(p);
  EXPECT_POOL_VALID(pool);
}

TEST(DevicePoolBadInput, FractionThatIsNotANumber) {
  SimPool sim(false);
  for (double f : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(), 1.0000001}) {
    EXPECT_TRUE(Throws([&] { sim.pool->set_memory_fraction(f); }, Status::bad_argument, "memory fraction")) << f;
  }
  EXPECT_EQ(sim.pool->memory_limit(), 0u);
  EXPECT_POOL_VALID(*sim.pool);
}

// A limit below what is reserved already: nothing is taken away, and new
// segments are refused as out of memory until the limit is removed.
TEST(DevicePoolBadInput, MemoryLimitBelowWhatIsInUse) {
  SimPool sim(false);
  DevicePool& pool = *sim.pool;
  void* p = pool.allocate(8 * kMiB, kStreamA);
  pool.set_memory_limit(1);
  EXPECT_THROW(pool.allocate(64 * kMiB, kStreamA), OutOfMemoryError);
  pool.deallocate(p);
  pool.set_memory_limit(0);
  void* q = pool.allocate(64 * kMiB, kStreamA);
  pool.deallocate(q);
  EXPECT_POOL_VALID(pool);
}

TEST(DevicePoolBadInput, EmptyHooksAndObserverAreNotCalled) {
  SimPool sim(false, 64 * kMiB);
  DevicePool& pool = *sim.pool;
  pool.set_segment_hooks({});
  pool.set_oom_observer({});
  void* p = pool.allocate(8 * kMiB, kStreamA);  // maps a segment
  EXPECT_TRUE(Throws([&] { pool.allocate(128 * kMiB, kStreamA); }, Status::out_of_space, "out of memory"));
  pool.deallocate(p);
  pool.empty_cache();  // unmaps it
  EXPECT_EQ(pool.stats().reserved_bytes[0].current, 0);
  EXPECT_POOL_VALID(pool);
}

TEST(DevicePoolBadInput, ValidateWithoutAReason) {
  SimPool sim(true);
  void* p = sim.pool->allocate(kMiB, kStreamA);
  EXPECT_TRUE(sim.pool->validate(nullptr));
  sim.pool->deallocate(p);
  EXPECT_TRUE(sim.pool->validate());
}

TEST(DevicePoolsBadInput, CreateRefusesBadConfigs) {
  EXPECT_TRUE(Throws([] { DevicePools::create("backend=sim,bogus=1"); }, Status::bad_argument, "'bogus'"));
  EXPECT_TRUE(Throws([] { DevicePools::create("backend=nope"); }, Status::bad_argument, "'backend'"));
  EXPECT_TRUE(Throws([] { DevicePools::create("backend=sim,sim_devices=0"); }, Status::bad_argument, "'sim_devices'"));
  EXPECT_TRUE(Throws([] { DevicePools p(nullptr, DevicePoolConfig::parse("backend=sim")); }, Status::bad_argument,
                     "needs a backend"));
}

TEST(DevicePoolsBadInput, DevicesThatDoNotExist) {
  auto pools = DevicePools::create("backend=sim,sim_devices=2,sim_capacity=64MiB");
  for (int bad : {-1, 2}) {
    const std::string text = "device " + std::to_string(bad) + " does not exist";
    EXPECT_TRUE(Throws([&] { pools->pool(bad); }, Status::bad_argument, text));
    EXPECT_TRUE(Throws([&] { pools->allocate(kMiB, bad); }, Status::bad_argument, text));
  }
  int on_stack = 0;
  EXPECT_TRUE(Throws([&] { pools->deallocate(&on_stack, 7); }, Status::not_live, "foreign pointer"));
  EXPECT_TRUE(Throws([&] { pools->record_stream(&on_stack, kStreamB, -5); }, Status::not_live, "foreign"));
  void* p = pools->allocate(kMiB, 1);
  pools->deallocate(p, 9);  // a hint out of range is only a hint
  EXPECT_TRUE(Throws([&] { pools->deallocate(p, 1); }, Status::not_live, "double free"));
  std::string why;
  EXPECT_TRUE(pools->validate(&why)) << why;
  EXPECT_TRUE(pools->validate(nullptr));
}

}  // namespace
}  // namespace unipool::test
