// unipool null GPU: streams and events. Work is done when it is issued; an
// event's completion is what lags: it completes on its Config::event_lag-th
// query, at a synchronize of its stream, its device or itself, or when a
// test completes it (nullgpu::complete_stream & co.). So code that reuses
// memory behind an event really waits for it.
#include <algorithm>
#include <chrono>

#include "nullgpu/state.hpp"

using unipool::nullgpu::detail::Call;
using unipool::nullgpu::detail::capture_forbids_sync;
using unipool::nullgpu::detail::Family;
using unipool::nullgpu::detail::State;
using unipool::nullgpu::detail::stream_device;
using unipool::nullgpu::detail::stream_key;
using unipool::nullgpu::detail::thread_state;

namespace {

constexpr int kGreatestPriority = -5;  // as on recent GPUs: 0 (lowest) to -5

bool live(const State& s, cudaEvent_t event) { return event != nullptr && s.events.count(event) != 0; }

CUstream_st* live_stream(const State& s, cudaStream_t stream) {
  return s.streams.count(stream) != 0 ? stream : nullptr;
}

// One query of a pending event: it completes when its lag runs out.
bool query_completes(CUevent_st* event) {
  if (!event->recorded || event->complete) return true;
  if (event->queries_left != unipool::nullgpu::kUnlimited && --event->queries_left == 0) event->complete = true;
  return event->complete;
}

// A stream is idle when every event recorded on it is complete; each query
// counts against each of its pending events' lag.
bool query_stream(const State& s, uintptr_t stream, int device) {
  bool idle = true;
  for (CUevent_st* event : s.events) {
    if (event->stream == stream && event->device == device && !query_completes(event)) idle = false;
  }
  return idle;
}

cudaError_t create_stream(Call& call, cudaStream_t* stream, unsigned flags, int priority) {
  if (call.refused()) return call.runtime_refusal();
  if (stream == nullptr || (flags & ~static_cast<unsigned>(cudaStreamNonBlocking)) != 0) {
    return call.fail(cudaErrorInvalidValue);
  }
  // CUDA clamps priorities into the device's range.
  priority = std::min(0, std::max(kGreatestPriority, priority));
  auto* created = new CUstream_st{thread_state().device, flags, priority};
  call.s.streams.insert(created);
  *stream = created;
  return cudaSuccess;
}

cudaError_t create_event(Call& call, cudaEvent_t* event, unsigned flags) {
  if (call.refused()) return call.runtime_refusal();
  constexpr unsigned kKnown = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  if (event == nullptr || (flags & ~kKnown) != 0) return call.fail(cudaErrorInvalidValue);
  auto* created = new CUevent_st{thread_state().device, flags};
  call.s.events.insert(created);
  *event = created;
  return cudaSuccess;
}

cudaError_t record(Call& call, cudaEvent_t event, cudaStream_t stream) {
  if (call.refused()) return call.runtime_refusal();
  const int device = stream_device(call.s, stream);
  if (device < 0 || !live(call.s, event)) return call.fail(cudaErrorInvalidResourceHandle);
  // As in CUDA, an event and the stream it is recorded on share a device
  // (for a default stream: the current device).
  if (event->device != device) return call.fail(cudaErrorInvalidResourceHandle);
  CUstream_st* s = live_stream(call.s, stream);
  event->capture = s != nullptr ? s->capture : nullptr;
  event->stream = stream_key(stream);
  // Recorded into a capture, the event marks a point of the graph, not work
  // under way: waiting on it joins the capture.
  event->recorded = event->capture == nullptr;
  event->complete = false;
  event->queries_left = call.s.event_lag();
  event->recorded_at = std::chrono::steady_clock::now();
  return cudaSuccess;
}

// A host function runs when the work before it is done, which on the null
// GPU is now (or at graph launch, when captured).
cudaError_t host_function(Call& call, cudaStream_t stream, cudaHostFn_t fn, void* data) {
  if (call.refused()) return call.runtime_refusal();
  if (stream_device(call.s, stream) < 0) return call.fail(cudaErrorInvalidResourceHandle);
  if (fn == nullptr) return call.fail(cudaErrorInvalidValue);
  if (CUstream_st* s = live_stream(call.s, stream); s != nullptr && s->capture != nullptr) {
    s->capture->ops.push_back(NullGpuGraphOp{NullGpuGraphOp::host_function, nullptr, nullptr, 0, 0, fn, data});
    return cudaSuccess;
  }
  call.unlock();  // the function may call CUDA itself
  fn(data);
  return cudaSuccess;
}

}  // namespace

