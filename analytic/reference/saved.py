"""The bytes a layer's forward leaves saved for its backward, on real tensors: an MLA attention half
and an MoE MLP half as Megatron-Core builds them, with fused norms, FlashAttention and a fused
probability-weighted SwiGLU (what ``memory.activations.attention_mla`` and
``memory.activations.mlp_moe`` count), a dense MLP half with and without Megatron-Core's "mlp"
recompute module, and a Llama layer as Megatron-LM's model before Megatron-Core
builds it (what ``memory.activations.layer_flash_swiglu`` and ``memory.activations.legacy.*``
count)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class FusedRMSNorm(torch.autograd.Function):
    """RMSNorm as a fused kernel runs it (Transformer Engine, Apex): its input and the fp32
    reciprocal RMS per row are saved, nothing else."""

    @staticmethod
    def forward(ctx, x, weight):
        rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)
        ctx.save_for_backward(x, weight, rstd)
        return (x.float() * rstd).to(x.dtype) * weight

    @staticmethod
    def backward(ctx, grad):
        x, weight, rstd = ctx.saved_tensors
        with torch.enable_grad():
            x_ = x.detach().requires_grad_()
            w_ = weight.detach().requires_grad_()
            y = (x_.float() * torch.rsqrt(x_.float().pow(2).mean(-1, keepdim=True) + 1e-6)).to(
                x.dtype
            ) * w_
            return torch.autograd.grad(y, (x_, w_), grad)


class WeightedSwiGLU(torch.autograd.Function):
    """Megatron-Core's fused SwiGLU, silu(gate)·up, weighted by the routing probabilities where
    given (weighted_bias_swiglu_impl): its input and the probabilities are saved, not its output."""

    @staticmethod
    def forward(ctx, gate_up, prob=None):
        ctx.save_for_backward(gate_up, prob)
        gate, up = gate_up.chunk(2, dim=-1)
        return (F.silu(gate) * up * (1 if prob is None else prob)).to(gate_up.dtype)

    @staticmethod
    def backward(ctx, grad):
        gate_up, prob = ctx.saved_tensors
        with torch.enable_grad():
            g_ = gate_up.detach().requires_grad_()
            gate, up = g_.chunk(2, dim=-1)
            return (
                torch.autograd.grad(
                    (F.silu(gate) * up * (1 if prob is None else prob)).to(gate_up.dtype), g_, grad
                )[0],
                None,
            )


class FlashAttention(torch.autograd.Function):
    """Causal attention as FlashAttention runs it (Dao 2023, Algorithm 1-2): Q, K, V, the output and
    the fp32 log-sum-exp of each query row per head are saved; the scores are recomputed in the
    backward. Tensors are [s, a, d], sequence first as Megatron-Core's, or [b, s, a, d] as the
    flash-attn package takes them; Q and K may have a wider head than V, as MLA's do."""

    @staticmethod
    def _attend(q, k, v):
        if q.dim() == 4:  # [b, s, a, d]: each sequence's heads attend alone
            b, s = q.shape[:2]
            out, lse = FlashAttention._attend(
                *(t.transpose(0, 1).reshape(s, b * t.shape[2], t.shape[3]) for t in (q, k, v))
            )
            return out.reshape(s, b, q.shape[2], v.shape[3]).transpose(0, 1), lse
        q, k, v = (t.float().transpose(0, 1) for t in (q, k, v))
        scores = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
        scores = scores.masked_fill(
            torch.ones_like(scores, dtype=torch.bool).triu(1), float("-inf")
        )
        lse = scores.logsumexp(-1)
        return ((scores - lse.unsqueeze(-1)).exp() @ v).transpose(0, 1), lse

    @staticmethod
    def forward(ctx, q, k, v):
        out, lse = FlashAttention._attend(q, k, v)
        out = out.to(v.dtype).contiguous()
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx, grad):
        q, k, v, _, _ = ctx.saved_tensors
        with torch.enable_grad():
            q_, k_, v_ = (t.detach().requires_grad_() for t in (q, k, v))
            return torch.autograd.grad(
                FlashAttention._attend(q_, k_, v_)[0].to(v.dtype), (q_, k_, v_), grad
            )


def _norm(x, weight):
    return FusedRMSNorm.apply(x, weight)


