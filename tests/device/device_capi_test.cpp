// The C ABI: statuses and last-error messages, stats by key, snapshot into a
// caller buffer, limits, and the default pools from UNIPOOL_DEVICE_CONF.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <string>

#include "support/units.hpp"
#include "unipool/unipool.h"

namespace {

using unipool::test::kMiB;

class DeviceCApi : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(unipool_device_pools_create("backend=sim,sim_devices=2,sim_capacity=64MiB", &pools), UNIPOOL_OK);
  }
  void TearDown() override { unipool_device_pools_destroy(pools); }
  unipool_device_pools_t* pools = nullptr;
};

// The block (nullptr on failure) and the status into *status.
void* alloc(unipool_device_pools_t* pools, size_t size, int device, void* stream = nullptr,
            unipool_status_t* status = nullptr) {
  void* p = reinterpret_cast<void*>(0x1);
  const unipool_status_t s = unipool_device_alloc(pools, size, device, stream, &p);
  EXPECT_EQ(s == UNIPOOL_OK, p != nullptr) << "*out and the status must agree";
  if (status != nullptr) *status = s;
  return p;
}

TEST_F(DeviceCApi, AllocFreeAndErrors) {
  EXPECT_EQ(unipool_device_count(pools), 2);
  unipool_status_t status = UNIPOOL_BAD_ARGUMENT;
  void* p = alloc(pools, 3 * kMiB, 1, reinterpret_cast<void*>(0x10), &status);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(status, UNIPOOL_OK);
  EXPECT_EQ(unipool_device_record_stream(pools, p, reinterpret_cast<void*>(0x20)), UNIPOOL_OK);
  EXPECT_EQ(unipool_device_free_on(pools, p, 1), UNIPOOL_OK);
  EXPECT_EQ(unipool_device_free(pools, p), UNIPOOL_NOT_LIVE);
  EXPECT_NE(std::string(unipool_last_error()).find("double free"), std::string::npos) << unipool_last_error();

  EXPECT_EQ(alloc(pools, 0, 0, nullptr, &status), nullptr);
  EXPECT_EQ(status, UNIPOOL_ZERO_SIZE);
  EXPECT_EQ(alloc(pools, kMiB, 5, nullptr, &status), nullptr);
  EXPECT_EQ(status, UNIPOOL_BAD_ARGUMENT);
  EXPECT_EQ(alloc(pools, 100 * kMiB, 0, nullptr, &status), nullptr);
  EXPECT_EQ(status, UNIPOOL_OUT_OF_SPACE);
  EXPECT_NE(std::string(unipool_last_error()).find("Tried to allocate 100.00 MiB"), std::string::npos);
  EXPECT_EQ(unipool_device_alloc(pools, kMiB, 0, nullptr, nullptr), UNIPOOL_BAD_ARGUMENT);
  EXPECT_NE(std::string(unipool_last_error()).find("out is NULL"), std::string::npos) << unipool_last_error();
  EXPECT_EQ(unipool_device_validate(pools), UNIPOOL_OK);
}

