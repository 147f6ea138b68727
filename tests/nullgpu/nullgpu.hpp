// unipool test support: controls the null GPU (tests/nullgpu/).
//
// The null GPU implements, on host memory, the CUDA runtime, driver (VMM) and
// NCCL entry points that unipool's backends and CUB's CachingDeviceAllocator
// call, with the real prototypes and C linkage. A test binary links it in
// place of libcudart, so the real backend code runs on the CPU.
//
// What it models, and how faithfully:
// - Devices: `device_count` devices of `capacity` bytes each. cudaMalloc,
//   ncclMemAlloc and cuMemCreate charge the current (or named) device;
//   exceeding the capacity or the byte limit fails with the library's
//   out-of-memory code. cudaMalloc and ncclMemAlloc return real host memory.
// - Virtual memory: cuMemAddressReserve reserves a real PROT_NONE range;
//   cuMemMap backs granules with fresh anonymous pages (still PROT_NONE),
//   cuMemSetAccess makes them read/write, cuMemUnmap drops the pages and
//   makes the range PROT_NONE again, so a stray access faults. Contents do
//   not survive an unmap; a handle can be mapped once at a time (real CUDA
//   allows aliases; the null GPU refuses with CUDA_ERROR_NOT_SUPPORTED).
// - Streams and events: work "runs" at once (copies are plain memcpy), but a
//   recorded event stays pending until the test completes it here, or a
//   cudaEventSynchronize / cudaStreamSynchronize / cudaDeviceSynchronize (or
//   cudaFree, which synchronizes in CUDA; see Config) does.
// - Errors: a failing runtime call leaves its error pending for the calling
//   thread (cudaGetLastError returns and clears it, cudaPeekAtLastError only
//   returns it), including cudaErrorNotReady from the query calls. A sticky
//   error fails every later call and cannot be cleared, like a corrupted
//   context. Without a driver (Config::driver_present = false) the runtime
//   answers cudaErrorInsufficientDriver everywhere and keeps it pending, as
//   the real libcudart does on a machine with the toolkit but no driver.
// - NCCL: ncclMemAlloc rounds to the VMM granularity (as NCCL's cuMem path
//   does) and fails with ncclUnhandledCudaError when out of memory. The
//   nccl* symbols are exported from test binaries, so a backend that looks
//   NCCL up with dlsym(RTLD_DEFAULT, ...) finds the null GPU.
//
// Counted calls: every null GPU entry point except the error-text ones
// (cudaGetErrorString/Name, cuGetErrorString/Name, ncclGetErrorString) and
// cudaGetLastError / cudaPeekAtLastError. Only counted calls can be failed.
//
// Thread-safe: one mutex guards the whole null GPU. The current device and the
// pending error are per thread, as in CUDA. Test support only; never
// installed, never linked into the libraries.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "support/units.hpp"

