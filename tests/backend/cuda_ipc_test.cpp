// CUDA IPC of plain segments through the CUDA backends, on the null GPU
// with memfd device memory (Config::ipc): a forked child opens the parent's
// segment, reads what the parent wrote and writes back; refusals of bad
// handles, of memory that is not shareable and of backends without IPC.
// CUDA VMM memory (cuda_vmm's segments) is in cuda_vmm_ipc_test.cpp.
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "backend/cuda/cuda_backends.hpp"
#include "nullgpu_fixture.hpp"
#include "unipool/device_sim_backend.hpp"

namespace unipool::test {
namespace {

using backend::make_cuda_backend;

class CudaIpc : public NullGpuIpcTest {
 protected:
  std::unique_ptr<DeviceBackend> backend = make_cuda_backend("cuda_malloc");
};

TEST_F(CudaIpc, AnotherProcessMapsTheSegmentBothWays) {
  constexpr uint64_t kBytes = 3 * gpu::kMiB;
  void* p = nullptr;
  ASSERT_TRUE(backend->allocate(0, kBytes, &p).is_ok());
  std::memset(p, 0x11, kBytes);
  DeviceBackend::IpcHandle handle;
  ASSERT_TRUE(backend->ipc_export(0, p, 0, kBytes, &handle).is_ok());
  EXPECT_EQ(handle.offset, 0u);  // the whole segment
  const bool child_ok = in_child([&] {
    void* mine = nullptr;
    if (!backend->ipc_open(0, handle, &mine).is_ok() || mine == p) return false;
    const auto* bytes = static_cast<unsigned char*>(mine);
    const bool read = bytes[0] == 0x11 && bytes[kBytes - 1] == 0x11;
    std::memset(static_cast<char*>(mine) + kBytes / 2, 0x22, 4096);
    return read && backend->ipc_close(0, mine).is_ok() && !backend->ipc_close(0, mine).is_ok();
  });
  EXPECT_TRUE(child_ok);
  EXPECT_EQ(static_cast<unsigned char*>(p)[kBytes / 2], 0x22);  // the child's write, in the parent's memory
  EXPECT_EQ(static_cast<unsigned char*>(p)[kBytes / 2 + 4096], 0x11);
  EXPECT_TRUE(backend->deallocate(0, p, kBytes).is_ok());
}

// As with CUDA, a process that opens one handle twice gets one mapping,
// unmapped with the last close.
TEST_F(CudaIpc, OpensOfOneHandleAreCounted) {
  void* p = nullptr;
  ASSERT_TRUE(backend->allocate(0, gpu::kMiB, &p).is_ok());
  static_cast<unsigned char*>(p)[0] = 0x33;
  DeviceBackend::IpcHandle h;
  ASSERT_TRUE(backend->ipc_export(0, p, 0, gpu::kMiB, &h).is_ok());
  EXPECT_TRUE(in_child([&] {
    void *first = nullptr, *second = nullptr;
    if (!backend->ipc_open(0, h, &first).is_ok() || !backend->ipc_open(0, h, &second).is_ok()) return false;
    const bool same = first == second;
    const bool kept =
        backend->ipc_close(0, first).is_ok() && readable(second) && static_cast<unsigned char*>(second)[0] == 0x33;
    return same && kept && backend->ipc_close(0, second).is_ok() && !readable(second);
  }));
  EXPECT_TRUE(backend->deallocate(0, p, gpu::kMiB).is_ok());
}

TEST_F(CudaIpc, EventsCrossProcessesAsInterprocessEvents) {
  cudaEvent_t event = nullptr, plain = nullptr, opened = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&event, cudaEventInterprocess | cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&plain), cudaSuccess);
  cudaIpcEventHandle_t h;
  EXPECT_EQ(cudaIpcGetEventHandle(&h, plain), cudaErrorInvalidResourceHandle);  // not interprocess
  (void)cudaGetLastError();
  ASSERT_EQ(cudaIpcGetEventHandle(&h, event), cudaSuccess);
  ASSERT_EQ(cudaIpcOpenEventHandle(&opened, h), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(opened), cudaSuccess);  // the null GPU's work is done when its call returns
  EXPECT_EQ(cudaStreamWaitEvent(nullptr, opened, 0), cudaSuccess);
  for (cudaEvent_t e : {event, plain, opened}) EXPECT_EQ(cudaEventDestroy(e), cudaSuccess);
}

