// bench/device: allocation traces, generated from a seed, replayed against
// every allocator in the same run. docs/device_pool.md describes the
// generators.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace device_bench {

// One event: allocate `size` bytes into slot `slot`, or (size 0) free the
// block in that slot. Slots are reused once freed.
struct Op {
  uint32_t slot;
  uint64_t size;
};

struct Trace {
  std::string name;
  std::vector<Op> ops;
  uint32_t slots = 0;      // distinct slots used
  uint64_t allocations = 0;
  uint64_t warmup_ops = 0; // ops before the "after warm-up" backend-call count starts
};

// RMM's random_allocations: sizes uniform in [1, max_size], an allocation
// with probability 0.73 (else a free of a random live block), live bytes
// capped; everything freed at the end.
Trace random_trace(const std::string& name, uint64_t ops, uint64_t max_size, uint64_t cap, uint64_t seed);
// Decode steps of an LLM server (32 layers, hidden 4096) with a batch that
// wanders over 1..256 and a growing context, plus fixed-size KV-cache blocks
// allocated and freed in bursts.
Trace inference_trace(uint64_t steps, uint64_t seed);
// A LoRA fine-tuning step of Llama-3-8B (forward with the tensors autograd
// saves, backward, optimizer) repeated with batch N, N+1, N+2, ... sequences
// of 128 tokens.
Trace batch_growth_trace(uint64_t first_batch, uint64_t last_batch);

}  // namespace device_bench