namespace unipool::nullgpu {

using ::unipool::test::kMiB;
inline constexpr uint64_t kUnlimited = std::numeric_limits<uint64_t>::max();
// As a fault code: the failing function's generic error (cudaErrorUnknown,
// CUDA_ERROR_UNKNOWN or ncclUnhandledCudaError).
inline constexpr int kDefaultError = -1;

struct Config {
  int device_count = 1;
  uint64_t capacity = uint64_t{1} << 30;  // bytes per device
  uint64_t granularity = 2 * kMiB;        // VMM granularity, minimum and recommended
  bool driver_present = true;
  bool vmm_supported = true;  // CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
  // Driver entry-point lookups of these names report "symbol not found".
  std::vector<std::string> hidden_driver_symbols;
  // cudaFree completes every pending event of its device (the real one
  // synchronizes the device).
  bool free_synchronizes = true;
  uint64_t pinned_limit = kUnlimited;  // total bytes cudaHostRegister accepts
  int runtime_version = 13000;
  int driver_version = 13000;
  // A recorded event completes by itself on its Nth query (cudaEventQuery,
  // or cudaStreamQuery of its stream); kUnlimited: only a synchronize or a
  // test's complete_*() completes it.
  uint64_t event_lag = kUnlimited;
  int compute_major = 8;  // what device properties and attributes report (an A100:
                          // from 9.0 on, torch sends attention to cuDNN, not stood in)
  int compute_minor = 0;
  int sm_count = 108;
  // Device memory in transparent huge pages (see advise_device_memory).
  bool huge_pages = true;
  // cudaMalloc memory in a memfd, so that CUDA IPC (cudaIpcGetMemHandle,
  // cudaIpcOpenMemHandle) can share it with other processes of this host.
  // Off by default: shared memory gets no transparent huge pages on most
  // machines, so its first copies pay a fault per 4 KiB page.
  bool ipc = false;
};

// The configuration of a process whose null GPU is the preloaded shared
// library (scripts/nullgpu.sh): a device of 80 GiB whose events complete
// on their second query, CUDA 13.2.
Config shared_library_defaults();

// Frees everything the null GPU still holds (memory, reservations, streams,
// events), drops faults, zeroes counters and starts every thread afresh on
// device 0 with no pending error. Call it at the start of each test.
void reset(const Config& config = Config{});
Config config();

// --- fault injection -------------------------------------------------------
struct Fault {
  std::string function;  // an entry point's name, or "*" for any counted call
  uint64_t nth = 1;      // fails the nth matching call made after inject()
  int code = kDefaultError;
  bool sticky = false;   // the code then fails every later call too
};
void inject(const Fault& fault);
inline void fail_nth_call(std::string_view function, uint64_t nth, int code = kDefaultError) {
  inject(Fault{std::string(function), nth, code, false});
}
void clear_faults();
uint64_t faults_fired();
std::string last_fault();  // the function the last fired fault failed, or ""

// Parses `text`, the value of the UNIPOOL_NULLGPU environment variable:
// comma-separated key=value pairs over `base`. Keys: devices, capacity and
// granularity (bytes; KiB/MiB/GiB/TiB suffixes), compute_capability (9.0),
// sm_count, event_lag (a count or "never"), pinned_limit, byte_limit,
// vmm (on/off), driver (on/off), and fault=FUNCTION:NTH[:CODE][:sticky],
// the only key that may repeat (each arms one Fault). A key given twice, an
// unknown key or a bad value throws std::invalid_argument naming it.
struct EnvironmentConfig {
  Config config;
  std::vector<Fault> faults;
  uint64_t byte_limit = kUnlimited;
};
EnvironmentConfig parse_config(std::string_view text, const Config& base);

// Allocations (cudaMalloc, cuMemCreate, ncclMemAlloc) larger than `bytes`
// fail as out of memory. kUnlimited lifts the limit.
void set_byte_limit(uint64_t bytes);
// From now on every counted call fails with `cuda_error` (a cudaError_t /
// CUresult value; NCCL calls fail with ncclUnhandledCudaError).
void set_sticky_error(int cuda_error);

// --- counters --------------------------------------------------------------
uint64_t calls(std::string_view function);
uint64_t total_calls();

// --- memory ----------------------------------------------------------------
// Bytes charged to `device`: cudaMalloc + ncclMemAlloc + cuMemCreate.
uint64_t live_bytes(int device);
uint64_t mapped_bytes(int device);  // mapped with cuMemMap, handles of `device`
uint64_t reserved_bytes();          // virtual address space held by cuMemAddressReserve
uint64_t live_allocations();        // cudaMalloc + ncclMemAlloc blocks
uint64_t physical_handles();        // cuMemCreate handles not yet freed
struct HostRange {
  const void* base;
  uint64_t bytes;
};
std::vector<HostRange> registered_ranges();  // cudaHostRegister, by address
uint64_t pinned_bytes();
int current_device();  // of the calling thread

// --- streams and events ----------------------------------------------------
// `stream` is a cudaStream_t's value (unipool::StreamHandle); 0 is the default
// stream of every device.
void complete_stream(uintptr_t stream);
void complete_all_events();
uint64_t pending_events();  // recorded and not yet complete
uint64_t live_events();
uint64_t live_events_with_timing();  // created without cudaEventDisableTiming
uint64_t live_streams();

// --- NCCL --------------------------------------------------------------------
uint64_t nccl_registrations();  // ncclCommRegister handles not deregistered

// --- leaks -----------------------------------------------------------------
struct LeakReport {
  uint64_t allocations = 0;  // cudaMalloc + ncclMemAlloc blocks
  uint64_t allocated_bytes = 0;
  uint64_t physical_handles = 0;
  uint64_t mappings = 0;
  uint64_t reservations = 0;
  uint64_t host_ranges = 0;
  uint64_t streams = 0;
  uint64_t events = 0;
  uint64_t nccl_registrations = 0;
  uint64_t host_allocations = 0;  // cudaHostAlloc / cudaMallocHost
  uint64_t graphs = 0;            // captured or created, not destroyed

  bool clean() const noexcept;
  std::string describe() const;  // "clean" or what is left, for test messages
};
LeakReport leaks();

}  // namespace unipool::nullgpu
