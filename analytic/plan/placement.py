"""Stage 2 of a plan: the nodes, and the parameters each GPU holds (where the ranks of each axis sit
and which link they use: :mod:`.ranks`)."""

from __future__ import annotations

from ..core.algebra import ceiling, is_false
from ..core.composition import cases
from ..core.formula import Formula
from ..core.terms import ratio
from ..formulas import formula
from .inputs import Inputs


def nodes(inp: Inputs):
    return ceiling(ratio(inp.deg.gpus, inp.values["gpus_per_node"]))


def parameters(inp: Inputs) -> dict:
    """Total (the model's published count), stored (with the MTP modules), routed-expert and per-GPU
    (dense and expert, on average over the ranks: twice under DualPipe) parameter expressions."""
    lay, m = inp.deg, inp.model
    total = m.params_formula()
    stored = total + m.mtp_params_formula() if m.mtp_modules else total
    routed = (
        m.routed_experts_formula() * m.moe_blocks
        if m.is_moe
        else Formula("zero", 0, "parameter", "")
    )
    dense_local = (stored - routed) / (lay.tp * lay.pp)
    expert_local = routed / (lay.etp * lay.pp * lay.ep)
    dual = lay.schedule_is("dualpipe")
    if not is_false(dual):  # each rank holds two stages (pipeline.parameter_copies.dualpipe)
        copies = formula("pipeline.parameter_copies.dualpipe")
        dense_local, expert_local = (
            cases(f.name, "parameter", (f * copies, dual), (f, True))
            for f in (dense_local, expert_local)
        )
    return {
        "total": total,
        "stored": stored,
        "routed": routed,
        "dense_local": dense_local,
        "expert_local": expert_local,
        "per_gpu": dense_local + expert_local,
    }


def replica_groups(inp: Inputs, params: dict) -> list:
    """(parameters per GPU, ranks, stride) of the groups that hold the same parameters: they reduce
    gradients together and ZeRO shards over them. CP ranks hold the same weights and see different
    tokens, so they join DP (Megatron's data-parallel group with context parallelism; torchtitan's
    FSDP over the flattened dp_shard × cp mesh). Experts: the expert data parallel group,
    tp·cp·dp/(etp·ep) ranks etp·ep apart (Megatron-Core's MoE parallel folding)."""
    lay = inp.deg
    return [
        (params["dense_local"], lay.dp * lay.cp, lay.tp),
        (params["expert_local"], lay.tp * lay.cp * lay.dp / (lay.etp * lay.ep), lay.etp * lay.ep),
    ]


def optimizer_shard(inp: Inputs, params: dict) -> Formula:
    """Parameters this GPU's optimizer updates: its ZeRO shard (ZeRO ≥ 1) of each replica
    group's."""
    shard = None
    for local, dp, _ in replica_groups(inp, params):
        part = cases("shard", "parameter", (local / dp, inp.deg.zero_at_least(1)), (local, True))
        shard = part if shard is None else shard + part
    return shard