TEST_F(DeviceCApi, StatsSnapshotLimits) {
  void* p = alloc(pools, 1000, 0, nullptr);
  ASSERT_NE(p, nullptr);
  int64_t v = -1;
  EXPECT_EQ(unipool_device_stat(pools, 0, "allocated_bytes.small_pool.current", &v), UNIPOOL_OK);
  EXPECT_EQ(v, 1024);
  EXPECT_EQ(unipool_device_stat(pools, 0, "requested_bytes.all.current", &v), UNIPOOL_OK);
  EXPECT_EQ(v, 1000);
  EXPECT_EQ(unipool_device_stat(pools, 0, "no.such.key", &v), UNIPOOL_BAD_ARGUMENT);
  EXPECT_NE(std::string(unipool_last_error()).find("no.such.key"), std::string::npos);
  size_t keys = 0;
  while (unipool_device_stat_key(keys) != nullptr) {
    EXPECT_EQ(unipool_device_stat(pools, 1, unipool_device_stat_key(keys), &v), UNIPOOL_OK);
    ++keys;
  }
  EXPECT_EQ(keys, 9u * 3 * 4 + 5);

  const size_t need = unipool_device_snapshot_json(pools, -1, nullptr, 0);
  ASSERT_GT(need, 0u);
  std::string buf(need + 1, '\0');
  EXPECT_EQ(unipool_device_snapshot_json(pools, -1, buf.data(), buf.size()), need);
  const auto j = nlohmann::json::parse(buf.c_str());
  EXPECT_EQ(j["segments"].size(), 1u);
  EXPECT_EQ(j["device_traces"].size(), 2u);
  char tiny[8];
  const size_t need0 = unipool_device_snapshot_json(pools, 0, nullptr, 0);
  EXPECT_GT(need0, sizeof tiny);
  EXPECT_EQ(unipool_device_snapshot_json(pools, 0, tiny, sizeof tiny), need0);  // truncated, NUL-terminated
  EXPECT_EQ(tiny[7], '\0');
  EXPECT_EQ(std::string(tiny), std::string(buf.c_str(), 7));

  EXPECT_EQ(unipool_device_set_memory_fraction(pools, -1, 0.5), UNIPOOL_OK);
  EXPECT_EQ(alloc(pools, 40 * kMiB, 1, nullptr), nullptr);
  EXPECT_EQ(unipool_device_set_memory_fraction(pools, 0, 2.0), UNIPOOL_BAD_ARGUMENT);
  EXPECT_EQ(unipool_device_set_memory_limit(pools, -1, 0), UNIPOOL_OK);
  EXPECT_EQ(unipool_device_set_memory_fraction(pools, -1, 0), UNIPOOL_OK);
  void* q = alloc(pools, 40 * kMiB, 1, nullptr);
  EXPECT_NE(q, nullptr);
  EXPECT_EQ(unipool_device_free(pools, q), UNIPOOL_OK);
  EXPECT_EQ(unipool_device_free(pools, p), UNIPOOL_OK);
  EXPECT_EQ(unipool_device_empty_cache(pools, -1), UNIPOOL_OK);
  EXPECT_EQ(unipool_device_stat(pools, 0, "reserved_bytes.all.current", &v), UNIPOOL_OK);
  EXPECT_EQ(v, 0);
  EXPECT_EQ(unipool_device_reset_peak_stats(pools, -1), UNIPOOL_OK);
  EXPECT_EQ(unipool_device_stat(pools, 1, "reserved_bytes.all.peak", &v), UNIPOOL_OK);
  EXPECT_EQ(v, 0);
  EXPECT_EQ(unipool_device_reset_accumulated_stats(pools, 1), UNIPOOL_OK);
  EXPECT_EQ(unipool_device_stat(pools, 1, "num_device_alloc", &v), UNIPOOL_OK);
  EXPECT_EQ(v, 0);
}

TEST(DeviceCApiConfig, BadConfigNamesTheKey) {
  unipool_device_pools_t* pools = reinterpret_cast<unipool_device_pools_t*>(0x1);
  EXPECT_EQ(unipool_device_pools_create("backend=sim,memory_fraction=7", &pools), UNIPOOL_BAD_ARGUMENT);
  EXPECT_EQ(pools, nullptr);
  EXPECT_NE(std::string(unipool_last_error()).find("memory_fraction"), std::string::npos);
  EXPECT_EQ(unipool_device_pools_create("backend=sim", nullptr), UNIPOOL_BAD_ARGUMENT);
  EXPECT_STREQ(unipool_last_error(), "unipool_device_pools_create: out is NULL");
}

// The process-wide default pools read UNIPOOL_DEVICE_CONF on first use; the
// only test in this binary that touches them.
TEST(DeviceCApiConfig, DefaultPoolsFromEnvironment) {
  ::setenv("UNIPOOL_DEVICE_CONF", "backend=sim,sim_capacity=32MiB,sim_devices=3", 1);
  ASSERT_NE(unipool_device_default(), nullptr) << unipool_last_error();
  EXPECT_EQ(unipool_device_count(nullptr), 3);
  void* p = alloc(nullptr, 4096, 2, nullptr);  // what unipool_alloc() will be
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(unipool_device_free_on(nullptr, p, 2), UNIPOOL_OK);
  EXPECT_EQ(alloc(nullptr, 64 * kMiB, 0, nullptr), nullptr);  // over 32 MiB
  ::unsetenv("UNIPOOL_DEVICE_CONF");
}

}  // namespace
