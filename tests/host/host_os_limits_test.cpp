// unipool host: requests the machine cannot back are refused, as glibc's
// malloc refuses them under the kernel's default overcommit heuristic.
#include <sys/resource.h>
#include <sys/sysinfo.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

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
      const HostAllocation a = pool.allocate(size);
      EXPECT_EQ(a, nullptr) << config << ": " << size;
      EXPECT_EQ(a.status, Status::out_of_space) << HostPool::last_error();
      // Refused by the overcommit heuristic ("memory and swap"), or before that
      // for want of address space (under TSan, whose layout leaves no room).
      const std::string why = HostPool::last_error();
      EXPECT_TRUE(why.find("memory") != std::string::npos || why.find("address space") != std::string::npos) << why;
      EXPECT_EQ(pool.allocate_zeroed(size), nullptr) << config << ": " << size;
      EXPECT_EQ(pool.allocate(size, 1 << 20), nullptr) << config << ": " << size;
    }
    EXPECT_EQ(pool.stats().committed_bytes, 0u);
    void* p = pool.allocate(100 << 20);  // still serves what fits
    ASSERT_NE(p, nullptr) << HostPool::last_error();
    EXPECT_EQ(pool.deallocate(p), Status::ok);
    EXPECT_VALID(pool);
  }
}

TEST(HostPoolOsLimits, CApiRefusesSizesNoMemoryCanBack) {
  unipool_host_pool_t* pool = unipool_host_default();
  ASSERT_NE(pool, nullptr);
  for (size_t size : {more_than_the_machine(), size_t{64} << 40}) {
    void* p = reinterpret_cast<void*>(0x1);
    EXPECT_EQ(unipool_host_alloc(pool, size, &p), UNIPOOL_OUT_OF_SPACE) << size;
    EXPECT_EQ(p, nullptr);
  }
}

// Under an address-space limit (prlimit --as) a pool with the default
// 64 GiB reservation must still serve every path. The limit is set in a
// child that then runs this binary again with only the disabled test below
// (this process has mapped too much already: its earlier pools' arenas).
int serve_under_address_space_limit(uint64_t bytes, const char* config) {
  const pid_t pid = fork();
  if (pid == 0) {
    const rlimit as{bytes, bytes};
    if (setrlimit(RLIMIT_AS, &as) != 0 || setenv("UNIPOOL_TEST_RLIMIT_CONF", config, 1) != 0) _exit(10);
    execl("/proc/self/exe", "host_os_limits_child", "--gtest_filter=HostPoolOsLimits.DISABLED_ServeInThisProcess",
          "--gtest_also_run_disabled_tests", static_cast<char*>(nullptr));
    _exit(11);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

TEST(HostPoolOsLimits, DISABLED_ServeInThisProcess) {
  const char* config = std::getenv("UNIPOOL_TEST_RLIMIT_CONF");
  HostPool pool(config != nullptr ? config : "");
  std::vector<void*> blocks;
  for (size_t size : {size_t{24}, size_t{5000}, size_t{20000}, size_t{300000}, size_t{3} << 20, size_t{40} << 20}) {
    for (int i = 0; i < 8; ++i) {
      void* p = pool.allocate(size);
      ASSERT_NE(p, nullptr) << size << ": " << HostPool::last_error();
      fill(p, size, 1);
      blocks.push_back(p);
    }
  }
  for (void* p : blocks) EXPECT_EQ(pool.deallocate(p), Status::ok);
  EXPECT_VALID(pool);
}

TEST(HostPoolOsLimits, ServesUnderAnAddressSpaceLimit) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // The sanitizer runtimes reserve terabytes of shadow address space as the
  // process starts: no instrumented binary starts under such a limit.
  GTEST_SKIP() << "not under ASan/TSan (their shadow memory needs the address space)";
#endif
  for (uint64_t gib : {8, 1}) {
    EXPECT_EQ(serve_under_address_space_limit(gib << 30, ""), 0) << gib << " GiB";
    EXPECT_EQ(serve_under_address_space_limit(gib << 30, "thread_cache=none"), 0) << gib << " GiB";
  }
  EXPECT_EQ(serve_under_address_space_limit(uint64_t{512} << 20, ""), 0) << "512 MiB";
}

// A limit below one chunk could serve nothing (the first allocation commits
// a chunk): refused, naming it, rather than a pool that fails every call.
TEST(HostPoolOsLimits, LimitBelowAChunkIsRefused) {
  HostPoolConfig config;
  char error[256] = {};
  EXPECT_EQ(parse_host_config("limit=1", &config, error, sizeof error), Status::bad_argument);
  EXPECT_NE(std::string(error).find("limit"), std::string::npos) << error;
  EXPECT_THROW(HostPool("limit=1MiB"), std::invalid_argument);
  HostPool pool("limit=4MiB");  // one chunk: allowed
}

}  // namespace
}  // namespace unipool::test
