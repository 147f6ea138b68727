// CUDA VMM memory across processes through the cuda_vmm backend, on the
// null GPU with memfd device memory (Config::ipc): plain segments and
// ranges of expandable ones are shared granule by granule, their
// descriptors lent by the exporter's descriptor server; a forked child
// opens them, reads the parent's bytes and writes back. An opened mapping
// keeps its memory after the exporter unmaps it. Refusals: ranges not
// mapped or outside the segment, malformed and withdrawn handles, a server
// that is gone, devices without POSIX descriptor handles.
#include <cuda.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <utility>

#include "backend/cuda/cuda_backends.hpp"
#include "nullgpu_fixture.hpp"

namespace unipool::test {
namespace {

using backend::make_cuda_backend;
constexpr uint64_t kG = 2 * gpu::kMiB;  // the null GPU's granularity

class CudaVmmIpc : public NullGpuIpcTest {
 protected:
  // Made after SetUp, which sets the null GPU's configuration up.
  void SetUp() override {
    NullGpuIpcTest::SetUp();
    backend = make_cuda_backend("cuda_vmm");
    ASSERT_TRUE(backend->supports_expandable());
  }
  void TearDown() override {
    backend.reset();
    NullGpuIpcTest::TearDown();
  }
  // A plain segment of one granule filled with `fill`, exported into *h.
  void* exported_granule(unsigned char fill, DeviceBackend::IpcHandle* h) {
    void* p = nullptr;
    EXPECT_TRUE(backend->allocate(0, kG, &p).is_ok());
    if (p == nullptr) return nullptr;
    std::memset(p, fill, kG);
    EXPECT_TRUE(backend->ipc_export(0, p, 0, kG, h).is_ok());
    return p;
  }
  std::unique_ptr<DeviceBackend> backend;
};

// In a child: opens `h`, checks `bytes` bytes of `expect` at `at` past the
// mapping, writes `write` over them, closes; true if all went right.
bool child_reads_and_writes(DeviceBackend& b, const DeviceBackend::IpcHandle& h, uint64_t at, uint64_t bytes,
                            unsigned char expect, unsigned char write) {
  void* mine = nullptr;
  if (!b.ipc_open(0, h, &mine).is_ok()) return false;
  auto* p = static_cast<unsigned char*>(mine) + at;
  const bool read = p[0] == expect && p[bytes - 1] == expect;
  std::memset(p, write, bytes);
  return read && b.ipc_close(0, mine).is_ok() && !b.ipc_close(0, mine).is_ok();
}

TEST_F(CudaVmmIpc, APlainSegmentIsSharedBothWays) {
  constexpr uint64_t kBytes = 3 * gpu::kMiB;  // two granules
  void* p = nullptr;
  ASSERT_TRUE(backend->allocate(0, kBytes, &p).is_ok());
  std::memset(p, 0x11, kBytes);
  DeviceBackend::IpcHandle h;
  ASSERT_TRUE(backend->ipc_export(0, p, 0, kBytes, &h).is_ok());
  EXPECT_EQ(h.bytes[0], 'V');
  EXPECT_EQ(h.offset, 0u);
  EXPECT_TRUE(in_child([&] { return child_reads_and_writes(*backend, h, 0, kBytes, 0x11, 0x22); }));
  EXPECT_EQ(static_cast<unsigned char*>(p)[0], 0x22);  // the child's writes, in the parent's memory
  EXPECT_EQ(static_cast<unsigned char*>(p)[kBytes - 1], 0x22);
  EXPECT_TRUE(backend->deallocate(0, p, kBytes).is_ok());
}

TEST_F(CudaVmmIpc, ARangeOfAnExpandableSegmentSharesTheGranulesHoldingIt) {
  void* base = nullptr;
  ASSERT_TRUE(backend->reserve(0, 8 * kG, &base).is_ok());
  ASSERT_TRUE(backend->map(0, base, 0, 4 * kG).is_ok());
  auto* bytes = static_cast<unsigned char*>(base);
  std::memset(bytes, 0x33, 4 * kG);
  // A block from 1.5 granules to 2.5: granules 1 and 2 are shared.
  const uint64_t block = kG + kG / 2;
  DeviceBackend::IpcHandle h;
  ASSERT_TRUE(backend->ipc_export(0, base, block, kG, &h).is_ok());
  EXPECT_EQ(h.offset, kG / 2);  // the block's place in the shared granules
  EXPECT_TRUE(in_child([&] { return child_reads_and_writes(*backend, h, h.offset, kG, 0x33, 0x44); }));
  EXPECT_EQ(bytes[block - 1], 0x33);
  EXPECT_EQ(bytes[block], 0x44);
  EXPECT_EQ(bytes[block + kG - 1], 0x44);
  EXPECT_EQ(bytes[block + kG], 0x33);
  // The same granules again, named from inside the reservation: exported
  // once, shared as often as asked.
  DeviceBackend::IpcHandle again;
  ASSERT_TRUE(backend->ipc_export(0, bytes + block, 0, kG, &again).is_ok());
  EXPECT_EQ(again.bytes, h.bytes);
  EXPECT_EQ(again.offset, h.offset);
  EXPECT_TRUE(backend->unmap(0, base, 0, 4 * kG).is_ok());
  EXPECT_TRUE(backend->unreserve(0, base, 8 * kG).is_ok());
}

// More granules than one fetch brings (kMaxFetch): the receiver takes them
// a batch at a time.
TEST_F(CudaVmmIpc, ManyGranulesAreFetchedInBatches) {
  constexpr uint64_t kGranules = 70;
  void* base = nullptr;
  ASSERT_TRUE(backend->reserve(0, kGranules * kG, &base).is_ok());
  ASSERT_TRUE(backend->map(0, base, 0, kGranules * kG).is_ok());
  auto* bytes = static_cast<unsigned char*>(base);
  for (uint64_t g = 0; g < kGranules; ++g) bytes[g * kG + 7] = static_cast<unsigned char>(g);
  DeviceBackend::IpcHandle h;
  ASSERT_TRUE(backend->ipc_export(0, base, 0, kGranules * kG, &h).is_ok());
  EXPECT_TRUE(in_child([&] {
    void* mine = nullptr;
    if (!backend->ipc_open(0, h, &mine).is_ok()) return false;
    bool same = true;
    for (uint64_t g = 0; g < kGranules; ++g) same &= static_cast<unsigned char*>(mine)[g * kG + 7] == g;
    return same && backend->ipc_close(0, mine).is_ok();
  }));
  EXPECT_TRUE(backend->unmap(0, base, 0, kGranules * kG).is_ok());
  EXPECT_TRUE(backend->unreserve(0, base, kGranules * kG).is_ok());
}

// A driver call failing part way through ipc_open leaves nothing behind:
// no imported handle, mapping or reservation.
TEST_F(CudaVmmIpc, AFailedOpenLeavesNothing) {
  void* p = nullptr;
  ASSERT_TRUE(backend->allocate(0, 3 * kG, &p).is_ok());
  DeviceBackend::IpcHandle h;
  ASSERT_TRUE(backend->ipc_export(0, p, 0, 3 * kG, &h).is_ok());
  for (const auto& [function, nth] : {std::pair{"cuMemImportFromShareableHandle", 2}, std::pair{"cuMemMap", 3},
                                      std::pair{"cuMemSetAccess", 1}, std::pair{"cuMemAddressReserve", 1}}) {
    EXPECT_TRUE(in_child([&, function = function, nth = nth] {
      const uint64_t handles = gpu::physical_handles(), reserved = gpu::reserved_bytes();
      const uint64_t mapped = gpu::mapped_bytes(0);
      gpu::fail_nth_call(function, static_cast<uint64_t>(nth));
      void* mine = nullptr;
      const bool refused = !backend->ipc_open(0, h, &mine).is_ok() && gpu::faults_fired() == 1;
      return refused && gpu::physical_handles() == handles && gpu::reserved_bytes() == reserved &&
             gpu::mapped_bytes(0) == mapped;
    })) << function;
  }
  EXPECT_TRUE(backend->deallocate(0, p, 3 * kG).is_ok());
}

// The child opens, the parent unmaps and releases its granules, and the
// child still reads and writes the memory through its own mapping.
TEST_F(CudaVmmIpc, AnOpenedRangeOutlivesTheExportersMapping) {
  DeviceBackend::IpcHandle h;
  void* p = exported_granule(0x55, &h);
  ASSERT_NE(p, nullptr);
  int opened[2], freed[2];
  ASSERT_EQ(pipe(opened), 0);
  ASSERT_EQ(pipe(freed), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    // Only the ends it uses: if the other side dies, a read sees the end.
    close(opened[0]);
    close(freed[1]);
    void* mine = nullptr;
    const bool ok = backend->ipc_open(0, h, &mine).is_ok();
    char byte = ok ? 1 : 0;
    (void)!write(opened[1], &byte, 1);
    if (!ok || read(freed[0], &byte, 1) != 1) _exit(1);
    auto* q = static_cast<unsigned char*>(mine);
    const bool kept = q[0] == 0x55 && q[kG - 1] == 0x55;
    std::memset(q, 0x66, kG);
    _exit(kept && q[kG / 2] == 0x66 && backend->ipc_close(0, mine).is_ok() ? 0 : 2);
  }
  close(opened[1]);
  close(freed[0]);
  char byte = 0;
  EXPECT_EQ(read(opened[0], &byte, 1), 1);
  EXPECT_EQ(byte, 1);
  EXPECT_TRUE(backend->deallocate(0, p, kG).is_ok());
  // The granule's descriptor was withdrawn with it: the handle opens no more.
  void* late = nullptr;
  EXPECT_NE(std::string(backend->ipc_open(0, h, &late).message).find("freed or unmapped"), std::string::npos);
  EXPECT_EQ(write(freed[1], &byte, 1), 1);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  close(opened[0]);
  close(freed[1]);
}

TEST_F(CudaVmmIpc, BadRangesAndHandlesAreRefused) {
  void* base = nullptr;
  ASSERT_TRUE(backend->reserve(0, 4 * kG, &base).is_ok());
  ASSERT_TRUE(backend->map(0, base, 0, kG).is_ok());
  DeviceBackend::IpcHandle h;
  auto refusal = [&](uint64_t offset, uint64_t bytes) {
    return std::string(backend->ipc_export(0, base, offset, bytes, &h).message);
  };
  EXPECT_NE(refusal(kG / 2, kG).find("not (entirely) mapped"), std::string::npos);
  EXPECT_NE(refusal(0, 5 * kG).find("outside the segment"), std::string::npos);
  EXPECT_NE(refusal(0, 0).find("outside the segment"), std::string::npos);
  EXPECT_NE(refusal(4 * kG, 1).find("outside the segment"), std::string::npos);
  int stack = 0;
  EXPECT_NE(std::string(backend->ipc_export(0, &stack, 0, 1, &h).message).find("outside this backend's memory"),
            std::string::npos);
  EXPECT_NE(std::string(backend->ipc_export(0, static_cast<char*>(base) + 4 * kG, 0, 1, &h).message)
                .find("outside this backend's memory"),
            std::string::npos);
  EXPECT_FALSE(backend->ipc_export(0, base, 0, kG, nullptr).is_ok());
  ASSERT_TRUE(backend->ipc_export(0, base, 0, kG, &h).is_ok());
  void* mine = nullptr;
  DeviceBackend::IpcHandle cut{h.bytes.substr(0, h.bytes.size() - 1)};
  EXPECT_NE(std::string(backend->ipc_open(0, cut, &mine).message).find("malformed"), std::string::npos);
  EXPECT_NE(std::string(backend->ipc_open(0, {"V"}, &mine).message).find("malformed"), std::string::npos);
  // A server name nobody holds: the exporter is gone.
  DeviceBackend::IpcHandle orphan = h;
  orphan.bytes[1 + 16] ^= 0x01;  // the first byte of the server's name
  EXPECT_NE(std::string(backend->ipc_open(0, orphan, &mine).message).find("process sharing the memory is gone"),
            std::string::npos);
  // A plain cudaIpc backend cannot open VMM memory.
  auto plain = make_cuda_backend("cuda_malloc");
  EXPECT_NE(std::string(plain->ipc_open(0, h, &mine).message).find("cuda_vmm"), std::string::npos);
  EXPECT_TRUE(backend->unmap(0, base, 0, kG).is_ok());
  EXPECT_TRUE(backend->unreserve(0, base, 4 * kG).is_ok());
}

// The null GPU's own calls: memory created for a POSIX descriptor handle
// is exported as a descriptor that imports as the same memory.
TEST_F(CudaVmmIpc, TheNullGpuExportsAndImportsDescriptors) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemGenericAllocationHandle plain = 0, shareable = 0, imported = 0;
  ASSERT_EQ(cuMemCreate(&plain, kG, &prop, 0), CUDA_SUCCESS);
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  ASSERT_EQ(cuMemCreate(&shareable, kG, &prop, 0), CUDA_SUCCESS);
  int fd = -1;
  EXPECT_EQ(cuMemExportToShareableHandle(&fd, plain, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_ERROR_NOT_PERMITTED);  // not created for export
  EXPECT_EQ(cuMemExportToShareableHandle(&fd, shareable, CU_MEM_HANDLE_TYPE_FABRIC, 0), CUDA_ERROR_NOT_SUPPORTED);
  ASSERT_EQ(cuMemExportToShareableHandle(&fd, shareable, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), CUDA_SUCCESS);
  auto as_handle = [](int f) { return reinterpret_cast<void*>(static_cast<intptr_t>(f)); };
  ASSERT_EQ(cuMemImportFromShareableHandle(&imported, as_handle(fd), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
            CUDA_SUCCESS);
  close(fd);  // the imported handle holds its own copy
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  CUmemGenericAllocationHandle bad = 0;
  EXPECT_EQ(cuMemImportFromShareableHandle(&bad, as_handle(pipe_fds[0]), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
            CUDA_ERROR_INVALID_HANDLE);  // not the null GPU's memory
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  // Both handles, mapped at two addresses, are the same memory.
  CUdeviceptr a = 0, b = 0;
  ASSERT_EQ(cuMemAddressReserve(&a, kG, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAddressReserve(&b, kG, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(a, kG, 0, shareable, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(b, kG, 0, imported, 0), CUDA_SUCCESS);
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  ASSERT_EQ(cuMemSetAccess(a, kG, &access, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuMemSetAccess(b, kG, &access, 1), CUDA_SUCCESS);
  reinterpret_cast<unsigned char*>(a)[kG - 1] = 0x77;
  EXPECT_EQ(reinterpret_cast<unsigned char*>(b)[kG - 1], 0x77);
  for (CUdeviceptr p : {a, b}) {
    EXPECT_EQ(cuMemUnmap(p, kG), CUDA_SUCCESS);
    EXPECT_EQ(cuMemAddressFree(p, kG), CUDA_SUCCESS);
  }
  for (CUmemGenericAllocationHandle h : {plain, shareable, imported}) EXPECT_EQ(cuMemRelease(h), CUDA_SUCCESS);
}

#if !defined(__SANITIZE_THREAD__)  // TSan does not let a child of a threaded process start threads
// A fork child inherits granules its parent exported; their ids are its
// parent's server's. Exporting them again names the child's own server,
// which lends its own descriptors.
TEST_F(CudaVmmIpc, AForkChildExportsUnderItsOwnServer) {
  DeviceBackend::IpcHandle parents;
  void* p = exported_granule(0x5c, &parents);
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(in_child([&] {
    DeviceBackend::IpcHandle mine;
    void* opened = nullptr;
    if (!backend->ipc_export(0, p, 0, kG, &mine).is_ok() || mine.bytes == parents.bytes) return false;
    if (!backend->ipc_open(0, mine, &opened).is_ok()) return false;  // from this process's own server
    const bool read = static_cast<unsigned char*>(opened)[kG - 1] == 0x5c;
    return read && backend->ipc_close(0, opened).is_ok();
  }));
  EXPECT_TRUE(backend->deallocate(0, p, kG).is_ok());
}
#endif

class CudaVmmIpcOff : public NullGpuTest {};

TEST_F(CudaVmmIpcOff, ADeviceWithoutPosixHandlesRefusesToExport) {
  auto b = make_cuda_backend("cuda_vmm");  // Config::ipc off: the attribute says no
  void* p = nullptr;
  ASSERT_TRUE(b->allocate(0, kG, &p).is_ok());
  DeviceBackend::IpcHandle h;
  EXPECT_NE(std::string(b->ipc_export(0, p, 0, kG, &h).message).find("POSIX file descriptor"), std::string::npos);
  EXPECT_TRUE(b->deallocate(0, p, kG).is_ok());
}

}  // namespace
}  // namespace unipool::test
