// bench/device: trace replay and the hot path loop.
#include "replay.hpp"

#include <algorithm>
#include <chrono>
#include <vector>

namespace device_bench {

namespace {

using Clock = std::chrono::steady_clock;

double ns_since(Clock::time_point t) {
  return std::chrono::duration<double, std::nano>(Clock::now() - t).count();
}

}  // namespace

namespace {

double per_1k(uint64_t calls, uint64_t allocations) {
  return allocations == 0 ? 0 : 1000.0 * static_cast<double>(calls) / static_cast<double>(allocations);
}

// The memory pass: peaks sampled after every allocation, backend calls
// counted over the whole trace and after warm-up.
void memory_pass(const Trace& trace, const PeerInfo& info, Result& r) {
  std::vector<void*> ptr(trace.slots, nullptr);
  std::vector<uint64_t> size(trace.slots, 0);
  auto peer = info.make();
  uint64_t live = 0, allocs = 0, calls_at_warmup = 0, pool_calls_at_warmup = 0, allocs_at_warmup = 0;
  for (size_t i = 0; i < trace.ops.size(); ++i) {
    if (i == trace.warmup_ops) {
      calls_at_warmup = peer->backend_calls();
      pool_calls_at_warmup = peer->pool_calls();
      allocs_at_warmup = allocs;
    }
    const Op& op = trace.ops[i];
    if (op.size != 0) {
      ptr[op.slot] = peer->allocate(op.size);
      size[op.slot] = op.size;
      live += op.size;
      ++allocs;
      r.peak_requested = std::max(r.peak_requested, live);
      r.peak_reserved = std::max(r.peak_reserved, peer->reserved());
    } else {
      peer->deallocate(ptr[op.slot], size[op.slot]);
      live -= size[op.slot];
    }
  }
  r.backend_calls = peer->backend_calls();
  const uint64_t later = allocs - allocs_at_warmup;
  r.calls_per_1k_after_warmup = per_1k(r.backend_calls - calls_at_warmup, later);
  r.pool_calls_per_1k_after_warmup = per_1k(peer->pool_calls() - pool_calls_at_warmup, later);
}

// One timed pass on a fresh peer, nothing sampled: CPU ns for the trace.
double timed_pass(const Trace& trace, const PeerInfo& info) {
  std::vector<void*> ptr(trace.slots, nullptr);
  std::vector<uint64_t> size(trace.slots, 0);
  auto peer = info.make();
  const auto start = Clock::now();
  for (const Op& op : trace.ops) {
    if (op.size != 0) {
      ptr[op.slot] = peer->allocate(op.size);
      size[op.slot] = op.size;
    } else {
      peer->deallocate(ptr[op.slot], size[op.slot]);
    }
  }
  return ns_since(start);
}

}  // namespace

Result replay(const Trace& trace, const PeerInfo& info, int timed_runs) {
  Result r;
  r.trace = trace.name;
  r.allocator = info.name;
  r.allocations = trace.allocations;
  memory_pass(trace, info, r);
  r.util = r.peak_reserved == 0 ? 0 : static_cast<double>(r.peak_requested) / static_cast<double>(r.peak_reserved);
  double best = 0;
  for (int run = 0; run < timed_runs; ++run) {
    const double ns = timed_pass(trace, info);
    best = run == 0 ? ns : std::min(best, ns);
  }
  r.ns_per_op = best / static_cast<double>(std::max<uint64_t>(trace.allocations, 1));
  return r;
}

double hot_path_ns(const PeerInfo& info, uint64_t bytes, uint64_t iterations, int runs) {
  auto peer = info.make();
  peer->deallocate(peer->allocate(bytes), bytes);  // warm: the block is cached now
  double best = 0;
  for (int run = 0; run < runs; ++run) {
    const auto start = Clock::now();
    for (uint64_t i = 0; i < iterations; ++i) {
      void* p = peer->allocate(bytes);
      peer->deallocate(p, bytes);
    }
    const double ns = ns_since(start) / static_cast<double>(iterations);
    best = run == 0 ? ns : std::min(best, ns);
  }
  return best;
}

}  // namespace device_bench
