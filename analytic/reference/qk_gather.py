"""TorchTitan's tensor-parallel plan of a Qwen3 attention block (2025) on a real gloo process group:
the all-gathers its QK norms add, against the catalogue's ``parallelism.tp.qk_gather_bytes`` and
``parallelism.tp.qk_gather_bytes_backward``.

The block is TorchTitan's Qwen3 ``Attention`` (``torchtitan/experiments/qwen3/model/model.py``:
projections, per-head RMSNorm of queries and keys, RoPE, ``repeat_kv``,
``scaled_dot_product_attention``) under its plan
(``torchtitan/experiments/qwen3/infra/parallelize.py``): the input all-gathered from its sequence
shard, ``wq``/``wk``/``wv`` ``ColwiseParallel(use_local_output=False)``, ``wo``
``RowwiseParallel(output_layouts= Shard(1))``, and ``q_norm``/``k_norm`` either under TorchTitan's
``NoParallel(use_local_output=False)`` (its code below, as the plan ran until pytorch/torchtitan
issue #1867) or under ``SequenceParallel(sequence_dim=2)``, the fix. Every all-gather dispatched in
a forward and backward is recorded with the elements it gathers.

Run with :func:`analytic.reference.collectives.run` (``run(world, check)``).
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from .collectives import Dispatched

BATCH, SEQUENCE, HEADS, KV_HEADS, HEAD_DIM = 2, 8, 4, 2, 16
HIDDEN = HEADS * HEAD_DIM


def _no_parallel():
    """pytorch/torchtitan ``NoParallel`` (torchtitan/distributed/expert_parallel.py, 2025, which the
    Qwen3 plan imports for its QK norms; its redistributions run synchronously here): parameters
    replicated, an input whose declared layout is not Replicate redistributed to it, and an output
    whose placements are not (Replicate(),) redistributed to Replicate()."""
    from torch.distributed.tensor import DTensor, Replicate, distribute_module
    from torch.distributed.tensor.parallel import ParallelStyle

    class NoParallel(ParallelStyle):
        def __init__(self, *, use_local_output: bool = True):
            super().__init__()
            self.input_layout = self.output_layout = self.desired_input_layout = Replicate()
            self.use_local_output = use_local_output

        @staticmethod
        def _prepare_input_fn(input_layout, desired_input_layout, mod, inputs, device_mesh):
            x = inputs[0]
            if not isinstance(x, DTensor):
                x = DTensor.from_local(x, device_mesh, (input_layout,), run_check=False)
            if input_layout != desired_input_layout:
                x = x.redistribute(placements=(desired_input_layout,))
            return (x, *inputs[1:])

        @staticmethod
        def _prepare_output_fn(output_layout, use_local_output, mod, outputs, device_mesh):
            if outputs.placements != (output_layout,):
                outputs = outputs.redistribute(placements=(output_layout,))
            return outputs.to_local() if use_local_output else outputs

        def _apply(self, module, device_mesh):
            return distribute_module(
                module,
                device_mesh,
                None,
                partial(self._prepare_input_fn, self.input_layout, self.desired_input_layout),
                partial(self._prepare_output_fn, self.output_layout, self.use_local_output),
            )

    return NoParallel(use_local_output=False)


class Attention(nn.Module):
    """TorchTitan's Qwen3 attention: projections, QK norms, RoPE, repeated key and value heads,
    SDPA."""

    def __init__(self):
        super().__init__()
        self.wq = nn.Linear(HIDDEN, HEADS * HEAD_DIM, bias=False)
        self.wk = nn.Linear(HIDDEN, KV_HEADS * HEAD_DIM, bias=False)
        self.wv = nn.Linear(HIDDEN, KV_HEADS * HEAD_DIM, bias=False)
        self.wo = nn.Linear(HEADS * HEAD_DIM, HIDDEN, bias=False)
        self.q_norm = nn.RMSNorm(HEAD_DIM, eps=1e-6)
        self.k_norm = nn.RMSNorm(HEAD_DIM, eps=1e-6)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        xq = self.q_norm(self.wq(x).view(b, s, -1, HEAD_DIM))
        xk = self.k_norm(self.wk(x).view(b, s, -1, HEAD_DIM))
        xv = self.wv(x).view(b, s, -1, HEAD_DIM)

        def rotate(t):  # model.py apply_rotary_emb: (t * cos) + (rotate_half(t) * sin)
            half = t.shape[-1] // 2
            return t * cos + torch.cat((-t[..., half:], t[..., :half]), dim=-1) * sin

        def repeat(t):  # model.py repeat_kv
            return (
                t.unsqueeze(3)
                .expand(b, s, t.shape[2], HEADS // KV_HEADS, HEAD_DIM)
                .reshape(b, s, -1, HEAD_DIM)
            )

        q, k, v = (t.transpose(1, 2) for t in (rotate(xq), repeat(rotate(xk)), repeat(xv)))
        return self.wo(_attention(q, k, v).transpose(1, 2).contiguous().view(b, s, -1))


def _attention(q, k, v):
    """SDPA on DTensors as DTensor's flash-attention strategy runs it on CUDA
    (torch/distributed/tensor/_ops/ _matrix_ops.py, scaled_dot_product_flash_attention_strategy):
    every input sharded on the heads, the cheapest of its strategies for replicated queries and keys
    and head-sharded values (a local slice each); DTensor registers no strategy for the CPU kernel,
    so the redistribution is made here and the kernel runs on the local heads."""
    from torch.distributed.tensor import DTensor, Shard

    if not isinstance(q, DTensor):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    q, k, v = (t.redistribute(placements=(Shard(1),)) for t in (q, k, v))
    out = F.scaled_dot_product_attention(q.to_local(), k.to_local(), v.to_local(), is_causal=True)
    return DTensor.from_local(out, q.device_mesh, (Shard(1),), run_check=False)


def _gathered(world: int, fixed: bool) -> list[int]:
    """Elements of each all-gather of one forward and backward of the block under the plan, the QK
    norms under NoParallel (``fixed`` False) or SequenceParallel(sequence_dim=2)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)
    block = Attention()
    norm = (lambda: SequenceParallel(sequence_dim=2)) if fixed else _no_parallel
    parallelize_module(
        block,
        mesh,
        {
            "": PrepareModuleInput(
                input_layouts=(Shard(1), Replicate(), Replicate()),
                desired_input_layouts=(Replicate(), Replicate(), Replicate()),
            ),
            "wq": ColwiseParallel(use_local_output=False),
            "wk": ColwiseParallel(use_local_output=False),
            "wv": ColwiseParallel(use_local_output=False),
            "q_norm": norm(),
            "k_norm": norm(),
            "wo": RowwiseParallel(output_layouts=Shard(1)),
        },
    )
    angle = torch.arange(SEQUENCE).float()[:, None] / 10 ** (torch.arange(HEAD_DIM) / HEAD_DIM)
    cos, sin = angle.cos()[None, :, None, :], angle.sin()[None, :, None, :]
    x = torch.randn(BATCH, SEQUENCE // world, HIDDEN, requires_grad=True)
    with Dispatched(torch.ops._c10d_functional.all_gather_into_tensor.default) as gathers:
        out = block(x, cos, sin)
        (out.to_local() if hasattr(out, "to_local") else out).square().sum().backward()
    return gathers.elements


def checks(rank: int, world: int) -> dict:
    """The elements all-gathered in one forward and backward of the block, its QK norms under
    NoParallel and under SequenceParallel(sequence_dim=2), and the catalogue's messages of the QK
    gathers (forward and backward) at this block's shape, in elements."""
    from ..formulas import formula

    shape = dict(seq_len=SEQUENCE, microbatch_size=BATCH, heads=HEADS, kv_heads=KV_HEADS,
                 head_dim=HEAD_DIM, element_bytes="1 B")
    return {
        "no_parallel": _gathered(world, fixed=False),
        "sequence_parallel": _gathered(world, fixed=True),
        "catalogue_forward": float(
            formula("parallelism.tp.qk_gather_bytes").evaluate(**shape).to("byte").magnitude
        ),
        "catalogue_backward": float(
            formula("parallelism.tp.qk_gather_bytes_backward")
            .evaluate(**{k: v for k, v in shape.items() if k != "kv_heads"})
            .to("byte")
            .magnitude
        ),
    }


__all__ = ["Attention", "checks"]