class MLAHalf(nn.Module):
    """Multi-head latent attention (DeepSeek-V2 §2.1) as Megatron-Core's MLA: the input norm, query
    and key/value down-projections, the latents' norms, up-projections, Q and K of d_h + d_r per
    head (the RoPE part shared by the heads' keys), V of d_h, causal SDPA, the output projection.
    RoPE itself is left out (elementwise, saves nothing)."""

    def __init__(
        self, hidden: int, heads: int, head_dim: int, rope_dim: int, q_rank: int, kv_rank: int
    ):
        super().__init__()
        self.a, self.d, self.r = heads, head_dim, rope_dim
        self.norm, self.q_norm, self.kv_norm = (
            nn.Parameter(torch.ones(n)) for n in (hidden, q_rank, kv_rank)
        )
        self.q_down, self.kv_down = nn.Linear(hidden, q_rank, bias=False), nn.Linear(
            hidden, kv_rank + rope_dim, bias=False
        )
        self.q_up = nn.Linear(q_rank, heads * (head_dim + rope_dim), bias=False)
        self.kv_up = nn.Linear(kv_rank, heads * 2 * head_dim, bias=False)
        self.out = nn.Linear(heads * head_dim, hidden, bias=False)
        self.kv_rank = kv_rank

    def forward(self, x):
        s, a, d, r = x.shape[0], self.a, self.d, self.r
        y = _norm(x, self.norm)
        q = self.q_up(_norm(self.q_down(y), self.q_norm)).view(s, a, d + r)
        latent, k_rope = self.kv_down(y).split([self.kv_rank, r], dim=-1)
        k_nope, v = self.kv_up(_norm(latent, self.kv_norm)).view(s, a, 2 * d).split([d, d], dim=-1)
        k = torch.cat([k_nope, k_rope.unsqueeze(1).expand(s, a, r)], dim=-1)
        o = FlashAttention.apply(q, k, v.contiguous())
        return x + self.out(o.view(s, a * d))


class MoEHalf(nn.Module):
    """An MoE MLP as Megatron-Core's: the norm, a router whose top-k choice and probabilities come
    from its scores, each token copied to its k experts (the dispatch), each expert's gate-and-up
    matmul, the weighted SwiGLU and its down matmul, the copies summed back (the combine);
    ``shared`` experts of the same width beside them."""

    def __init__(self, hidden: int, experts: int, topk: int, shared: int, expert_hidden: int):
        super().__init__()
        self.k, self.n = topk, experts
        self.norm = nn.Parameter(torch.ones(hidden))
        self.router = nn.Linear(hidden, experts, bias=False)
        self.w13 = nn.Parameter(torch.randn(experts, hidden, 2 * expert_hidden) / hidden**0.5)
        self.w2 = nn.Parameter(torch.randn(experts, expert_hidden, hidden) / expert_hidden**0.5)
        self.shared13 = (
            nn.Linear(hidden, shared * 2 * expert_hidden, bias=False) if shared else None
        )
        self.shared2 = nn.Linear(shared * expert_hidden, hidden, bias=False) if shared else None

    def forward(self, x):
        s, h = x.shape
        y = _norm(x, self.norm)
        # routing: the router's own saved scores are not what this half measures
        with (torch.no_grad()):
            scores = torch.sigmoid(self.router(y).float())
            top = scores.topk(self.k, dim=-1).indices
            prob = scores.gather(-1, top)  # [s, k] fp32
        order = top.flatten().argsort()
        token = order // self.k
        copies = y[token]  # [s·k, h] in expert order: the dispatched tokens
        counts = torch.bincount(top.flatten(), minlength=self.n).tolist()
        outs, start = [], 0
        for e, n in enumerate(counts):
            rows = slice(start, start + n)
            act = WeightedSwiGLU.apply(
                copies[rows] @ self.w13[e], prob.flatten()[order[rows]].unsqueeze(-1)
            )
            outs.append(act @ self.w2[e])
            start += n
        # the combine, back in token order
        out = torch.cat(outs)[order.argsort()].view(s, self.k, h).sum(1)
        if self.shared13 is not None:
            out = out + self.shared2(WeightedSwiGLU.apply(self.shared13(y)))
        return x + out


class DenseMLPHalf(nn.Module):
    """A dense SwiGLU MLP as Megatron-Core's: the pre-MLP norm, the gate-and-up matmul, the fused
    SwiGLU and the down matmul; with ``recompute``, the MLP after the norm under a normal checkpoint
    on the norm's output, which saves that input for its backward as Megatron-Core's
    tensor_parallel.checkpoint does (TransformerLayer with recompute_modules 'mlp')."""

    def __init__(self, hidden: int, ffn_hidden: int, recompute: bool = False):
        super().__init__()
        self.recompute = recompute
        self.norm = nn.Parameter(torch.ones(hidden))
        self.fc1 = nn.Linear(hidden, 2 * ffn_hidden, bias=False)
        self.fc2 = nn.Linear(ffn_hidden, hidden, bias=False)

    def _mlp(self, y):
        return self.fc2(WeightedSwiGLU.apply(self.fc1(y)))

    def forward(self, x):
        y = _norm(x, self.norm)
        if self.recompute:
            from torch.utils.checkpoint import checkpoint

            return x + checkpoint(self._mlp, y, use_reentrant=True)
        return x + self._mlp(y)


