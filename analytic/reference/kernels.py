"""Autograd Functions that save for backward exactly what production stacks' fused kernels save (and
what the library's activation formulas count), for :mod:`analytic.reference.transformer`."""

from __future__ import annotations

import torch
import torch.nn.functional as F


class RMSNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, eps):
        rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, w, rstd)
        return (x.float() * rstd).to(x.dtype) * w

    @staticmethod
    def backward(ctx, g):
        x, w, rstd = ctx.saved_tensors
        xhat = x.float() * rstd
        gw = (g.float() * xhat).sum(dim=tuple(range(g.dim() - 1))).to(w.dtype)
        gx_hat = g.float() * w.float()
        gx = rstd * (gx_hat - xhat * (gx_hat * xhat).mean(-1, keepdim=True))
        return gx.to(x.dtype), gw, None


class LayerNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, bias, eps):
        xf = x.float()
        mean = xf.mean(-1, keepdim=True)
        rstd = torch.rsqrt(((xf - mean) ** 2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, w, mean, rstd)
        return ((xf - mean) * rstd).to(x.dtype) * w + bias

    @staticmethod
    def backward(ctx, g):
        x, w, mean, rstd = ctx.saved_tensors
        xhat = (x.float() - mean) * rstd
        dims = tuple(range(g.dim() - 1))
        gw = (g.float() * xhat).sum(dims).to(w.dtype)
        gb = g.float().sum(dims).to(w.dtype)
        gx_hat = g.float() * w.float()
        gx = rstd * (gx_hat - gx_hat.mean(-1, keepdim=True) - xhat * (gx_hat * xhat).mean(-1, keepdim=True))
        return gx.to(x.dtype), gw, gb, None


class SwiGLUFn(torch.autograd.Function):
    """silu(gate) * up, saving gate and up only (SiLU recomputed)."""

    @staticmethod
    def forward(ctx, gate, up):
        ctx.save_for_backward(gate, up)
        return F.silu(gate) * up

    @staticmethod
    def backward(ctx, g):
        gate, up = ctx.saved_tensors
        gf = gate.float()
        sig = torch.sigmoid(gf)
        silu = gf * sig
        d_gate = g.float() * up.float() * (sig * (1 + gf * (1 - sig)))
        return d_gate.to(gate.dtype), (g.float() * silu).to(up.dtype)


class FlashCoreFn(torch.autograd.Function):
    """softmax(QKᵀ·scale + mask)·V as FlashAttention computes it, without the tiling (Dao et al. 2022,
    arXiv 2205.14135 Algorithms 2 and 4): the forward saves Q, K, V, the output and the fp32
    log-sum-exp of each row; the backward recomputes S = QKᵀ and P from them, then dV = PᵀdO,
    dP = dO·Vᵀ, dQ = dS·K, dK = dSᵀ·Q: five matmuls against the forward's two."""

    @staticmethod
    def forward(ctx, q, k, v, mask, scale):
        scores = ((q @ k.transpose(-1, -2)) * scale + mask).to(torch.promote_types(q.dtype, torch.float32))
        lse = torch.logsumexp(scores, dim=-1, keepdim=True)
        out = torch.exp(scores - lse).to(q.dtype) @ v
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.mask, ctx.scale = mask, scale
        return out

    @staticmethod
    def backward(ctx, g):
        q, k, v, out, lse = ctx.saved_tensors
        p = torch.exp(((q @ k.transpose(-1, -2)) * ctx.scale + ctx.mask).to(lse.dtype) - lse).to(q.dtype)
        dv = p.transpose(-1, -2) @ g
        dp = g @ v.transpose(-1, -2)
        ds = p * (dp - (g * out).sum(dim=-1, keepdim=True))
        return (ds @ k) * ctx.scale, (ds.transpose(-1, -2) @ q) * ctx.scale, dv, None, None


class OutProjFn(torch.autograd.Function):
    """o = attn[b, a, s, d] (as flash attention returned it) → [b, s, h] @ Wᵀ, saving ``attn`` itself."""

    @staticmethod
    def forward(ctx, attn, w):
        ctx.save_for_backward(attn, w)
        b, a, s, d = attn.shape
        return attn.transpose(1, 2).reshape(b, s, a * d) @ w.t()

    @staticmethod
    def backward(ctx, g):
        attn, w = ctx.saved_tensors
        b, a, s, d = attn.shape
        flat = attn.transpose(1, 2).reshape(b, s, a * d)
        g_flat = g @ w
        gw = g.reshape(-1, g.shape[-1]).t() @ flat.reshape(-1, a * d)
        return g_flat.reshape(b, s, a, d).transpose(1, 2), gw


class DropoutFn(torch.autograd.Function):
    """Dropout that keeps a 1-byte boolean mask (as CUDA's fused dropout does; the CPU kernel keeps
    a mask in the input's dtype)."""

    @staticmethod
    def forward(ctx, x, p):
        mask = torch.rand_like(x, dtype=torch.float32) >= p
        ctx.save_for_backward(mask)
        ctx.scale = 1.0 / (1.0 - p)
        return x * mask * ctx.scale

    @staticmethod
    def backward(ctx, g):
        (mask,) = ctx.saved_tensors
        return g * mask * ctx.scale, None


def dropout(x, p, training):
    return DropoutFn.apply(x, p) if p and training else x


def rope(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin
