"""Autograd Functions that save for backward exactly what production stacks' fused kernels save (and
what the library's activation formulas count), for :mod:`analytic.reference.transformer`."""

from __future__ import annotations

import torch
import torch.nn.functional as F

#: rows a kernel below computes at once in fp32 (its working set, which a fused kernel keeps on
#: chip)
BLOCK_ROWS = 128


def _blocks(rows: torch.Tensor):
    """Slices of ``BLOCK_ROWS`` rows covering a 2-D tensor's rows."""
    return (slice(i, i + BLOCK_ROWS) for i in range(0, rows.shape[0], BLOCK_ROWS))


class RMSNormFn(torch.autograd.Function):
    """Saves its input and the fp32 per-row statistics; like a fused kernel, it computes in fp32 a
    block of rows at a time, so no full-size fp32 copy is ever held."""

    @staticmethod
    def forward(ctx, x, w, eps):
        rows = x.reshape(-1, x.shape[-1])
        rstd = torch.empty(rows.shape[0], 1, dtype=torch.float32, device=x.device)
        out = torch.empty_like(rows)
        for r in _blocks(rows):
            xf = rows[r].float()
            rstd[r] = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
            out[r] = (xf * rstd[r]).to(x.dtype) * w
        ctx.save_for_backward(x, w, rstd)
        return out.view(x.shape)

    @staticmethod
    def backward(ctx, g):
        x, w, rstd = ctx.saved_tensors
        rows, g_rows = x.reshape(-1, x.shape[-1]), g.reshape(-1, g.shape[-1])
        gx, gw = torch.empty_like(rows), torch.zeros(w.shape, dtype=torch.float32, device=w.device)
        for r in _blocks(rows):
            xhat = rows[r].float() * rstd[r]
            gw += (g_rows[r].float() * xhat).sum(0)
            gx_hat = g_rows[r].float() * w.float()
            gx[r] = rstd[r] * (gx_hat - xhat * (gx_hat * xhat).mean(-1, keepdim=True))
        return gx.view(x.shape), gw.to(w.dtype), None


class LayerNormFn(torch.autograd.Function):
    """Saves its input and the fp32 per-row mean and reciprocal standard deviation; computes in fp32
    a block of rows at a time, as :class:`RMSNormFn` does."""

    @staticmethod
    def forward(ctx, x, w, bias, eps):
        rows = x.reshape(-1, x.shape[-1])
        mean, rstd = (
            torch.empty(rows.shape[0], 1, dtype=torch.float32, device=x.device) for _ in range(2)
        )
        out = torch.empty_like(rows)
        for r in _blocks(rows):
            xf = rows[r].float()
            mean[r] = xf.mean(-1, keepdim=True)
            rstd[r] = torch.rsqrt((xf - mean[r]).pow(2).mean(-1, keepdim=True) + eps)
            out[r] = ((xf - mean[r]) * rstd[r]).to(x.dtype) * w + bias
        ctx.save_for_backward(x, w, mean, rstd)
        return out.view(x.shape)

    @staticmethod
    def backward(ctx, g):
        x, w, mean, rstd = ctx.saved_tensors
        rows, g_rows = x.reshape(-1, x.shape[-1]), g.reshape(-1, g.shape[-1])
        gx = torch.empty_like(rows)
        gw, gb = (torch.zeros(w.shape, dtype=torch.float32, device=w.device) for _ in range(2))
        for r in _blocks(rows):
            xhat = (rows[r].float() - mean[r]) * rstd[r]
            gf = g_rows[r].float()
            gw += (gf * xhat).sum(0)
            gb += gf.sum(0)
            gx_hat = gf * w.float()
            gx[r] = rstd[r] * (
                gx_hat
                - gx_hat.mean(-1, keepdim=True)
                - xhat * (gx_hat * xhat).mean(-1, keepdim=True)
            )
        return gx.view(x.shape), gw.to(w.dtype), gb.to(w.dtype), None


class SwiGLUFn(torch.autograd.Function):
    """silu(gate) * up, saving gate and up only (SiLU recomputed). Like a fused kernel, its backward
    holds only the two 16-bit gradients it returns: it computes in fp32 a block of rows at a
    time."""

    @staticmethod
    def forward(ctx, gate, up):
        ctx.save_for_backward(gate, up)
        return F.silu(gate) * up

    @staticmethod
    def backward(ctx, g):
        gate, up = ctx.saved_tensors
        n = gate.shape[-1]
        gates, ups, gs = gate.reshape(-1, n), up.reshape(-1, n), g.reshape(-1, n)
        d_gate, d_up = torch.empty_like(gates), torch.empty_like(ups)
        for r in _blocks(gates):
            gf = gates[r].float()
            sig = torch.sigmoid(gf)
            d_gate[r] = gs[r].float() * ups[r].float() * (sig * (1 + gf * (1 - sig)))
            d_up[r] = gs[r].float() * gf * sig
        return d_gate.view(gate.shape), d_up.view(up.shape)


class FlashCoreFn(torch.autograd.Function):
    """softmax(QKᵀ·scale + mask)·V as FlashAttention computes it, without the tiling (Dao et al.
    2022, arXiv 2205.14135 Algorithms 2 and 4): the forward saves Q, K, V, the output and the fp32
    log-sum-exp of each row; the backward recomputes S = QKᵀ and P from them, then dV = PᵀdO, dP
    = dO·Vᵀ, dQ = dS·K, dK = dSᵀ·Q: five matmuls against the forward's two."""

    @staticmethod
    def forward(ctx, q, k, v, mask, scale):
        scores = ((q @ k.transpose(-1, -2)) * scale + mask).to(
            torch.promote_types(q.dtype, torch.float32)
        )
        lse = torch.logsumexp(scores, dim=-1, keepdim=True)
        out = torch.exp(scores - lse).to(q.dtype) @ v
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.mask, ctx.scale = mask, scale
        return out

    @staticmethod
    def backward(ctx, g):
        q, k, v, out, lse = ctx.saved_tensors
        p = torch.exp(((q @ k.transpose(-1, -2)) * ctx.scale + ctx.mask).to(lse.dtype) - lse).to(
            q.dtype
        )
        dv = p.transpose(-1, -2) @ g
        dp = g @ v.transpose(-1, -2)
        ds = p * (dp - (g * out).sum(dim=-1, keepdim=True))
        return (ds @ k) * ctx.scale, (ds.transpose(-1, -2) @ q) * ctx.scale, dv, None, None


class OutProjFn(torch.autograd.Function):
    """o = attn[b, a, s, d] (as flash attention returned it) → [b, s, h] @ Wᵀ, saving ``attn``
    itself."""

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
