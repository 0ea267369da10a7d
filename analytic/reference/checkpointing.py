"""TorchTitan's op-level selective activation checkpointing on a Llama block, and the bytes a
block's forward leaves saved under it: what ``memory.activations.layer_flash_swiglu_op_sac``
counts."""

from __future__ import annotations

from collections import defaultdict

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
)

#: pytorch/torchtitan parallelize_llama.py (2024) _save_list; the CPU's flash-attention op stands in
#: for the CUDA one, and the collectives, which one process does not run, are left out
SAVE = {
    torch.ops.aten.mm.default,
    torch.ops.aten._scaled_dot_product_flash_attention.default,
    torch.ops.aten._scaled_dot_product_efficient_attention.default,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
    torch.ops.aten.max.default,
}


class LlamaBlock(nn.Module):
    """TorchTitan's Llama TransformerBlock: RMSNorm, bias-free wq/wk/wv/wo, GQA by repeating K and
    V, causal SDPA, RMSNorm and the SwiGLU w2(silu(w1 x) · w3 x). Rotary embedding left out
    (elementwise, never saved under the policy)."""

    def __init__(self, hidden: int, heads: int, kv_heads: int, ffn_hidden: int):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        d = self.head_dim
        self.wq, self.wk, self.wv = (
            nn.Linear(hidden, n * d, bias=False) for n in (heads, kv_heads, kv_heads)
        )
        self.wo = nn.Linear(heads * d, hidden, bias=False)
        self.w1, self.w3 = (nn.Linear(hidden, ffn_hidden, bias=False) for _ in range(2))
        self.w2 = nn.Linear(ffn_hidden, hidden, bias=False)
        self.attention_norm, self.ffn_norm = nn.RMSNorm(hidden), nn.RMSNorm(hidden)

    def forward(self, x):
        b, s, h = x.shape
        y = self.attention_norm(x)
        q = self.wq(y).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k, v = (
            w(y).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
            for w in (self.wk, self.wv)
        )
        k, v = (t.repeat_interleave(self.heads // self.kv_heads, dim=1) for t in (k, v))
        out = (
            F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, h)
        )
        x = x + self.wo(out)
        z = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(z)) * self.w3(z))


def op_sac_context():
    """TorchTitan's op-level policy: save the outputs of the ops in :data:`SAVE`, except every
    second matmul of a block's forward (and of its recomputation); recompute the rest."""
    meta = defaultdict(int)

    def policy(ctx, func, *args, **kwargs):
        mode = "recompute" if ctx.is_recompute else "forward"
        if func == torch.ops.aten.mm.default:
            meta[f"{mode}_mm_count"] += 1
        keep = func in SAVE and not (
            func == torch.ops.aten.mm.default and meta[f"{mode}_mm_count"] % 2 == 0
        )
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def saved_bytes_per_token(hidden: int = 256, heads: int = 4, kv_heads: int = 2,
                          ffn_hidden: int = 704, tokens: int = 512,
                          compiled: bool = False) -> float:
    """Bytes a bf16 block's forward under :func:`op_sac_context` leaves allocated per token, its
    input (the checkpoint keeps it) included and its output (the next block's input) not, on the
    CPU; with ``compiled``, the checkpointed block compiled by torch.compile (Inductor), as
    TorchTitan compiles each block after wrapping it, measured after a first step has compiled its
    forward and backward."""
    block = LlamaBlock(hidden, heads, kv_heads, ffn_hidden).to(torch.bfloat16)
    x = torch.randn(1, tokens, hidden, dtype=torch.bfloat16, requires_grad=True)

    def step(x):
        return checkpoint(block, x, use_reentrant=False, context_fn=op_sac_context)

    if compiled:
        step = torch.compile(step, fullgraph=True)
        step(x).sum().backward()
    kept = []
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        kept.append(step(x))
    held = sum(e.nbytes() for e in prof.profiler.kineto_results.events() if e.name() == "[memory]")
    return (held - kept[0].numel() * kept[0].element_size() + x.numel() * x.element_size()) / tokens


def backward_peak_bytes(
    hidden: int = 256, heads: int = 4, kv_heads: int = 2, ffn_hidden: int = 1408, tokens: int = 1024
) -> int:
    """Bytes a bf16 block's backward allocates at its peak beyond what its forward left (its saved
    tensors and its output), on the CPU, with the gradient from above and those of the input and
    the weights allocated before it runs. One intra-op thread: the scratch buffers a parallel CPU
    matmul allocates per thread (which vary with the host's cores and instruction set) are not the
    block's tensors."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _backward_peak_bytes(hidden, heads, kv_heads, ffn_hidden, tokens)
    finally:
        torch.set_num_threads(threads)


def _backward_peak_bytes(
    hidden: int, heads: int, kv_heads: int, ffn_hidden: int, tokens: int
) -> int:
    block = LlamaBlock(hidden, heads, kv_heads, ffn_hidden).to(torch.bfloat16)
    for p in block.parameters():
        p.grad = torch.zeros_like(p)
    x = torch.randn(1, tokens, hidden, dtype=torch.bfloat16, requires_grad=True)
    x.grad, dy = torch.zeros_like(x), torch.randn(1, tokens, hidden, dtype=torch.bfloat16)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        with record_function("forward"):
            y = block(x)
        y.backward(dy)
    events = prof.profiler.kineto_results.events()
    forward = next(e for e in events if e.name() == "forward")
    end = forward.start_ns() + forward.duration_ns()
    held = peak = left = 0
    for e in sorted((e for e in events if e.name() == "[memory]"), key=lambda e: e.start_ns()):
        held += e.nbytes()
        if e.start_ns() <= end:
            left = held
        peak = max(peak, held)
    return peak - left


__all__ = ["SAVE", "LlamaBlock", "backward_peak_bytes", "op_sac_context", "saved_bytes_per_token"]
