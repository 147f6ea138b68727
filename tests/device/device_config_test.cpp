// UNIPOOL_DEVICE_CONF parsing: values, units, and errors that name the key.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "device_test_support.hpp"

namespace unipool::test {
namespace {

std::string error_of(const std::string& text) {
  try {
    DevicePoolConfig::parse(text);
  } catch (const DevicePoolError& e) {
    EXPECT_EQ(e.status(), Status::bad_argument);
    return e.what();
  }
  return "";
}

TEST(DeviceConfig, ParsesEveryKey) {
  const DevicePoolConfig c = DevicePoolConfig::parse(
      "backend=sim, memory_fraction=0.5,memory_limit=1.5GiB,max_split_size_mb=64,"
      "garbage_collection_threshold=0.8,release_threshold=256M,expandable_segments=true,"
      "sim_capacity=8G,sim_devices=3,sim_granularity=64KiB");
  EXPECT_EQ(c.backend, "sim");
  EXPECT_DOUBLE_EQ(c.memory_fraction, 0.5);
  EXPECT_EQ(c.memory_limit, 3 * kGiB / 2);
  EXPECT_EQ(c.max_split_size, 64 * kMiB);
  EXPECT_DOUBLE_EQ(c.garbage_collection_threshold, 0.8);
  EXPECT_EQ(c.release_threshold, 256 * kMiB);
  EXPECT_EQ(c.expandable_segments, 1);
  EXPECT_EQ(c.sim_capacity, 8 * kGiB);
  EXPECT_EQ(c.sim_devices, 3);
  EXPECT_EQ(c.sim_granularity, 64u << 10);
  // Round trip.
  const DevicePoolConfig d = DevicePoolConfig::parse(c.to_string());
  EXPECT_EQ(d.to_string(), c.to_string());
}

TEST(DeviceConfig, EmptyGivesDefaults) {
  const DevicePoolConfig c = DevicePoolConfig::parse("");
  EXPECT_EQ(c.expandable_segments, -1);
  EXPECT_EQ(c.memory_limit, 0u);
  EXPECT_EQ(c.max_split_size, ~uint64_t{0});
}

TEST(DeviceConfig, ErrorsNameTheKey) {
  EXPECT_NE(error_of("colour=blue").find("unknown key 'colour'"), std::string::npos);
  EXPECT_NE(error_of("memory_fraction=1.5").find("'memory_fraction'"), std::string::npos);
  EXPECT_NE(error_of("memory_fraction=abc").find("'memory_fraction'"), std::string::npos);
  EXPECT_NE(error_of("memory_fraction=0").find("'memory_fraction'"), std::string::npos);
  EXPECT_NE(error_of("memory_limit=12XB").find("'memory_limit'"), std::string::npos);
  EXPECT_NE(error_of("memory_limit=-5").find("'memory_limit'"), std::string::npos);
  EXPECT_NE(error_of("expandable_segments=maybe").find("'expandable_segments'"), std::string::npos);
  EXPECT_NE(error_of("backend=opencl").find("'backend'"), std::string::npos);
  EXPECT_NE(error_of("max_split_size_mb=5").find("'max_split_size_mb'"), std::string::npos);
  EXPECT_NE(error_of("garbage_collection_threshold=1").find("'garbage_collection_threshold'"), std::string::npos);
  EXPECT_NE(error_of("sim_devices=0").find("'sim_devices'"), std::string::npos);
  EXPECT_NE(error_of("sim_devices=2.5").find("'sim_devices'"), std::string::npos);
  EXPECT_NE(error_of("sim_granularity=3000").find("'sim_granularity'"), std::string::npos);
  EXPECT_NE(error_of("sim_capacity=1K").find("'sim_capacity'"), std::string::npos);
  EXPECT_NE(error_of("memory_limit=").find("'memory_limit' has no value"), std::string::npos);
  EXPECT_NE(error_of("expandable_segments").find("not key=value"), std::string::npos);
}

// "the last wins" would silently drop one of two values; which was meant?
TEST(DeviceConfig, DuplicateKeyIsRefused) {
  EXPECT_NE(error_of("memory_limit=1GiB,memory_limit=2GiB").find("key 'memory_limit' is given twice"),
            std::string::npos);
  EXPECT_NE(error_of("backend=sim, sim_devices=2 ,backend=sim").find("key 'backend' is given twice"),
            std::string::npos);
  EXPECT_NE(error_of("sim_capacity=1G,sim_granularity=4K,sim_capacity=2G").find("'sim_capacity'"),
            std::string::npos);
}

// A limit that rounds to zero bytes must not turn into "no limit" (0).
TEST(DeviceConfig, MemoryLimitBelowOneByteIsRefused) {
  for (const char* text : {"memory_limit=0.5", "memory_limit=0.9B", "memory_limit=0", "memory_limit=0GiB"}) {
    EXPECT_NE(error_of(text).find("'memory_limit'"), std::string::npos) << text;
    EXPECT_NE(error_of(text).find("at least 1 byte"), std::string::npos) << text;
  }
  EXPECT_EQ(DevicePoolConfig::parse("memory_limit=1").memory_limit, 1u);
  EXPECT_EQ(DevicePoolConfig::parse("memory_limit=0.001KiB").memory_limit, 1u);  // 1.024 bytes
}

// A granule larger than the simulated device: every allocation would fail
// with an OOM report saying the device is free. Either key order.
TEST(DeviceConfig, SimGranularityAboveCapacityIsRefused) {
  EXPECT_NE(error_of("sim_granularity=1TiB").find("'sim_granularity'"), std::string::npos);
  EXPECT_NE(error_of("sim_granularity=1TiB").find("sim_capacity"), std::string::npos);
  EXPECT_NE(error_of("sim_capacity=8MiB,sim_granularity=16MiB").find("'sim_granularity'"), std::string::npos);
  EXPECT_NE(error_of("sim_granularity=16MiB,sim_capacity=8MiB").find("'sim_granularity'"), std::string::npos);
  EXPECT_EQ(DevicePoolConfig::parse("sim_capacity=8MiB,sim_granularity=8MiB").sim_granularity, 8 * kMiB);
}

TEST(DeviceConfig, PoolsFromConfigString) {
  auto pools = DevicePools::create("backend=sim,sim_devices=2,sim_capacity=64MiB");
  ASSERT_EQ(pools->device_count(), 2);
  void* p = pools->allocate(kMiB, 1, kStreamA);
  EXPECT_TRUE(pools->pool(1).owns(p));
  EXPECT_FALSE(pools->pool(0).owns(p));
  pools->deallocate(p);  // finds device 1 by itself
  EXPECT_THROW(pools->pool(2), DevicePoolError);
  EXPECT_VALID(*pools);
}

TEST(DeviceConfig, FromEnvironment) {
  ::setenv("UNIPOOL_DEVICE_CONF", "backend=sim,memory_limit=32MiB", 1);
  const DevicePoolConfig c = DevicePoolConfig::from_env();
  ::unsetenv("UNIPOOL_DEVICE_CONF");
  EXPECT_EQ(c.memory_limit, 32 * kMiB);
}

TEST(DeviceConfig, ExpandableNeedsBackendSupport) {
  SimBackendOptions o;
  o.expandable = false;
  auto sim = std::make_shared<SimBackend>(o);
  DevicePoolConfig c;
  c.expandable_segments = 1;
  try {
    DevicePool pool(sim, 0, c);
    FAIL() << "expected an error";
  } catch (const DevicePoolError& e) {
    EXPECT_NE(std::string(e.what()).find("expandable_segments"), std::string::npos);
  }
  c.expandable_segments = -1;  // default: plain on this backend
  DevicePool pool(sim, 0, c);
  EXPECT_FALSE(pool.expandable());
  EXPECT_THROW(DevicePool(sim, 1, c), DevicePoolError);  // no such device
}

}  // namespace
}  // namespace unipool::test
