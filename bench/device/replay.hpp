// bench/device: replaying a trace against a peer, and the hot path.
#pragma once

#include <cstdint>
#include <string>

#include "peers.hpp"
#include "trace.hpp"

namespace device_bench {

struct Result {
  std::string trace;
  std::string allocator;
  uint64_t peak_requested = 0;  // largest sum of live requested bytes
  uint64_t peak_reserved = 0;   // largest backend footprint
  double util = 0;              // peak_requested / peak_reserved
  uint64_t backend_calls = 0;   // over the whole trace
  double calls_per_1k_after_warmup = 0;  // backend calls per 1,000 allocations after warm-up
  double pool_calls_per_1k_after_warmup = 0;  // the same for Peer::pool_calls
  double ns_per_op = 0;         // CPU ns per allocation + its free (best timed run)
  uint64_t allocations = 0;
};

// A memory pass (peaks sampled after every allocation) and `timed_runs`
// timed passes (nothing sampled), each on a fresh peer.
Result replay(const Trace& trace, const PeerInfo& peer, int timed_runs);

// ns per allocate + deallocate of one size on one stream, the block cached
// (best of `runs` runs of `iterations` pairs).
double hot_path_ns(const PeerInfo& peer, uint64_t bytes, uint64_t iterations, int runs);

}  // namespace device_bench
