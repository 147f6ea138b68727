// The C ABI: statuses and last-error messages, stats by key, snapshot into a
// caller buffer, limits, and the default pools from UNIPOOL_DEVICE_CONF.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdlib>
#include <cstring>
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

// Sleep and wake through the C ABI on an accessible sim device: the tag's
// memory goes back, its contents come back at the same address, and the
// per-tag stats say so.
TEST(DeviceCApiSleep, OffloadAndDiscardThenWake) {
  unipool_device_pools_t* pools = nullptr;
  ASSERT_EQ(unipool_device_pools_create("backend=sim,sim_capacity=256MiB,sim_accessible=true", &pools), UNIPOOL_OK)
      << unipool_last_error();
  ASSERT_EQ(unipool_device_set_tag("capi-weights"), UNIPOOL_OK);
  auto* w = static_cast<unsigned char*>(alloc(pools, 3 * kMiB, 0));
  ASSERT_EQ(unipool_device_set_tag("capi-kv"), UNIPOOL_OK);
  void* kv = alloc(pools, 8 * kMiB, 0);
  ASSERT_EQ(unipool_device_set_tag(nullptr), UNIPOOL_OK);
  for (size_t i = 0; i < 3 * kMiB; ++i) w[i] = static_cast<unsigned char>(i * 7);

  const char* offload[] = {"capi-weights"};
  const char* discard[] = {"capi-kv"};
  unipool_device_sleep_result_t r{};
  r.size = sizeof r;
  ASSERT_EQ(unipool_device_sleep(pools, offload, 1, discard, 1, &r), UNIPOOL_OK) << unipool_last_error();
  EXPECT_EQ(r.offloaded_bytes, 3 * kMiB);
  EXPECT_EQ(r.discarded_bytes, 8 * kMiB);
  EXPECT_GE(r.released_bytes, 11 * kMiB);
  int64_t reserved = -1;
  ASSERT_EQ(unipool_device_stat(pools, 0, "reserved_bytes.all.current", &reserved), UNIPOOL_OK);
  EXPECT_EQ(reserved, 0);
  void* p = nullptr;
  ASSERT_EQ(unipool_device_set_tag("capi-kv"), UNIPOOL_OK);
  EXPECT_EQ(unipool_device_alloc(pools, kMiB, 0, nullptr, &p), UNIPOOL_ASLEEP);
  EXPECT_NE(std::string(unipool_last_error()).find("'capi-kv'"), std::string::npos) << unipool_last_error();
  ASSERT_EQ(unipool_device_set_tag(nullptr), UNIPOOL_OK);

  const size_t n = unipool_device_tag_stats_json(pools, -1, nullptr, 0);
  std::string json(n, '\0');
  ASSERT_EQ(unipool_device_tag_stats_json(pools, -1, json.data(), n + 1), n);
  const auto tags = nlohmann::json::parse(json);
  bool seen = false;
  for (const auto& t : tags) {
    if (t["tag"] != "capi-weights") continue;
    seen = true;
    EXPECT_EQ(t["state"], "asleep");
    EXPECT_EQ(t["host_bytes"], 3 * kMiB);
    EXPECT_EQ(t["device"], 0);
  }
  EXPECT_TRUE(seen) << json;

  unipool_device_sleep_result_t woke{};
  woke.size = sizeof woke;
  ASSERT_EQ(unipool_device_wake(pools, nullptr, 0, &woke), UNIPOOL_OK) << unipool_last_error();
  EXPECT_EQ(woke.released_bytes, r.released_bytes);
  for (size_t i = 0; i < 3 * kMiB; ++i) ASSERT_EQ(w[i], static_cast<unsigned char>(i * 7)) << i;
  EXPECT_EQ(unipool_device_free(pools, w), UNIPOOL_OK);
  EXPECT_EQ(unipool_device_free(pools, kv), UNIPOOL_OK);
  EXPECT_EQ(unipool_device_validate(pools), UNIPOOL_OK) << unipool_last_error();
  unipool_device_pools_destroy(pools);
}

// An older caller's shorter result struct is never written past.
TEST(DeviceCApiSleep, AShorterResultStructIsFilledOnlyAsFarAsItGoes) {
  unipool_device_pools_t* pools = nullptr;
  ASSERT_EQ(unipool_device_pools_create("backend=sim,sim_capacity=64MiB", &pools), UNIPOOL_OK);
  ASSERT_EQ(unipool_device_set_tag("capi-short"), UNIPOOL_OK);
  void* p = alloc(pools, kMiB, 0);
  ASSERT_EQ(unipool_device_set_tag(nullptr), UNIPOOL_OK);
  struct {
    unipool_device_sleep_result_t head;
    char guard[8];
  } buf;
  std::memset(&buf, 0x5A, sizeof buf);
  buf.head.size = offsetof(unipool_device_sleep_result_t, discarded_bytes);  // size and offloaded_bytes only
  const char* discard[] = {"capi-short"};
  ASSERT_EQ(unipool_device_sleep(pools, nullptr, 0, discard, 1, &buf.head), UNIPOOL_OK) << unipool_last_error();
  EXPECT_EQ(buf.head.offloaded_bytes, 0u);
  const auto* after = reinterpret_cast<const unsigned char*>(&buf.head.discarded_bytes);
  for (size_t i = 0; i < sizeof buf - offsetof(unipool_device_sleep_result_t, discarded_bytes); ++i) {
    ASSERT_EQ(after[i], 0x5A) << "written past the caller's struct at " << i;
  }
  ASSERT_EQ(unipool_device_wake(pools, discard, 1, nullptr), UNIPOOL_OK) << unipool_last_error();
  EXPECT_EQ(unipool_device_free(pools, p), UNIPOOL_OK);
  unipool_device_pools_destroy(pools);
}

}  // namespace
