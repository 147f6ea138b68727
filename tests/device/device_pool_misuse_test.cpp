// Misuse gets a clear error and changes nothing: double free, interior and
// foreign pointers, zero and huge sizes.
#include <gtest/gtest.h>

#include <string>

#include "device_test_support.hpp"

namespace unipool::test {
namespace {

class DevicePoolMisuse : public ::testing::TestWithParam<bool> {
 protected:
  // Runs f, which must throw DevicePoolError with `status` and a message
  // containing `text`; checks that the pool's books did not move.
  template <class F>
  void expect_error(F&& f, Status status, const std::string& text) {
    const std::string before = pool.snapshot_json();
    const DeviceStats stats_before = pool.stats();
    try {
      f();
      ADD_FAILURE() << "expected a DevicePoolError containing '" << text << "'";
    } catch (const DevicePoolError& e) {
      EXPECT_EQ(e.status(), status);
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
    EXPECT_EQ(pool.snapshot_json(), before);
    EXPECT_EQ(pool.stats().allocated_bytes[0].allocated, stats_before.allocated_bytes[0].allocated);
    EXPECT_POOL_VALID(pool);
  }

  SimPool sim{GetParam()};
  DevicePool& pool = *sim.pool;
};

TEST_P(DevicePoolMisuse, BadSizes) {
  expect_error([&] { pool.allocate(0, kStreamA); }, Status::zero_size, "0 bytes");
  expect_error([&] { pool.allocate(uint64_t{1} << 60, kStreamA); }, Status::too_large, "larger than any device");
  expect_error([&] { pool.allocate(~uint64_t{0}, kStreamA); }, Status::too_large, "larger than any device");
}

TEST_P(DevicePoolMisuse, DoubleFreeInteriorForeign) {
  void* p = pool.allocate(4096, kStreamA);
  void* keep = pool.allocate(4096, kStreamA);
  pool.deallocate(p);
  expect_error([&] { pool.deallocate(p); }, Status::not_live, "double free");
  expect_error([&] { pool.deallocate(static_cast<char*>(keep) + 512); }, Status::not_live, "interior pointer");
  int on_stack = 0;
  expect_error([&] { pool.deallocate(&on_stack); }, Status::not_live, "foreign pointer");
  expect_error([&] { pool.deallocate(nullptr); }, Status::not_live, "null pointer");
  expect_error([&] { pool.record_stream(&on_stack, kStreamB); }, Status::not_live, "record_stream");
  EXPECT_EQ(pool.try_deallocate(&on_stack), Status::not_live);
  pool.deallocate(keep);
  EXPECT_POOL_VALID(pool);
}

TEST_P(DevicePoolMisuse, DoubleFreeWhilePending) {
  void* p = pool.allocate(4096, kStreamA);
  pool.record_stream(p, kStreamB);
  pool.deallocate(p);
  expect_error([&] { pool.deallocate(p); }, Status::not_live, "already freed");
  sim.backend->manual_fences().complete_all();
}

TEST_P(DevicePoolMisuse, BadMemoryFraction) {
  expect_error([&] { pool.set_memory_fraction(1.5); }, Status::bad_argument, "memory fraction");
  expect_error([&] { pool.set_memory_fraction(-0.1); }, Status::bad_argument, "memory fraction");
  // A positive fraction that rounds to 0 bytes of the device is not "no limit".
  pool.set_memory_limit(512 * kMiB);
  expect_error([&] { pool.set_memory_fraction(1e-300); }, Status::bad_argument, "memory fraction");
  expect_error([&] { pool.set_memory_fraction(1e-12); }, Status::bad_argument, "0 bytes");
  EXPECT_EQ(pool.memory_limit(), 512 * kMiB);  // unchanged
  pool.set_memory_limit(0);
  EXPECT_EQ(pool.memory_limit(), 0u);
  try {
    SimPool tiny(GetParam(), kGiB, "memory_fraction=1e-300");
    ADD_FAILURE() << "a pool with memory_fraction=1e-300 was created, limit " << tiny.pool->memory_limit();
  } catch (const DevicePoolError& e) {
    EXPECT_EQ(e.status(), Status::bad_argument);
    EXPECT_NE(std::string(e.what()).find("memory_fraction"), std::string::npos) << e.what();
  }
  // The smallest fraction that is at least a byte is a limit, not none.
  pool.set_memory_fraction(1.0 / static_cast<double>(kGiB));
  EXPECT_EQ(pool.memory_limit(), 1u);
  pool.set_memory_fraction(0);  // 0 still removes the fraction limit
  EXPECT_EQ(pool.memory_limit(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Segments, DevicePoolMisuse, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "expandable" : "plain"; });

}  // namespace
}  // namespace unipool::test
