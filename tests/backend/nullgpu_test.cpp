// The null GPU itself: the semantics the backend tests (and the
// pool tests) rely on.
#include <cuda.h>
#include <nccl.h>

#include <cstring>
#include <thread>
#include <vector>

#include "nullgpu_fixture.hpp"

namespace unipool::test {
namespace {

class NullGpu : public NullGpuTest {
 protected:
  gpu::Config config() const override {
    gpu::Config c;
    c.device_count = 2;
    c.capacity = 64 * gpu::kMiB;
    return c;
  }
};

TEST_F(NullGpu, MallocIsRealMemoryChargedToTheCurrentDevice) {
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  std::memset(p, 0xab, 1000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
  EXPECT_EQ(gpu::live_bytes(0), 1000u);
  EXPECT_EQ(gpu::live_bytes(1), 0u);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  void* q = nullptr;
  ASSERT_EQ(cudaMalloc(&q, 4096), cudaSuccess);
  EXPECT_EQ(gpu::live_bytes(1), 4096u);
  size_t free_bytes = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  EXPECT_EQ(total, 64 * gpu::kMiB);
  EXPECT_EQ(free_bytes, 64 * gpu::kMiB - 4096);
  EXPECT_EQ(cudaFree(q), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(gpu::live_bytes(0) + gpu::live_bytes(1), 0u);
  EXPECT_EQ(gpu::calls("cudaMalloc"), 2u);
}

TEST_F(NullGpu, CapacityAndByteLimitFailAsOutOfMemory) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 65 * gpu::kMiB), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  gpu::set_byte_limit(gpu::kMiB);
  EXPECT_EQ(cudaMalloc(&p, gpu::kMiB + 1), cudaErrorMemoryAllocation);
  ASSERT_EQ(cudaMalloc(&p, gpu::kMiB), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST_F(NullGpu, LastErrorIsPerThreadAndClearedByGetLastError) {
  EXPECT_EQ(cudaSetDevice(7), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorInvalidDevice);
  std::thread([] { EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess); }).join();
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorInvalidDevice);  // peeking does not clear
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
}

TEST_F(NullGpu, CurrentDeviceIsPerThread) {
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  std::thread([] { EXPECT_EQ(gpu::current_device(), 0); }).join();
  EXPECT_EQ(gpu::current_device(), 1);
}

TEST_F(NullGpu, StickyErrorFailsEverythingAndCannotBeCleared) {
  gpu::set_sticky_error(cudaErrorIllegalAddress);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 16), cudaErrorIllegalAddress);
  EXPECT_EQ(cudaGetLastError(), cudaErrorIllegalAddress);
  EXPECT_EQ(cudaGetLastError(), cudaErrorIllegalAddress);
  int count = 0;
  EXPECT_EQ(cudaGetDeviceCount(&count), cudaErrorIllegalAddress);
  EXPECT_EQ(ncclMemAlloc(&p, 16), ncclUnhandledCudaError);
  gpu::reset(config());
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST_F(NullGpu, StickyFaultStartsAtTheNthCall) {
  gpu::inject(gpu::Fault{"cudaMalloc", 2, cudaErrorLaunchFailure, true});
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 16), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&p, 16), cudaErrorLaunchFailure);
  EXPECT_EQ(cudaFree(p), cudaErrorLaunchFailure);  // the context is gone
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorLaunchFailure);
  gpu::reset(config());  // frees the block the sticky error kept alive
}

TEST_F(NullGpu, FaultsHitTheNthCallOnceWithTheChosenCode) {
  gpu::fail_nth_call("cudaMalloc", 3, cudaErrorMemoryAllocation);
  std::vector<void*> blocks;
  std::vector<cudaError_t> results;
  for (int i = 0; i < 4; ++i) {
    void* p = nullptr;
    results.push_back(cudaMalloc(&p, 64));
    if (p != nullptr && results.back() == cudaSuccess) blocks.push_back(p);
  }
  EXPECT_EQ(results, (std::vector<cudaError_t>{cudaSuccess, cudaSuccess, cudaErrorMemoryAllocation, cudaSuccess}));
  EXPECT_EQ(gpu::faults_fired(), 1u);
  EXPECT_EQ(gpu::last_fault(), "cudaMalloc");
  EXPECT_EQ(gpu::calls("cudaMalloc"), 4u);
  for (void* p : blocks) EXPECT_EQ(cudaFree(p), cudaSuccess);
  (void)cudaGetLastError();
}

