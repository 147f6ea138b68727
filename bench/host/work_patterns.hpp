// host_bench: the access patterns the named workloads are built from.
#pragma once

#include <cstdint>
#include <memory>

#include "size_source.hpp"
#include "workloads.hpp"

namespace host_bench {

// A table of `slots` live blocks, filled first; each of `steps` steps frees a
// uniformly random slot's block and allocates a new one in its place
// (`batch` > 1: frees `batch` distinct slots, then refills them). Every block
// is freed at the end. alignment > 0 allocates with aligned_alloc.
struct ReplaceParams {
  uint32_t slots;
  uint64_t steps;
  uint32_t batch = 1;
  uint32_t alignment = 0;
  SizeSpec sizes;
};
std::unique_ptr<ThreadWork> make_replace_work(const ReplaceParams& p, uint64_t seed);

// hakmem's scenarios: each round allocates `blocks` blocks of one SizeSpec,
// writes them, then frees them all; nothing stays live between rounds. With
// several specs, each round picks one uniformly at random.
struct RoundParams {
  uint64_t rounds;
  uint32_t blocks[3];
  SizeSpec sizes[3];
  uint32_t kinds;  // how many of blocks[]/sizes[] are used
};
std::unique_ptr<ThreadWork> make_round_work(const RoundParams& p, uint64_t seed);

// rpmalloc's benchmark pattern: a table of `slots`; each of `loops` loops
// frees the blocks of `ops` slots scattered over the whole table, then
// allocates `ops` blocks into slots scattered the same way (freeing a block
// still there first).
struct ScatterParams {
  uint32_t slots;
  uint32_t ops;
  uint32_t loops;
  SizeSpec sizes;
};
std::unique_ptr<ThreadWork> make_scatter_work(const ScatterParams& p, uint64_t seed);

// mid_mt's mid-range loop: each cycle picks a random slot of a small
// working set; a full slot is freed, an empty one gets a new block.
struct ToggleParams {
  uint32_t slots;
  uint64_t cycles;
  SizeSpec sizes;
};
std::unique_ptr<ThreadWork> make_toggle_work(const ToggleParams& p, uint64_t seed);

// Threads in pairs: the even one allocates `messages` blocks and passes
// them through a ring of `depth` slots to the odd one, which frees them (a
// thread without a partner fills its own ring and empties it).
struct ProducerConsumerParams {
  uint64_t messages;
  uint32_t depth;  // a power of two
  SizeSpec sizes;
};
std::unique_ptr<ThreadWork> make_producer_consumer_work(const ProducerConsumerParams& p, uint64_t seed,
                                                        unsigned thread, unsigned threads);

// A server's threads passing objects around: each of `steps` steps
// allocates an object and either keeps it in a random slot of its table of
// `slots` (freeing the one there) or, one step in four, hands it to a random
// other thread, which keeps it the same way.
struct ExchangeParams {
  uint32_t slots;
  uint64_t steps;
  SizeSpec sizes;
};
std::unique_ptr<ThreadWork> make_exchange_work(const ExchangeParams& p, uint64_t seed, unsigned thread,
                                               unsigned threads);

}  // namespace host_bench