extern "C" {

cudaError_t cudaStreamCreate(cudaStream_t* pStream) {
  Call call("cudaStreamCreate", Family::runtime);
  return create_stream(call, pStream, cudaStreamDefault, 0);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags) {
  Call call("cudaStreamCreateWithFlags", Family::runtime);
  return create_stream(call, pStream, flags, 0);
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t* pStream, unsigned int flags, int priority) {
  Call call("cudaStreamCreateWithPriority", Family::runtime);
  return create_stream(call, pStream, flags, priority);
}

cudaError_t cudaStreamGetPriority(cudaStream_t hStream, int* priority) {
  Call call("cudaStreamGetPriority", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (stream_device(call.s, hStream) < 0) return call.fail(cudaErrorInvalidResourceHandle);
  if (priority == nullptr) return call.fail(cudaErrorInvalidValue);
  const CUstream_st* s = live_stream(call.s, hStream);
  *priority = s != nullptr ? s->priority : 0;
  return cudaSuccess;
}

cudaError_t cudaStreamGetFlags(cudaStream_t hStream, unsigned int* flags) {
  Call call("cudaStreamGetFlags", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (stream_device(call.s, hStream) < 0) return call.fail(cudaErrorInvalidResourceHandle);
  if (flags == nullptr) return call.fail(cudaErrorInvalidValue);
  const CUstream_st* s = live_stream(call.s, hStream);
  *flags = s != nullptr ? s->flags : cudaStreamDefault;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  Call call("cudaDeviceGetStreamPriorityRange", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (leastPriority != nullptr) *leastPriority = 0;
  if (greatestPriority != nullptr) *greatestPriority = kGreatestPriority;
  return cudaSuccess;
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
  if (capture_forbids_sync(call.s, live_stream(call.s, stream))) return call.fail(cudaErrorStreamCaptureUnsupported);
  call.s.complete_events(stream_key(stream), device);
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  Call call("cudaStreamQuery", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  const int device = stream_device(call.s, stream);
  if (device < 0) return call.fail(cudaErrorInvalidResourceHandle);
  if (const CUstream_st* s = live_stream(call.s, stream); s != nullptr && s->capture != nullptr) {
    s->capture->invalidated = true;
    return call.fail(cudaErrorStreamCaptureUnsupported);
  }
  return query_stream(call.s, stream_key(stream), device) ? cudaSuccess : call.fail(cudaErrorNotReady);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  Call call("cudaStreamWaitEvent", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (stream_device(call.s, stream) < 0 || !live(call.s, event)) return call.fail(cudaErrorInvalidResourceHandle);
  if (flags & ~static_cast<unsigned>(cudaEventWaitExternal)) return call.fail(cudaErrorInvalidValue);
  // Waiting on a point of a capture makes this stream part of that capture.
  CUstream_st* s = live_stream(call.s, stream);
  if (event->capture != nullptr && event->capture->capturing) {
    if (s == nullptr) return call.fail(cudaErrorStreamCaptureIsolation);
    s->capture = event->capture;
  }
  return cudaSuccess;
}

cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t callback, void* userData,
                                  unsigned int flags) {
  Call call("cudaStreamAddCallback", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (callback == nullptr || flags != 0) return call.fail(cudaErrorInvalidValue);
  if (const CUstream_st* s = live_stream(call.s, stream); s != nullptr && s->capture != nullptr) {
    return call.fail(cudaErrorStreamCaptureUnsupported);  // as documented: use cudaLaunchHostFunc
  }
  if (stream_device(call.s, stream) < 0) return call.fail(cudaErrorInvalidResourceHandle);
  call.unlock();
  callback(stream, cudaSuccess, userData);
  return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* userData) {
  Call call("cudaLaunchHostFunc", Family::runtime);
  return host_function(call, stream, fn, userData);
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
  return record(call, event, stream);
}

cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int flags) {
  Call call("cudaEventRecordWithFlags", Family::runtime);
  if (!call.refused() && (flags & ~static_cast<unsigned>(cudaEventRecordExternal)) != 0) {
    return call.fail(cudaErrorInvalidValue);
  }
  return record(call, event, stream);
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  Call call("cudaEventQuery", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (!live(call.s, event)) return call.fail(cudaErrorInvalidResourceHandle);
  return query_completes(event) ? cudaSuccess : call.fail(cudaErrorNotReady);
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  Call call("cudaEventSynchronize", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (!live(call.s, event)) return call.fail(cudaErrorInvalidResourceHandle);
  if (capture_forbids_sync(call.s, nullptr)) return call.fail(cudaErrorStreamCaptureUnsupported);
  if (event->recorded) event->complete = true;
  return cudaSuccess;
}

// Wall time between the two records: what the host saw, not GPU time.
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  Call call("cudaEventElapsedTime", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (ms == nullptr) return call.fail(cudaErrorInvalidValue);
  if (!live(call.s, start) || !live(call.s, end)) return call.fail(cudaErrorInvalidResourceHandle);
  if (((start->flags | end->flags) & cudaEventDisableTiming) != 0) return call.fail(cudaErrorInvalidResourceHandle);
  if (!start->recorded || !end->recorded) return call.fail(cudaErrorInvalidResourceHandle);
  if (!start->complete || !end->complete) return call.fail(cudaErrorNotReady);
  *ms = std::chrono::duration<float, std::milli>(end->recorded_at - start->recorded_at).count();
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
