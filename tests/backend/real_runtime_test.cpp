// libunipool as shipped (linked to the real libcudart, not to libcuda or
// NCCL) on a machine without a GPU driver, like CI: it loads, and every
// backend says what is missing instead of failing obscurely. On a machine
// with a GPU this binary has nothing to check and skips.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <string>

#include "backend/cuda/cuda_backends.hpp"
#include "backend/host_pinner.hpp"
#include "unipool/build_info.hpp"

namespace unipool::test {
namespace {

class RealRuntimeWithoutDriver : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0) GTEST_SKIP() << "a CUDA device is present";
  }
};

TEST_F(RealRuntimeWithoutDriver, LibraryReportsTheRuntimeItWasBuiltWith) {
  const BuildInfo info = build_info();
  EXPECT_TRUE(info.cuda);
  EXPECT_GT(info.cuda_runtime_version, 0);
}

TEST_F(RealRuntimeWithoutDriver, HostPinnerIsUnavailable) {
  const auto pinner = backend::make_default_host_pinner();
  EXPECT_STREQ(pinner->name(), "cuda");
  EXPECT_FALSE(pinner->available());
  char buffer[4096];
  const BackendStatus status = pinner->pin(buffer, sizeof buffer);
  EXPECT_EQ(status.code, BackendStatus::error);
  EXPECT_GT(std::string(status.message).size(), 0u);
}

TEST_F(RealRuntimeWithoutDriver, EveryBackendFailsWithAReason) {
  for (const char* name : {"cuda_malloc", "cuda_vmm", "nccl"}) {
    SCOPED_TRACE(name);
    const auto backend = backend::make_cuda_backend(name);
    ASSERT_NE(backend, nullptr);
    EXPECT_EQ(backend->device_count(), 0);
    EXPECT_FALSE(backend->supports_expandable());
    void* p = nullptr;
    const BackendStatus status = backend->allocate(0, 1 << 20, &p);
    EXPECT_EQ(status.code, BackendStatus::error);
    EXPECT_GT(std::string(status.message).size(), 0u);
    EXPECT_EQ(p, nullptr);
    EXPECT_EQ(backend->fences().record(0, 0), kNoFence);
  }
}

TEST_F(RealRuntimeWithoutDriver, VmmSaysTheDriverApiIsUnavailable) {
  const auto vmm = backend::make_cuda_backend("cuda_vmm");
  void* base = nullptr;
  const BackendStatus status = vmm->reserve(0, 2 << 20, &base);
  EXPECT_NE(std::string(status.message).find("CUDA driver API unavailable"), std::string::npos) << status.message;
}

}  // namespace
}  // namespace unipool::test
