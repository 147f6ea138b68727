// unipool null GPU: the shared state and the entry-point prologue.
#include "nullgpu/state.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace unipool::nullgpu::detail {

namespace {

// The shared library starts from its own defaults and the environment; a
// bad UNIPOOL_NULLGPU stops the process, naming the key, since every result
// obtained under a misread configuration would be wrong.
void configure_from_environment(State& s) {
#ifdef UNIPOOL_NULLGPU_SHARED
  const Config base = shared_library_defaults();
#else
  const Config base = Config{};
#endif
  const char* text = std::getenv("UNIPOOL_NULLGPU");
  try {
    EnvironmentConfig env = parse_config(text != nullptr ? text : "", base);
    s.config = std::move(env.config);
    s.byte_limit = env.byte_limit;
    for (const Fault& fault : env.faults) s.faults.push_back(ArmedFault{fault, fault.nth});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "unipool null GPU: %s\n", e.what());
    std::abort();
  }
}

}  // namespace

State& state() {
  // Never destroyed: entry points may run from other static destructors.
  static State* const instance = [] {
    auto* s = new State;
    configure_from_environment(*s);
    s->charged.assign(static_cast<size_t>(s->config.device_count), 0);
    return s;
  }();
  return *instance;
}

ThreadState& thread_state() {
  thread_local ThreadState tls;
  const uint64_t generation = state().generation.load(std::memory_order_acquire);
  if (tls.generation != generation) tls = ThreadState{generation, 0, cudaSuccess, cudaStreamCaptureModeGlobal};
  return tls;
}

namespace {

int generic_error(Family family) {
  switch (family) {
    case Family::runtime: return cudaErrorUnknown;
    case Family::driver: return CUDA_ERROR_UNKNOWN;
    case Family::nccl: return ncclUnhandledCudaError;
  }
  return cudaErrorUnknown;
}

bool matches(const Fault& fault, const char* function) {
  return fault.function == "*" || fault.function == function;
}

}  // namespace

Call::Call(const char* function, Family family, Needs needs) : s(state()), lock_(s.mutex) {
  ++s.total_calls;
  ++s.calls[function];

  // Every armed fault that matches counts this call; the first to reach its
  // nth call decides the refusal.
  for (auto it = s.faults.begin(); it != s.faults.end();) {
    if (matches(it->fault, function) && --it->remaining == 0) {
      ++s.faults_fired;
      if (refusal_ == 0) {
        s.last_fault = function;
        refusal_ = it->fault.code == kDefaultError ? generic_error(family) : it->fault.code;
        if (it->fault.sticky) s.sticky = family == Family::nccl ? static_cast<int>(cudaErrorUnknown) : refusal_;
      }
      it = s.faults.erase(it);
    } else {
      ++it;
    }
  }
  if (s.sticky != 0) refusal_ = family == Family::nccl ? static_cast<int>(ncclUnhandledCudaError) : s.sticky;
  if (needs != Needs::nothing && !s.config.driver_present) {
    refusal_ = family == Family::runtime  ? static_cast<int>(cudaErrorInsufficientDriver)
               : family == Family::driver ? static_cast<int>(CUDA_ERROR_NOT_INITIALIZED)
                                          : static_cast<int>(ncclUnhandledCudaError);
  } else if (needs == Needs::device && s.config.device_count == 0 && refusal_ == 0) {
    refusal_ = family == Family::runtime  ? static_cast<int>(cudaErrorNoDevice)
               : family == Family::driver ? static_cast<int>(CUDA_ERROR_NO_DEVICE)
                                          : static_cast<int>(ncclUnhandledCudaError);
  }
}

cudaError_t Call::fail(cudaError_t err) {
  if (err != cudaSuccess) thread_state().pending = err;
  return err;
}

bool State::fits(int device, uint64_t bytes) const {
  if (bytes > byte_limit) return false;
  const uint64_t used = charged[static_cast<size_t>(device)];
  return bytes <= config.capacity && used <= config.capacity - bytes;
}

void State::complete_events(uintptr_t stream, int device) {
  for (CUevent_st* event : events) {
    if (event->recorded && event->stream == stream && (device < 0 || event->device == device)) event->complete = true;
  }
}

void State::complete_device_events(int device) {
  for (CUevent_st* event : events) {
    if (event->recorded && event->device == device) event->complete = true;
  }
}

