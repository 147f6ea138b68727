// The null GPU's semantics that torch relies on: its configuration string,
// events that complete by themselves after a lag, pinned host memory,
// checked copies, stream capture whose replay moves bytes, kernel launches
// and the loud failure of what it does not implement.
#include <cuda.h>

#include <cstring>
#include <stdexcept>
#include <vector>

#include "nullgpu_fixture.hpp"

namespace unipool::test {
namespace {

class NullGpuSemantics : public NullGpuTest {
 protected:
  gpu::Config config() const override {
    gpu::Config c;
    c.capacity = 64 * gpu::kMiB;
    c.event_lag = 3;
    return c;
  }
};

TEST(NullGpuConfig, ParsesEveryKeyAndRefusesBadInput) {
  const gpu::EnvironmentConfig e = gpu::parse_config(
      "devices=2,capacity=24GiB,compute_capability=8.6,event_lag=never,sm_count=108,vmm=off,"
      "fault=cudaMalloc:3,fault=cuMemMap:1:2:sticky,byte_limit=1MiB",
      gpu::Config{});
  EXPECT_EQ(e.config.device_count, 2);
  EXPECT_EQ(e.config.capacity, uint64_t{24} << 30);
  EXPECT_EQ(e.config.compute_major, 8);
  EXPECT_EQ(e.config.compute_minor, 6);
  EXPECT_EQ(e.config.event_lag, gpu::kUnlimited);
  EXPECT_EQ(e.config.sm_count, 108);
  EXPECT_FALSE(e.config.vmm_supported);
  EXPECT_EQ(e.byte_limit, gpu::kMiB);
  ASSERT_EQ(e.faults.size(), 2u);
  EXPECT_EQ(e.faults[0].function, "cudaMalloc");
  EXPECT_EQ(e.faults[0].nth, 3u);
  EXPECT_EQ(e.faults[1].code, 2);
  EXPECT_TRUE(e.faults[1].sticky);
  for (const char* bad : {"devices=2,devices=3", "capacity=lots", "colour=red", "event_lag=0", "granularity=3000",
                          "fault=cudaMalloc", "fault=cudaMalloc:0", "vmm=maybe", "compute_capability=9"}) {
    EXPECT_THROW(gpu::parse_config(bad, gpu::Config{}), std::invalid_argument) << bad;
  }
  EXPECT_EQ(gpu::parse_config("", gpu::shared_library_defaults()).config.capacity, uint64_t{80} << 30);
}

TEST_F(NullGpuSemantics, EventsCompleteOnTheirLagthQuery) {
  cudaStream_t stream = nullptr;
  cudaEvent_t event = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(event, stream), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(event), cudaErrorNotReady);
  EXPECT_EQ(cudaStreamQuery(stream), cudaErrorNotReady);  // a query of the stream counts too
  EXPECT_EQ(cudaEventQuery(event), cudaSuccess);
  EXPECT_EQ(cudaStreamQuery(stream), cudaSuccess);
  (void)cudaGetLastError();
  EXPECT_EQ(cudaEventDestroy(event), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

TEST_F(NullGpuSemantics, PinnedHostMemoryIsToldApartFromPageable) {
  void* pinned = nullptr;
  ASSERT_EQ(cudaHostAlloc(&pinned, 5000, cudaHostAllocDefault), cudaSuccess);
  std::vector<char> pageable(100);
  cudaPointerAttributes a{};
  ASSERT_EQ(cudaPointerGetAttributes(&a, static_cast<char*>(pinned) + 4999), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeHost);
  ASSERT_EQ(cudaPointerGetAttributes(&a, pageable.data()), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeUnregistered);
  void* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, 100), cudaSuccess);
  ASSERT_EQ(cudaPointerGetAttributes(&a, device), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeDevice);
  EXPECT_EQ(cudaFreeHost(pageable.data()), cudaErrorInvalidValue);
  (void)cudaGetLastError();
  EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
  EXPECT_EQ(cudaFree(device), cudaSuccess);
}

TEST_F(NullGpuSemantics, CopiesMoveBytesAndRefuseMemoryThatIsNotThere) {
  char* device = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&device), 4096), cudaSuccess);
  std::vector<char> in(4096), out(4096);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<char>(i * 7);
  ASSERT_EQ(cudaMemcpy(device, in.data(), 4096, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(out.data(), device, 4096, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(in, out);
  // Past the end of the allocation, and a host pointer called device memory.
  EXPECT_EQ(cudaMemcpy(device + 4000, in.data(), 200, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(out.data(), in.data(), 10, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  ASSERT_EQ(cudaFree(device), cudaSuccess);
  EXPECT_EQ(cudaMemset(device, 0, 16), cudaErrorInvalidValue);  // freed
  (void)cudaGetLastError();
}

TEST_F(NullGpuSemantics, CapturedCopiesHappenAtEachLaunch) {
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  char* device = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&device), 64), cudaSuccess);
  char host[64] = "first";
  char back[64] = {};
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  cudaStreamCaptureStatus status{};
  unsigned long long id = 0;
  ASSERT_EQ(cudaStreamGetCaptureInfo(stream, &status, &id), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusActive);
  EXPECT_NE(id, 0u);
  ASSERT_EQ(cudaMemcpyAsync(device, host, 64, cudaMemcpyHostToDevice, stream), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(back, device, 64, cudaMemcpyDeviceToHost, stream), cudaSuccess);
  EXPECT_STREQ(back, "");  // recorded, not done
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorStreamCaptureUnsupported);  // invalidates the capture
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(stream, &graph), cudaErrorStreamCaptureInvalidated);
  (void)cudaGetLastError();

  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(device, host, 64, cudaMemcpyHostToDevice, stream), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(back, device, 64, cudaMemcpyDeviceToHost, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  EXPECT_STREQ(back, "first");
  std::strcpy(host, "second");
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  EXPECT_STREQ(back, "second");
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  EXPECT_EQ(cudaFree(device), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

void kernel_stub() {}

TEST_F(NullGpuSemantics, LaunchesCheckTheirConfigurationAndDoNothing) {
  const void* kernel = reinterpret_cast<const void*>(&kernel_stub);
  EXPECT_EQ(cudaLaunchKernel(kernel, dim3(4), dim3(256), nullptr, 0, nullptr), cudaSuccess);
  EXPECT_EQ(cudaLaunchKernel(kernel, dim3(4), dim3(2048), nullptr, 0, nullptr), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaLaunchKernel(kernel, dim3(0), dim3(32), nullptr, 0, nullptr), cudaErrorInvalidConfiguration);
  (void)cudaGetLastError();
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  EXPECT_EQ(prop.major, 8);
  EXPECT_EQ(prop.totalGlobalMem, 64 * gpu::kMiB);
}

TEST_F(NullGpuSemantics, UnimplementedCallsFailAndDriverLookupsFindTheirStubs) {
  // A runtime call the null GPU does not implement.
  EXPECT_EQ(cudaGraphicsMapResources(1, nullptr, nullptr), cudaErrorNotSupported);
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status{};
  ASSERT_EQ(cuGetProcAddress("cuMemAlloc", &fn, 13000, 0, &status), CUDA_SUCCESS);  // a stub, not "not found"
  EXPECT_NE(fn, nullptr);
  EXPECT_EQ(reinterpret_cast<int (*)()>(fn)(), static_cast<int>(CUDA_ERROR_NOT_SUPPORTED));
  ASSERT_EQ(cuGetProcAddress("cuMemCreate", &fn, 13000, 0, &status), CUDA_SUCCESS);
  EXPECT_EQ(fn, reinterpret_cast<void*>(&cuMemCreate));
  EXPECT_EQ(cuGetProcAddress("cuNoSuchFunction", &fn, 13000, 0, &status), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
}

}  // namespace
}  // namespace unipool::test