TEST_F(CudaIpc, BadHandlesAreRefused) {
  DeviceBackend::IpcHandle garbage{"C" + std::string(sizeof(cudaIpcMemHandle_t), '\x5a')};
  void* mine = nullptr;
  const BackendStatus s = backend->ipc_open(0, garbage, &mine);
  EXPECT_FALSE(s.is_ok());
  EXPECT_EQ(s.native, cudaErrorInvalidResourceHandle);
  for (const std::string& bytes : {std::string(), std::string("C"), std::string(66, 'C'), std::string(80, 'x')}) {
    EXPECT_NE(std::string(backend->ipc_open(0, {bytes}, &mine).message).find("not an IPC handle"), std::string::npos);
  }
  EXPECT_NE(std::string(backend->ipc_open(0, {std::string(80, 'V')}, &mine).message).find("cuda_vmm"),
            std::string::npos);  // a VMM handle, which cudaIpc cannot open
  int stack = 0;
  DeviceBackend::IpcHandle h;
  EXPECT_FALSE(backend->ipc_export(0, &stack, 0, 1, &h).is_ok());  // not device memory
  EXPECT_FALSE(backend->ipc_close(0, &stack).is_ok());
  // A handle whose exporter is gone: the child exports and exits.
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    void* p = nullptr;
    DeviceBackend::IpcHandle out{};
    (void)backend->allocate(0, gpu::kMiB, &p);
    (void)backend->ipc_export(0, p, 0, gpu::kMiB, &out);
    (void)!write(pipe_fds[1], out.bytes.data(), out.bytes.size());
    _exit(0);
  }
  DeviceBackend::IpcHandle orphan{std::string(1 + sizeof(cudaIpcMemHandle_t), '\0')};
  ASSERT_EQ(read(pipe_fds[0], orphan.bytes.data(), orphan.bytes.size()), static_cast<ssize_t>(orphan.bytes.size()));
  waitpid(pid, nullptr, 0);
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  EXPECT_EQ(backend->ipc_open(0, orphan, &mine).native, cudaErrorInvalidResourceHandle);
}

TEST_F(CudaIpc, AHandleToAFreedSegmentNamesNoOther) {
  void* a = nullptr;
  ASSERT_TRUE(backend->allocate(0, gpu::kMiB, &a).is_ok());
  DeviceBackend::IpcHandle stale;
  ASSERT_TRUE(backend->ipc_export(0, a, 0, gpu::kMiB, &stale).is_ok());
  ASSERT_TRUE(backend->deallocate(0, a, gpu::kMiB).is_ok());
  void* b = nullptr;
  ASSERT_TRUE(backend->allocate(0, gpu::kMiB, &b).is_ok());  // its memfd likely takes a's descriptor number
  EXPECT_TRUE(in_child([&] {
    void* mine = nullptr;
    return backend->ipc_open(0, stale, &mine).native == cudaErrorInvalidResourceHandle;
  }));
  EXPECT_TRUE(backend->deallocate(0, b, gpu::kMiB).is_ok());
}

class CudaIpcOff : public NullGpuTest {};

TEST_F(CudaIpcOff, MemoryThatIsNotShareableAndBackendsWithoutIpcRefuse) {
  auto cuda = make_cuda_backend("cuda_malloc");
  void* p = nullptr;
  ASSERT_TRUE(cuda->allocate(0, gpu::kMiB, &p).is_ok());
  DeviceBackend::IpcHandle h;
  EXPECT_EQ(cuda->ipc_export(0, p, 0, gpu::kMiB, &h).native, cudaErrorNotSupported);  // Config::ipc is off
  EXPECT_TRUE(cuda->deallocate(0, p, gpu::kMiB).is_ok());
  SimBackend sim;
  EXPECT_NE(std::string(sim.ipc_export(0, p, 0, gpu::kMiB, &h).message).find("cannot share memory"), std::string::npos);
}

}  // namespace
}  // namespace unipool::test
