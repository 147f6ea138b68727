// unipool null GPU: the one process-wide state behind every null GPU entry
// point, and the prologue each entry point runs (lock, count, inject).
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include "nullgpu/nullgpu.hpp"

// The runtime's opaque handle types are incomplete in the CUDA headers; the
// null GPU gives them a body. Handles are validated against the live sets
// before they are dereferenced, so a stale handle is an error, not UB.
// A captured operation, replayed by cudaGraphLaunch. Kernels are not
// recorded: they do nothing on the null GPU, captured or not.
struct NullGpuGraphOp {
  enum Kind { copy, set, host_function } kind;
  void* dst = nullptr;
  const void* src = nullptr;
  uint64_t bytes = 0;
  int value = 0;
  cudaHostFn_t function = nullptr;
  void* user_data = nullptr;
};
struct CUuserObject_st {
  void* ptr;
  cudaHostFn_t destroy;
  unsigned references;
};
struct CUgraph_st {
  std::vector<NullGpuGraphOp> ops;
  std::vector<std::pair<CUuserObject_st*, unsigned>> user_objects;  // references the graph owns
  // While captured into: the capture's id and mode, and whether an illegal
  // call invalidated it (cudaStreamEndCapture then fails).
  uint64_t capture_id = 0;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  bool capturing = false;
  bool invalidated = false;
};
struct CUgraphExec_st {
  std::vector<NullGpuGraphOp> ops;
};
struct CUstream_st {
  int device;
  unsigned flags;
  int priority = 0;
  // The graph this stream is capturing into (begun here or joined through
  // an event), or null.
  CUgraph_st* capture = nullptr;
};
struct CUevent_st {
  int device;
  unsigned flags;
  uintptr_t stream = 0;  // where it was last recorded (0 = a default stream)
  bool recorded = false;
  bool complete = false;
  // Queries left before it completes by itself (Config::event_lag).
  uint64_t queries_left = 0;
  std::chrono::steady_clock::time_point recorded_at{};
  // Recorded into a capture: a stream that waits on it joins that capture.
  CUgraph_st* capture = nullptr;
};

namespace unipool::nullgpu::detail {

enum class Family { runtime, driver, nccl };
// What a call needs to succeed besides an armed fault not hitting it.
enum class Needs { nothing, driver, device };

struct DeviceAllocation {  // cudaMalloc or ncclMemAlloc, or another process's opened by IPC
  int device;
  uint64_t bytes;  // charged to the device (not for an opened one)
  bool nccl;
  uint64_t mapped_bytes;  // its mmap (whole pages)
  int fd = -1;            // its memfd (Config::ipc), which IPC handles name
  bool opened = false;    // cudaIpcOpenMemHandle: closed with cudaIpcCloseMemHandle, not freed
  uint64_t serial = 0;    // unique in the process: a handle to a freed allocation never names a new one
  int source = 0;         // an opened one's: the exporting process (and `serial` there)
  int opens = 0;          // an opened one's: opens not yet closed
};
struct HostAllocation {  // cudaHostAlloc / cudaMallocHost: pinned from birth
  uint64_t bytes;
  uint64_t mapped_bytes;
  unsigned flags;
};
struct Physical {  // cuMemCreate
  int device;
  uint64_t bytes;
  bool mapped;
  bool released;  // cuMemRelease called; freed when unmapped
  int fd = -1;    // its memfd: asked for a POSIX descriptor handle under Config::ipc
  bool imported = false;  // cuMemImportFromShareableHandle: another process's, not charged here
};
struct Mapping {  // cuMemMap, keyed by address
  uint64_t bytes;
  CUmemGenericAllocationHandle handle;
};
struct Registration {  // cudaHostRegister, keyed by address
  uint64_t bytes;
  int device;
};
struct ArmedFault {
  Fault fault;
  uint64_t remaining;
};

struct State {
  std::mutex mutex;
  Config config;
  std::atomic<uint64_t> generation{1};  // bumped by reset(): threads start afresh

  std::map<std::string, uint64_t, std::less<>> calls;
  uint64_t total_calls = 0;
  std::vector<ArmedFault> faults;
  uint64_t faults_fired = 0;
  std::string last_fault;
  uint64_t byte_limit = kUnlimited;
  int sticky = 0;

  std::vector<uint64_t> charged;  // per device
  std::map<uintptr_t, DeviceAllocation> allocations;
  std::map<uintptr_t, uint64_t> reservations;  // base -> bytes
  std::map<CUmemGenericAllocationHandle, Physical> physical;
  CUmemGenericAllocationHandle next_handle = 1;
  uint64_t next_serial = 1;  // DeviceAllocation::serial
  std::map<uintptr_t, Mapping> mappings;
  std::map<uintptr_t, Registration> registrations;
  uint64_t pinned = 0;  // registered bytes (cudaHostRegister)
  std::map<uintptr_t, HostAllocation> host_allocations;
  uint64_t host_allocated = 0;  // cudaHostAlloc bytes
  std::unordered_set<CUgraph_st*> graphs;  // captured or created, not destroyed
  uint64_t next_capture_id = 1;
  uint64_t global_captures = 0;  // under way in cudaStreamCaptureModeGlobal
  std::set<std::pair<int, int>> peer_access;  // (device, peer) enabled
  std::map<uintptr_t, uint64_t> symbols;       // __cudaRegisterVar: host shadow -> bytes
  std::unordered_set<CUstream_st*> streams;
  std::unordered_set<CUevent_st*> events;
  std::unordered_set<uintptr_t> nccl_registrations;
  uintptr_t next_nccl_registration = 0x1000;

