// bench/device: the trace generators.
#include "trace.hpp"

#include <algorithm>
#include <initializer_list>

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

// One LoRA fine-tuning step of Llama-3-8B (torchtune's single-device LoRA
// recipe: rank 8 on q_proj and v_proj, bf16, no activation checkpointing,
// frozen base weights that live outside the trace), `batch` sequences of 128
// tokens. Every tensor autograd saves stays until the backward pass reaches
// its layer; temporaries die at once; LoRA weight gradients live until the
// optimizer step, AdamW's states from the first step on. The repeated step
// with batch N, N+1, ... is what torchtune #1185 saw fragment plain segments.
Trace batch_growth_trace(uint64_t first_batch, uint64_t last_batch) {
  constexpr uint64_t kLayers = 32, kHidden = 4096, kKvDim = 8 * 128, kHeads = 32, kFfn = 14336, kVocab = 128256;
  constexpr uint64_t kRank = 8, kSeq = 128, kBf16 = 2, kFp32 = 4;
  Builder b("batch_growth");
  std::vector<uint32_t> optimizer_state;  // AdamW exp_avg / exp_avg_sq of the LoRA weights: kept
  for (uint64_t n = first_batch; n <= last_batch; ++n) {
    const uint64_t t = n * kSeq;  // tokens
    auto act = [&](uint64_t width, uint64_t bytes = 2 /* bf16 */) { return b.alloc(t * width * bytes); };
    auto drop = [&](std::initializer_list<uint32_t> slots) {
      for (const uint32_t s : slots) b.free(s);
    };
    const uint32_t tokens = b.alloc(t * 8), labels = b.alloc(t * 8);  // int64 input ids and labels
    struct Saved {
      uint32_t input, n1, r1, la_q, la_v, q_rot, k_exp, v_exp, out, lse, out_flat, h1, n2, r2, gate, up, silu, prod;
    };
    std::vector<Saved> saved(kLayers);
    uint32_t h = act(kHidden);  // embedding output
    for (uint64_t l = 0; l < kLayers; ++l) {
      Saved& s = saved[l];
      s.input = h;
      s.n1 = act(kHidden);
      s.r1 = act(1, kFp32);  // rmsnorm's rstd
      const uint32_t q_base = act(kHidden);
      s.la_q = act(kRank);  // x @ A (LoRA), saved for B's gradient
      const uint32_t lb_q = act(kHidden);
      const uint32_t q = act(kHidden);  // base + scale * lora
      drop({q_base, lb_q});
      const uint32_t k = act(kKvDim);
      const uint32_t v_base = act(kKvDim);
      s.la_v = act(kRank);
      const uint32_t lb_v = act(kKvDim);
      const uint32_t v = act(kKvDim);
      drop({v_base, lb_v});
      const uint32_t q_f32 = act(kHidden, kFp32);  // rotary embedding computes in fp32
      s.q_rot = act(kHidden);
      drop({q_f32, q});
      const uint32_t k_f32 = act(kKvDim, kFp32);
      const uint32_t k_rot = act(kKvDim);
      drop({k_f32, k});
      s.k_exp = act(kHidden);  // grouped-query heads expanded to 32
      s.v_exp = act(kHidden);
      drop({k_rot, v});
      s.out = act(kHidden);  // flash attention: output and logsumexp saved
      s.lse = act(kHeads, kFp32);
      s.out_flat = act(kHidden);  // transpose(1, 2).contiguous()
      const uint32_t o = act(kHidden);
      s.h1 = act(kHidden);  // residual
      drop({o});
      s.n2 = act(kHidden);
      s.r2 = act(1, kFp32);
      s.gate = act(kFfn);
      s.up = act(kFfn);
      s.silu = act(kFfn);
      s.prod = act(kFfn);
      const uint32_t down = act(kHidden);
      h = act(kHidden);  // residual: the next layer's input
      drop({down});
    }
    const uint32_t nf = act(kHidden), rf = act(1, kFp32);
    const uint32_t logits = act(kVocab);
    const uint32_t logits_f32 = act(kVocab, kFp32);  // cross-entropy upcasts
    drop({logits});
    const uint32_t log_probs = act(kVocab, kFp32);
    const uint32_t loss = b.alloc(4);
    // backward
    const uint32_t g_f32 = act(kVocab, kFp32);
    drop({log_probs, logits_f32, loss});
    const uint32_t g_logits = act(kVocab);
    drop({g_f32});
    const uint32_t g_nf = act(kHidden);
    drop({g_logits});
    uint32_t gy = act(kHidden);  // through the final norm
    drop({g_nf, nf, rf, h});
    std::vector<uint32_t> weight_grads;
    for (uint64_t l = kLayers; l-- > 0;) {
      Saved& s = saved[l];
      const uint32_t g_prod = act(kFfn);
      drop({s.prod});
      const uint32_t g_silu = act(kFfn), g_up = act(kFfn);
      drop({g_prod, s.silu, s.up});
      const uint32_t g_gate = act(kFfn);
      drop({g_silu, s.gate});
      const uint32_t a1 = act(kHidden), a2 = act(kHidden), g_n2 = act(kHidden);
      drop({a1, a2, g_gate, g_up});
      const uint32_t g_norm2 = act(kHidden);
      drop({g_n2, s.n2, s.r2});
      const uint32_t g_h1 = act(kHidden);
      drop({g_norm2, gy, s.h1});
      const uint32_t g_flat = act(kHidden);
      drop({s.out_flat});
      const uint32_t g_out = act(kHidden);
      drop({g_flat});
      const uint32_t dq_acc = act(kHidden, kFp32), softmax_d = act(kHeads, kFp32);
      const uint32_t g_q = act(kHidden), g_ke = act(kHidden), g_ve = act(kHidden);
      drop({dq_acc, softmax_d, g_out, s.out, s.lse, s.k_exp, s.v_exp});
      const uint32_t g_k = act(kKvDim), g_v = act(kKvDim);
      drop({g_ke, g_ve});
      const uint32_t gq_f32 = act(kHidden, kFp32), g_qp = act(kHidden);
      drop({gq_f32, g_q, s.q_rot});
      const uint32_t gk_f32 = act(kKvDim, kFp32), g_kp = act(kKvDim);
      drop({gk_f32, g_k});
      weight_grads.push_back(b.alloc(kHidden * kRank * kBf16));  // lora_b of q_proj
      const uint32_t g_la_q = act(kRank);
      weight_grads.push_back(b.alloc(kRank * kHidden * kBf16));  // lora_a of q_proj
      const uint32_t gx_q = act(kHidden);
      drop({g_la_q, s.la_q});
      weight_grads.push_back(b.alloc(kKvDim * kRank * kBf16));
      const uint32_t g_la_v = act(kRank);
      weight_grads.push_back(b.alloc(kRank * kHidden * kBf16));
      const uint32_t gx_v = act(kHidden);
      drop({g_la_v, s.la_v});
      const uint32_t t1 = act(kHidden), t2 = act(kHidden), t3 = act(kHidden), g_n1 = act(kHidden);
      drop({t1, t2, t3, gx_q, gx_v, g_qp, g_kp, g_v});
      const uint32_t g_norm1 = act(kHidden);
      drop({g_n1, s.n1, s.r1});
      const uint32_t gx = act(kHidden);
      drop({g_norm1, g_h1, s.input});
      gy = gx;
    }
    drop({gy, tokens, labels});
    // optimizer.step(): AdamW's states appear at the first step; then
    // zero_grad(set_to_none=True) frees the gradients.
    if (optimizer_state.empty()) {
      for (const uint32_t g : weight_grads) {
        (void)g;
        optimizer_state.push_back(b.alloc(kHidden * kRank * kFp32));
        optimizer_state.push_back(b.alloc(kHidden * kRank * kFp32));
      }
    }
    for (const uint32_t g : weight_grads) b.free(g);
    if (n == first_batch + (last_batch - first_batch) / 5) b.mark_warmup();
  }
  for (const uint32_t s : optimizer_state) b.free(s);
  return b.take();
}

}  // namespace device_bench
