#include "backend/cuda/cuda_event_fences.hpp"

#include <stdexcept>
#include <string>

#include "backend/cuda/cuda_status.hpp"
#include "backend/cuda/device_guard.hpp"

namespace unipool::backend::cuda {

namespace {
// A fence id is the slot's index + 1 in the low half and the slot's
// generation in the high half, so a released id never names its successor.
FenceId make_id(size_t index, uint32_t generation) {
  return (static_cast<FenceId>(generation) << 32) | static_cast<FenceId>(index + 1);
}
}  // namespace

namespace {
// Once more on failure (a transient error); after that the context is
// broken and the event goes with it.
void destroy(cudaEvent_t event) {
  if (!runtime_status(cudaEventDestroy(event)).is_ok()) (void)runtime_status(cudaEventDestroy(event));
}
}  // namespace

CudaEventFenceSource::~CudaEventFenceSource() {
  for (Slot& s : slots_) {
    if (s.live) destroy(s.event);
  }
  for (auto& events : idle_) {
    for (cudaEvent_t event : events) destroy(event);
  }
}

FenceId CudaEventFenceSource::record(int device, StreamHandle stream) {
  std::lock_guard lock(mutex_);
  // Events belong to the device current at creation, and may only be
  // recorded on that device's streams.
  DeviceGuard guard(device);
  if (!guard.ok()) {
    note(guard.status());
    return kNoFence;
  }
  cudaEvent_t event = take_event(device);
  if (event == nullptr) return kNoFence;
  const BackendStatus recorded = runtime_status(cudaEventRecord(event, reinterpret_cast<cudaStream_t>(stream)));
  if (!recorded.is_ok()) {
    note(recorded);
    give_back(device, event);
    return kNoFence;
  }
  return remember(event, device);
}

bool CudaEventFenceSource::completed(FenceId fence) {
  std::lock_guard lock(mutex_);
  Slot& s = slot(fence);
  if (s.done) return true;
  const cudaError_t err = cudaEventQuery(s.event);
  if (err == cudaSuccess) {
    s.done = true;
    return true;
  }
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();  // "not ready" is an answer, not an error
  } else {
    note(runtime_status(err));
  }
  return false;
}

void CudaEventFenceSource::wait(FenceId fence) {
  cudaEvent_t event = nullptr;
  {
    std::lock_guard lock(mutex_);
    Slot& s = slot(fence);
    if (s.done) return;
    event = s.event;
  }
  // Not under the lock: other threads keep recording and polling meanwhile.
  const BackendStatus synced = runtime_status(cudaEventSynchronize(event));
  std::lock_guard lock(mutex_);
  if (!synced.is_ok()) {
    note(synced);
    throw std::runtime_error(std::string("unipool: cudaEventSynchronize failed: ") + synced.message);
  }
  Slot& s = slot(fence);
  s.done = true;
}

void CudaEventFenceSource::release(FenceId fence) {
  std::lock_guard lock(mutex_);
  Slot& s = slot(fence);
  give_back(s.device, s.event);
  s.event = nullptr;
  s.live = false;
  ++s.generation;
  --outstanding_;
  free_slots_.push_back(static_cast<uint32_t>((fence & 0xffffffffu) - 1));
}

uint64_t CudaEventFenceSource::outstanding() const {
  std::lock_guard lock(mutex_);
  return outstanding_;
}

uint64_t CudaEventFenceSource::pooled() const {
  std::lock_guard lock(mutex_);
  uint64_t n = 0;
  for (const auto& events : idle_) n += events.size();
  return n;
}

uint64_t CudaEventFenceSource::events_created() const {
  std::lock_guard lock(mutex_);
  return created_;
}

BackendStatus CudaEventFenceSource::last_error() const {
  std::lock_guard lock(mutex_);
  return last_error_;
}

CudaEventFenceSource::Slot& CudaEventFenceSource::slot(FenceId fence) {
  const uint64_t index = (fence & 0xffffffffu);
  const auto generation = static_cast<uint32_t>(fence >> 32);
  if (index == 0 || index > slots_.size() || !slots_[index - 1].live || slots_[index - 1].generation != generation) {
    throw std::invalid_argument("unipool::CudaEventFenceSource: unknown or released fence");
  }
  return slots_[index - 1];
}

cudaEvent_t CudaEventFenceSource::take_event(int device) {
  const auto d = static_cast<size_t>(device);
  if (d < idle_.size() && !idle_[d].empty()) {
    cudaEvent_t event = idle_[d].back();
    idle_[d].pop_back();
    return event;
  }
  cudaEvent_t event = nullptr;
  const BackendStatus created = runtime_status(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  if (!created.is_ok()) {
    note(created);
    return nullptr;
  }
  ++created_;
  return event;
}

void CudaEventFenceSource::give_back(int device, cudaEvent_t event) {
  const auto d = static_cast<size_t>(device);
  if (d >= idle_.size()) idle_.resize(d + 1);
  idle_[d].push_back(event);
}

FenceId CudaEventFenceSource::remember(cudaEvent_t event, int device) {
  size_t index = slots_.size();
  if (!free_slots_.empty()) {
    index = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slots_.emplace_back();
  }
  Slot& s = slots_[index];
  s.event = event;
  s.device = device;
  s.live = true;
  s.done = false;
  ++outstanding_;
  return make_id(index, s.generation);
}

void CudaEventFenceSource::note(const BackendStatus& status) { last_error_ = status; }

}  // namespace unipool::backend::cuda
