"""Sequence-parallel collectives on the sequence dimension, dim 1 of [batch, sequence, hidden], as
TorchTitan's DTensor plans run them, on a real gloo process group: the copies each collective makes
beside its transfer, run eager (the ``aten.cat`` calls dispatched) and under ``torch.compile``
(the kernels Inductor generates between a collective and the matmul beside it), against the
catalogue's ``compute.memory_bound.sp_relayout``.

Run with :func:`analytic.reference.collectives.run` (``run(world, check)``).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc

from .collectives import Dispatched

BATCH, SEQUENCE, HIDDEN = 2, 8, 64  # a microbatch of 2 sequences of 8 tokens, hidden 64


def _gather(x, group):
    return fc.all_gather_tensor(x, gather_dim=1, group=group)


def _scatter(x, group):
    return fc.reduce_scatter_tensor(x, "sum", scatter_dim=1, group=group)


def _compiled_kernels(fn, *args) -> list[str]:
    """Names of the kernels Inductor generates for ``fn`` (collectives and extern matmuls are not
    kernels)."""
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    _, code = run_and_get_code(torch.compile(fn), *args)
    return sorted(
        {
            line.split("=")[0].strip()
            for src in code
            for line in src.splitlines()
            if "= async_compile." in line
        }
    )


def checks(rank: int, world: int) -> dict:
    """Per token of the microbatch, the elements the copies around one all-gather and one
    reduce-scatter on the sequence dimension move (each copy reads and writes its tensor), eager;
    the catalogue's count for a block's two of each, halved, at this hidden size; and, compiled, the
    kernels Inductor puts between an all-gather and the matmul after it and between a matmul and the
    reduce-scatter after it."""
    from ..formulas import formula

    group = dist.group.WORLD
    torch.manual_seed(0)
    shard = torch.randn(BATCH, SEQUENCE // world, HIDDEN)
    full = torch.randn(BATCH, SEQUENCE, HIDDEN)
    weight = torch.randn(HIDDEN, HIDDEN)
    with Dispatched(torch.ops.aten.cat.default) as copies:  # the elements each concatenation writes
        gathered = fc.wait_tensor(_gather(shard, group))
        scattered = fc.wait_tensor(_scatter(full, group))
    tokens = BATCH * SEQUENCE
    return {
        "gathered": list(gathered.shape),
        "scattered": list(scattered.shape),
        "moved_per_token": 2 * sum(copies.elements) / tokens,  # read and write
        "catalogue_per_token": (
            float(formula("compute.memory_bound.sp_relayout").evaluate(hidden=HIDDEN)) / 2
        ),
        "after_gather": _compiled_kernels(lambda x, w: _gather(x, group) @ w, shard, weight),
        "before_scatter": _compiled_kernels(lambda x, w: _scatter(x @ w, group), full, weight),
    }


__all__ = ["checks"]
