"""Stage 2 of a plan: where the ranks of each axis sit, which link each axis's collectives use, and
the parameters each GPU holds.

Placement follows Megatron-Core's rank order, innermost first: tp, cp, dp (ep inside dp), pp.
An axis whose group fits in a scale-up domain (a node, or an NVL72-class rack of nodes) uses the
scale-up link, one whose ranks are all in other domains the scale-out link; one that spans both is
"two-level"."""

from __future__ import annotations

import sympy

from ..choices import AXES
from ..formula import Formula, cases
from ..formulas import formula
from ..values import is_number
from .inputs import Inputs


def axis_stride(inp: Inputs, axis: str):
    """The distance in the rank order between neighbours of ``axis``'s groups."""
    lay = inp.deg
    return {"tp": 1, "cp": lay.tp, "dp": lay.tp * lay.cp, "ep": lay.tp * lay.cp, "pp": lay.tp * lay.cp * lay.dp}[axis]


def link_kind(size, stride_, g) -> str:
    """"scale-up", "scale-out" or "two-level" for a group of ``size`` ranks ``stride_`` apart on nodes of
    ``g`` GPUs ("symbolic" while that depends on free symbols)."""
    if not all(is_number(x) for x in (size, stride_, g)):
        low = lambda x: sympy.sympify(x).subs({s: 1 for s in sympy.sympify(x).free_symbols})  # degrees ≥ 1  # noqa: E731
        if is_number(g) and is_number(low(stride_)) and low(stride_) >= g:
            return "scale-out"
        return "symbolic"
    if size * stride_ <= g:
        return "scale-up"
    if stride_ >= g:
        return "scale-out"
    return "two-level"


def placement(inp: Inputs) -> dict:
    """For each axis: its size, its stride in the rank order and the link it uses."""
    g = inp.values["scale_up_domain"]
    out = {}
    for axis in AXES:
        size, s = getattr(inp.layout, axis), axis_stride(inp, axis)
        out[axis] = {"size": size, "stride": s, "link": "-" if size == 1 else link_kind(size, s, g)}
    return out


def nodes(inp: Inputs):
    return sympy.ceiling(sympy.sympify(inp.deg.gpus) / inp.values["gpus_per_node"])


def parameters(inp: Inputs) -> dict:
    """Total (the model's published count), stored (with the MTP modules), routed-expert and per-GPU
    (dense and expert, on average over the ranks: twice under DualPipe) parameter expressions."""
    lay, m = inp.deg, inp.model
    total = m.params_formula()
    stored = total + m.mtp_params_formula() if m.mtp_modules else total
    routed = (formula("model.params.routed_experts").bind(m.inputs()) * m.moe_blocks if m.is_moe
              else Formula("zero", sympy.Integer(0), "parameter", ""))
    dense_local = (stored - routed) / (lay.tp * lay.pp)
    expert_local = routed / (lay.tp * lay.pp * lay.ep)
    dual = lay.schedule_is("dualpipe")
    if dual is not sympy.false:  # each rank holds two stages (pipeline.parameter_copies.dualpipe)
        copies = formula("pipeline.parameter_copies.dualpipe")
        dense_local, expert_local = (cases(f.name, "parameter", (f * copies, dual), (f, True))
                                     for f in (dense_local, expert_local))
    return {"total": total, "stored": stored, "routed": routed, "dense_local": dense_local,
            "expert_local": expert_local, "per_gpu": dense_local + expert_local}


def replica_groups(inp: Inputs, params: dict) -> list:
    """(parameters per GPU, ranks, stride) of the groups that hold the same parameters: they
    reduce gradients together and ZeRO shards over them. CP ranks hold the same weights and see
    different tokens, so they join DP (Megatron's data-parallel group with context parallelism;
    torchtitan's FSDP over the flattened dp_shard × cp mesh). Experts: dp·cp/ep replicas."""
    lay = inp.deg
    return [(params["dense_local"], lay.dp * lay.cp, lay.tp),
            (params["expert_local"], lay.dp * lay.cp / lay.ep, axis_stride(inp, "dp"))]


def optimizer_shard(inp: Inputs, params: dict) -> Formula:
    """Parameters this GPU's optimizer updates: its ZeRO shard (ZeRO ≥ 1) of each replica group's."""
    shard = None
    for local, dp, _ in replica_groups(inp, params):
        part = cases("shard", "parameter", (local / dp, inp.deg.zero_at_least(1)), (local, True))
        shard = part if shard is None else shard + part
    return shard
