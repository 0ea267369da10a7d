"""Tiny transformers in plain torch, built from an analytic :class:`~analytic.Model`, to count what
real code does: parameters, FLOPs (``FlopCounterMode``) and bytes saved for backward.

Kernels that production stacks fuse are written as autograd Functions that save what the fused
kernels save (and what the library's activation formulas count):

- RMSNorm / LayerNorm save their input and fp32 per-row statistics (the statistics are the one
  documented gap: the formulas, like Korthikanti et al., leave them out);
- SwiGLU saves the gate and up projections and recomputes SiLU in backward;
- the output projection keeps the attention output in the layout flash attention saved it, so the
  two share one tensor.

``attention="explicit"`` writes attention as matmuls and softmax (every FLOP visible to the counter,
scores stored, optional 1-byte dropout masks: Korthikanti's GPT layer); ``attention="flash"`` calls
``scaled_dot_product_attention`` (q, k, v, output and fp32 log-sum-exp saved, no s² tensor);
``attention="flash-matmul"`` is FlashAttention's algorithm in plain matmuls (what it saves, and a
backward that recomputes QKᵀ, every FLOP visible to the counter).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..core.errors import InputError
from ..presets.model import Model, choice
from .kernels import FlashCoreFn, LayerNormFn, OutProjFn, RMSNormFn, SwiGLUFn, dropout, rope

ATTENTIONS = ("explicit", "flash", "flash-matmul")


class Norm(nn.Module):
    def __init__(self, h, kind, dtype):
        super().__init__()
        self.kind = kind
        self.weight = nn.Parameter(torch.ones(h, dtype=dtype))
        if kind == "layernorm":
            self.bias = nn.Parameter(torch.zeros(h, dtype=dtype))

    def forward(self, x):
        if self.kind == "layernorm":
            return LayerNormFn.apply(x, self.weight, self.bias, 1e-5)
        return RMSNormFn.apply(x, self.weight, 1e-5)


class Attention(nn.Module):
    def __init__(
        self, m: Model, dtype, attention: str, dropout: float, recompute_core: bool = False
    ):
        super().__init__()
        self.recompute_core = recompute_core
        h, a, kv, d = m.hidden, m.heads, m.kv_heads, m.head_dim
        self.a, self.kv, self.d, self.attention, self.dropout = a, kv, d, attention, dropout
        self.q = nn.Linear(h, a * d, bias=m.bias, dtype=dtype)
        self.k = nn.Linear(h, kv * d, bias=m.bias, dtype=dtype)
        self.v = nn.Linear(h, kv * d, bias=m.bias, dtype=dtype)
        self.o = nn.Parameter(torch.empty(h, a * d, dtype=dtype))
        nn.init.normal_(self.o, std=0.02)
        self.o_bias = nn.Parameter(torch.zeros(h, dtype=dtype)) if m.bias else None
        self.rope = m.position == "rope"

    def forward(self, x, cos=None, sin=None, causal=None):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, self.a, self.d).transpose(1, 2)
        k = self.k(x).view(b, s, self.kv, self.d).transpose(1, 2)
        v = self.v(x).view(b, s, self.kv, self.d).transpose(1, 2)
        if self.rope:
            q, k = rope(q, cos, sin), rope(k, cos, sin)
        if self.attention == "flash":

            def core(q, k, v):
                return F.scaled_dot_product_attention(
                    q, k, v, is_causal=True, enable_gqa=self.kv != self.a
                )

            # selective recomputation: keep q, k, v; redo the attention core
            if self.recompute_core:
                out = torch.utils.checkpoint.checkpoint(core, q, k, v, use_reentrant=False)
            else:
                out = core(q, k, v)
            y = OutProjFn.apply(out, self.o)
        else:  # matmuls: attention counted in full (the causal mask costs FLOPs like any score)
            if self.kv != self.a:
                k = k.repeat_interleave(self.a // self.kv, dim=1)
                v = v.repeat_interleave(self.a // self.kv, dim=1)

            def core(q, k, v):
                if self.attention == "flash-matmul":
                    return FlashCoreFn.apply(q, k, v, causal[:s, :s], 1.0 / math.sqrt(self.d))
                scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(self.d)) + causal[:s, :s]
                return dropout(torch.softmax(scores, dim=-1), self.dropout, self.training) @ v

            if self.recompute_core:
                out = torch.utils.checkpoint.checkpoint(core, q, k, v, use_reentrant=False)
            else:
                out = core(q, k, v)
            y = out.transpose(1, 2).reshape(b, s, self.a * self.d) @ self.o.t()
        if self.o_bias is not None:
            y = y + self.o_bias
        return dropout(y, self.dropout, self.training)


class MLAttention(nn.Module):
    """DeepSeek's multi-head latent attention (DeepSeek-V2 §2.1): queries and keys/values go
    through low-rank latents with RMSNorm; a decoupled RoPE key of d_r dimensions is shared by the
    heads."""

    def __init__(self, m: Model, dtype, attention: str = "flash"):
        super().__init__()
        h, a, d, dr, rq, rkv = (m.hidden, m.heads, m.head_dim, m.rope_dim, m.q_lora_rank,
                                m.kv_lora_rank)
        self.a, self.d, self.dr, self.rkv, self.attention = a, d, dr, rkv, attention
        self.q_a = nn.Linear(h, rq, bias=False, dtype=dtype)
        self.q_norm = Norm(rq, "rmsnorm", dtype)
        self.q_b = nn.Linear(rq, a * (d + dr), bias=False, dtype=dtype)
        self.kv_a = nn.Linear(h, rkv + dr, bias=False, dtype=dtype)
        self.kv_norm = Norm(rkv, "rmsnorm", dtype)
        self.kv_b = nn.Linear(rkv, a * 2 * d, bias=False, dtype=dtype)
        self.o = nn.Linear(a * d, h, bias=False, dtype=dtype)

    def forward(self, x, cos=None, sin=None, causal=None):
        b, s, _ = x.shape
        q = self.q_b(self.q_norm(self.q_a(x))).view(b, s, self.a, self.d + self.dr).transpose(1, 2)
        latent, k_rope = self.kv_a(x).split([self.rkv, self.dr], dim=-1)
        kv = self.kv_b(self.kv_norm(latent)).view(b, s, self.a, 2 * self.d).transpose(1, 2)
        k_nope, v = kv.split([self.d, self.d], dim=-1)
        k = torch.cat([k_nope, k_rope.unsqueeze(1).expand(b, self.a, s, self.dr)], dim=-1)
        if self.attention == "flash":
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif self.attention == "flash-matmul":
            out = FlashCoreFn.apply(q, k, v, causal[:s, :s], 1.0 / math.sqrt(self.d + self.dr))
        else:  # explicit matmuls: QKᵀ over d_h + d_r, attention over V of d_h, counted in full
            scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(self.d + self.dr)) + causal[
                :s, :s
            ]
            out = torch.softmax(scores, dim=-1) @ v
        return self.o(out.transpose(1, 2).reshape(b, s, self.a * self.d))


class MLP(nn.Module):
    def __init__(self, h, f, kind, bias, dtype, dropout=0.0):
        super().__init__()
        self.kind, self.dropout = kind, dropout
        if kind == "swiglu":
            self.gate = nn.Linear(h, f, bias=False, dtype=dtype)
            self.up = nn.Linear(h, f, bias=False, dtype=dtype)
            self.down = nn.Linear(f, h, bias=False, dtype=dtype)
        else:
            self.fc1 = nn.Linear(h, f, bias=bias, dtype=dtype)
            self.fc2 = nn.Linear(f, h, bias=bias, dtype=dtype)

    def forward(self, x):
        if self.kind == "swiglu":
            y = self.down(SwiGLUFn.apply(self.gate(x), self.up(x)))
        else:
            y = self.fc2(F.gelu(self.fc1(x)))
        return dropout(y, self.dropout, self.training)


class MoE(nn.Module):
    """Shared experts plus top-k routed SwiGLU experts; a bias-free router h × E."""

    def __init__(self, m: Model, dtype):
        super().__init__()
        h, fe = m.hidden, m.expert_ffn_hidden
        self.k = m.topk
        self.router = nn.Linear(h, m.experts, bias=False, dtype=dtype)
        self.experts = nn.ModuleList(MLP(h, fe, "swiglu", False, dtype) for _ in range(m.experts))
        self.shared = nn.ModuleList(
            MLP(h, fe, "swiglu", False, dtype) for _ in range(m.shared_experts)
        )

    def forward(self, x):
        b, s, h = x.shape
        flat = x.reshape(-1, h)
        weights, chosen = torch.softmax(self.router(flat).float(), -1).topk(self.k, dim=-1)
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            rows, slot = (chosen == e).nonzero(as_tuple=True)
            if rows.numel():
                out = out.index_add(
                    0, rows, expert(flat[rows]) * weights[rows, slot, None].to(flat.dtype)
                )
        for expert in self.shared:
            out = out + expert(flat)
        return out.view(b, s, h)


class Block(nn.Module):
    def __init__(self, m: Model, dtype, attention: str, moe: bool, dropout: float = 0.0,
                 recompute_core: bool = False):
        super().__init__()
        self.norm1 = Norm(m.hidden, m.norm, dtype)
        self.attn = (
            MLAttention(m, dtype, attention)
            if m.attention == "mla"
            else Attention(m, dtype, attention, dropout, recompute_core)
        )
        self.norm2 = Norm(m.hidden, m.norm, dtype)
        self.mlp = (
            MoE(m, dtype) if moe else MLP(m.hidden, m.ffn_hidden, m.mlp, m.bias, dtype, dropout)
        )

    def forward(self, x, cos=None, sin=None, causal=None):
        x = x + self.attn(self.norm1(x), cos, sin, causal)
        return x + self.mlp(self.norm2(x))


class MTPModule(nn.Module):
    """One multi-token prediction module (DeepSeek-V3 §2.2 eqs. 21–23): RMSNorm the previous
    depth's hidden state and the embedding of the token k ahead, project [h; e] (2h → h), run one
    block of the last layer's kind; the caller applies the shared output head."""

    def __init__(self, m: Model, dtype, attention: str):
        super().__init__()
        self.hnorm = Norm(m.hidden, "rmsnorm", dtype)
        self.enorm = Norm(m.hidden, "rmsnorm", dtype)
        self.proj = nn.Linear(2 * m.hidden, m.hidden, bias=False, dtype=dtype)
        self.block = Block(m, dtype, attention, m.is_moe)

    def forward(self, hidden, emb, cos=None, sin=None, causal=None):
        return self.block(
            self.proj(torch.cat([self.hnorm(hidden), self.enorm(emb)], dim=-1)), cos, sin, causal
        )


