// The "nccl" backend, with NCCL found at run time: here the fake NCCL the
// test binary exports (dlsym(RTLD_DEFAULT)).
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/cuda/cuda_backends.hpp"
#include "fake_cuda_fixture.hpp"

namespace unipool::test {
namespace {

using backend::make_cuda_backend;

class NcclBackend : public FakeCudaTest {
 protected:
  fake::Config config() const override {
    fake::Config c;
    c.device_count = 2;
    c.capacity = 16 * fake::kMiB;
    return c;
  }
  void SetUp() override {
    FakeCudaTest::SetUp();
    backend = make_cuda_backend("nccl");
  }
  void TearDown() override {
    backend.reset();
    FakeCudaTest::TearDown();
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
  ASSERT_TRUE(backend->allocate(0, fake::kMiB, &p).is_ok());
  std::memset(p, 7, fake::kMiB);
  EXPECT_EQ(fake::calls("ncclMemAlloc"), 1u);
  EXPECT_EQ(fake::live_bytes(0), 2 * fake::kMiB);  // NCCL rounds to its granularity
  ASSERT_TRUE(backend->deallocate(0, p, fake::kMiB).is_ok());
  EXPECT_EQ(fake::calls("ncclMemFree"), 1u);
  EXPECT_EQ(fake::live_bytes(0), 0u);
}

TEST_F(NcclBackend, WorksOnTheNamedDeviceAndRestoresTheCallers) {
  void* p = nullptr;
  ASSERT_TRUE(backend->allocate(1, fake::kMiB, &p).is_ok());
  EXPECT_EQ(fake::live_bytes(1), 2 * fake::kMiB);
  EXPECT_EQ(fake::current_device(), 0);
  ASSERT_TRUE(backend->deallocate(1, p, fake::kMiB).is_ok());
  EXPECT_EQ(fake::current_device(), 0);
}

TEST_F(NcclBackend, OutOfMemoryIsRecognised) {
  void* p = nullptr;
  const BackendStatus status = backend->allocate(0, 17 * fake::kMiB, &p);
  EXPECT_EQ(status.code, BackendStatus::out_of_memory);
  EXPECT_EQ(status.native, ncclUnhandledCudaError);
  EXPECT_NE(std::string(status.message).find("unhandled cuda error"), std::string::npos);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
}

TEST_F(NcclBackend, OtherFailuresAreErrors) {
  void* p = nullptr;
  fake::fail_nth_call("ncclMemAlloc", 1, ncclUnhandledCudaError);  // with memory to spare
  EXPECT_EQ(backend->allocate(0, fake::kMiB, &p).code, BackendStatus::error);
  fake::fail_nth_call("ncclMemAlloc", 1, ncclSystemError);
  EXPECT_EQ(backend->allocate(0, fake::kMiB, &p).code, BackendStatus::out_of_memory);
  fake::fail_nth_call("ncclMemAlloc", 1, ncclInternalError);
  EXPECT_EQ(backend->allocate(0, fake::kMiB, &p).code, BackendStatus::error);
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
  const BackendStatus status = backend->allocate(0, fake::kMiB, &p);
  EXPECT_EQ(status.code, BackendStatus::error);
  const std::string message = status.message;
  EXPECT_NE(message.find("cannot load /nonexistent/libnccl.so.2"), std::string::npos) << message;
  EXPECT_NE(message.find("UNIPOOL_NCCL_LIBRARY"), std::string::npos) << message;
  EXPECT_EQ(fake::calls("ncclMemAlloc"), 0u);  // an explicit choice has no fallback
}

TEST_F(NcclBackend, LibraryWithoutMemAllocIsAClearError) {
  {
    ScopedEnv env("UNIPOOL_NCCL_LIBRARY", "libm.so.6");
    backend = make_cuda_backend("nccl");
  }
  void* p = nullptr;
  const std::string message = backend->allocate(0, fake::kMiB, &p).message;
  EXPECT_NE(message.find("lacks ncclMemAlloc"), std::string::npos) << message;
}

}  // namespace
}  // namespace unipool::test
