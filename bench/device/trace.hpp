// bench/device: allocation traces, generated from a seed or read from a
// recorded model run, replayed against every allocator in the same run.
// docs/device_pool.md describes the generators and the file format.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
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
  uint32_t streams = 1;     // distinct stream ids in a recorded trace (all replayed on one)
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

// A recorded allocation trace, gzip'ed text (trace_file.cpp):
//   # ...                    comment / header
//   + SLOT BYTES STREAM      allocate BYTES into SLOT on stream id STREAM
//   - SLOT                   free the block in SLOT
//   w                        end of warm-up (Trace::warmup_ops)
// Blocks still live at the end are freed there, so every peer ends empty.
// At most `max_ops` lines of operations are read (0: all). Throws
// std::runtime_error naming the file and line of a malformed trace.
Trace read_trace_file(const std::string& path, const std::string& name, uint64_t max_ops = 0);
// The model traces in `dir`, model_<name>.trace.gz, by name: pairs of
// (trace name "model_<name>", path).
std::vector<std::pair<std::string, std::string>> model_trace_files(const std::string& dir);

}  // namespace device_bench
