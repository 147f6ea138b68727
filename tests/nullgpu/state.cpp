// unipool null GPU: the shared state and the entry-point prologue.
#include "nullgpu/state.hpp"

#include <sys/mman.h>

#include <cstdlib>

namespace unipool::nullgpu::detail {

State& state() {
  // Never destroyed: entry points may run from other static destructors.
  static State* const instance = [] {
    auto* s = new State;
    s->charged.assign(static_cast<size_t>(s->config.device_count), 0);
    return s;
  }();
  return *instance;
}

ThreadState& thread_state() {
  thread_local ThreadState tls;
  const uint64_t generation = state().generation.load(std::memory_order_acquire);
  if (tls.generation != generation) tls = ThreadState{generation, 0, cudaSuccess};
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
  for (auto& [base, allocation] : allocations) std::free(reinterpret_cast<void*>(base));
  allocations.clear();
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
