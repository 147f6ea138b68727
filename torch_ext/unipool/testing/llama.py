"""A Llama-shaped decoder-only transformer and a small serving loop: test and
benchmark support only (bench/model, tests/python), never a model to use.

It exists to give the device allocators a real model's workload: the tensors
torch allocates and frees while a server without paging runs Llama-3.2-1B
(prefill of a batch of prompts, then decode steps with a growing KV cache).
On the null GPU (tests/nullgpu) no kernel computes, so the weights are
torch.empty there and every value is meaningless; only the allocations are
real. On the CPU the weights are small random numbers, so the same code can
be checked for consistency (incremental decode == a full forward).

No transformers dependency and no download: the layout is written out here
(RMSNorm, rotary embeddings, grouped-query attention through
scaled_dot_product_attention, SwiGLU MLP, tied or untied lm_head).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# Attention kernels a serving engine picks: flash, else memory-efficient,
# else the math fallback (the CPU). Not cuDNN's: torch prefers it on sm90,
# and on the null GPU cuDNN cannot initialise ("cuDNN error:
# CUDNN_STATUS_NOT_INITIALIZED", it asks for cuGetExportTable), while the
# flash and efficient kernels launch (and, there, compute nothing). The
# null GPU reports sm80 by default, where torch takes flash anyway; this
# keeps the model's allocations the same with compute_capability=9.0.
ATTENTION_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


@dataclass(frozen=True)
class LlamaConfig:
    name: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    tie_embeddings: bool = True
    rope_theta: float = 500000.0
    rms_eps: float = 1e-5
    max_positions: int = 8192   # rotary table length: longest prompt + decode steps

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    def num_parameters(self) -> int:
        h, kv = self.hidden_size, self.num_kv_heads * self.head_dim
        layer = h * (h + 2 * kv) + h * h + 3 * h * self.intermediate_size + 2 * h
        lm_head = 0 if self.tie_embeddings else self.vocab_size * h
        return self.vocab_size * h + self.num_layers * layer + h + lm_head

    def kv_bytes_per_token(self, dtype: torch.dtype = torch.bfloat16) -> int:
        elem = torch.empty((), dtype=dtype).element_size()
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * elem


# Llama-3.2-1B's shape: 1.24e9 parameters with the embedding tied to lm_head.
LLAMA_1B = LlamaConfig("llama-3.2-1b", vocab_size=128256, hidden_size=2048, intermediate_size=8192,
                       num_layers=16, num_heads=32, num_kv_heads=8, tie_embeddings=True)
# For tests: the same structure (GQA 2:1, untied head to cover that path).
TINY = LlamaConfig("tiny", vocab_size=256, hidden_size=64, intermediate_size=128, num_layers=2,
                   num_heads=4, num_kv_heads=2, tie_embeddings=False, max_positions=512)


@dataclass
class Layer:
    attn_norm: torch.Tensor
    wqkv: torch.Tensor      # q, k and v projections fused, as serving engines load them
    wo: torch.Tensor
    mlp_norm: torch.Tensor
    w_gate_up: torch.Tensor  # gate and up projections fused
    w_down: torch.Tensor


@dataclass
class Llama:
    config: LlamaConfig
    embed: torch.Tensor
    layers: list[Layer]
    norm: torch.Tensor
    lm_head: torch.Tensor
    cos: torch.Tensor        # rotary tables [max_positions, head_dim], computed once at load
    sin: torch.Tensor
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))


def _weight(shape: tuple[int, ...], device: torch.device, dtype: torch.dtype, scale: float) -> torch.Tensor:
    # One tensor per weight, as a checkpoint loader creates them. On a device
    # torch.empty: the null GPU computes nothing, so filling would only cost
    # time (and RAM: untouched null-GPU memory is free). On the CPU small
    # random values keep activations finite for the consistency check.
    if device.type == "cpu":
        return (torch.randn(shape, dtype=torch.float32) * scale).to(dtype)
    return torch.empty(shape, dtype=dtype, device=device)


def _norm_weight(n: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    return torch.ones(n, dtype=dtype, device=device)


def rotary_tables(config: LlamaConfig, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of every position, [max_positions, head_dim], float32."""
    d = config.head_dim
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float32, device=device) / d))
    t = torch.arange(config.max_positions, dtype=torch.float32, device=device)
    freqs = torch.outer(t, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def build(config: LlamaConfig, device: str | torch.device = "cpu", dtype: torch.dtype = torch.bfloat16,
          seed: int = 0) -> Llama:
    """The model's weights, created directly on `device`."""
    device = torch.device(device)
    torch.manual_seed(seed)
    h, kv, inter = config.hidden_size, config.num_kv_heads * config.head_dim, config.intermediate_size
    s = h ** -0.5
    layers = [Layer(attn_norm=_norm_weight(h, device, dtype),
                    wqkv=_weight((h + 2 * kv, h), device, dtype, s),
                    wo=_weight((h, h), device, dtype, s),
                    mlp_norm=_norm_weight(h, device, dtype),
                    w_gate_up=_weight((2 * inter, h), device, dtype, s),
                    w_down=_weight((h, inter), device, dtype, inter ** -0.5))
              for _ in range(config.num_layers)]
    embed = _weight((config.vocab_size, h), device, dtype, 1.0)
    lm_head = embed if config.tie_embeddings else _weight((config.vocab_size, h), device, dtype, s)
    cos, sin = rotary_tables(config, device)
    return Llama(config, embed, layers, _norm_weight(h, device, dtype), lm_head, cos, sin, device)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # In float32 as Llama's reference does: the temporaries (x.float(), its
    # square, the mean) are part of the real allocation pattern.
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, heads, T, head_dim]; cos/sin [T, head_dim] of x's positions."""
    return (x * cos.to(x.dtype) + _rotate_half(x) * sin.to(x.dtype))


