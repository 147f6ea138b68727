// The simulated device: PROT_NONE memory, capacity, strict argument checks,
// counters, fault injection, manual fences.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>

#include "device_test_support.hpp"

namespace unipool::test {
namespace {

// The permissions /proc/self/maps shows for the mapping holding `p`.
std::string permissions_of(const void* p) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  const auto a = reinterpret_cast<uintptr_t>(p);
  while (std::getline(maps, line)) {
    unsigned long lo = 0, hi = 0;
    char perms[8] = {};
    if (std::sscanf(line.c_str(), "%lx-%lx %7s", &lo, &hi, perms) == 3 && a >= lo && a < hi) return perms;
  }
  return "";
}

TEST(SimBackend, MemoryIsReservedWithoutAccess) {
  SimBackend sim;
  void* p = nullptr;
  ASSERT_TRUE(sim.allocate(0, 4 * kMiB, &p).is_ok());
  EXPECT_EQ(permissions_of(p).substr(0, 3), "---");  // any touch faults
  EXPECT_TRUE(sim.deallocate(0, p, 4 * kMiB).is_ok());
}

TEST(SimBackend, CapacityAndArgumentChecks) {
  SimBackendOptions o;
  o.capacity = 8 * kMiB;
  SimBackend sim(o);
  void* p = nullptr;
  void* q = nullptr;
  ASSERT_TRUE(sim.allocate(0, 6 * kMiB, &p).is_ok());
  EXPECT_EQ(sim.allocate(0, 4 * kMiB, &q).code, BackendStatus::out_of_memory);
  uint64_t free_bytes = 0, total = 0;
  ASSERT_TRUE(sim.memory_info(0, &free_bytes, &total).is_ok());
  EXPECT_EQ(free_bytes, 2 * kMiB);
  EXPECT_EQ(total, 8 * kMiB);
  EXPECT_EQ(sim.deallocate(0, p, 4 * kMiB).code, BackendStatus::error);  // wrong size
  EXPECT_EQ(sim.allocate(1, kMiB, &q).code, BackendStatus::error);       // no device 1
  EXPECT_TRUE(sim.deallocate(0, p, 6 * kMiB).is_ok());
  EXPECT_EQ(sim.deallocate(0, p, 6 * kMiB).code, BackendStatus::error);  // double free
  EXPECT_EQ(sim.used_bytes(0), 0u);
  EXPECT_EQ(sim.calls(SimBackend::allocate_call), 3u);
  EXPECT_EQ(sim.calls(SimBackend::deallocate_call), 3u);
}

// A granule larger than the device could never be mapped: every allocation
// would fail while the device reads as free. Refused up front.
TEST(SimBackend, GranularityAboveCapacityIsRefused) {
  SimBackendOptions o;
  o.capacity = 8 * kMiB;
  o.granularity = 16 * kMiB;
  try {
    SimBackend sim(o);
    ADD_FAILURE() << "granularity 16 MiB accepted on an 8 MiB device";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("capacity"), std::string::npos) << e.what();
  }
  o.granularity = 8 * kMiB;  // one granule: the whole device
  EXPECT_NO_THROW(SimBackend{o});
}

TEST(SimBackend, ReserveMapUnmap) {
  SimBackendOptions o;
  o.capacity = 8 * kMiB;
  SimBackend sim(o);
  void* base = nullptr;
  ASSERT_TRUE(sim.reserve(0, 32 * kMiB, &base).is_ok());  // address space only
  EXPECT_EQ(sim.used_bytes(0), 0u);
  ASSERT_TRUE(sim.map(0, base, 0, 4 * kMiB).is_ok());
  EXPECT_EQ(sim.map(0, base, 2 * kMiB, 2 * kMiB).code, BackendStatus::error);  // already mapped
  EXPECT_EQ(sim.map(0, base, 5 * kMiB, 2 * kMiB).code, BackendStatus::error);  // not granule aligned
  EXPECT_EQ(sim.map(0, base, 4 * kMiB, 6 * kMiB).code, BackendStatus::out_of_memory);  // over capacity
  EXPECT_EQ(permissions_of(base).substr(0, 3), "---");
  EXPECT_EQ(sim.unreserve(0, base, 32 * kMiB).code, BackendStatus::error);  // still mapped
  EXPECT_TRUE(sim.unmap(0, base, 2 * kMiB, 2 * kMiB).is_ok());               // part of a map
  EXPECT_EQ(sim.unmap(0, base, 2 * kMiB, 2 * kMiB).code, BackendStatus::error);  // twice
  EXPECT_EQ(sim.mapped_bytes(0), 2 * kMiB);
  EXPECT_TRUE(sim.unmap(0, base, 0, 2 * kMiB).is_ok());
  EXPECT_TRUE(sim.unreserve(0, base, 32 * kMiB).is_ok());
  EXPECT_EQ(sim.live_segments(0), 0u);
}

TEST(SimBackend, FaultInjection) {
  SimBackend sim;
  void* p = nullptr;
  sim.fail_next(SimBackend::allocate_call, 2);
  EXPECT_FALSE(sim.allocate(0, kMiB, &p).is_ok());
  EXPECT_FALSE(sim.allocate(0, kMiB, &p).is_ok());
  ASSERT_TRUE(sim.allocate(0, kMiB, &p).is_ok());
  sim.fail_call_at(1);  // the second memory call from now
  EXPECT_TRUE(sim.deallocate(0, p, kMiB).is_ok());
  EXPECT_FALSE(sim.allocate(0, kMiB, &p).is_ok());
  EXPECT_TRUE(sim.allocate(0, kMiB, &p).is_ok());
  EXPECT_TRUE(sim.deallocate(0, p, kMiB).is_ok());
}

TEST(SimBackend, InjectedFaultsCarryTheirCode) {
  SimBackend sim;
  void* p = nullptr;
  EXPECT_EQ(sim.allocate(0, kMiB, &p).code, BackendStatus::ok);
  sim.fail_next(SimBackend::deallocate_call, 1, BackendStatus::error);
  EXPECT_EQ(sim.deallocate(0, p, kMiB).code, BackendStatus::error);
  sim.fail_call_at(0);  // out of memory unless told otherwise
  EXPECT_EQ(sim.deallocate(0, p, kMiB).code, BackendStatus::out_of_memory);
  sim.fail_call_at(0, BackendStatus::error);
  EXPECT_EQ(sim.deallocate(0, p, kMiB).code, BackendStatus::error);
  EXPECT_TRUE(sim.deallocate(0, p, kMiB).is_ok());
}

TEST(SimBackend, ManualFences) {
  SimBackend sim;
  FenceSource& fences = sim.fences();
  const FenceId a = fences.record(0, kStreamA);
  const FenceId b = fences.record(0, kStreamB);
  EXPECT_FALSE(fences.completed(a));
  sim.manual_fences().complete_stream(kStreamA);
  EXPECT_TRUE(fences.completed(a));
  EXPECT_FALSE(fences.completed(b));
  fences.release(a);
  fences.release(b);
  EXPECT_EQ(sim.manual_fences().outstanding(), 0u);
}

}  // namespace
}  // namespace unipool::test
