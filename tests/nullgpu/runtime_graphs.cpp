// unipool null GPU: stream capture and CUDA graphs, enough for
// torch.cuda.graph. Copies, fills and host functions issued on a capturing
// stream are recorded into its graph (kernels do nothing anyway); a launch
// replays them in order, so a replay moves real bytes. A call that a
// capture forbids (a synchronize, cudaFree) invalidates it, as in CUDA.
#include <cstring>

#include "nullgpu/state.hpp"

using unipool::nullgpu::detail::Call;
using unipool::nullgpu::detail::destroy_graph;
using unipool::nullgpu::detail::Family;
using unipool::nullgpu::detail::State;
using unipool::nullgpu::detail::stream_device;
using unipool::nullgpu::detail::thread_state;

namespace {

CUstream_st* live_stream(const State& s, cudaStream_t stream) {
  return s.streams.count(stream) != 0 ? stream : nullptr;
}

bool live_graph(const State& s, cudaGraph_t graph) { return graph != nullptr && s.graphs.count(graph) != 0; }

cudaError_t begin_capture(Call& call, cudaStream_t stream, cudaGraph_t graph, cudaStreamCaptureMode mode) {
  if (call.refused()) return call.runtime_refusal();
  // The legacy default stream synchronizes with every stream: not capturable.
  CUstream_st* s = live_stream(call.s, stream);
  if (s == nullptr) return call.fail(stream_device(call.s, stream) < 0 ? cudaErrorInvalidResourceHandle
                                                                        : cudaErrorStreamCaptureUnsupported);
  if (s->capture != nullptr) return call.fail(cudaErrorIllegalState);
  if (mode > cudaStreamCaptureModeRelaxed) return call.fail(cudaErrorInvalidValue);
  if (graph == nullptr) {
    graph = new CUgraph_st;
    call.s.graphs.insert(graph);
  } else if (!live_graph(call.s, graph)) {
    return call.fail(cudaErrorInvalidValue);
  }
  graph->capture_id = call.s.next_capture_id++;
  graph->mode = mode;
  graph->capturing = true;
  graph->invalidated = false;
  if (mode == cudaStreamCaptureModeGlobal) ++call.s.global_captures;
  s->capture = graph;
  return cudaSuccess;
}

// The executable graph is a copy of the graph's operations as they are now.
cudaError_t instantiate(Call& call, cudaGraphExec_t* exec, cudaGraph_t graph) {
  if (call.refused()) return call.runtime_refusal();
  if (exec == nullptr || !live_graph(call.s, graph)) return call.fail(cudaErrorInvalidValue);
  *exec = new CUgraphExec_st{graph->ops};
  return cudaSuccess;
}

void run(const std::vector<NullGpuGraphOp>& ops) {
  for (const NullGpuGraphOp& op : ops) {
    switch (op.kind) {
      case NullGpuGraphOp::copy: std::memmove(op.dst, op.src, op.bytes); break;
      case NullGpuGraphOp::set: std::memset(op.dst, op.value, op.bytes); break;
      case NullGpuGraphOp::host_function: op.function(op.user_data); break;
    }
  }
}

}  // namespace

extern "C" {

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
  Call call("cudaStreamBeginCapture", Family::runtime);
  return begin_capture(call, stream, nullptr, mode);
}

cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t stream, cudaGraph_t graph, const cudaGraphNode_t*,
                                          const cudaGraphEdgeData*, size_t, enum cudaStreamCaptureMode mode) {
  Call call("cudaStreamBeginCaptureToGraph", Family::runtime);
  if (!call.refused() && graph == nullptr) return call.fail(cudaErrorInvalidValue);
  return begin_capture(call, stream, graph, mode);
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* pGraph) {
  Call call("cudaStreamEndCapture", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  CUstream_st* s = live_stream(call.s, stream);
  if (pGraph == nullptr) return call.fail(cudaErrorInvalidValue);
  if (s == nullptr || s->capture == nullptr) return call.fail(cudaErrorIllegalState);
  CUgraph_st* graph = s->capture;
  for (CUstream_st* other : call.s.streams) {
    if (other->capture == graph) other->capture = nullptr;  // joined streams leave with it
  }
  graph->capturing = false;
  if (graph->mode == cudaStreamCaptureModeGlobal) --call.s.global_captures;
  if (graph->invalidated) {
    call.s.graphs.erase(graph);
    destroy_graph(graph);
    *pGraph = nullptr;
    return call.fail(cudaErrorStreamCaptureInvalidated);
  }
  *pGraph = graph;
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus* pCaptureStatus) {
  Call call("cudaStreamIsCapturing", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (pCaptureStatus == nullptr) return call.fail(cudaErrorInvalidValue);
  if (stream_device(call.s, stream) < 0) return call.fail(cudaErrorInvalidResourceHandle);
  const CUstream_st* s = live_stream(call.s, stream);
  const CUgraph_st* graph = s != nullptr ? s->capture : nullptr;
  *pCaptureStatus = graph == nullptr        ? cudaStreamCaptureStatusNone
                    : graph->invalidated    ? cudaStreamCaptureStatusInvalidated
                                            : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream, enum cudaStreamCaptureStatus* captureStatus_out,
                                     unsigned long long* id_out, cudaGraph_t* graph_out,
                                     const cudaGraphNode_t** dependencies_out, const cudaGraphEdgeData** edgeData_out,
                                     size_t* numDependencies_out) {
  Call call("cudaStreamGetCaptureInfo", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (captureStatus_out == nullptr) return call.fail(cudaErrorInvalidValue);
  if (stream_device(call.s, stream) < 0) return call.fail(cudaErrorInvalidResourceHandle);
  const CUstream_st* s = live_stream(call.s, stream);
  CUgraph_st* graph = s != nullptr ? s->capture : nullptr;
  *captureStatus_out = graph == nullptr     ? cudaStreamCaptureStatusNone
                       : graph->invalidated ? cudaStreamCaptureStatusInvalidated
                                            : cudaStreamCaptureStatusActive;
  if (id_out != nullptr) *id_out = graph != nullptr ? graph->capture_id : 0;
  if (graph_out != nullptr) *graph_out = graph;
  // The null GPU's graphs are lists, not DAGs: there are no nodes to name.
  if (dependencies_out != nullptr) *dependencies_out = nullptr;
  if (edgeData_out != nullptr) *edgeData_out = nullptr;
  if (numDependencies_out != nullptr) *numDependencies_out = 0;
  return cudaSuccess;
}

cudaError_t cudaStreamUpdateCaptureDependencies(cudaStream_t stream, cudaGraphNode_t*, const cudaGraphEdgeData*,
                                                size_t, unsigned int) {
  Call call("cudaStreamUpdateCaptureDependencies", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  const CUstream_st* s = live_stream(call.s, stream);
  if (s == nullptr || s->capture == nullptr) return call.fail(cudaErrorIllegalState);
  return cudaSuccess;
}

cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode* mode) {
  Call call("cudaThreadExchangeStreamCaptureMode", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (mode == nullptr || *mode > cudaStreamCaptureModeRelaxed) return call.fail(cudaErrorInvalidValue);
  std::swap(*mode, thread_state().capture_mode);
  return cudaSuccess;
}

cudaError_t cudaGraphCreate(cudaGraph_t* pGraph, unsigned int flags) {
  Call call("cudaGraphCreate", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (pGraph == nullptr || flags != 0) return call.fail(cudaErrorInvalidValue);
  *pGraph = new CUgraph_st;
  call.s.graphs.insert(*pGraph);
  return cudaSuccess;
}

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* numNodes) {
  Call call("cudaGraphGetNodes", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (!live_graph(call.s, graph) || numNodes == nullptr) return call.fail(cudaErrorInvalidValue);
  (void)nodes;  // no node objects: see cudaStreamGetCaptureInfo
  *numNodes = 0;
  return cudaSuccess;
}

// Flags (auto-free on launch, upload, priority) change nothing here.
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* pGraphExec, cudaGraph_t graph, unsigned long long) {
  Call call("cudaGraphInstantiate", Family::runtime);
  return instantiate(call, pGraphExec, graph);
}

cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* pGraphExec, cudaGraph_t graph, unsigned long long) {
  Call call("cudaGraphInstantiateWithFlags", Family::runtime);
  return instantiate(call, pGraphExec, graph);
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
  Call call("cudaGraphLaunch", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (graphExec == nullptr) return call.fail(cudaErrorInvalidValue);
  if (stream_device(call.s, stream) < 0) return call.fail(cudaErrorInvalidResourceHandle);
  const std::vector<NullGpuGraphOp> ops = graphExec->ops;
  call.unlock();  // host functions may call CUDA
  run(ops);
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec) {
  Call call("cudaGraphExecDestroy", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  delete graphExec;
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  Call call("cudaGraphDestroy", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (!live_graph(call.s, graph) || graph->capturing) return call.fail(cudaErrorInvalidValue);
  call.s.graphs.erase(graph);
  destroy_graph(graph);
  return cudaSuccess;
}

cudaError_t cudaUserObjectCreate(cudaUserObject_t* object_out, void* ptr, cudaHostFn_t destroy,
                                 unsigned int initialRefcount, unsigned int flags) {
  Call call("cudaUserObjectCreate", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (object_out == nullptr || destroy == nullptr || initialRefcount == 0 || flags != cudaUserObjectNoDestructorSync) {
    return call.fail(cudaErrorInvalidValue);
  }
  *object_out = new CUuserObject_st{ptr, destroy, initialRefcount};
  return cudaSuccess;
}

cudaError_t cudaUserObjectRelease(cudaUserObject_t object, unsigned int count) {
  Call call("cudaUserObjectRelease", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (object == nullptr || count == 0 || count > object->references) return call.fail(cudaErrorInvalidValue);
  object->references -= count;
  if (object->references != 0) return cudaSuccess;
  const cudaHostFn_t destroy = object->destroy;
  void* ptr = object->ptr;
  delete object;
  call.unlock();
  destroy(ptr);
  return cudaSuccess;
}

cudaError_t cudaGraphRetainUserObject(cudaGraph_t graph, cudaUserObject_t object, unsigned int count,
                                      unsigned int flags) {
  Call call("cudaGraphRetainUserObject", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (!live_graph(call.s, graph) || object == nullptr || count == 0) return call.fail(cudaErrorInvalidValue);
  // With cudaGraphUserObjectMove the caller's references pass to the graph.
  if ((flags & cudaGraphUserObjectMove) == 0) object->references += count;
  graph->user_objects.emplace_back(object, count);
  return cudaSuccess;
}

cudaError_t cudaDeviceGetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr, void* value) {
  Call call("cudaDeviceGetGraphMemAttribute", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (!call.s.valid_device(device)) return call.fail(cudaErrorInvalidDevice);
  if (value == nullptr || attr > cudaGraphMemAttrReservedMemHigh) return call.fail(cudaErrorInvalidValue);
  *static_cast<unsigned long long*>(value) = 0;  // graphs here allocate no memory of their own
  return cudaSuccess;
}

cudaError_t cudaDeviceSetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr, void* value) {
  Call call("cudaDeviceSetGraphMemAttribute", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (!call.s.valid_device(device)) return call.fail(cudaErrorInvalidDevice);
  if (value == nullptr || attr > cudaGraphMemAttrReservedMemHigh) return call.fail(cudaErrorInvalidValue);
  return cudaSuccess;
}

cudaError_t cudaDeviceGraphMemTrim(int device) {
  Call call("cudaDeviceGraphMemTrim", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  return call.s.valid_device(device) ? cudaSuccess : call.fail(cudaErrorInvalidDevice);
}

}  // extern "C"
