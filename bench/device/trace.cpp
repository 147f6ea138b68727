// bench/device: the trace generators.
#include "trace.hpp"

#include <algorithm>

#include "rng.hpp"

namespace device_bench {

namespace {

// Builds a trace, handing out and recycling slots.
class Builder {
 public:
  explicit Builder(std::string name) { trace_.name = std::move(name); }
  uint32_t alloc(uint64_t size) {
    uint32_t slot;
    if (!spare_.empty()) {
      slot = spare_.back();
      spare_.pop_back();
    } else {
      slot = trace_.slots++;
    }
    trace_.ops.push_back(Op{slot, size});
    ++trace_.allocations;
    return slot;
  }
  void free(uint32_t slot) {
    trace_.ops.push_back(Op{slot, 0});
    spare_.push_back(slot);
  }
  void mark_warmup() { trace_.warmup_ops = trace_.ops.size(); }
  Trace take() { return std::move(trace_); }

 private:
  Trace trace_;
  std::vector<uint32_t> spare_;
};

}  // namespace

Trace random_trace(const std::string& name, uint64_t ops, uint64_t max_size, uint64_t cap, uint64_t seed) {
  Builder b(name);
  Rng rng(seed);
  std::vector<std::pair<uint32_t, uint64_t>> live;
  uint64_t live_bytes = 0;
  for (uint64_t i = 0; i < ops; ++i) {
    const uint64_t size = rng.between(1, max_size);
    const bool allocate = live.empty() || (rng.chance(0.73) && live_bytes + size <= cap);
    if (allocate) {
      live.emplace_back(b.alloc(size), size);
      live_bytes += size;
    } else {
      const uint64_t k = rng.below(live.size());
      b.free(live[k].first);
      live_bytes -= live[k].second;
      live[k] = live.back();
      live.pop_back();
    }
    if (i == ops / 5) b.mark_warmup();
  }
  for (const auto& [slot, size] : live) b.free(slot);
  return b.take();
}

// Llama-3-8B shapes (hidden 4096, 32 query / 8 KV heads of 128, FFN 14336,
// vocabulary 128256, 32 layers, fp16) served with paged KV cache blocks of 16
// tokens per layer (64 KiB, vLLM's block size) that the server allocates and
// frees through the allocator.
Trace inference_trace(uint64_t steps, uint64_t seed) {
  constexpr uint64_t kLayers = 32, kHidden = 4096, kHeads = 32, kKvDim = 8 * 128, kFfn = 14336, kVocab = 128256;
  constexpr uint64_t kHalf = 2;
  constexpr uint64_t kBlockTokens = 16;
  constexpr uint64_t kKvBlock = kBlockTokens * kKvDim * 2 * kHalf;  // K and V of 16 tokens, one layer: 64 KiB
  constexpr uint64_t kKvBudget = uint64_t{8} << 30;                  // admission control: 8 GiB of KV
  constexpr uint64_t kMaxContext = 4096, kMaxPrefill = 8192;
  struct Request {
    uint64_t context;
    std::vector<uint32_t> blocks;  // kLayers per kBlockTokens tokens
  };
  Builder b("inference");
  Rng rng(seed);
  std::vector<Request> active;
  uint64_t target = 32, kv_bytes = 0;

  auto add_blocks = [&](Request& r, uint64_t tokens_before, uint64_t tokens_after) {
    const uint64_t have = (tokens_before + kBlockTokens - 1) / kBlockTokens;
    const uint64_t need = (tokens_after + kBlockTokens - 1) / kBlockTokens;
    for (uint64_t n = have; n < need; ++n) {
      for (uint64_t layer = 0; layer < kLayers; ++layer) r.blocks.push_back(b.alloc(kKvBlock));  // a burst
      kv_bytes += kLayers * kKvBlock;
    }
  };
  // A layer's activations for `tokens` tokens attending over `context`, each
  // freed as soon as it is dead; `residual` is carried from layer to layer.
  auto layer = [&](uint64_t tokens, uint64_t context, uint32_t& residual) {
    const uint32_t norm = b.alloc(tokens * kHidden * kHalf);
    const uint32_t qkv = b.alloc(tokens * (kHidden + 2 * kKvDim) * kHalf);
    b.free(norm);
    // Attention workspace (flash-attention style: a tile of the scores, not all).
    const uint32_t scores = b.alloc(tokens * kHeads * std::min<uint64_t>(context, 256) * kHalf);
    const uint32_t attn = b.alloc(tokens * kHidden * kHalf);
    b.free(scores);
    b.free(qkv);
    const uint32_t proj = b.alloc(tokens * kHidden * kHalf);
    b.free(attn);
    const uint32_t mid = b.alloc(tokens * kHidden * kHalf);
    b.free(proj);
    b.free(residual);
    const uint32_t norm2 = b.alloc(tokens * kHidden * kHalf);
    const uint32_t gate_up = b.alloc(tokens * 2 * kFfn * kHalf);
    b.free(norm2);
    const uint32_t act = b.alloc(tokens * kFfn * kHalf);
    b.free(gate_up);
    const uint32_t down = b.alloc(tokens * kHidden * kHalf);
    b.free(act);
    residual = b.alloc(tokens * kHidden * kHalf);
    b.free(down);
    b.free(mid);
  };
  auto forward = [&](uint64_t tokens, uint64_t context, uint64_t logits_rows) {
    uint32_t residual = b.alloc(tokens * kHidden * kHalf);
    for (uint64_t l = 0; l < kLayers; ++l) layer(tokens, context, residual);
    const uint32_t logits = b.alloc(logits_rows * kVocab * kHalf);
    b.free(residual);
    b.free(logits);
  };

  for (uint64_t step = 0; step < steps; ++step) {
    // The wanted batch wanders over 1..256 (now and then it jumps).
    if (rng.chance(0.05)) {
      target = rng.between(1, 256);
    } else {
      const int64_t delta = static_cast<int64_t>(rng.below(9)) - 4;
      target = static_cast<uint64_t>(std::clamp<int64_t>(static_cast<int64_t>(target) + delta, 1, 256));
    }
    // Finished requests give their KV blocks back in a burst.
    for (size_t i = 0; i < active.size();) {
      Request& r = active[i];
      if (r.context >= kMaxContext || rng.chance(1.0 / 256) || (active.size() > target && rng.chance(0.05))) {
        for (const uint32_t slot : r.blocks) b.free(slot);
        kv_bytes -= r.blocks.size() * kKvBlock;
        active[i] = std::move(active.back());
        active.pop_back();
      } else {
        ++i;
      }
    }
    // New requests join while the batch is below target and the KV budget
    // allows: their prompts' blocks (a burst) and one prefill pass.
    uint64_t prefill = 0;
    while (active.size() < target && prefill < kMaxPrefill) {
      const uint64_t prompt = rng.between(64, 2048);
      const uint64_t blocks = kLayers * ((prompt + kBlockTokens - 1) / kBlockTokens);
      if (kv_bytes + blocks * kKvBlock > kKvBudget) break;
      active.push_back(Request{prompt, {}});
      add_blocks(active.back(), 0, prompt);
      prefill += std::min(prompt, kMaxPrefill - prefill);
    }
    if (prefill > 0) forward(prefill, std::min<uint64_t>(prefill, kMaxContext), 1);
    // One decode step for the batch: a token each, a new block every 16.
    if (active.empty()) continue;
    uint64_t context = 0;
    for (Request& r : active) {
      add_blocks(r, r.context, r.context + 1);
      ++r.context;
      context = std::max(context, r.context);
    }
    forward(active.size(), context, active.size());
    if (step == steps / 5) b.mark_warmup();
  }
  for (const Request& r : active) {
    for (const uint32_t slot : r.blocks) b.free(slot);
  }
  return b.take();
}

Trace batch_growth_trace(uint64_t first_batch, uint64_t last_batch) {
  constexpr uint64_t kLayers = 12, kMiB = uint64_t{1} << 20;
  Builder b("batch_growth");
  for (uint64_t n = first_batch; n <= last_batch; ++n) {
    std::vector<uint32_t> kept;  // activations saved for the backward pass
    for (uint64_t layer = 0; layer < kLayers; ++layer) {
      kept.push_back(b.alloc(n * kMiB));                // input
      kept.push_back(b.alloc(n * 3 * kMiB));            // qkv
      const uint32_t tmp = b.alloc(n * 4 * kMiB);       // softmax workspace
      kept.push_back(b.alloc(n * 4 * kMiB));            // attention probabilities
      b.free(tmp);
      kept.push_back(b.alloc(n * 4 * kMiB + 4096 * n)); // mlp
      kept.push_back(b.alloc(4096 * n));                // a small statistic
    }
    for (auto it = kept.rbegin(); it != kept.rend(); ++it) b.free(*it);  // backward
    if (n == first_batch + (last_batch - first_batch) / 5) b.mark_warmup();
  }
  return b.take();
}

}  // namespace device_bench