  bool valid_device(int device) const { return device >= 0 && device < config.device_count; }
  // Whether `bytes` more fit on `device` (byte limit and capacity).
  bool fits(int device, uint64_t bytes) const;
  void charge(int device, uint64_t bytes) { charged[static_cast<size_t>(device)] += bytes; }
  void uncharge(int device, uint64_t bytes) { charged[static_cast<size_t>(device)] -= bytes; }
  // Events recorded on `stream` (any device when device < 0) complete.
  void complete_events(uintptr_t stream, int device);
  void complete_device_events(int device);
  // A newly recorded event's countdown (Config::event_lag).
  uint64_t event_lag() const { return config.event_lag; }
  void release_everything();  // for reset(): frees what tests leaked
};

State& state();

// The entry of `map` (keyed by base address) whose [key, key + size) holds
// `address`, or end().
template <class Map, class SizeOf>
auto containing(Map& map, uintptr_t address, SizeOf size_of) {
  auto it = map.upper_bound(address);
  if (it == map.begin()) return map.end();
  --it;
  return address - it->first < size_of(it->second) ? it : map.end();
}

// Device and pinned host memory: fresh anonymous pages, reserved with
// MAP_NORESERVE so that an 80 GiB device costs no RAM until touched, at an
// `alignment` that is a power of two. Null on failure; *mapped_bytes gets
// the length to give unmap_memory.
void* map_memory(uint64_t bytes, uint64_t alignment, uint64_t* mapped_bytes);
// Memory another process may map is a memfd named "<kind><number>": an
// importer is handed a bare descriptor, and the name is how it tells one of
// the null GPU's memfds (and which device or allocation) from any other.
inline constexpr char kVmmMemfd[] = "nullgpu.vmm.";        // number: the device
inline constexpr char kDeviceMemfd[] = "nullgpu.device.";  // number: DeviceAllocation::serial
// A close-on-exec memfd of `bytes` named kind + number, or -1.
int create_memfd(const char* kind, uint64_t number, uint64_t bytes);
// Whether `fd` is a memfd named kind + number; the number into *number.
bool memfd_number(int fd, const char* kind, uint64_t* number);
// The same in a memfd (*fd, which the caller closes after unmapping), for
// Config::ipc; or, with fd_in >= 0, that memfd (another process's).
// A new memfd is named kDeviceMemfd + serial.
void* map_shared_memory(uint64_t bytes, uint64_t alignment, uint64_t* mapped_bytes, int* fd, int fd_in = -1,
                        uint64_t serial = 0);
void unmap_memory(void* base, uint64_t mapped_bytes);
// With Config::huge_pages, asks the kernel to back device memory with
// transparent huge pages: a GPU's memory has no 4 KiB first-touch faults, and
// a copy into freshly mapped device memory should not pay 512 of them per
// 2 MiB granule. A hint only: nothing fails without THP.
void advise_device_memory(const State& s, void* base, uint64_t bytes);

// A device attribute (CUdevice_attribute / cudaDeviceAttr: the same
// numbers) as the configured device reports it; 0 for what it lacks.
int device_attribute(const Config& config, int attribute);
// cudaGetDeviceProperties of `device`, consistent with device_attribute.
void fill_properties(const Config& config, int device, cudaDeviceProp* prop);

// Drops a graph: its user objects lose the graph's references (a
// destructor runs when the last goes), then it is deleted.
void destroy_graph(CUgraph_st* graph);
// Whether a call that synchronizes (or frees) is illegal now for the
// calling thread because a capture is under way; if so the capture is
// invalidated, as CUDA does, and the caller fails with
// cudaErrorStreamCaptureUnsupported.
bool capture_forbids_sync(State& s, CUstream_st* stream);

// The calling thread's CUDA view: current device and pending error.
struct ThreadState {
  uint64_t generation = 0;
  int device = 0;
  cudaError_t pending = cudaSuccess;
  // cudaThreadExchangeStreamCaptureMode: relaxed lets this thread make
  // calls that a global capture forbids.
  cudaStreamCaptureMode capture_mode = cudaStreamCaptureModeGlobal;
};
ThreadState& thread_state();

// Every counted entry point starts with a Call: it takes the lock, counts
// the call and decides whether it is refused: an injected fault, a sticky
// error, no driver (unless it needs nothing), no device (if it needs one).
// Runtime failures are left pending for the thread.
class Call {
 public:
  Call(const char* function, Family family, Needs needs = Needs::device);

  bool refused() const noexcept { return refusal_ != 0; }
  int refusal() const noexcept { return refusal_; }
  cudaError_t runtime_refusal() { return fail(static_cast<cudaError_t>(refusal_)); }
  CUresult driver_refusal() const noexcept { return static_cast<CUresult>(refusal_); }
  ncclResult_t nccl_refusal() const noexcept { return static_cast<ncclResult_t>(refusal_); }

  // Records a runtime failure as the thread's pending error; returns it.
  cudaError_t fail(cudaError_t err);
  // Lets go of the lock before calling back into user code, which may call
  // CUDA itself; `s` must not be used after.
  void unlock() { lock_.unlock(); }

  State& s;

 private:
  std::unique_lock<std::mutex> lock_;
  int refusal_ = 0;
};

// The device a stream belongs to (the current device for a default stream),
// or -1 for a handle that is not a live stream.
int stream_device(const State& s, cudaStream_t stream);
// A stream's value as events and tests see it: cudaStreamLegacy is stream 0.
uintptr_t stream_key(cudaStream_t stream);

// The driver function cuGetProcAddress gives for `name` (a base name, as
// callers ask): implemented, or a loud stub; null if the real driver has
// no such function either.
void* driver_symbol(const char* name);
// The stub of a driver function the null GPU does not implement, by its
// exact exported name, or null (driver_stubs.cpp).
void* unimplemented_driver_symbol(const char* name);

}  // namespace unipool::nullgpu::detail