TEST_F(NullGpu, WildcardFaultUsesEachFamilysGenericError) {
  gpu::fail_nth_call("*", 1);
  void* p = nullptr;
  EXPECT_EQ(ncclMemAlloc(&p, 64), ncclUnhandledCudaError);
  gpu::fail_nth_call("*", 1);
  EXPECT_EQ(cudaMalloc(&p, 64), cudaErrorUnknown);
  gpu::fail_nth_call("*", 2);
  CUdevice d = 0;
  EXPECT_EQ(cuDeviceGet(&d, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuDeviceGet(&d, 0), CUDA_ERROR_UNKNOWN);
  (void)cudaGetLastError();
}

TEST_F(NullGpu, EventsStayPendingUntilTheTestCompletesThem) {
  cudaStream_t s1 = nullptr, s2 = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s1), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking), cudaSuccess);
  cudaEvent_t e1 = nullptr, e2 = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&e1, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&e2), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(e1), cudaSuccess);  // never recorded: complete
  ASSERT_EQ(cudaEventRecord(e1, s1), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(e2, s2), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(e1), cudaErrorNotReady);
  EXPECT_EQ(cudaGetLastError(), cudaErrorNotReady);  // left pending, like CUDA
  EXPECT_EQ(cudaStreamQuery(s1), cudaErrorNotReady);
  EXPECT_EQ(gpu::pending_events(), 2u);
  gpu::complete_stream(reinterpret_cast<uintptr_t>(s1));
  EXPECT_EQ(cudaEventQuery(e1), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(e2), cudaErrorNotReady);
  EXPECT_EQ(cudaStreamSynchronize(s2), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(e2), cudaSuccess);
  EXPECT_EQ(gpu::live_events_with_timing(), 1u);
  EXPECT_EQ(cudaEventDestroy(e1), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(e2), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(e2), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamDestroy(s1), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(s2), cudaSuccess);
  (void)cudaGetLastError();
}

TEST_F(NullGpu, SynchronizationCompletesEvents) {
  cudaEvent_t e = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(e, nullptr), cudaSuccess);
  EXPECT_EQ(cudaEventSynchronize(e), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(e), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(e, nullptr), cudaSuccess);  // re-recording makes it pending again
  EXPECT_EQ(gpu::pending_events(), 1u);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(gpu::pending_events(), 0u);
  ASSERT_EQ(cudaEventRecord(e, nullptr), cudaSuccess);
  gpu::complete_all_events();
  EXPECT_EQ(cudaEventQuery(e), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(e), cudaSuccess);
}

TEST_F(NullGpu, EventAndStreamMustShareADevice) {
  cudaEvent_t e = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess);  // device 0
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  EXPECT_EQ(cudaEventRecord(e, nullptr), cudaErrorInvalidResourceHandle);  // device 1's default stream
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventDestroy(e), cudaSuccess);
}

TEST_F(NullGpu, HostRegistrationIsTrackedAndChecked) {
  std::vector<char> buffer(8192);
  ASSERT_EQ(cudaHostRegister(buffer.data(), 4096, cudaHostRegisterDefault), cudaSuccess);
  EXPECT_EQ(cudaHostRegister(buffer.data() + 100, 10, cudaHostRegisterDefault), cudaErrorHostMemoryAlreadyRegistered);
  ASSERT_EQ(gpu::registered_ranges().size(), 1u);
  EXPECT_EQ(gpu::registered_ranges()[0].base, buffer.data());
  EXPECT_EQ(gpu::pinned_bytes(), 4096u);
  cudaPointerAttributes attributes{};
  ASSERT_EQ(cudaPointerGetAttributes(&attributes, buffer.data() + 10), cudaSuccess);
  EXPECT_EQ(attributes.type, cudaMemoryTypeHost);
  ASSERT_EQ(cudaPointerGetAttributes(&attributes, buffer.data() + 5000), cudaSuccess);
  EXPECT_EQ(attributes.type, cudaMemoryTypeUnregistered);
  EXPECT_EQ(cudaHostUnregister(buffer.data() + 1), cudaErrorHostMemoryNotRegistered);
  EXPECT_EQ(cudaHostUnregister(buffer.data()), cudaSuccess);
  EXPECT_EQ(gpu::pinned_bytes(), 0u);
  (void)cudaGetLastError();
}

