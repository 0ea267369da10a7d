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
    return {**_counts(plan), **_memory(plan), **_flops_and_time(plan), **_communication(plan),
            **_run(plan), **_by_part(plan)}


def _counts(plan) -> dict:
    inp, deg = plan._in, plan.deg
    return {
        "gpus": lambda: Formula("gpus", deg.gpus, "", ""),
        "nodes": lambda: Formula("nodes", placement.nodes(inp), "", ""),
        "microbatches": lambda: Formula("m", inp.microbatches, "", ""),
        "tokens_per_step": lambda: inp.tokens_per_step,
        "params": lambda: plan._params["total"],
        "active_params": lambda: plan.model.active_params_formula(),
        "params_per_gpu": lambda: plan._params["per_gpu"],
        "optimizer_params": lambda: placement.optimizer_shard(inp, plan._params),
        "layers_per_stage": lambda: Formula("L/p", ratio(plan.model.layers, deg.pp), "", ""),
    }


def _local_seq(inp) -> dict:
    """The tokens of a sequence one CP rank holds, as a formula's keyword."""
    return {"seq_len": inp.seq_len / inp.deg.cp}


def _memory(plan) -> dict:
    inp, deg, e = plan._in, plan.deg, plan.expr
    return {
        **{f"memory.{k}": (lambda k=k: plan._worst[k]) for k in (*memory.PARTS, "host")},
        "memory.activations.first_stage": lambda: plan._stage(0)["activations"],
        "memory.activations.last_stage": lambda: plan._stage(deg.pp - 1)["activations"],
        "memory.activations.layer": lambda: plan._activation_parts["layer"],
        "memory.logits": lambda: plan._activation_parts["logits"],
        "memory.logits.unsplit": lambda: inp.f("memory.logits", **_local_seq(inp)),
        "memory.loss": lambda: plan._activation_parts["loss"],
        "memory.total": lambda: plan._worst["total"],
        "memory.headroom": lambda: inp.f("memory.headroom", counted_bytes=e("memory.total")),
    }


def _flops_and_time(plan) -> dict:
    inp, deg, e = plan._in, plan.deg, plan.expr
    mfu = lambda flops: inp.f(  # noqa: E731
        "compute.mfu", flops=e(flops), step_time=e("step_time"), gpus=deg.gpus)
    return {
        "flops": lambda: compute.model_flops(inp, "6nd"),
        **{f"flops.{c}": (lambda c=c: compute.model_flops(inp, c))
           for c in ("6nd", "palm", "megatron", "megatron-core")},
        "flops.hardware": lambda: compute.hardware_flops(inp),
        "bubble": lambda: plan._time["bubble"] / timing.total(plan._time, OP_CLASSES[:3]),
        "time.compute": lambda: timing.total(plan._time, OP_CLASSES),
        **{f"time.{k}": (lambda k=k: plan._time[k])
           for k in ("bubble", "imbalance", "stage.first", "stage.middle", "stage.last")},
        "step_time": lambda: timing.total(plan._time),
        "mfu": lambda: mfu("flops"),
        "mfu.palm": lambda: mfu("flops.palm"),
    }


def _communication(plan) -> dict:
    inp, e = plan._in, plan.expr
    return {
        "communication.tp_message": lambda: inp.f("parallelism.tp.allreduce_bytes",
                                                  **_local_seq(inp)),
        "communication_time.stage_output": lambda: inp.f(
            "collectives.transfer.time",
            message=inp.f("parallelism.pp.p2p_bytes", **_local_seq(inp)),
            bandwidth=inp.need("scale_out_bandwidth")),
        "communication_time.dp_one_nic": lambda: inp.f(
            "collectives.transfer.time", message=e("communication.dp"),
            bandwidth=inp.need("scale_out_bandwidth")),
        "experts_per_node_at_same_cost": lambda: inp.f(
            "parallelism.ep.experts_per_node_at_same_cost"),
        "experts_at_same_cost": lambda: inp.f(
            "parallelism.ep.experts_at_same_cost", nodes_per_token=plan.model.nodes_per_token),
    }


def _run(plan) -> dict:
    inp, deg, e = plan._in, plan.deg, plan.expr
    return {
        "steps": lambda: inp.f("compute.steps", tokens=inp.training_tokens_or_raise(),
                               batch_tokens=e("tokens_per_step")),
        "mtbf": lambda: inp.f("reliability.mtbf", gpus=deg.gpus),
        "checkpoint_time": lambda: _checkpoint_time(plan),
        # Daly's exact model, not the first-order one: it stays right where failures are frequent
        "checkpoint_interval": lambda: inp.f("reliability.daly.optimal_interval", mtbf=e("mtbf"),
                                             checkpoint_time=e("checkpoint_time")),
        "goodput": lambda: inp.f(
            "reliability.daly.goodput", mtbf=e("mtbf"), checkpoint_time=e("checkpoint_time"),
            checkpoint_interval=e("checkpoint_interval"),
            restart_time=inp.f("reliability.async_restart_time",
                               checkpoint_interval=e("checkpoint_interval"))),
        "train_time": lambda: e("step_time") * e("steps") / e("goodput"),
        "interruptions": lambda: e("train_time") / e("mtbf"),
    }


def _by_part(plan) -> dict:
    """Each op class's time, and each axis's bytes, traffic time and exposed time."""
    out = {f"time.{part}": (lambda p=part: plan._time[p]) for part in OP_CLASSES}
    for axis in AXES:
        out[f"communication.{axis}"] = (lambda a=axis: plan._comm[a]["bytes"])
        out[f"communication_time.{axis}"] = (lambda a=axis: plan._comm[a]["time"])
        out[f"time.{axis}"] = (lambda a=axis: plan._time[a])
    out["time.dp_window"] = lambda: plan._time["dp_window"]  # the compute DP traffic hides behind
    return out


def _checkpoint_time(plan) -> Formula:
    """The stall of a checkpoint: the one given, else one copy of the model states written at the
    storage bandwidth of Llama 3's cluster."""
    if "checkpoint_time" in plan._in.values:
        return Formula("delta", plan._in.values["checkpoint_time"], "s", "")
    from ..presets import llama3_storage_bandwidth
    states = plan._in.f("memory.model_states.zero0", params=plan._params["stored"])
    bandwidth = read_magnitude("bandwidth", llama3_storage_bandwidth())
    return states / Formula("B", bandwidth, "byte/s", "")


__all__ = ["builders"]
