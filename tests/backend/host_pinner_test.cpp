// The CUDA host pinner (cudaHostRegister) and make_default_host_pinner().
#include <cstring>
#include <vector>

#include "backend/host_pinner.hpp"
#include "nullgpu_fixture.hpp"

namespace unipool::test {
namespace {

using backend::HostPinner;
using backend::make_default_host_pinner;

class HostPinnerTest : public NullGpuTest {
 protected:
  std::unique_ptr<HostPinner> pinner = make_default_host_pinner();
  std::vector<char> buffer = std::vector<char>(64 * 1024);
};

TEST_F(HostPinnerTest, DefaultPinnerIsTheCudaOneWhenBuiltWithCuda) {
  EXPECT_STREQ(pinner->name(), "cuda");
  EXPECT_TRUE(pinner->available());
}

TEST_F(HostPinnerTest, PinsAndUnpinsARange) {
  ASSERT_TRUE(pinner->pin(buffer.data(), buffer.size()).is_ok());
  ASSERT_EQ(gpu::registered_ranges().size(), 1u);
  EXPECT_EQ(gpu::registered_ranges()[0].base, buffer.data());
  EXPECT_EQ(gpu::registered_ranges()[0].bytes, buffer.size());
  EXPECT_EQ(gpu::calls("cudaHostRegister"), 1u);
  ASSERT_TRUE(pinner->unpin(buffer.data()).is_ok());
  EXPECT_TRUE(gpu::registered_ranges().empty());
}

TEST_F(HostPinnerTest, InjectedRegistrationFailureIsReportedAndCleared) {
  gpu::fail_nth_call("cudaHostRegister", 1, cudaErrorInvalidValue);
  const BackendStatus status = pinner->pin(buffer.data(), buffer.size());
  EXPECT_EQ(status.code, BackendStatus::error);
  EXPECT_EQ(status.native, cudaErrorInvalidValue);
  EXPECT_STREQ(status.message, "invalid argument");
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);  // nothing left to surprise a later call
  EXPECT_TRUE(gpu::registered_ranges().empty());
}

TEST_F(HostPinnerTest, OutOfPinnableMemoryIsOutOfMemory) {
  gpu::fail_nth_call("cudaHostRegister", 1, cudaErrorMemoryAllocation);
  EXPECT_EQ(pinner->pin(buffer.data(), buffer.size()).code, BackendStatus::out_of_memory);
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);

  gpu::Config limited;
  limited.pinned_limit = 1024;
  gpu::reset(limited);
  EXPECT_EQ(pinner->pin(buffer.data(), 2048).code, BackendStatus::out_of_memory);
  EXPECT_TRUE(pinner->pin(buffer.data(), 1024).is_ok());
  EXPECT_TRUE(pinner->unpin(buffer.data()).is_ok());
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
}

TEST_F(HostPinnerTest, MisuseIsAnErrorAndLeavesNothingPending) {
  ASSERT_TRUE(pinner->pin(buffer.data(), 4096).is_ok());
  const BackendStatus twice = pinner->pin(buffer.data() + 10, 100);
  EXPECT_EQ(twice.code, BackendStatus::error);
  EXPECT_EQ(twice.native, cudaErrorHostMemoryAlreadyRegistered);
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
  EXPECT_EQ(pinner->unpin(buffer.data() + 10).native, cudaErrorHostMemoryNotRegistered);
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
  EXPECT_TRUE(pinner->unpin(buffer.data()).is_ok());
  EXPECT_EQ(pinner->pin(nullptr, 10).code, BackendStatus::error);
  EXPECT_EQ(pinner->pin(buffer.data(), 0).code, BackendStatus::error);
  EXPECT_EQ(pinner->unpin(nullptr).code, BackendStatus::error);
  EXPECT_EQ(gpu::calls("cudaHostRegister"), 2u);  // bad arguments never reach CUDA
}

TEST_F(HostPinnerTest, UnavailableWithoutDevicesOrDriver) {
  gpu::Config none;
  none.device_count = 0;
  gpu::reset(none);
  EXPECT_FALSE(pinner->available());
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);

  gpu::Config no_driver;
  no_driver.driver_present = false;
  gpu::reset(no_driver);
  EXPECT_FALSE(pinner->available());
  const BackendStatus status = pinner->pin(buffer.data(), buffer.size());
  EXPECT_EQ(status.native, cudaErrorInsufficientDriver);
  EXPECT_NE(std::strstr(status.message, "driver"), nullptr);
}

TEST_F(HostPinnerTest, StickyErrorsAreReportedNotHidden) {
  gpu::set_sticky_error(cudaErrorIllegalAddress);
  EXPECT_FALSE(pinner->available());
  EXPECT_EQ(pinner->pin(buffer.data(), buffer.size()).native, cudaErrorIllegalAddress);
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorIllegalAddress);  // sticky: CUDA keeps it
}

}  // namespace
}  // namespace unipool::test