TEST_F(NullGpu, DriverEntryPointsResolveToTheFakeDriver) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuMemCreate", &fn, 12000, cudaEnableDefault, &found), cudaSuccess);
  EXPECT_EQ(found, cudaDriverEntryPointSuccess);
  EXPECT_EQ(fn, reinterpret_cast<void*>(&cuMemCreate));
  ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuNoSuchThing", &fn, 12000, cudaEnableDefault, &found), cudaSuccess);
  EXPECT_EQ(found, cudaDriverEntryPointSymbolNotFound);
  EXPECT_EQ(fn, nullptr);
  ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuMemMap", &fn, 99000, cudaEnableDefault, &found), cudaSuccess);
  EXPECT_EQ(found, cudaDriverEntryPointVersionNotSufficent);
}

TEST_F(NullGpu, VmmMapsRealPagesThatFaultAfterUnmap) {
  const size_t g = 2 * gpu::kMiB;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 1;
  size_t granularity = 0;
  ASSERT_EQ(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_SUCCESS);
  EXPECT_EQ(granularity, g);
  CUdeviceptr base = 0;
  ASSERT_EQ(cuMemAddressReserve(&base, 4 * g, 0, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(base % g, 0u);
  auto* bytes = reinterpret_cast<char*>(base);
  EXPECT_FALSE(readable(bytes));
  CUmemGenericAllocationHandle h1 = 0, h2 = 0;
  ASSERT_EQ(cuMemCreate(&h1, g, &prop, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemCreate(&h2, g, &prop, 0), CUDA_SUCCESS);
  EXPECT_EQ(gpu::live_bytes(1), 2 * g);
  ASSERT_EQ(cuMemMap(base + g, g, 0, h1, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(base + 2 * g, g, 0, h2, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemMap(base + 3 * g, g, 0, h2, 0), CUDA_ERROR_NOT_SUPPORTED);  // no aliases in the null GPU
  EXPECT_FALSE(writable(bytes + g));  // mapped, no access yet
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = 1;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  EXPECT_EQ(cuMemSetAccess(base, 2 * g, &access, 1), CUDA_ERROR_INVALID_VALUE);  // granule 0 unmapped
  ASSERT_EQ(cuMemSetAccess(base + g, 2 * g, &access, 1), CUDA_SUCCESS);
  std::memset(bytes + g, 0x11, 2 * g);
  EXPECT_EQ(gpu::mapped_bytes(1), 2 * g);
  EXPECT_EQ(cuMemRelease(h1), CUDA_SUCCESS);  // still mapped: freed at unmap
  EXPECT_EQ(gpu::physical_handles(), 2u);
  EXPECT_EQ(cuMemUnmap(base + g, g / 2), CUDA_ERROR_INVALID_VALUE);  // part of a mapping
  EXPECT_EQ(cuMemAddressFree(base, 4 * g), CUDA_ERROR_INVALID_VALUE);  // still mapped
  ASSERT_EQ(cuMemUnmap(base + g, 2 * g), CUDA_SUCCESS);  // two whole mappings at once
  EXPECT_FALSE(readable(bytes + g));
  EXPECT_EQ(gpu::mapped_bytes(1), 0u);
  EXPECT_EQ(gpu::physical_handles(), 1u);
  EXPECT_EQ(cuMemRelease(h2), CUDA_SUCCESS);
  EXPECT_EQ(gpu::live_bytes(1), 0u);
  EXPECT_EQ(cuMemAddressFree(base, 4 * g), CUDA_SUCCESS);
  EXPECT_EQ(gpu::reserved_bytes(), 0u);
}

TEST_F(NullGpu, PhysicalMemoryCountsAgainstCapacity) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemGenericAllocationHandle big = 0, more = 0;
  ASSERT_EQ(cuMemCreate(&big, 64 * gpu::kMiB, &prop, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemCreate(&more, 2 * gpu::kMiB, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 1), cudaErrorMemoryAllocation);
  EXPECT_EQ(cuMemRelease(big), CUDA_SUCCESS);
  (void)cudaGetLastError();
}

TEST_F(NullGpu, NcclAllocationRoundsToTheGranularity) {
  void* p = nullptr;
  ASSERT_EQ(ncclMemAlloc(&p, 100), ncclSuccess);
  EXPECT_EQ(gpu::live_bytes(0), 2 * gpu::kMiB);
  EXPECT_EQ(cudaFree(p), cudaErrorInvalidValue);  // not a cudaMalloc block
  void* handle = nullptr;
  auto* comm = reinterpret_cast<ncclComm_t>(0x10);
  ASSERT_EQ(ncclCommRegister(comm, p, 100, &handle), ncclSuccess);
  EXPECT_EQ(gpu::nccl_registrations(), 1u);
  EXPECT_EQ(ncclCommDeregister(comm, handle), ncclSuccess);
  EXPECT_EQ(ncclCommDeregister(comm, handle), ncclInvalidArgument);
  EXPECT_EQ(ncclMemFree(p), ncclSuccess);
  EXPECT_EQ(ncclMemFree(p), ncclUnhandledCudaError);
  EXPECT_STREQ(ncclGetErrorString(ncclSuccess), "no error");
  (void)cudaGetLastError();
}

TEST_F(NullGpu, WithoutADriverTheRuntimeKeepsFailing) {
  gpu::Config c = config();
  c.driver_present = false;
  gpu::reset(c);
  int n = 0;
  EXPECT_EQ(cudaGetDeviceCount(&n), cudaErrorInsufficientDriver);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInsufficientDriver);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInsufficientDriver);  // not clearable
  int version = -1;
  EXPECT_EQ(cudaDriverGetVersion(&version), cudaSuccess);
  EXPECT_EQ(version, 0);
  EXPECT_EQ(cudaRuntimeGetVersion(&version), cudaSuccess);
  EXPECT_EQ(version, 13000);
}

TEST_F(NullGpu, WithoutDevicesCallsFailWithNoDevice) {
  gpu::Config c = config();
  c.device_count = 0;
  gpu::reset(c);
  void* p = nullptr;
  int n = -1;
  EXPECT_EQ(cudaGetDeviceCount(&n), cudaErrorNoDevice);
  EXPECT_EQ(cudaMalloc(&p, 16), cudaErrorNoDevice);
  EXPECT_EQ(ncclMemAlloc(&p, 16), ncclUnhandledCudaError);
  EXPECT_EQ(cudaGetLastError(), cudaErrorNoDevice);
  EXPECT_EQ(cudaRuntimeGetVersion(&n), cudaSuccess);
}

TEST_F(NullGpu, ResetReclaimsWhatATestLeaked) {
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 100), cudaSuccess);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  EXPECT_FALSE(gpu::leaks().clean());
  EXPECT_NE(gpu::leaks().describe().find("1 device allocations"), std::string::npos);
  gpu::reset(config());
  EXPECT_TRUE(gpu::leaks().clean());
  EXPECT_EQ(gpu::total_calls(), 0u);
}

TEST_F(NullGpu, ErrorTextsMatchTheRuntime) {
  EXPECT_STREQ(cudaGetErrorString(cudaErrorMemoryAllocation), "out of memory");
  EXPECT_STREQ(cudaGetErrorName(cudaErrorNotReady), "cudaErrorNotReady");
  const char* text = nullptr;
  EXPECT_EQ(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &text), CUDA_SUCCESS);
  EXPECT_STREQ(text, "out of memory");
  EXPECT_EQ(gpu::total_calls(), 0u);  // error texts are not counted
}

}  // namespace
}  // namespace unipool::test
