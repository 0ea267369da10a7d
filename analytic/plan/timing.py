"""Stage 5 of a plan: time — the operations' time (:mod:`.ops`), the pipeline bubble, and the
communication each axis leaves exposed — summed into the step time."""

from __future__ import annotations

from ..core.algebra import Gt, Max
from ..core.choices import TIME_PARTS as PARTS
from ..core.composition import cases, composed
from ..core.formula import Formula
from ..formulas import formula
from . import stage_split
from .inputs import Inputs
from .schedules import BUBBLE_FORMULAS, at_least_critical_path
from .stage_split import stage_layers


def bubble_time(inp: Inputs, compute: Formula) -> Formula:
    """The schedule's bubble with each microbatch chunk's forward, input-gradient and
    weight-gradient passes a third of its compute, never below the first microbatch's critical
    path."""
    lay, mb = inp.deg, inp.microbatches
    # forward 2 FLOPs/param, input-gradient 2, weight-gradient 2
    third = compute / (mb * lay.vpp) / 3
    values = {
        "pp": lay.pp,
        "vpp": lay.vpp,
        "microbatches": mb,
        "t_f": third,
        "t_b": third,
        "t_w": third,
        "t_fb": third * 3,
    }
    by_formula = {}  # catalogue bubble formula → the schedules it describes
    for schedule, name in BUBBLE_FORMULAS.items():
        by_formula.setdefault(name, []).append(schedule)
    pieces = [
        (formula(f"pipeline.bubble_time.{name}").bind(values), lay.schedule_is(*schedules))
        for name, schedules in by_formula.items()
    ]
    return at_least_critical_path(cases("bubble", "s", *pieces[:-1], (pieces[-1][0], True)), values)


STAGES = ("first", "middle", "last")


def stage_times(inp: Inputs, compute: Formula, ends: Formula) -> dict:
    """The first, a middle (the fullest) and the last stage's compute for the step: its layers (the
    layout's split, :func:`~.stage_split.stage_layers`) at the average block's time, the
    last stage's with the MTP blocks and the output layer and loss (``ends``, the whole model's).
    A hybrid model's stages: their own layers' ops (:func:`_hybrid_stage_times`)."""
    if stage_split.placed(inp):
        return _hybrid_stage_times(inp, compute, ends)
    lay, blocks, mtp = inp.deg, inp.model.blocks, inp.model.mtp_layers
    first, middle, last = stage_layers(inp)
    per_block = (compute.term - ends.term / lay.pp) * lay.pp / blocks
    exprs = (first * per_block, middle * per_block, (last + mtp) * per_block + ends.term)
    return {
        name: composed(f"stage.{name}", e, "s", compute, ends) for name, e in zip(STAGES, exprs)
    }


def _hybrid_stage_times(inp: Inputs, compute: Formula, ends: Formula) -> dict:
    """The first, the slowest middle and the last stage of a hybrid model: the ops of the layers
    each holds (:func:`~.ops.stage_compute`), the last stage's with the output layer and loss."""
    from .ops import stage_compute

    own = [stage_compute(inp, kinds) for kinds in stage_split.table(inp)]
    middle = own[1:-1] or own[-1:]  # without a middle stage, the last's own layers
    slowest = composed("stage.middle", Max(*(t.term for t in middle)), "s", *middle)
    return {
        name: composed(f"stage.{name}", t.term, "s", t, compute)
        for name, t in zip(STAGES, (own[0], slowest, own[-1] + ends))
    }


def middle_stage(inp: Inputs) -> int:
    """The index of the middle stage :func:`stage_times` counts, for a numeric pipeline: the second,
    a pipeline layout's fullest middle stage, or a hybrid model's slowest."""
    pp, laid = int(inp.deg.pp), stage_split.laid(inp)
    if laid is not None and pp > 3:  # a pipeline layout's fullest middle stage
        middle = laid[0][1:-1]
        return 1 + middle.index(max(middle))
    if not stage_split.placed(inp) or pp < 4:
        return min(1, pp - 1)
    from .ops import stage_compute

    rows = stage_split.table(inp)
    return max(
        range(1, pp - 1), key=lambda k: stage_compute(inp, rows[k]).value().to("s").magnitude
    )


def imbalance_time(inp: Inputs, compute: Formula, stages: dict) -> Formula:
    """What the slowest of ``stages`` (:func:`stage_times`) adds to the step over the average
    stage."""
    slowest = Max(*(stages[k].term for k in STAGES))
    t = inp.f("pipeline.imbalance_time", slowest_stage_time=slowest, stage_time=compute.term,
              microbatches=inp.microbatches)
    return composed("imbalance", t.term, "s", t, *stages.values())


