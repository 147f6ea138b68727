// unipool null GPU: the test-facing control API (nullgpu.hpp).
#include <stdexcept>
#include <string>

#include "nullgpu/state.hpp"

namespace unipool::nullgpu {

using detail::state;

namespace {
std::unique_lock<std::mutex> locked() { return std::unique_lock(state().mutex); }

void check_device(int device) {
  if (!state().valid_device(device)) throw std::out_of_range("nullgpu: no device " + std::to_string(device));
}
}  // namespace

void reset(const Config& config) {
  if (config.device_count < 0 || config.granularity == 0 || (config.granularity & (config.granularity - 1)) != 0) {
    throw std::invalid_argument("nullgpu::reset: device_count >= 0 and a power-of-two granularity");
  }
  auto lock = locked();
  auto& s = state();
  s.release_everything();
  s.config = config;
  s.calls.clear();
  s.total_calls = 0;
  s.faults.clear();
  s.faults_fired = 0;
  s.last_fault.clear();
  s.byte_limit = kUnlimited;
  s.sticky = 0;
  s.charged.assign(static_cast<size_t>(config.device_count), 0);
  s.next_handle = 1;
  s.generation.fetch_add(1, std::memory_order_acq_rel);
}

Config config() {
  auto lock = locked();
  return state().config;
}

void inject(const Fault& fault) {
  if (fault.nth == 0) throw std::invalid_argument("nullgpu::inject: nth counts from 1");
  auto lock = locked();
  state().faults.push_back(detail::ArmedFault{fault, fault.nth});
}

void clear_faults() {
  auto lock = locked();
  state().faults.clear();
}

uint64_t faults_fired() {
  auto lock = locked();
  return state().faults_fired;
}

std::string last_fault() {
  auto lock = locked();
  return state().last_fault;
}

void set_byte_limit(uint64_t bytes) {
  auto lock = locked();
  state().byte_limit = bytes;
}

void set_sticky_error(int cuda_error) {
  auto lock = locked();
  state().sticky = cuda_error;
}

uint64_t calls(std::string_view function) {
  auto lock = locked();
  const auto it = state().calls.find(function);
  return it == state().calls.end() ? 0 : it->second;
}

uint64_t total_calls() {
  auto lock = locked();
  return state().total_calls;
}

uint64_t live_bytes(int device) {
  auto lock = locked();
  check_device(device);
  return state().charged[static_cast<size_t>(device)];
}

uint64_t mapped_bytes(int device) {
  auto lock = locked();
  check_device(device);
  uint64_t total = 0;
  for (const auto& [address, mapping] : state().mappings) {
    if (state().physical.at(mapping.handle).device == device) total += mapping.bytes;
  }
  return total;
}

uint64_t reserved_bytes() {
  auto lock = locked();
  uint64_t total = 0;
  for (const auto& [base, bytes] : state().reservations) total += bytes;
  return total;
}

uint64_t live_allocations() {
  auto lock = locked();
  return state().allocations.size();
}

uint64_t physical_handles() {
  auto lock = locked();
  return state().physical.size();
}

std::vector<HostRange> registered_ranges() {
  auto lock = locked();
  std::vector<HostRange> ranges;
  for (const auto& [base, registration] : state().registrations) {
    ranges.push_back(HostRange{reinterpret_cast<const void*>(base), registration.bytes});
  }
  return ranges;
}

uint64_t pinned_bytes() {
  auto lock = locked();
  return state().pinned;
}

int current_device() {
  auto lock = locked();
  return detail::thread_state().device;
}

void complete_stream(uintptr_t stream) {
  auto lock = locked();
  state().complete_events(stream == reinterpret_cast<uintptr_t>(cudaStreamLegacy) ? 0 : stream, -1);
}

void complete_all_events() {
  auto lock = locked();
  for (CUevent_st* event : state().events) {
    if (event->recorded) event->complete = true;
  }
}

uint64_t pending_events() {
  auto lock = locked();
  uint64_t pending = 0;
  for (const CUevent_st* event : state().events) pending += event->recorded && !event->complete;
  return pending;
}

uint64_t live_events() {
  auto lock = locked();
  return state().events.size();
}

uint64_t live_events_with_timing() {
  auto lock = locked();
  uint64_t n = 0;
  for (const CUevent_st* event : state().events) n += (event->flags & cudaEventDisableTiming) == 0;
  return n;
}

uint64_t live_streams() {
  auto lock = locked();
  return state().streams.size();
}

uint64_t nccl_registrations() {
  auto lock = locked();
  return state().nccl_registrations.size();
}

bool LeakReport::clean() const noexcept {
  return allocations == 0 && allocated_bytes == 0 && physical_handles == 0 && mappings == 0 && reservations == 0 &&
         host_ranges == 0 && streams == 0 && events == 0 && nccl_registrations == 0 && host_allocations == 0 &&
         graphs == 0;
}

std::string LeakReport::describe() const {
  if (clean()) return "clean";
  std::string text;
  const auto add = [&text](const char* what, uint64_t n) {
    if (n != 0) text += (text.empty() ? "" : ", ") + std::to_string(n) + " " + what;
  };
  add("device allocations", allocations);
  add("allocated bytes", allocated_bytes);
  add("physical handles", physical_handles);
  add("mappings", mappings);
  add("reservations", reservations);
  add("registered host ranges", host_ranges);
  add("streams", streams);
  add("events", events);
  add("NCCL registrations", nccl_registrations);
  add("pinned host allocations", host_allocations);
  add("graphs", graphs);
  return "leaked: " + text;
}

LeakReport leaks() {
  auto lock = locked();
  const auto& s = state();
  LeakReport report;
  report.allocations = s.allocations.size();
  for (const auto& [base, allocation] : s.allocations) report.allocated_bytes += allocation.bytes;
  report.physical_handles = s.physical.size();
  report.mappings = s.mappings.size();
  report.reservations = s.reservations.size();
  report.host_ranges = s.registrations.size();
  report.streams = s.streams.size();
  report.events = s.events.size();
  report.nccl_registrations = s.nccl_registrations.size();
  report.host_allocations = s.host_allocations.size();
  report.graphs = s.graphs.size();
  return report;
}

}  // namespace unipool::nullgpu