def _dropout(x, p):
    """Training-mode dropout as F.dropout runs it on a GPU (native_dropout: a 1-byte mask saved); on
    a CPU F.dropout itself multiplies by a noise tensor of the input's dtype instead."""
    return torch.native_dropout(x, p, True)[0]


class LegacyLlamaLayer(nn.Module):
    """A Llama layer as Megatron-LM's model before Megatron-Core runs it with --use-flash-attn and
    --swiglu (megatron/model/transformer.py, 2023): fused RMSNorms, Q, K and V rearranged into
    contiguous [b, s, a, d] copies for the flash-attn kernel, its output rearranged back into a
    contiguous [s, b, a·d] tensor for the output projection, hidden dropout in each
    bias_dropout_add, and the SwiGLU as F.silu(gate) * up. Input [s, b, h]."""

    def __init__(self, hidden: int, heads: int, ffn_hidden: int, dropout: float = 0.1):
        super().__init__()
        self.a, self.p = heads, dropout
        self.norm1, self.norm2 = nn.Parameter(torch.ones(hidden)), nn.Parameter(torch.ones(hidden))
        self.qkv, self.dense = nn.Linear(hidden, 3 * hidden, bias=False), nn.Linear(
            hidden, hidden, bias=False
        )
        self.h_to_4h, self.four_h_to_h = nn.Linear(hidden, 2 * ffn_hidden, bias=False), nn.Linear(
            ffn_hidden, hidden, bias=False
        )

    def forward(self, x):
        s, b, h = x.shape
        qkv = self.qkv(_norm(x, self.norm1)).view(s, b, 3, self.a, h // self.a)
        # rearrange 's b ... -> b s ...'
        q, k, v = (
            qkv[:, :, i].transpose(0, 1).contiguous() for i in range(3)
        )
        # 'b s h d -> s b (h d)'
        context = FlashAttention.apply(q, k, v).transpose(0, 1).reshape(s, b, h).contiguous()
        x = x + _dropout(self.dense(context), self.p)
        gate, up = torch.chunk(self.h_to_4h(_norm(x, self.norm2)), 2, dim=-1)
        return x + _dropout(self.four_h_to_h(F.silu(gate) * up), self.p)


def _quantize(x, block):
    """``x`` in E4M3 as Transformer Engine saves it, with its scales: one FP32 scale for the
    tensor (``block`` None, per-tensor FP8), or an E8M0 scale per ``block`` elements along the last
    dimension (MXFP8, OCP MX v1.0 §5: 2^(⌊log2 amax⌋ − 8), E4M3's largest exponent 8)."""
    xf = x.float()
    if block is None:
        scale = (448 / xf.abs().amax().clamp(min=2**-126)).reshape(1)
        return (xf * scale).to(torch.float8_e4m3fn), scale
    blocks = xf.reshape(*xf.shape[:-1], -1, block)
    exponent = torch.floor(torch.log2(blocks.abs().amax(-1, keepdim=True).clamp(min=2**-126))) - 8
    q = (blocks / torch.exp2(exponent)).to(torch.float8_e4m3fn).reshape(x.shape)
    return q, torch.exp2(exponent).squeeze(-1).to(torch.float8_e8m0fnu)


def _dequantize(q, scale, block, dtype):
    if block is None:
        return (q.float() / scale).to(dtype)
    blocks = q.float().reshape(*q.shape[:-1], -1, block) * scale.float().unsqueeze(-1)
    return blocks.reshape(q.shape).to(dtype)


def _weight_grad(grad, x):
    return grad.reshape(-1, grad.shape[-1]).t() @ x.reshape(-1, x.shape[-1])


class QuantizedLinear(torch.autograd.Function):
    """A Transformer Engine linear under a quantization recipe (``block``: None for per-tensor FP8,
    32 for MXFP8): its input saved quantized for the weight-gradient GEMM, or, with
    ``save_original``, the input itself (Megatron-Core's save_original_input)."""

    @staticmethod
    def forward(ctx, x, weight, block, save_original):
        ctx.block, ctx.original = block, save_original
        if save_original:
            ctx.save_for_backward(x, weight)
        else:
            ctx.save_for_backward(*_quantize(x, block), weight)
        return x @ weight.t()

    @staticmethod
    def backward(ctx, grad):
        if ctx.original:
            x, weight = ctx.saved_tensors
        else:
            q, scale, weight = ctx.saved_tensors
            x = _dequantize(q, scale, ctx.block, grad.dtype)
        return grad @ weight, _weight_grad(grad, x), None, None


class NormQuantizedLinear(torch.autograd.Function):
    """Transformer Engine's LayerNormLinear under a quantization recipe: an RMSNorm fused with the
    linear after it; the norm's input and fp32 reciprocal RMS are saved, and its output quantized
    (TE's ln_out)."""

    @staticmethod
    def forward(ctx, x, norm_weight, weight, block):
        rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)
        y = (x.float() * rstd).to(x.dtype) * norm_weight
        ctx.block = block
        ctx.save_for_backward(x, norm_weight, rstd, *_quantize(y, block), weight)
        return y @ weight.t()

    @staticmethod
    def backward(ctx, grad):
        x, norm_weight, _, q, scale, weight = ctx.saved_tensors
        y = _dequantize(q, scale, ctx.block, grad.dtype)
        with torch.enable_grad():
            x_, w_ = x.detach().requires_grad_(), norm_weight.detach().requires_grad_()
            normed = FusedRMSNorm.apply(x_, w_)
            dx, dw = torch.autograd.grad(normed, (x_, w_), grad @ weight)
        return dx, dw, _weight_grad(grad, y), None