def timing(inp: Inputs, ops: dict, comm: dict) -> dict:
    """Each op class, the bubble, the slowest stage's excess and each axis's exposed communication
    (:data:`PARTS`), in seconds. The microbatches' work (every class but the optimizer step) sets
    the bubble and the windows communication hides in."""
    lay = inp.deg
    ops = dict(ops)
    ends = ops.pop("ends")
    compute = ops["gemm"] + ops["attention"] + ops["memory_bound"]
    bubble = bubble_time(inp, compute)
    inp.require_times()
    # SMs set apart for communication for the whole step hold the collectives: none beside compute
    phi = cases("overlap", "", (1, Gt(lay.comm_sms, 0)), (inp.need("overlap"), True)).term
    # TP collectives sit between the GEMMs that produce and consume them: exposed, unless async TP
    # splits the GEMMs to overlap them like the other axes' traffic. CP all-gathers K and V before
    # the attention that needs them: exposed in the critical path (Llama 3 §3.3.2)
    stages = stage_times(inp, compute, ends)
    out = {
        **ops,
        "bubble": bubble,
        "imbalance": imbalance_time(inp, compute, stages),
        **{f"stage.{k}": v for k, v in stages.items()},
        "tp": comm["tp"]["time"] * (1 - phi) if lay.async_tp else comm["tp"]["time"],
        "cp": comm["cp"]["time"],
        "pp": comm["pp"]["time"] * (1 - phi),
    }
    # DP hides behind compute: ZeRO-2/3 without a pipeline reduce (and ZeRO-3 gathers) around every
    # block of every microbatch, so through the whole step; otherwise the gradient reduction hides
    # behind the last microbatch (on every chunk of this stage) and the parameter all-gather behind
    # the next step's first one (per-tensor ZeRO-3 gathers block: exposed in full)
    per_microbatch = lay.dp_regimes[1][1]  # ZeRO ≥ 2 without a pipeline
    chunk = compute / (inp.microbatches * lay.vpp)
    window = cases("window", "s", (compute, per_microbatch), (chunk * lay.vpp, True))
    blocking, edge = comm["dp"]["blocking"], comm["dp"]["edge"]
    out["dp"] = beside(inp, comm["dp"]["time"] - blocking - edge, window, phi) + edge + blocking
    out["dp_window"] = window
    # the all-to-all sits between the router and the experts' GEMMs that consume it: exposed, unless
    # DualPipe runs it beside the paired chunk's compute (DeepSeek-V3, arXiv 2412.19437 §3.2.1) or
    # Megatron-Core's combined 1F1B beside another microbatch's pass
    ep = comm["ep"]["time"]
    paired = ((_combined_1f1b(inp, ep, compute, phi), True),) if lay.ep_overlap else ()
    out["ep"] = cases(
        "ep",
        "s",
        (beside(inp, ep, compute, phi), lay.schedule_is("dualpipe")),
        *paired,
        (ep, True),
    )
    return out


def _combined_1f1b(inp: Inputs, traffic: Formula, compute: Formula, phi) -> Formula:
    """What Megatron-Core's combined 1F1B leaves of the all-to-alls ``traffic``: the unpaired
    passes' share (pipeline.unpaired_share.combined_1f1b) in full, the rest beside the paired
    passes' compute."""
    lay = inp.deg
    unpaired = inp.f("pipeline.unpaired_share.combined_1f1b", pp=lay.pp, vpp=lay.vpp,
                     microbatches=inp.microbatches)
    paired = composed("paired", 1 - unpaired.term, "", unpaired)
    return traffic * unpaired + beside(inp, traffic * paired, compute * paired, phi)


def beside(inp: Inputs, traffic: Formula, window: Formula, phi) -> Formula:
    """What ``traffic`` overlapped with ``window`` of compute adds to the step
    (``parallelism.overlapped_exposed_time``)."""
    return inp.f(
        "parallelism.overlapped_exposed_time", comm_time=traffic, comm_window=window, overlap=phi
    )


def why_exposed(lay) -> dict:
    """axis → why what :func:`timing` leaves of its traffic is not hidden, for a layout's numeric
    Degrees ``lay`` (its conditions decided)."""
    dualpipe, whole_step = lay.schedule_is("dualpipe"), lay.dp_regimes[1][1]
    dp = (
        "the larger of what outlasts the step's compute (ZeRO ≥ 2 without a pipeline reduces"
        " block by block) and the SMs its kernels take from it"
        if whole_step
        else "the larger of what outlasts the last microbatch's compute (the gradients reduce"
        " behind it) and the SMs its kernels take from it"
    ) + "; one bucket's first gather and last reduction"
    return {
        "tp": (
            "the SMs its kernels take from async TP's split GEMMs beside it (1 − φ)"
            if lay.async_tp
            else "between the GEMMs that produce and consume it, no async TP"
        ),
        "cp": "K and V gathered before the attention that needs them",
        "pp": "the SMs the stages' transfers take from the compute beside them (1 − φ)",
        "dp": dp + ("; per-tensor ZeRO-3 gathers block" if lay.per_tensor_gathers else ""),
        "ep": (
            "what exceeds the paired chunk's compute, DualPipe's, or the SMs it takes from it"
            if dualpipe
            else "the unpaired warm-up and cool-down passes', and of the rest what exceeds the"
            " paired passes' compute or the SMs it takes from it (combined 1F1B)"
            if lay.ep_overlap
            else "between the router and the experts' GEMMs that consume it, no DualPipe"
        ),
    }


def total(parts: dict, names=PARTS) -> Formula:
    """The sum of :func:`timing`'s parts ``names`` (all: the step time)."""
    out = parts[names[0]]
    for k in names[1:]:
        out = out + parts[k]
    return out
