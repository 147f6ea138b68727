// unipool host: requests the machine cannot back are refused, as glibc's
// malloc refuses them under the kernel's default overcommit heuristic.
#include <sys/sysinfo.h>

#include <gtest/gtest.h>

#include <string>

#include "host_test_util.hpp"
#include "unipool/c/host.h"

namespace unipool::test {
namespace {

// Twice the machine's RAM and swap: no overcommit heuristic backs it.
size_t more_than_the_machine() {
  struct sysinfo si {};
  EXPECT_EQ(sysinfo(&si), 0);
  const uint64_t total = (uint64_t{si.totalram} + si.totalswap) * si.mem_unit;
  return static_cast<size_t>(2 * total);
}

TEST(HostPoolOsLimits, SizesNoMemoryCanBackAreRefused) {
  for (const char* config : {"", kTestConf}) {
    HostPool pool(config);
    for (size_t size : {more_than_the_machine(), size_t{64} << 40}) {
      EXPECT_EQ(pool.allocate(size), nullptr) << config << ": " << size;
      EXPECT_EQ(HostPool::last_status(), Status::out_of_space) << HostPool::last_error();
      EXPECT_NE(std::string(HostPool::last_error()).find("memory"), std::string::npos) << HostPool::last_error();
      EXPECT_EQ(pool.allocate_zeroed(size), nullptr) << config << ": " << size;
      EXPECT_EQ(pool.allocate(size, 1 << 20), nullptr) << config << ": " << size;
    }
    EXPECT_EQ(pool.stats().committed_bytes, 0u);
    void* p = pool.allocate(100 << 20);  // still serves what fits
    ASSERT_NE(p, nullptr) << HostPool::last_error();
    EXPECT_EQ(pool.free(p), Status::ok);
    EXPECT_VALID(pool);
  }
}

TEST(HostPoolOsLimits, CApiRefusesSizesNoMemoryCanBack) {
  unipool_host_pool_t* pool = unipool_host_default();
  ASSERT_NE(pool, nullptr);
  EXPECT_EQ(unipool_host_alloc(pool, more_than_the_machine()), nullptr);
  EXPECT_EQ(unipool_host_alloc(pool, size_t{64} << 40), nullptr);
}

}  // namespace
}  // namespace unipool::test
