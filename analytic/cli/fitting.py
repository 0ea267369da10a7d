"""What the command line says of a plan that does not fit: one verdict (Plan.memory_verdict), said
first, and the layouts of the same GPUs that fit (search's), or what stood closest where none
does."""

from __future__ import annotations

from ..core.choices import MEMORY_VERDICTS
from ..core.units import Q

#: the flags that choose a layout; a plan of a model given without any of them may be one search
#: chooses
LAYOUT_FLAGS = ("tp", "pp", "dp", "cp", "ep", "vpp", "zero", "recompute", "schedule",
                "sequence_parallel", "microbatch_size", "recompute_layers", "recompute_modules",
                "first_stage_layers", "last_stage_layers", "ends_as_layers", "offload_activations",
                "offload_optimizer", "pipeline_layout", "ep_overlap")
#: the hardware overrides a plan may hold, with the unit its inputs hold them in
_HARDWARE = {
    "hbm": "byte",
    "scale_up_bandwidth": "byte/s",
    "scale_out_bandwidth": "byte/s",
    "scale_up_domain": "",
}


def layout_given(args) -> bool:
    """Whether any flag of the command line chose the layout."""
    return any(getattr(args, k, None) is not None for k in LAYOUT_FLAGS)


#: the options of search (programs.PLAN_OPTIONS and LAYOUT_OPTIONS) a search for the layouts of a
#: plan's GPUs keeps as the plan has them: all but the expert capacity and routing (kept apart), the
#: degree etp and the placements on numbered stages
_KEPT_PLAN = ("fp8_recipe", "optimizer", "dispatcher", "grad_dtype", "moment_dtype")
_KEPT_LAYOUT = ("recompute_modules", "fp8_activations", "quantized_params", "offload_activations",
                "offload_optimizer", "ep_overlap")


def _kept_options(plan) -> dict:
    """The plan's options a search for layouts of its GPUs keeps: Plan's (precision recipe,
    optimizer, dispatcher, layers kept in BF16, gradient and moment dtypes) and the Layout fields
    it sets of :data:`_KEPT_LAYOUT`, so that every layout listed is counted as the plan is."""
    kept = {k: getattr(plan, k) for k in _KEPT_PLAN if getattr(plan, k) is not None}
    if any(plan.bf16_layers):
        kept["bf16_layers"] = plan.bf16_layers
    options = {k: getattr(plan.layout, k) for k in _KEPT_LAYOUT if getattr(plan.layout, k)}
    return kept | ({"layout_options": options} if options else {})


def search_like(plan, top: int = 3):
    """Search of the plan's GPUs, model, hardware (its overrides too), batch, dtype, stack, expert
    capacity, routing imbalance and the options it keeps (:func:`_kept_options`), ranked by step
    time: the layouts that fit at their predicted peak."""
    from ..search.layouts import search

    over = {
        k: Q(float(plan.overrides[k]), u) if u else int(plan.overrides[k])
        for k, u in _HARDWARE.items()
        if k in plan.overrides
    }
    hw = plan.hardware.replace(**over) if over else plan.hardware
    outside = (
        {"outside_bytes": Q(float(plan.overrides["outside_bytes"]), "byte")}
        if "outside_bytes" in plan.overrides
        else {}
    )
    routed = {k: plan.overrides[k] for k in ("routing_imbalance",) if k in plan.overrides}
    if plan.expert_capacity is not None:
        routed |= {"expert_capacity": plan.expert_capacity, "pad_to_capacity": plan.pad_to_capacity}
    return search(plan.model, hw, gpus=int(plan.gpus), seq_len=int(plan.seq_len),
                  global_batch=int(plan.global_batch), dtype=plan.dtype, stack=plan.stack, top=top,
                  progress=False, **outside, **routed, **_kept_options(plan))


def layout_text(lay, microbatch_size) -> str:
    """A layout in one line: its degrees, ZeRO stage, recomputation, schedule and microbatch
    size."""
    return (
        f"TP {lay.tp} CP {lay.cp} PP {lay.pp} DP {lay.dp}"
        + (f" EP {lay.ep}" if lay.ep > 1 else "")
        + (f" VPP {lay.vpp}" if lay.vpp > 1 else "")
        + f" ZeRO-{lay.zero}, recompute {lay.recompute}, "
        f"{lay.schedule}, microbatches of {microbatch_size}"
    )


def verdict_lines(plan, layouts: bool = True) -> tuple[list[str], dict]:
    """For a plan that does not fit at its predicted peak: the lines that say so first, and the same
    as data (its verdict, the layouts of its GPUs that fit, fastest first, or the one that stood
    closest; without ``layouts`` the search command that lists them, and where search cannot count
    the hardware, why); ([], {}) for a plan that fits."""
    from ..core.errors import AnalyticError

    verdict = plan.memory_verdict()
    if verdict == MEMORY_VERDICTS[0]:
        return [], {}
    mem = plan.memory()
    said = "DOES NOT FIT" if verdict == MEMORY_VERDICTS[2] else "FITS ONLY AT THE ALLOCATOR'S LIMIT"
    lines = [f"{said}: {mem.total.to('GB'):.4g~P} counted per GPU of {mem.hbm.to('GB'):.4g~P} HBM"]
    data = {"verdict": verdict}
    if not layouts:
        ask = (
            f"analytic search --model {plan.model.name} --hardware {plan.hardware.key} --gpus"
            f" {int(plan.gpus)} --seq {int(plan.seq_len)} --global-batch {int(plan.global_batch)}"
        )
        return lines + [f"the layouts of these GPUs that fit: {ask}"], data
    try:
        res = search_like(plan)
    except AnalyticError as exc:  # a hardware search cannot count (a link without a bandwidth)
        return lines + [f"(search cannot list the layouts that fit: {exc})"], data
    data["fitting_layouts"] = [r.as_dict() for r in res.ranked]
    if res.ranked:
        lines.append(
            f"layouts of these {int(plan.gpus):,} GPUs that fit (analytic search, fastest first):"
        )
        lines += [
            f"  {layout_text(r.layout, r.microbatch_size)}: step {r.step_time:.3g} s, "
            f"{r.memory / 1e9:.4g} GB"
            for r in res.ranked
        ]
        return lines, data
    closest = closest_line(
        res, lambda r: plan.replace(layout=r.layout, microbatch_size=r.microbatch_size)
    )
    if closest:
        lines.append(closest[0])
        data["closest"] = closest[1]
    return lines, data


def closest_line(res, plan_of) -> tuple[str, dict] | None:
    """Of a search in which nothing fits: the layout that stood closest, as a line and as data, with
    the HBM its plan (``plan_of(row)``) would fit in at its predicted peak; None where no layout was
    evaluated."""
    near = res.closest()
    if near is None:
        return None
    need = _device_peak(plan_of(near)).to("GB").magnitude
    gpus = int(near.layout.gpus)
    return (
        (
            f"no layout of {gpus:,} GPUs fits; the closest,"
            f" {layout_text(near.layout, near.microbatch_size)}, counts {near.memory / 1e9:.4g} GB"
            f" ({near.verdict}): it fits on more GPUs, or with --hbm '{need:.4g} GB'"
        ),
        {**near.as_dict(), "needs_hbm_GB": float(need)},
    )


def _device_peak(plan):
    """The memory a plan's process peaks at: the allocator's predicted peak and what lies outside it
    (the count and the least measured outside it where the allocator has no fitted reserve)."""
    from ..core.errors import PresetError

    try:
        return plan.memory_peak() + plan.memory_outside()
    except PresetError:
        mem = plan.memory()
        return mem.total + mem.outside
