// The "nccl" backend, with NCCL found at run time: here the null GPU's NCCL the
// test binary exports (dlsym(RTLD_DEFAULT)).
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/cuda/cuda_backends.hpp"
#include "nullgpu_fixture.hpp"

namespace unipool::test {
namespace {

using backend::make_cuda_backend;

class NcclBackend : public NullGpuTest {
 protected:
  gpu::Config config() const override {
    gpu::Config c;
    c.device_count = 2;
    c.capacity = 16 * gpu::kMiB;
    return c;
  }
  void SetUp() override {
    NullGpuTest::SetUp();
    backend = make_cuda_backend("nccl");
  }
  void TearDown() override {
    backend.reset();
    NullGpuTest::TearDown();
  }
  std::unique_ptr<DeviceBackend> backend;
};

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char* name_;
};

TEST_F(NcclBackend, AllocatesThroughTheProcesssNccl) {
  void* p = nullptr;
  ASSERT_TRUE(backend->allocate(0, gpu::kMiB, &p).is_ok());
  std::memset(p, 7, gpu::kMiB);
  EXPECT_EQ(gpu::calls("ncclMemAlloc"), 1u);
  EXPECT_EQ(gpu::live_bytes(0), 2 * gpu::kMiB);  // NCCL rounds to its granularity
  ASSERT_TRUE(backend->deallocate(0, p, gpu::kMiB).is_ok());
  EXPECT_EQ(gpu::calls("ncclMemFree"), 1u);
  EXPECT_EQ(gpu::live_bytes(0), 0u);
}

TEST_F(NcclBackend, WorksOnTheNamedDeviceAndRestoresTheCallers) {
  void* p = nullptr;
  ASSERT_TRUE(backend->allocate(1, gpu::kMiB, &p).is_ok());
  EXPECT_EQ(gpu::live_bytes(1), 2 * gpu::kMiB);
  EXPECT_EQ(gpu::current_device(), 0);
  ASSERT_TRUE(backend->deallocate(1, p, gpu::kMiB).is_ok());
  EXPECT_EQ(gpu::current_device(), 0);
}

TEST_F(NcclBackend, OutOfMemoryIsRecognised) {
  void* p = nullptr;
  const BackendStatus status = backend->allocate(0, 17 * gpu::kMiB, &p);
  EXPECT_EQ(status.code, BackendStatus::out_of_memory);
  EXPECT_EQ(status.native, ncclUnhandledCudaError);
  EXPECT_NE(std::string(status.message).find("unhandled cuda error"), std::string::npos);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
}

TEST_F(NcclBackend, OtherFailuresAreErrors) {
  void* p = nullptr;
  gpu::fail_nth_call("ncclMemAlloc", 1, ncclUnhandledCudaError);  // with memory to spare
  EXPECT_EQ(backend->allocate(0, gpu::kMiB, &p).code, BackendStatus::error);
  gpu::fail_nth_call("ncclMemAlloc", 1, ncclSystemError);
  EXPECT_EQ(backend->allocate(0, gpu::kMiB, &p).code, BackendStatus::out_of_memory);
  gpu::fail_nth_call("ncclMemAlloc", 1, ncclInternalError);
  EXPECT_EQ(backend->allocate(0, gpu::kMiB, &p).code, BackendStatus::error);
  int local = 0;
  const BackendStatus foreign = backend->deallocate(0, &local, sizeof local);
  EXPECT_EQ(foreign.code, BackendStatus::error);
  EXPECT_EQ(foreign.native, ncclUnhandledCudaError);
  EXPECT_EQ(backend->allocate(0, 0, &p).code, BackendStatus::error);
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
}

TEST_F(NcclBackend, MissingLibraryIsAClearError) {
  {
    ScopedEnv env("UNIPOOL_NCCL_LIBRARY", "/nonexistent/libnccl.so.2");
    backend = make_cuda_backend("nccl");
  }
  void* p = nullptr;
  const BackendStatus status = backend->allocate(0, gpu::kMiB, &p);
  EXPECT_EQ(status.code, BackendStatus::error);
  const std::string message = status.message;
  EXPECT_NE(message.find("cannot load /nonexistent/libnccl.so.2"), std::string::npos) << message;
  EXPECT_NE(message.find("UNIPOOL_NCCL_LIBRARY"), std::string::npos) << message;
  EXPECT_EQ(gpu::calls("ncclMemAlloc"), 0u);  // an explicit choice has no fallback
}

TEST_F(NcclBackend, LibraryWithoutMemAllocIsAClearError) {
  {
    ScopedEnv env("UNIPOOL_NCCL_LIBRARY", "libm.so.6");
    backend = make_cuda_backend("nccl");
  }
  void* p = nullptr;
  const std::string message = backend->allocate(0, gpu::kMiB, &p).message;
  EXPECT_NE(message.find("lacks ncclMemAlloc"), std::string::npos) << message;
}

}  // namespace
}  // namespace unipool::test