KVCache = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: k, v [B, kv_heads, T, head_dim]


def attention(model: Llama, layer: Layer, x: torch.Tensor, start: int,
              cache: KVCache, index: int) -> torch.Tensor:
    """Self-attention of x [B, T, hidden] at positions start..start+T-1,
    appending its keys and values to cache[index] (created at prefill)."""
    c = model.config
    b, t, _ = x.shape
    d, nq, nkv = c.head_dim, c.num_heads, c.num_kv_heads
    qkv = F.linear(x, layer.wqkv)
    q, k, v = qkv.split((nq * d, nkv * d, nkv * d), dim=-1)
    q = q.view(b, t, nq, d).transpose(1, 2)
    k = k.view(b, t, nkv, d).transpose(1, 2)
    # v is copied out of the fused projection (k gets its own tensor from
    # the rotation): a view in the cache would keep all of qkv alive.
    v = v.view(b, t, nkv, d).transpose(1, 2).contiguous()
    cos, sin = model.cos[start:start + t], model.sin[start:start + t]
    q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
    # The KV cache grows by torch.cat, as Hugging Face's DynamicCache does:
    # the usual cache of a server without paging. Every step allocates each
    # layer's keys and values one token longer and frees the old ones, so
    # block sizes creep up step by step while activations of other sizes
    # come and go between them: the pattern that fragments a caching
    # allocator, which a cache preallocated to its final length never shows.
    if index == len(cache):
        cache.append((k, v))
    else:
        old_k, old_v = cache[index]
        k, v = torch.cat((old_k, k), dim=2), torch.cat((old_v, v), dim=2)
        cache[index] = (k, v)
    # Prefill is causal within the prompt; a decode token sees the whole cache.
    out = F.scaled_dot_product_attention(q, k, v, is_causal=(t > 1), enable_gqa=True)
    return F.linear(out.transpose(1, 2).reshape(b, t, nq * d), layer.wo)


def mlp(layer: Layer, x: torch.Tensor) -> torch.Tensor:
    gate, up = F.linear(x, layer.w_gate_up).chunk(2, dim=-1)
    return F.linear(F.silu(gate) * up, layer.w_down)


def forward(model: Llama, tokens: torch.Tensor, start: int, cache: KVCache) -> torch.Tensor:
    """Logits of the last position, [B, vocab], for tokens [B, T] at
    positions start..start+T-1; extends `cache`."""
    c = model.config
    x = F.embedding(tokens, model.embed)
    for i, layer in enumerate(model.layers):
        x = x + attention(model, layer, rms_norm(x, layer.attn_norm, c.rms_eps), start, cache, i)
        x = x + mlp(layer, rms_norm(x, layer.mlp_norm, c.rms_eps))
    # Only the last position's logits, as servers compute them: a full
    # [B, T, vocab] would be batch * prompt * 128256 values.
    last = rms_norm(x[:, -1, :], model.norm, c.rms_eps)
    return F.linear(last, model.lm_head).float()


@dataclass(frozen=True)
class Request:
    batch: int
    prompt_len: int
    decode_steps: int


StepHook = Callable[[int, int], None]  # (request index, decode step) after each decode step


def generate(model: Llama, prompts: torch.Tensor, decode_steps: int,
             on_step: StepHook | None = None, request: int = 0) -> torch.Tensor:
    """Greedy generation: prefill prompts [B, T] (on the host, as a tokenizer
    gives them), then `decode_steps` decode forwards. Returns the new tokens
    [B, decode_steps + 1] (the first from the prefill) on the host. The
    cache lives only inside this call, as one request's."""
    with sdpa_kernel(ATTENTION_BACKENDS):
        return _generate(model, prompts, decode_steps, on_step, request)


def _generate(model: Llama, prompts: torch.Tensor, decode_steps: int,
              on_step: StepHook | None, request: int) -> torch.Tensor:
    cache: KVCache = []
    tokens = prompts.to(model.device)
    position = tokens.shape[1]
    logits = forward(model, tokens, 0, cache)
    out = []
    for step in range(decode_steps):
        next_token = logits.argmax(dim=-1, keepdim=True)
        # Copied to the host every step, as a server streams tokens back.
        out.append(next_token.cpu())
        logits = forward(model, next_token, position, cache)
        position += 1
        if on_step is not None:
            on_step(request, step)
    out.append(logits.argmax(dim=-1, keepdim=True).cpu())
    del cache, logits
    return torch.cat(out, dim=1)


def serve(model: Llama, requests: Iterable[Request], on_step: StepHook | None = None,
          seed: int = 0) -> int:
    """Runs the requests one after the other (random prompts); returns the
    number of tokens generated."""
    g = torch.Generator().manual_seed(seed)
    generated = 0
    with torch.inference_mode():
        for i, r in enumerate(requests):
            if r.prompt_len + r.decode_steps > model.config.max_positions:
                raise ValueError(f"request {i}: {r.prompt_len} + {r.decode_steps} positions "
                                 f"> max_positions {model.config.max_positions}")
            prompts = torch.randint(0, model.config.vocab_size, (r.batch, r.prompt_len), generator=g)
            generated += generate(model, prompts, r.decode_steps, on_step, i).numel()
    return generated