class Transformer(nn.Module):
    """A whole decoder built from an analytic Model (use tiny dimensions). With ``mtp_modules``,
    ``forward(tokens, mtp=True)`` also returns each MTP module's logits; a module runs over all s
    positions (the token k ahead wraps around; DeepSeek-V3 drops the last k positions instead)."""

    def __init__(self, m: Model, *, dtype=torch.float32, attention: str = "explicit",
                 dropout: float = 0.0, seq_len: int | None = None, recompute_core: bool = False):
        super().__init__()
        choice("attention", attention, ATTENTIONS)
        if dropout and attention != "explicit":
            raise InputError(
                "dropout: only attention='explicit' drops attention probabilities, got"
                f" {attention!r}"
            )
        self.m = m
        self.embed = nn.Embedding(m.vocab, m.hidden, dtype=dtype)
        self.pos = (
            nn.Embedding(m.max_seq_len, m.hidden, dtype=dtype) if m.position == "learned" else None
        )
        moe_from = m.dense_layers if m.is_moe else m.layers
        self.blocks = nn.ModuleList(
            Block(m, dtype, attention, i >= moe_from, dropout, recompute_core)
            for i in range(m.layers)
        )
        self.norm = Norm(m.hidden, m.norm, dtype)
        self.head = (
            None if m.tied_embeddings else nn.Linear(m.hidden, m.vocab, bias=False, dtype=dtype)
        )
        self.mtp = nn.ModuleList(MTPModule(m, dtype, attention) for _ in range(m.mtp_modules))
        n = seq_len or 64
        self.register_buffer(
            "causal", torch.full((n, n), float("-inf"), dtype=dtype).triu(1), persistent=False
        )
        if m.position == "rope":
            inv = 1.0 / (10000 ** (torch.arange(0, m.head_dim, 2).float() / m.head_dim))
            ang = torch.outer(torch.arange(n).float(), inv)
            ang = torch.cat((ang, ang), dim=-1)
            self.register_buffer("cos", ang.cos().to(dtype), persistent=False)
            self.register_buffer("sin", ang.sin().to(dtype), persistent=False)

    def forward(self, tokens, checkpoint: str = "none", mtp: bool = False):
        s = tokens.shape[1]
        x = self.embed(tokens)
        if self.pos is not None:
            x = x + self.pos(torch.arange(s))
        cos = sin = None
        if self.m.position == "rope":
            cos, sin = self.cos[:s], self.sin[:s]
        causal = self.causal[:s, :s]
        for blk in self.blocks:
            if checkpoint == "full":
                x = torch.utils.checkpoint.checkpoint(blk, x, cos, sin, causal, use_reentrant=False)
            else:
                x = blk(x, cos, sin, causal)
        logits = self.output(self.norm(x))
        if not mtp:
            return logits
        out, hidden = [logits], x
        for k, module in enumerate(self.mtp, 1):
            hidden = module(hidden, self.embed(tokens.roll(-k, dims=1)), cos, sin, causal)
            out.append(self.output(self.norm(hidden)))  # the shared output head
        return out

    def output(self, x):
        """The output layer: its own weight, or the embedding's where tied (called as a module, so
        that FSDP's hooks gather its weight)."""
        return x @ self.embed.weight.t() if self.head is None else self.head(x)


def count_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def saved_bytes(fn, module: nn.Module) -> dict:
    """Run ``fn()`` under saved-tensor hooks; bytes of distinct storages saved for backward, leaving
    out parameters and buffers. Returns {"total": bytes, "tensors": [(shape, dtype, bytes),
    ...]}."""
    skip = {p.untyped_storage().data_ptr() for p in module.parameters()}
    skip |= {b.untyped_storage().data_ptr() for b in module.buffers()}
    seen, tensors = {}, []

    def pack(t):
        st = t.untyped_storage()
        ptr = st.data_ptr()
        if ptr not in skip and ptr not in seen:
            seen[ptr] = st.nbytes()
            tensors.append((tuple(t.shape), t.dtype, st.nbytes()))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return {"total": sum(seen.values()), "tensors": tensors, "output": out}
