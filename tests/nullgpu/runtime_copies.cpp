// unipool null GPU: copies and fills. They move real bytes at once, so a
// round trip's contents can be checked; on a stream that is capturing a
// graph they are recorded instead and happen when the graph is launched.
// Device ranges are checked: a copy into freed or unmapped device memory
// fails as CUDA's would (cudaErrorInvalidValue), it does not crash.
#include <algorithm>
#include <cstring>

#include "nullgpu/state.hpp"

using unipool::nullgpu::detail::Call;
using unipool::nullgpu::detail::containing;
using unipool::nullgpu::detail::Family;
using unipool::nullgpu::detail::State;
using unipool::nullgpu::detail::stream_device;

namespace {

// Whether `address` lies in device memory (cudaMalloc, NCCL or a VMM
// mapping), and if so whether [address, address + bytes) is all of it.
enum class Range { host, device, bad_device };

Range classify(const State& s, const void* ptr, uint64_t bytes) {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  const auto bytes_of = [](const auto& entry) { return entry.bytes; };
  if (auto it = containing(s.allocations, address, bytes_of); it != s.allocations.end()) {
    return address - it->first + bytes <= it->second.bytes ? Range::device : Range::bad_device;
  }
  for (auto it = containing(s.mappings, address, bytes_of); it != s.mappings.end();) {
    const uintptr_t end = it->first + it->second.bytes;
    if (address + bytes <= end) return Range::device;
    it = s.mappings.find(end);  // the range goes on into the next mapping
    if (it == s.mappings.end()) return Range::bad_device;
  }
  // Inside a reservation but not mapped: device memory that is not there.
  const auto reservation = containing(s.reservations, address, [](uint64_t b) { return b; });
  return reservation != s.reservations.end() ? Range::bad_device : Range::host;
}

bool valid_copy(const State& s, void* dst, const void* src, uint64_t bytes, cudaMemcpyKind kind) {
  if (bytes == 0) return true;
  if (dst == nullptr || src == nullptr) return false;
  const Range to = classify(s, dst, bytes);
  const Range from = classify(s, src, bytes);
  if (to == Range::bad_device || from == Range::bad_device) return false;
  switch (kind) {
    case cudaMemcpyHostToDevice: return to == Range::device;
    case cudaMemcpyDeviceToHost: return from == Range::device;
    case cudaMemcpyDeviceToDevice: return to == Range::device && from == Range::device;
    default: return true;  // HostToHost, Default: any memory of the process
  }
}

// Does the copy now, or records it into the capture `stream` is part of.
void copy_or_record(State& s, cudaStream_t stream, void* dst, const void* src, uint64_t bytes) {
  CUgraph_st* capture = s.streams.count(stream) != 0 ? stream->capture : nullptr;
  if (capture != nullptr) {
    capture->ops.push_back(NullGpuGraphOp{NullGpuGraphOp::copy, dst, src, bytes});
  } else if (bytes != 0) {
    std::memmove(dst, src, bytes);
  }
}

void set_or_record(State& s, cudaStream_t stream, void* dst, int value, uint64_t bytes) {
  CUgraph_st* capture = s.streams.count(stream) != 0 ? stream->capture : nullptr;
  if (capture != nullptr) {
    capture->ops.push_back(NullGpuGraphOp{NullGpuGraphOp::set, dst, nullptr, bytes, value});
  } else if (bytes != 0) {
    std::memset(dst, value, bytes);
  }
}

cudaError_t copy(Call& call, void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
  if (call.refused()) return call.runtime_refusal();
  if (stream_device(call.s, stream) < 0) return call.fail(cudaErrorInvalidResourceHandle);
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) return call.fail(cudaErrorInvalidMemcpyDirection);
  if (!valid_copy(call.s, dst, src, count, kind)) return call.fail(cudaErrorInvalidValue);
  copy_or_record(call.s, stream, dst, src, count);
  return cudaSuccess;
}

cudaError_t fill(Call& call, void* dst, int value, size_t count, cudaStream_t stream) {
  if (call.refused()) return call.runtime_refusal();
  if (stream_device(call.s, stream) < 0) return call.fail(cudaErrorInvalidResourceHandle);
  if (count != 0 && (dst == nullptr || classify(call.s, dst, count) != Range::device)) {
    return call.fail(cudaErrorInvalidValue);
  }
  set_or_record(call.s, stream, dst, value, count);
  return cudaSuccess;
}

// Row by row; each row is checked as a copy of its own.
cudaError_t copy_2d(Call& call, void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                    size_t height, cudaMemcpyKind kind, cudaStream_t stream) {
  if (call.refused()) return call.runtime_refusal();
  if (width > dpitch || width > spitch) return call.fail(cudaErrorInvalidPitchValue);
  for (size_t row = 0; row < height; ++row) {
    auto* to = static_cast<char*>(dst) + row * dpitch;
    const auto* from = static_cast<const char*>(src) + row * spitch;
    if (!valid_copy(call.s, to, from, width, kind)) return call.fail(cudaErrorInvalidValue);
  }
  for (size_t row = 0; row < height; ++row) {
    copy_or_record(call.s, stream, static_cast<char*>(dst) + row * dpitch,
                   static_cast<const char*>(src) + row * spitch, width);
  }
  return cudaSuccess;
}

}  // namespace

extern "C" {

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) {
  Call call("cudaMemcpy", Family::runtime);
  return copy(call, dst, src, count, kind, nullptr);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream) {
  Call call("cudaMemcpyAsync", Family::runtime);
  return copy(call, dst, src, count, kind, stream);
}

cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                         enum cudaMemcpyKind kind) {
  Call call("cudaMemcpy2D", Family::runtime);
  return copy_2d(call, dst, dpitch, src, spitch, width, height, kind, nullptr);
}

cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              enum cudaMemcpyKind kind, cudaStream_t stream) {
  Call call("cudaMemcpy2DAsync", Family::runtime);
  if (stream_device(call.s, stream) < 0) return call.fail(cudaErrorInvalidResourceHandle);
  return copy_2d(call, dst, dpitch, src, spitch, width, height, kind, stream);
}

cudaError_t cudaMemcpyPeer(void* dst, int dstDevice, const void* src, int srcDevice, size_t count) {
  Call call("cudaMemcpyPeer", Family::runtime);
  if (!call.refused() && (!call.s.valid_device(dstDevice) || !call.s.valid_device(srcDevice))) {
    return call.fail(cudaErrorInvalidDevice);
  }
  return copy(call, dst, src, count, cudaMemcpyDeviceToDevice, nullptr);
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dstDevice, const void* src, int srcDevice, size_t count,
                                cudaStream_t stream) {
  Call call("cudaMemcpyPeerAsync", Family::runtime);
  if (!call.refused() && (!call.s.valid_device(dstDevice) || !call.s.valid_device(srcDevice))) {
    return call.fail(cudaErrorInvalidDevice);
  }
  return copy(call, dst, src, count, cudaMemcpyDeviceToDevice, stream);
}

cudaError_t cudaMemset(void* devPtr, int value, size_t count) {
  Call call("cudaMemset", Family::runtime);
  return fill(call, devPtr, value, count, nullptr);
}

cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
  Call call("cudaMemsetAsync", Family::runtime);
  return fill(call, devPtr, value, count, stream);
}

}  // extern "C"
