// unipool null GPU: streams and events. Work is done at once; an event's
// completion is what the test controls (nullgpu::complete_stream & co.).
#include "nullgpu/state.hpp"

using unipool::nullgpu::detail::Call;
using unipool::nullgpu::detail::Family;
using unipool::nullgpu::detail::State;
using unipool::nullgpu::detail::stream_device;
using unipool::nullgpu::detail::stream_key;
using unipool::nullgpu::detail::thread_state;

namespace {

bool live(const State& s, cudaEvent_t event) { return event != nullptr && s.events.count(event) != 0; }

bool any_pending(const State& s, uintptr_t stream, int device) {
  for (const CUevent_st* event : s.events) {
    if (event->recorded && !event->complete && event->stream == stream && event->device == device) return true;
  }
  return false;
}

cudaError_t create_stream(Call& call, cudaStream_t* stream, unsigned flags) {
  if (call.refused()) return call.runtime_refusal();
  if (stream == nullptr) return call.fail(cudaErrorInvalidValue);
  auto* created = new CUstream_st{thread_state().device, flags};
  call.s.streams.insert(created);
  *stream = created;
  return cudaSuccess;
}

cudaError_t create_event(Call& call, cudaEvent_t* event, unsigned flags) {
  if (call.refused()) return call.runtime_refusal();
  if (event == nullptr) return call.fail(cudaErrorInvalidValue);
  auto* created = new CUevent_st{thread_state().device, flags, 0, false, false};
  call.s.events.insert(created);
  *event = created;
  return cudaSuccess;
}

}  // namespace

extern "C" {

cudaError_t cudaStreamCreate(cudaStream_t* pStream) {
  Call call("cudaStreamCreate", Family::runtime);
  return create_stream(call, pStream, cudaStreamDefault);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags) {
  Call call("cudaStreamCreateWithFlags", Family::runtime);
  return create_stream(call, pStream, flags);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  Call call("cudaStreamDestroy", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  const auto it = call.s.streams.find(stream);
  if (it == call.s.streams.end()) return call.fail(cudaErrorInvalidResourceHandle);
  call.s.streams.erase(it);
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  Call call("cudaStreamSynchronize", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  const int device = stream_device(call.s, stream);
  if (device < 0) return call.fail(cudaErrorInvalidResourceHandle);
  call.s.complete_events(stream_key(stream), device);
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  Call call("cudaStreamQuery", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  const int device = stream_device(call.s, stream);
  if (device < 0) return call.fail(cudaErrorInvalidResourceHandle);
  return any_pending(call.s, stream_key(stream), device) ? call.fail(cudaErrorNotReady) : cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  Call call("cudaStreamWaitEvent", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (stream_device(call.s, stream) < 0 || !live(call.s, event)) return call.fail(cudaErrorInvalidResourceHandle);
  if (flags & ~static_cast<unsigned>(cudaEventWaitExternal)) return call.fail(cudaErrorInvalidValue);
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  Call call("cudaEventCreate", Family::runtime);
  return create_event(call, event, cudaEventDefault);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  Call call("cudaEventCreateWithFlags", Family::runtime);
  return create_event(call, event, flags);
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  Call call("cudaEventRecord", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  const int device = stream_device(call.s, stream);
  if (device < 0 || !live(call.s, event)) return call.fail(cudaErrorInvalidResourceHandle);
  // As in CUDA, an event and the stream it is recorded on share a device
  // (for a default stream: the current device).
  if (event->device != device) return call.fail(cudaErrorInvalidResourceHandle);
  event->stream = stream_key(stream);
  event->recorded = true;
  event->complete = false;
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  Call call("cudaEventQuery", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (!live(call.s, event)) return call.fail(cudaErrorInvalidResourceHandle);
  return event->recorded && !event->complete ? call.fail(cudaErrorNotReady) : cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  Call call("cudaEventSynchronize", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (!live(call.s, event)) return call.fail(cudaErrorInvalidResourceHandle);
  if (event->recorded) event->complete = true;
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  Call call("cudaEventDestroy", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (!live(call.s, event)) return call.fail(cudaErrorInvalidResourceHandle);
  call.s.events.erase(event);
  delete event;
  return cudaSuccess;
}

}  // extern "C"
