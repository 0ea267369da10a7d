"""The bytes an AdamW step moves, counted on the operations PyTorch dispatches: each reads its
distinct tensor operands once and writes its outputs (or, in place, the operands it mutates).
Against ``compute.optimizer.bytes_per_param_foreach`` and
``compute.optimizer.weight_decay_bytes_per_param``.

Only tensors of more than one element count (the step counters and bias corrections are scalars),
and a view moves nothing. A fused kernel declares every tensor it may write (the gradients too,
which it unscales under a gradient scaler), so its count is not the HBM traffic: it is left out.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ..core.values import choice

#: AdamW's arguments for PyTorch's two unfused implementations (_multi_tensor_adam,
#: _single_tensor_adam)
KERNELS = {"foreach": {"foreach": True}, "for-loop": {"foreach": False}}


def _bytes(values) -> int:
    """Bytes of the distinct storages of the tensors (of more than one element) among ``values``."""
    storages = {}
    for t in values:
        if isinstance(t, torch.Tensor) and t.numel() > 1:
            storages[t.untyped_storage().data_ptr()] = t.numel() * t.element_size()
    return sum(storages.values())


class Traffic(TorchDispatchMode):
    """Bytes read and written by the operations dispatched inside it."""

    def __init__(self):
        super().__init__()
        self.read = self.written = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        schema = func._schema
        named = dict(zip((a.name for a in schema.arguments), args)) | kwargs
        mutated = [named[a.name] for a in schema.arguments
                   if a.alias_info is not None and a.alias_info.is_write and a.name in named]
        if not mutated and any(r.alias_info is not None for r in schema.returns):
            return out  # a view
        self.read += _bytes(tree_flatten((args, kwargs))[0])
        self.written += _bytes(tree_flatten(mutated or out)[0])
        return out


def bytes_per_param(kernel: str, weight_decay: float, *, sizes=(4096, 1000, 3)) -> float:
    """Bytes a second AdamW step (``kernel``: PyTorch's foreach or for-loop) moves per fp32
    parameter, over parameters of ``sizes`` elements with fp32 gradients."""
    choice("kernel", kernel, tuple(KERNELS))
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(n)) for n in sizes]
    optimizer = torch.optim.AdamW(params, lr=1e-3, weight_decay=weight_decay, **KERNELS[kernel])
    for p in params:
        p.grad = torch.randn_like(p)
    optimizer.step()  # the moments exist from here on
    with Traffic() as traffic:
        optimizer.step()
    return (traffic.read + traffic.written) / sum(sizes)