class QuantizedLlamaLayer(nn.Module):
    """A Llama layer as Megatron-Core builds it with Transformer Engine under a quantization
    recipe ("delayed" or "tensorwise" FP8, or "mxfp8"): the QKV projection and the MLP's first
    matrix fused with their norms, FlashAttention, the output projection (saving the attention's
    16-bit output, or under delayed scaling a quantized copy), the fused SwiGLU and the down
    projection. Input [s, h]."""

    def __init__(self, hidden: int, heads: int, ffn_hidden: int, recipe: str):
        super().__init__()
        self.a, self.block = heads, 32 if recipe == "mxfp8" else None
        self.original = recipe != "delayed"
        self.norm1, self.norm2 = nn.Parameter(torch.ones(hidden)), nn.Parameter(torch.ones(hidden))
        self.qkv, self.proj, self.fc1, self.fc2 = (
            nn.Parameter(torch.randn(n, k) / k**0.5)
            for n, k in (
                (3 * hidden, hidden), (hidden, hidden), (2 * ffn_hidden, hidden),
                (hidden, ffn_hidden),
            )
        )

    def forward(self, x):
        s, h = x.shape
        qkv = NormQuantizedLinear.apply(x, self.norm1, self.qkv, self.block)
        q, k, v = qkv.view(s, self.a, 3, h // self.a).unbind(2)
        out = FlashAttention.apply(q, k, v).view(s, h)
        x = x + QuantizedLinear.apply(out, self.proj, self.block, self.original)
        act = WeightedSwiGLU.apply(NormQuantizedLinear.apply(x, self.norm2, self.fc1, self.block))
        return x + QuantizedLinear.apply(act, self.fc2, self.block, False)


def saved_bytes(module: nn.Module, tokens: int, hidden: int, batch: int | None = None) -> dict:
    """Bytes of the distinct storages ``module``'s bf16 forward on ``tokens`` tokens ([tokens,
    hidden], or [tokens, batch, hidden] sequences when ``batch`` is given) saves for its backward,
    by dtype ("bfloat16", "float32", "bool": dropout masks, "float8_e4m3fn" and "float8_e8m0fnu":
    quantized inputs and their block scales); its parameters (model states) and
    integer index tensors (the dispatch's bookkeeping) left out."""
    module = module.to(torch.bfloat16)
    params = {p.untyped_storage().data_ptr() for p in module.parameters()}
    seen: dict[int, tuple] = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in params and (t.is_floating_point() or t.dtype == torch.bool):
            seen[storage.data_ptr()] = (str(t.dtype).removeprefix("torch."), storage.nbytes())
        return t

    shape = (tokens, hidden) if batch is None else (tokens, batch, hidden)
    x = torch.randn(*shape, dtype=torch.bfloat16, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = module(x)
    y.sum().backward()  # the graph runs: what was saved was what its backward needs
    out: dict[str, int] = {}
    for dtype, n in seen.values():
        out[dtype] = out.get(dtype, 0) + n
    return out


__all__ = [
    "DenseMLPHalf",
    "FlashAttention",
    "FusedRMSNorm",
    "LegacyLlamaLayer",
    "MLAHalf",
    "MoEHalf",
    "NormQuantizedLinear",
    "QuantizedLinear",
    "QuantizedLlamaLayer",
    "WeightedSwiGLU",
    "saved_bytes",
]
