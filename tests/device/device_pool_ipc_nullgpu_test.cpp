// unipool device pool: blocks shared with another process (CUDA IPC) on
// the real CUDA backend code, run against the null GPU with shareable
// device memory (Config::ipc): cudaMalloc segments, and cuda_vmm's plain
// and expandable segments. A forked child opens the parent's block through
// its own copy of the pool, reads what the parent wrote and writes back.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "backend/cuda/cuda_backends.hpp"
#include "backend/nullgpu_fixture.hpp"
#include "device_test_support.hpp"
#include "unipool/device_error.hpp"

namespace unipool::test {
namespace {

struct Setup {
  const char* backend;
  int expandable;
};

class PoolIpcOnNullGpu : public NullGpuIpcTest, public ::testing::WithParamInterface<Setup> {
 protected:
  void SetUp() override {
    NullGpuIpcTest::SetUp();
    DevicePoolConfig c;
    c.expandable_segments = GetParam().expandable;
    pool = std::make_unique<DevicePool>(backend::make_cuda_backend(GetParam().backend), 0, c);
  }
  void TearDown() override {
    pool.reset();
    NullGpuIpcTest::TearDown();
  }
  std::unique_ptr<DevicePool> pool;
};

// In the child: the block through the pool's own ipc_open; true if it read
// `expect` over `bytes` and wrote `write` over them. A second open of the
// same handle shares the mapping.
bool child_reads_and_writes(DevicePool& pool, const DeviceBackend::IpcHandle& h, uint64_t bytes, unsigned char expect,
                            unsigned char write) {
  try {
    std::shared_ptr<void> mapped = pool.ipc_open(h.bytes);
    if (pool.ipc_open(h.bytes) != mapped) return false;
    auto* p = static_cast<unsigned char*>(mapped.get()) + h.offset;
    const bool read = p[0] == expect && p[bytes / 2] == expect && p[bytes - 1] == expect;
    std::memset(p, write, bytes);
    return read;
  } catch (const DevicePoolError&) {
    return false;
  }
}

TEST_P(PoolIpcOnNullGpu, ABlockIsSharedBothWays) {
  // A small block after another, so it does not start its segment, and a
  // large one over several granules.
  void* first = pool->allocate(3000);
  for (const uint64_t bytes : {uint64_t{5000}, uint64_t{5} * kMiB}) {
    void* block = pool->allocate(bytes);
    std::memset(block, 0x11, bytes);
    const DeviceBackend::IpcHandle h = pool->ipc_export(block);
    EXPECT_TRUE(in_child([&] { return child_reads_and_writes(*pool, h, bytes, 0x11, 0x22); }));
    const auto* p = static_cast<unsigned char*>(block);
    EXPECT_EQ(p[0], 0x22);  // the child's writes, in the parent's memory
    EXPECT_EQ(p[bytes - 1], 0x22);
    pool->deallocate(block);
  }
  pool->deallocate(first);
  std::string why;
  EXPECT_TRUE(pool->validate(&why)) << why;
}

TEST_P(PoolIpcOnNullGpu, PointersThatAreNotLiveBlocksAreRefused) {
  void* block = pool->allocate(4096);
  try {
    (void)pool->ipc_export(static_cast<char*>(block) + 512);  // interior
    ADD_FAILURE() << "an interior pointer was exported";
  } catch (const DevicePoolError& e) {
    EXPECT_EQ(e.status(), Status::not_live);
  }
  pool->deallocate(block);
  EXPECT_THROW((void)pool->ipc_export(block), DevicePoolError);  // freed
  try {
    (void)pool->ipc_open("not a handle");
    ADD_FAILURE() << "a malformed handle was opened";
  } catch (const DevicePoolError& e) {
    EXPECT_EQ(e.status(), Status::backend_error);
    EXPECT_NE(std::string(e.what()).find("ipc_open"), std::string::npos);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, PoolIpcOnNullGpu,
                         ::testing::Values(Setup{"cuda_malloc", 0}, Setup{"cuda_vmm", 0}, Setup{"cuda_vmm", 1}),
                         [](const auto& info) {
                           return std::string(info.param.backend) + (info.param.expandable ? "_expandable" : "");
                         });

TEST(PoolIpcOnSim, TheSimulatedDeviceCannotShare) {
  DevicePool pool(std::make_shared<SimBackend>(), 0);
  void* block = pool.allocate(4096);
  try {
    (void)pool.ipc_export(block);
    ADD_FAILURE() << "sim shared a block";
  } catch (const DevicePoolError& e) {
    EXPECT_EQ(e.status(), Status::backend_error);
    EXPECT_NE(std::string(e.what()).find("cannot share memory"), std::string::npos);
  }
  pool.deallocate(block);
}

}  // namespace
}  // namespace unipool::test