void State::release_everything() {
  for (auto& [base, allocation] : allocations) {
    munmap(reinterpret_cast<void*>(base), allocation.mapped_bytes);
    if (allocation.fd >= 0) close(allocation.fd);
  }
  allocations.clear();
  for (auto& [base, allocation] : host_allocations) munmap(reinterpret_cast<void*>(base), allocation.mapped_bytes);
  host_allocations.clear();
  host_allocated = 0;
  for (CUgraph_st* graph : graphs) destroy_graph(graph);
  graphs.clear();
  global_captures = 0;
  peer_access.clear();
  // Unmapping happens with the reservations: every mapping lies inside one.
  for (auto& [base, bytes] : reservations) munmap(reinterpret_cast<void*>(base), bytes);
  reservations.clear();
  mappings.clear();
  physical.clear();
  registrations.clear();
  pinned = 0;
  for (CUstream_st* stream : streams) delete stream;
  streams.clear();
  for (CUevent_st* event : events) delete event;
  events.clear();
  nccl_registrations.clear();
}

void* map_memory(uint64_t bytes, uint64_t alignment, uint64_t* mapped_bytes) {
  const auto page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  alignment = std::max(alignment, page);
  const uint64_t length = (bytes + page - 1) / page * page;
  if (length < bytes || length > UINT64_MAX - alignment) return nullptr;
  // Over-reserve, then trim both ends to an aligned range.
  void* raw = mmap(nullptr, length + alignment - page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t base = (start + alignment - 1) / alignment * alignment;
  if (base > start) munmap(raw, base - start);
  const uintptr_t end = start + length + alignment - page;
  if (end > base + length) munmap(reinterpret_cast<void*>(base + length), end - (base + length));
  *mapped_bytes = length;
  return reinterpret_cast<void*>(base);
}

int create_memfd(const char* kind, uint64_t number, uint64_t bytes) {
  const std::string name = kind + std::to_string(number);
  const int fd = memfd_create(name.c_str(), MFD_CLOEXEC);
  if (fd >= 0 && ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

bool memfd_number(int fd, const char* kind, uint64_t* number) {
  // A memfd's link reads "/memfd:<name> (deleted)".
  char link[64], target[128];
  std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, target, sizeof target);
  const std::string prefix = std::string("/memfd:") + kind;
  if (n <= 0 || static_cast<size_t>(n) <= prefix.size() || std::memcmp(target, prefix.data(), prefix.size()) != 0) {
    return false;
  }
  const auto [end, error] = std::from_chars(target + prefix.size(), target + n, *number);
  return error == std::errc() && end != target + n && *end == ' ';
}

void* map_shared_memory(uint64_t bytes, uint64_t alignment, uint64_t* mapped_bytes, int* fd, int fd_in,
                        uint64_t serial) {
  uint64_t length = 0;
  void* base = map_memory(bytes, alignment, &length);  // the aligned address range
  if (base == nullptr) return nullptr;
  const int f = fd_in >= 0 ? fd_in : create_memfd(kDeviceMemfd, serial, length);
  if (f < 0) {
    munmap(base, length);
    return nullptr;
  }
  if (mmap(base, length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, f, 0) == MAP_FAILED) {
    if (fd_in < 0) close(f);
    munmap(base, length);
    return nullptr;
  }
  *mapped_bytes = length;
  *fd = f;
  return base;
}

void unmap_memory(void* base, uint64_t mapped_bytes) { munmap(base, mapped_bytes); }

void advise_device_memory(const State& s, void* base, uint64_t bytes) {
  if (s.config.huge_pages) (void)madvise(base, bytes, MADV_HUGEPAGE);
}

void destroy_graph(CUgraph_st* graph) {
  for (auto& [object, references] : graph->user_objects) {
    object->references -= std::min(object->references, references);
    if (object->references == 0) {
      if (object->destroy != nullptr) object->destroy(object->ptr);
      delete object;
    }
  }
  delete graph;
}

bool capture_forbids_sync(State& s, CUstream_st* stream) {
  CUgraph_st* capture = stream != nullptr && s.streams.count(stream) != 0 ? stream->capture : nullptr;
  if (capture == nullptr) {
    if (s.global_captures == 0 || thread_state().capture_mode == cudaStreamCaptureModeRelaxed) return false;
    for (CUgraph_st* graph : s.graphs) {
      if (graph->capturing && graph->mode == cudaStreamCaptureModeGlobal) graph->invalidated = true;
    }
    return true;
  }
  capture->invalidated = true;
  return true;
}

uintptr_t stream_key(cudaStream_t stream) {
  const auto key = reinterpret_cast<uintptr_t>(stream);
  return stream == cudaStreamLegacy ? 0 : key;
}

int stream_device(const State& s, cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) return thread_state().device;
  const auto it = s.streams.find(stream);
  return it == s.streams.end() ? -1 : (*it)->device;
}

}  // namespace unipool::nullgpu::detail
