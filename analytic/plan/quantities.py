"""The plan's named quantities: each name, and how its expression is built from the plan's stages
(:meth:`analytic.Plan.expr` resolves a name here; :meth:`analytic.Plan.quantities` lists them)."""

from __future__ import annotations

from ..core.choices import AXES, OP_CLASSES
from ..core.formula import Formula
from ..core.symbols import read_magnitude
from ..core.terms import ratio
from . import compute, memory, placement, timing


def builders(plan) -> dict:
    """name → a function building quantity ``name``'s Formula from ``plan``'s stages."""
    inp, deg, e = plan._in, plan.deg, plan.expr
    local_seq = {"seq_len": inp.seq_len / deg.cp}  # the tokens of a sequence one CP rank holds
    b = {
        "gpus": lambda: Formula("gpus", deg.gpus, "", ""),
        "nodes": lambda: Formula("nodes", placement.nodes(inp), "", ""),
        "microbatches": lambda: Formula("m", inp.microbatches, "", ""),
        "tokens_per_step": lambda: inp.tokens_per_step,
        "params": lambda: plan._params["total"],
        "active_params": lambda: plan.model.active_params_formula(),
        "params_per_gpu": lambda: plan._params["per_gpu"],
        "optimizer_params": lambda: placement.optimizer_shard(inp, plan._params),
        "layers_per_stage": lambda: Formula("L/p", ratio(plan.model.layers, deg.pp), "", ""),
        **{f"memory.{k}": (lambda k=k: plan._worst[k]) for k in (*memory.PARTS, "host")},
        "memory.activations.first_stage": lambda: plan._stage(0)["activations"],
        "memory.activations.last_stage": lambda: plan._stage(deg.pp - 1)["activations"],
        "memory.activations.layer": lambda: plan._activation_parts["layer"],
        "memory.logits": lambda: plan._activation_parts["logits"],
        "memory.logits.unsplit": lambda: inp.f("memory.logits", **local_seq),
        "memory.loss": lambda: plan._activation_parts["loss"],
        "memory.total": lambda: plan._worst["total"],
        "memory.headroom": lambda: inp.f("memory.headroom", counted_bytes=e("memory.total")),
        "flops": lambda: compute.model_flops(inp, "6nd"),
        "flops.6nd": lambda: compute.model_flops(inp, "6nd"),
        "flops.palm": lambda: compute.model_flops(inp, "palm"),
        "flops.megatron": lambda: compute.model_flops(inp, "megatron"),
        "flops.megatron-core": lambda: compute.model_flops(inp, "megatron-core"),
        "flops.hardware": lambda: compute.hardware_flops(inp),
        "bubble": lambda: plan._time["bubble"] / timing.total(plan._time, OP_CLASSES[:3]),
        "time.compute": lambda: timing.total(plan._time, OP_CLASSES),
        "time.bubble": lambda: plan._time["bubble"],
        "time.imbalance": lambda: plan._time["imbalance"],
        "time.stage.first": lambda: plan._time["stage.first"],
        "time.stage.middle": lambda: plan._time["stage.middle"],
        "time.stage.last": lambda: plan._time["stage.last"],
        "step_time": lambda: timing.total(plan._time),
        "mfu": lambda: inp.f("compute.mfu", flops=e("flops"), step_time=e("step_time"), gpus=deg.gpus),
        "mfu.palm": lambda: inp.f("compute.mfu", flops=e("flops.palm"), step_time=e("step_time"), gpus=deg.gpus),
        "communication.tp_message": lambda: inp.f("parallelism.tp.allreduce_bytes", **local_seq),
        "communication_time.stage_output": lambda: inp.f(
            "collectives.transfer.time", message=inp.f("parallelism.pp.p2p_bytes", **local_seq),
            bandwidth=inp.need("scale_out_bandwidth")),
        "communication_time.dp_one_nic": lambda: inp.f("collectives.transfer.time", message=e("communication.dp"),
                                                       bandwidth=inp.need("scale_out_bandwidth")),
        "experts_per_node_at_same_cost": lambda: inp.f("parallelism.ep.experts_per_node_at_same_cost"),
        "experts_at_same_cost": lambda: inp.f("parallelism.ep.experts_at_same_cost",
                                              nodes_per_token=plan.model.nodes_per_token),
        "steps": lambda: inp.f("compute.steps", tokens=inp.training_tokens_or_raise(), batch_tokens=e("tokens_per_step")),
        "mtbf": lambda: inp.f("reliability.mtbf", gpus=deg.gpus),
        "checkpoint_time": lambda: _checkpoint_time(plan),
        # Daly's exact model, not the first-order one: it stays right where failures are frequent
        "checkpoint_interval": lambda: inp.f("reliability.daly.optimal_interval", mtbf=e("mtbf"),
                                             checkpoint_time=e("checkpoint_time")),
        "goodput": lambda: inp.f("reliability.daly.goodput", mtbf=e("mtbf"), checkpoint_time=e("checkpoint_time"),
                                 checkpoint_interval=e("checkpoint_interval"),
                                 restart_time=inp.f("reliability.async_restart_time",
                                                    checkpoint_interval=e("checkpoint_interval"))),
        "train_time": lambda: e("step_time") * e("steps") / e("goodput"),
        "interruptions": lambda: e("train_time") / e("mtbf"),
    }
    for part in OP_CLASSES:
        b[f"time.{part}"] = (lambda p=part: plan._time[p])
    for axis in AXES:
        b[f"communication.{axis}"] = (lambda a=axis: plan._comm[a]["bytes"])
        b[f"communication_time.{axis}"] = (lambda a=axis: plan._comm[a]["time"])
        b[f"time.{axis}"] = (lambda a=axis: plan._time[a])
    b["time.dp_window"] = lambda: plan._time["dp_window"]  # the compute DP traffic hides behind
    return b


def _checkpoint_time(plan) -> Formula:
    """The stall of a checkpoint: the one given, else one copy of the model states written at the
    storage bandwidth of Llama 3's cluster."""
    if "checkpoint_time" in plan._in.values:
        return Formula("delta", plan._in.values["checkpoint_time"], "s", "")
    from ..presets import llama3_storage_bandwidth
    states = plan._in.f("memory.model_states.zero0", params=plan._params["stored"])
    return states / Formula("B", read_magnitude("bandwidth", llama3_storage_bandwidth()), "byte/s", "")


__all__ = ["builders"]
