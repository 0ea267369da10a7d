"""The commands of ``analytic``: each reads its flags (:mod:`analytic.cli.flags`) and prints text or
JSON."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.errors import AnalyticError
from .flags import PLAN_FLAGS, CLIError, build_plan, count_flag, refuse_unread, search_inputs
from .output import json_text


def _fmt(v) -> str:
    from ..core.units import is_quantity

    if is_quantity(v):
        if v.dimensionless:
            return f"{float(v.to('').magnitude):.4g}"
        mag = float(v.magnitude)
        if mag == int(mag) and abs(mag) < 1e15:
            return f"{int(mag):,} {v.units:~P}"
        return format(v, ".4g~")
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def cmd_step(args) -> int:
    """`analytic step`: the story of one step; a plan that does not fit says so first, with the
    layouts of its GPUs that fit, and a model given without a layout that does not fit takes
    search's fastest."""
    plan, extra = build_plan(args)
    from .fitting import layout_given, layout_text, search_like, verdict_lines
    from .story import lines

    notes = list(extra["notes"].values())
    if args.model and not layout_given(args) and plan.memory_verdict() != "fits":
        found = search_like(plan, top=1).ranked
        if found:
            best, default = found[0], plan
            plan = plan.replace(layout=best.layout, microbatch_size=best.microbatch_size)
            notes.append(
                f"no layout given, and the default (TP 1, PP 1, DP {int(default.layout.dp):,},"
                f" ZeRO-{default.layout.zero}) does not fit: search's fastest layout that fits,"
                f" {layout_text(best.layout, best.microbatch_size)} (give layout flags to choose"
                " another)"
            )
    # the source text's plan: the command only
    said, verdict = verdict_lines(plan, layouts=bool(args.model))
    story = lines(plan, mfu=extra["mfu"], text=extra["text"])
    notes += [n for n in plan.notes if n not in notes]  # what it took, wanting a measurement
    stack_said = _stack_said(plan)
    if args.json:
        print(
            json_text(
                {
                    "plan": repr(plan),
                    "notes": notes,
                    **verdict,
                    **stack_said[1],
                    "lines": [ln.as_dict() for ln in story],
                },
                indent=1,
                default=str,
            )
        )
        return 0
    for line in said + stack_said[0] + [f"note: {note}" for note in notes] + [repr(plan)]:
        print(_wrapped(line))
    section = None
    for ln in story:
        if ln.section != section:
            section = ln.section
            print(f"\n{section}")
        print("\n".join(_story_rows(ln, args.sources)))
    return 0


#: the story's width in columns
STORY_WIDTH = 120


def _story_rows(ln, every_source: bool) -> list[str]:
    """A story line in at most :data:`STORY_WIDTH` columns: its label (wrapped) and value, then the
    source text's figure and the formulas it came from, on the same row where they fit, else on rows
    of their own."""
    import textwrap

    from .story import shown_sources

    label = textwrap.wrap(ln.label, 74, break_long_words=False) or [""]
    first = f"  {label[0]:<74} {_fmt(ln.value):>16}"
    under = " " * (len(first) - len(first.lstrip()) + 4)  # what a row continues with: indented
    rest = [
        under + part
        for part in textwrap.wrap(" ".join(label[1:]), 76 - len(under), break_long_words=False)
    ]
    tail = ([f"(text: {ln.text}{': ' + ln.why if ln.why else ''})"] if ln.text else []) + [
        f"[{shown_sources(ln.formula, every_source)}]"
    ]
    rows = [first, *rest]
    for part in tail:  # beside the last row where it fits, else on rows of its own
        if len(rows[-1]) + 3 + len(part) <= STORY_WIDTH:
            rows[-1] += "   " + part
        else:
            rows += textwrap.wrap(
                part, STORY_WIDTH, initial_indent=under, subsequent_indent=under + "  ",
                break_long_words=False,
            )
    return rows


def _wrapped(line: str) -> str:
    """A line of a command's head in :data:`STORY_WIDTH` columns, its continuation indented."""
    import textwrap

    return "\n".join(
        textwrap.wrap(line, STORY_WIDTH, subsequent_indent="    ", break_long_words=False)
    )


def _stack_said(plan) -> tuple[list[str], dict]:
    """The stack's line and the other stacks' step times (none where the plan has no step time)."""
    from .stack_spread import calibration_text, spread, spread_line

    try:
        step = float(plan.step_time().to("s").magnitude)
    except AnalyticError:  # a link without a bandwidth: no step to set beside the others
        return [calibration_text(plan)], {"stack": plan.stack}
    others = spread(plan)
    return (
        [calibration_text(plan), spread_line(plan.hardware, step, others)],
        {"stack": plan.stack, "other_stacks_s": others},
    )


def cmd_memory(args) -> int:
    """`analytic memory`: the plan's memory per GPU, its verdict, the allocator's peak and what fits
    instead."""
    refuse_unread(
        args,
        PLAN_FLAGS - {"mfu", "tokens"},
        "memory",
        "memory depends only on the layout and the batch",
    )
    plan, extra = build_plan(args)
    from ..core.errors import PresetError
    from ..presets import memory_reserve, stack
    from .story import fitting_changes, wasted_selective

    mem = plan.memory()
    changes = (
        []
        if mem.fits
        else [
            {
                "change": label,
                "total": float(other.memory().total.to("GB").magnitude),
                "verdict": other.memory_verdict(),
                "step_time": float(other.step_time().to("s").magnitude),
                "mfu": float(other.mfu()),
            }
            for label, other in fitting_changes(plan)
        ]
    )
    rows = {k: v.to("GB") for k, v in mem.as_dict().items() if k != "stage"}
    stages = plan.memory_by_stage() if args.stages else []
    notes = list(extra["notes"].values())
    wasted = wasted_selective(plan)
    if wasted is not None:
        notes.append(
            "selective recomputation saves no memory under FlashAttention (it keeps no attention"
            f" scores) and still recomputes the attention core: {_fmt(wasted)} per step"
        )
    headroom = plan.value("memory.headroom").to("GB")  # of the fullest stage, mem's
    fit = plan.memory_verdict()
    try:  # the allocator's reserve is fitted for the allocator of the measured peaks only
        peak, (low, high) = plan.memory_peak().to("GB"), (
            q.to("GB") for q in plan.memory_interval()
        )
        # the stacks of the peaks
        measured = memory_reserve(stack(plan.stack)["allocator"]).get("stacks", [])
        outside = plan.memory_outside().to("GB")
    except PresetError as exc:
        peak = low = high = outside = None
        measured = []
        notes.append(f"no predicted peak: {exc}")
    notes += [n for n in plan.notes if n not in notes]  # what it took, wanting a measurement
    r = MemoryReport(
        plan, mem, rows, stages, notes, headroom, fit, peak, low, high, measured, outside, changes
    )
    from .fitting import verdict_lines

    said, fitting = verdict_lines(plan, layouts=bool(args.model))
    if args.json:
        _memory_json(r, args, fitting.get("fitting_layouts", []))
    else:
        print("\n".join(said + [""]) if said else "", end="")
        _memory_text(r)
    return 0


@dataclass(frozen=True)
class MemoryReport:
    """What `analytic memory` prints: the plan, its memory and rows in GB, its stages, notes,
    headroom and verdict, the allocator's predicted peak with its interval, the stacks it was
    measured on and the memory outside it (None without a reserve), and the one-setting changes that
    make it fit."""

    plan: object
    mem: object
    rows: object
    stages: object
    notes: object
    headroom: object
    fit: object
    peak: object
    low: object
    high: object
    measured: object
    outside: object
    changes: object


def _memory_json(r: MemoryReport, args, fitting_layouts: list) -> None:
    """The report as JSON (GB), the stages' parts with ``--stages``; where the plan does not fit at
    its predicted peak, the layouts of its GPUs that do."""
    plan, mem, rows, stages, notes, headroom = r.plan, r.mem, r.rows, r.stages, r.notes, r.headroom
    fit, peak, low, high, measured, outside, changes = (
        r.fit,
        r.peak,
        r.low,
        r.high,
        r.measured,
        r.outside,
        r.changes,
    )
    from ..core.choices import MEMORY_PARTS as PARTS

    gb = lambda m: {
        k: float(m.as_dict()[k].to("GB").magnitude) for k in (*PARTS, "total", "host")
    }  # noqa: E731
    print(
        json_text(
            {k: float(v.magnitude) for k, v in rows.items()}
            | {
                "unit": "GB",
                "stage": mem.stage,
                "fits": mem.fits,
                "verdict": fit,
                "headroom": float(headroom.magnitude),
                "notes": notes,
                "peak": None if peak is None else float(peak.magnitude),
                "outside_mean": None if outside is None else float(outside.magnitude),
                "host_memory": (
                    None
                    if plan.hardware.host_memory is None
                    else float(plan.hardware.host_memory.to("GB").magnitude)
                ),
                "interval": None if peak is None else [float(low.magnitude), float(high.magnitude)],
                "reserve_measured_on": measured,
                "fitting_changes": changes,
                "fitting_layouts": fitting_layouts,
                **(
                    {
                        "stages": [
                            {"stage": s.stage, "layers": n, **gb(s), "fits": s.fits}
                            for s, n in zip(stages, plan.layers_by_stage(ranks=True))
                        ]
                    }
                    if args.stages
                    else {}
                ),
            }
        )
    )


def _memory_text(r: MemoryReport) -> None:
    """The memory of each part, the verdict, what lies outside the allocator and in host memory, the
    peak, the changes that make it fit and the stages."""
    from ..core.choices import MEMORY_PARTS as PARTS

    plan, mem, rows, notes = r.plan, r.mem, r.rows, r.notes

    for note in notes:
        print(f"note: {note}")
    print(repr(plan))
    where = (
        f"stage {mem.stage} of {plan.layout.pp}, the worst" if plan.layout.pp > 1 else "one stage"
    )
    print(f"  per GPU on {where}:")
    for k in PARTS:
        # the step's temporaries, where the step is the peak
        if k != "optimizer_step" or rows[k].magnitude:
            print(f"  {k:<14} {_fmt(rows[k]):>12}")
    if rows["optimizer_step"].magnitude:
        print(
            "  (the peak is the optimizer step's: its temporaries, with the activations and"
            " gathered copies freed and the gradients it holds then)"
        )
    verdict = (
        f"fits, {_fmt(r.headroom)} to spare"
        if mem.fits
        else f"does not fit: {_fmt(-r.headroom)} over"
    )
    beside = (
        f" with the {_fmt(rows['outside'])} outside the allocator"
        if rows["outside"].magnitude
        else ""
    )
    print(
        f"  {'total':<14} {_fmt(rows['total']):>12}   of {_fmt(rows['hbm'])} HBM{beside}: {verdict}"
    )
    print(
        f"  (the last stage's loss at its peak: {_fmt(rows['loss'])}, its logits"
        f" {_fmt(rows['logits'])})"
    )
    _memory_outside(r)
    if r.peak is not None:
        _memory_peak(r)
    for c in r.changes:
        print(
            f"  fits on the same GPUs with {c['change']}: {c['total']:.4g} GB, {c['verdict']}, step"
            f" {c['step_time']:.3g} s, MFU {c['mfu']:.3f}"
        )
    if r.stages:
        _memory_stages(r)


def _memory_outside(r: MemoryReport) -> None:
    """What lies outside the allocator, and what an offloading plan keeps in host memory."""
    from .story import node_host_memory

    plan, rows, outside = r.plan, r.rows, r.outside
    if rows["outside"].magnitude:
        print(
            "  (outside the allocator: the driver's reservation, the CUDA context, NCCL's buffers;"
            f" at least {_fmt(rows['outside'])}, {_fmt(outside)} on average, in snapshots of"
            " training runs: memory.headroom)"
            if outside is not None
            else f"  (outside the allocator: at least {_fmt(rows['outside'])}: memory.headroom)"
        )
    else:
        print(
            "  (the HBM is the driver's total: nothing outside the allocator is counted for this"
            " stack's allocator)"
        )
    if r.mem.host.magnitude:
        per_node, dram, fits = node_host_memory(plan, rows["host"])
        room = (
            ""
            if dram is None
            else f", of the node's {_fmt(dram.to('TB'))}: {'fits' if fits else 'does not fit'}"
        )
        print(
            f"  offloaded {plan.layout.offloaded} in host memory: {_fmt(rows['host'])} per GPU,"
            f" {_fmt(per_node)} per node of {int(plan.inputs['gpus_per_node'])}{room}"
        )


def _memory_stages(r: MemoryReport) -> None:
    """A row for each pipeline stage."""
    from ..core.choices import MEMORY_PARTS as PARTS

    plan, mem, stages = r.plan, r.mem, r.stages
    # host: offloaded, not in total
    columns = (*PARTS, "total") + (("host",) if mem.host.magnitude else ())
    if plan.layout.schedule == "dualpipe":
        print(
            "\n  under DualPipe the row of stage k is its rank, which also holds stage p − 1 −"
            " k"
        )
    print("\n  stage  layers" + "".join(f"{k:>15}" for k in columns) + "   fits")
    for s, n in zip(stages, plan.layers_by_stage(ranks=True)):
        print(
            f"  {s.stage:>5} {n:>7}"
            + "".join(f"{_fmt(getattr(s, k).to('GB')):>15}" for k in columns)
            + f"   {'yes' if s.fits else 'no'}"
        )


def _memory_peak(r: MemoryReport) -> None:
    """The allocator's predicted peak, its interval and the verdict with the memory outside it."""
    plan, mem, rows, fit = r.plan, r.mem, r.rows, r.fit
    peak, low, high, measured, outside = r.peak, r.low, r.high, r.measured, r.outside
    from ..core.choices import MEMORY_VERDICTS

    above = "; at its top it would not fit" if peak + outside <= mem.hbm < high + outside else ""
    own = "" if plan.stack in measured else f"; {plan.stack} has none of its own"
    device = peak + outside
    limit = (
        f"; with the memory outside it, {_fmt(device)}: {_fmt(device - mem.hbm)} over the HBM with"
        f" the count within it: {fit} (short of memory, it releases its cached blocks and retries:"
        " num_alloc_retries of torch.cuda.memory_stats)"
        if fit == MEMORY_VERDICTS[1]
        else f"; with the memory outside it, {_fmt(device)}: {fit}"
    )
    print(
        f"  predicted peak the allocator reserves: {_fmt(peak)},"
        f" {(peak / rows['total']).to('').magnitude:.3f}× the count (fitted on measured peaks of"
        f" {_listed(measured)} runs, calibration.toml [memory]{own}){limit} [memory.device_peak]"
    )
    print(
        "  measured peaks of the validation runs, each predicted with its source left out, put it"
        f" at {_fmt(low)} to {_fmt(high)}{above}"
    )


def _listed(names) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return " and ".join(filter(None, (", ".join(names[:-1]), names[-1]))) if names else ""


def _parse_set(items) -> dict:
    out = {}
    for item in items or []:
        if "=" not in item:
            raise CLIError(f"--set: expected keyword=value, got {item[:80]!r}")
        k, v = item.split("=", 1)
        if k.strip() in out:
            raise CLIError(
                f"--set: {k.strip()[:80]} given twice ({out[k.strip()][:40]!r} and"
                f" {v.strip()[:40]!r})"
            )
        # read exactly, as one number with one unit, by the formula
        out[k.strip()] = v.strip().strip("'\"")
    return out


def cmd_formula(args) -> int:
    import sympy

    import analytic as an

    if args.list or not args.name:
        names = sorted(an.formulas())
        if args.json:
            print(json_text({n: an.formula(n).description for n in names}))
        else:
            for n in names:
                print(f"{n:<58} {an.formula(n).description}")
        return 0
    f = an.formula(args.name)
    values = _parse_set(args.set)
    data = {
        "name": f.name,
        "expr": str(f.expr),
        "latex": f.latex(),
        "unit": f"{f.unit:~P}",
        "symbols": {
            k: {
                "unit": f"{u:~P}",
                "display": an.symbols.info(k).display,
                "meaning": an.symbols.info(k).meaning,
            }
            for k, u in f.symbols.items()
        },
        "source": f.source,
        "assumptions": list(f.assumptions),
        "description": f.description,
    }
    free = [k for k in f.symbols if k not in values]
    if values and free:  # partial application: the expression in what is left
        part = f.subs(**values)
        data["partial"], data["free"] = str(part.expr), free
    elif values:
        result = f.evaluate(**values)
        if args.unit is not None:
            result = _in_unit(result, args.unit)
        data["value"] = float(result.magnitude)
        data["value_unit"] = f"{result.units:~P}"
    elif args.unit is not None:
        raise CLIError("--unit: the unit of a value; give every input with --set")
    if args.json:
        print(json_text(data))
        return 0
    print(f"{f.name}: {f.description}")
    print(sympy.pretty(f.expr, use_unicode=True))
    print(f"LaTeX: {f.latex()}")
    print(f"unit: {f.unit:~P}")
    for k, s in data["symbols"].items():
        print(f"  {s['display']:<6} {k:<20} [{s['unit']}] {s['meaning']}")
    print(f"source: {f.source}")
    for a in f.assumptions:
        print(f"assumes: {a}")
    if values and free:
        print(f"with {', '.join(values)} given, in {', '.join(free)}:")
        print(sympy.pretty(part.expr, use_unicode=True) + f"   [{f.unit:~P}]")
    elif values:
        readable = None if result.dimensionless or args.unit else _readable(result)
        print(f"value: {_fmt(result)}" + (f" = {_fmt(readable)}" if readable is not None else ""))
    return 0


def _in_unit(q, unit: str):
    """``q`` in ``unit`` (a unit name such as day, GB or PFLOP), or a one-line error."""
    from ..core.errors import UnitError
    from ..core.units import DimensionalityError
    from ..core.values import unit_of

    try:
        target = unit_of("--unit", unit)  # the one reader of unit names
    except UnitError as exc:
        raise CLIError(str(exc)) from None
    try:
        return q.to(target)
    except DimensionalityError:
        raise CLIError(f"--unit: cannot express {q.units:~P} in {unit[:80]!r}") from None


def _readable(q):
    """``q`` in the unit a reader would pick: times in s, min, h or days, anything else compacted
    by SI prefix; None when that is the unit it already has."""
    if q.dimensionality == {"[time]": 1}:
        s = q.to("s").magnitude
        unit = next(
            u
            for u, at in (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 0))
            if abs(s) >= at
        )
        out = q.to(unit)
    # pint compacts it; the library's quantity again (bytes are a dimension of their own there)
    else:
        from ..core.units import data

        out = data(q.to_compact())
    return None if out.units == q.units else out


def cmd_search(args) -> int:
    """A ranked table of the best layouts (``--json`` for data)."""
    from ..search.layouts import search

    model, hw, gpus, seq, gb, kw, note = search_inputs(args, "search", frozenset({"tokens"}))
    steps = None if args.tokens is None else count_flag(str(args.tokens), "tokens") / (gb * seq)
    res = search(
        model, hw, gpus=gpus, seq_len=seq, global_batch=gb, top=count_flag(args.top, "top"),
        objective=args.objective, at_limit=bool(args.at_limit), **kw,
    )
    several = isinstance(gpus, list)
    if not res.evaluated:
        sizes = ", ".join(f"{g:,}" for g in gpus) if several else f"{gpus:,}"
        raise CLIError(
            f"search: no valid layout of {sizes} GPUs for {model.name} with {gb:,} sequences (each"
            " layout needs the batch to split over its replicas and microbatches, and TP to divide"
            " the heads)"
        )
    from .fitting import closest_line
    from .stack_spread import plan_of_row, spread

    plan_of = lambda r: plan_of_row(r, model, hw, seq, gb, kw)  # noqa: E731
    closest = None if res.ranked else closest_line(res, plan_of)
    others = spread(plan_of(res.best)) if res.ranked else {}
    if args.json:
        _search_json(res, note, others, steps, closest)
        return 0
    _search_header(res, hw, note, others, bool(args.at_limit))
    if closest:
        print(closest[0])
        return 0
    _search_table(res, steps)
    return 0


def _search_json(res, note, others: dict, steps, closest) -> None:
    """The search as JSON: its counts, stack, notes, the other stacks' step and the ranked rows
    (with days where the tokens are given)."""
    print(
        json_text(
            {
                "evaluated": res.evaluated,
                "fitting": res.fitting,
                "seconds": res.seconds,
                "objective": res.objective,
                "stack": res.stack,
                "notes": [note] if note else [],
                "other_stacks_s": others,
                "ranked": [
                    r.as_dict() | ({} if steps is None else {"days": r.step_time * steps / 86400})
                    for r in res.ranked
                ],
                "closest": closest and closest[1],
            }
        )
    )
    return 0


def _search_header(res, hw, note, others: dict, at_limit: bool) -> None:
    """The lines above the table: the stack, the other stacks' step, what was evaluated and what
    the interval means."""
    if note:
        print(f"note: {note}")
    stack = [
        text
        for on, text in (
            (res.async_tp, "async TP wherever tp > 1"),
            (res.comm_sms, f"{res.comm_sms} SMs reserved for communication"),
            (res.zero3_gather == "per-tensor", "ZeRO-3 gathering tensor by tensor, blocking"),
        )
        if on
    ]
    from .stack_spread import spread_line, stack_text

    print("; ".join([stack_text(res.stack), *stack]) + " (--stack counts the layouts on another)")
    if res.ranked:
        print(_wrapped(spread_line(hw, res.best.step_time, others, "layout #1")))
    beside = f" with {res.outside / 1e9:.4g} GB outside the allocator" if res.outside else ""
    kept = (
        "fit at their predicted peak or at the allocator's limit"
        if at_limit
        else "fit at their predicted peak"
    )
    print(
        f"{res.evaluated:,} layouts evaluated, {res.fitting:,} {kept} in"
        f" {hw.hbm.to('GB'):.4g~P}{beside}; search took {res.seconds:.2f} s"
        + (
            " (including compiling the expressions of this configuration, cached for the next"
            " search)"
            if res.compiled
            else ""
        )
        + ("" if res.objective == "step_time" else f"; ranked by {res.objective}")
    )
    if res.ratios:
        print(
            "step: the predicted time; interval: where the measured one falls 80% of the time"
            f" (measured/predicted {res.ratios[0]:.2f}–{res.ratios[1]:.2f} over the validation"
            " cases, each with its source left out)"
        )


def _search_table(res, steps) -> None:
    """The ranked layouts, a row each (days where ``steps`` is given)."""
    print(
        f"{'#':>3} {'gpus':>6} {'tp':>3} {'cp':>3} {'pp':>4} {'dp':>5} {'ep':>3} {'v':>2} {'mb':>3}"
        f" {'zero':>4} {'recompute':>9} {'schedule':>11} {'step (s)':>9} {'interval (s)':>15}"
        f" {'GPU-h/Mtok':>10} {'MFU':>6} {'mem (GB)':>9}"
        + ("" if steps is None else f" {'days':>7}")
        + "  verdict"
    )
    for i, r in enumerate(res.ranked, 1):
        lay = r.layout
        interval = (
            f"{r.step_time_interval[0]:.3g}–{r.step_time_interval[1]:.3g}"
            if r.step_time_interval
            else "—"
        )
        # one replica: ZeRO-0 to 2 are alike
        zero = lay.zero if lay.dp * lay.cp > 1 or lay.zero == 3 else "—"
        print(
            f"{i:>3} {lay.gpus:>6} {lay.tp:>3} {lay.cp:>3} {lay.pp:>4} {lay.dp:>5} {lay.ep:>3}"
            f" {lay.vpp:>2} {r.microbatch_size:>3} {zero:>4} {lay.recompute:>9} {lay.schedule:>11}"
            f" {r.step_time:>9.3f} {interval:>15} {r.cost * 1e6 / 3600:>10.3g} {r.mfu:>6.3f}"
            f" {r.memory / 1e9:>9.2f}"
            + ("" if steps is None else f" {r.step_time * steps / 86400:>7.4g}")
            + f"  {r.verdict}"
        )


def cmd_plot(args) -> int:
    from ..search.layouts import search
    from . import plots

    if args.json:
        raise CLIError("plot: writes a figure to --out; --json is not read here")
    plots.output_format(args.out)  # before any work: the file name must say the format
    if (args.kind == "codesign") != (args.from_ is not None):
        raise CLIError(
            "plot codesign: give --from FILE.parquet (a sweep of analytic codesign --out); --from"
            " is read by plot codesign only"
        )
    if args.gpus_range is not None:
        if args.kind != "scaling" or args.gpus is not None:
            raise CLIError("--gpus-range: read by plot scaling, instead of --gpus")
        args.gpus = ",".join(map(str, plots.doubling(args.gpus_range)))
    if args.kind == "codesign":
        plots.codesign(plots.read_sweep(args.from_), out=args.out)
    elif args.kind == "bubble":
        refuse_unread(args, {"pp"}, "plot bubble", "the bubble plot takes --pp")
        plots.bubble(count_flag(args.pp or "8", "pp"), out=args.out)
    else:
        model, hw, gpus, seq, gb, kw, _ = search_inputs(args, f"plot {args.kind}")
        if isinstance(gpus, list) and args.kind != "scaling":
            raise CLIError(
                f"plot {args.kind}: --gpus takes one count here (a list draws the scaling plot)"
            )
        if args.kind == "scaling":  # the counts given, or gpus/8 to 2·gpus around the one given
            sizes = (
                gpus
                if isinstance(gpus, list)
                else [g for g in (gpus // 8, gpus // 4, gpus // 2, gpus, gpus * 2) if g >= 1]
            )
            plots.scaling(model, hw, gpus=sizes, seq_len=seq, global_batch=gb, out=args.out, **kw)
            print(
                f"GPU counts: {', '.join(f'{g:,}' for g in sizes)}"
                + (
                    ""
                    if isinstance(gpus, list)
                    else f" (gpus/8 to 2·gpus; give a list: --gpus {sizes[0]},{sizes[-1]})"
                )
            )
        else:
            res = search(model, hw, gpus=gpus, seq_len=seq, global_batch=gb, progress=False, **kw)
            if args.kind == "memory":
                plots.memory(res, model, hw, seq_len=seq, global_batch=gb, out=args.out)
            else:
                plots.pareto(
                    res,
                    out=args.out,
                    title=(
                        f"{model.name or 'model'} on {hw.key or hw.name}, {gpus:,} GPUs, sequence"
                        f" {seq:,}, {gb:,} sequences: {res.evaluated:,} layouts,"
                        f" {res.fitting:,} fit"
                    ),
                )
    print(f"wrote {args.out}")
    return 0


def _free_plan(args, question: str):
    """The plan of the flags with the degree ``--free`` left as its symbol, and the build's
    extras."""
    import analytic as an

    if args.free is None:
        raise CLIError(
            f"solve {question}: give --free AXIS (the degree to solve for: tp, pp, dp, cp or ep)"
        )
    if getattr(args, args.free) is not None or (args.free == "dp" and args.gpus is not None):
        raise CLIError(
            f"solve {question}: --{args.free} is the one to solve for; do not give it"
            + (" (nor --gpus, which fixes dp)" if args.free == "dp" else "")
        )
    # a placeholder the layout check accepts, replaced by the symbol below
    setattr(args, args.free, "1")
    plan, extra = build_plan(args)
    return plan.replace(layout=plan.layout.replace(**{args.free: an.sym(args.free)})), extra


def _smallest(free: str, detail: dict, plan) -> tuple[dict, str]:
    """``solve smallest``'s answer as data and as a line: the value, its verdict with the predicted
    peak, the values skipped and, where a smaller one fits only at the allocator's limit, that
    one."""
    try:
        device = (plan.memory_peak() + plan.memory_outside()).to("GB")
    except AnalyticError:  # no fitted reserve for the stack's allocator: the count decides
        device = None
    hbm = plan.memory().hbm.to("GB")
    out = {
        "question": "smallest",
        "free": free,
        "value": detail["value"],
        "verdict": detail["verdict"],
        "fits_from": detail["fits_from"],
        "skipped": detail["skipped"],
        "at_limit_from": detail["at_limit_from"],
        "memory_GB": float(detail["memory"].to("GB").magnitude),
        "device_peak_GB": None if device is None else float(device.magnitude),
        "hbm_GB": float(hbm.magnitude),
    }
    peak = "" if device is None else f", predicted peak {_fmt(device)}"
    text = (
        f"{free} = {detail['value']:,}: {detail['verdict']} ({_fmt(detail['memory'])} counted per"
        f" GPU{peak}, of {_fmt(hbm)} HBM)"
        + (f"; below {detail['value']:,}: {detail['skipped']}" if detail["skipped"] else "")
        + (
            f"; from {free} = {detail['at_limit_from']:,} it fits at the allocator's limit"
            " (--at-limit takes it)"
            if detail["at_limit_from"]
            else ""
        )
    )
    return out, text


def cmd_solve(args) -> int:
    """A planner's question answered without writing sympy: ``smallest`` (the smallest value of one
    free degree whose plan fits, with the reasons), ``bubble`` (microbatches for a bubble target),
    ``mfu`` (the smallest value of a free degree at which the predicted MFU falls below a threshold)
    or ``tp-break-even`` (the TP degree at which a layer's TP all-reduces take a threshold of its
    compute time)."""
    if args.question != "mfu" and args.question != "tp-break-even" and args.threshold is not None:
        raise CLIError(
            f"solve {args.question}: --threshold is read by the mfu and tp-break-even questions"
            " only"
        )
    if args.question != "tp-break-even" and args.link is not None:
        raise CLIError(f"solve {args.question}: --link is read by the tp-break-even question only")
    answer = {
        "bubble": _solve_bubble,
        "mfu": _solve_mfu,
        "tp-break-even": _solve_break_even,
        "smallest": _solve_smallest,
    }[args.question]
    out, text = answer(args)
    print(json_text(out) if args.json else text)
    return 0


def _solve_bubble(args) -> tuple[dict, str]:
    """The microbatches per pipeline that keep the bubble under ``--target``."""
    from .. import symbolic

    refuse_unread(
        args,
        {"pp", "vpp", "schedule"},
        "solve bubble",
        "the bubble depends on the schedule, pp and vpp",
    )
    if args.target is None or args.pp is None:
        raise CLIError("solve bubble: give --pp and --target (e.g. --target 0.05)")
    answer = symbolic.microbatches_for_bubble(
        args.schedule or "1f1b",
        count_flag(args.pp, "pp"),
        args.target,
        vpp=None if args.vpp is None else count_flag(args.vpp, "vpp"),
    )
    out = {"question": "bubble", "microbatches": answer["value"]}
    text = (
        f"{answer['value']} microbatches per pipeline keep the {args.schedule or '1f1b'} bubble"
        f" at or under {args.target} of the ideal time"
    )
    return out, text


def _solve_mfu(args) -> tuple[dict, str]:
    """The smallest value of the free degree at which the MFU falls below ``--threshold``."""
    from .. import symbolic

    if args.threshold is None:
        raise CLIError("solve mfu: give --threshold (the MFU to fall below, e.g. 0.3)")
    plan, extra = _free_plan(args, "mfu")
    value = symbolic.mfu_threshold(plan, args.free, args.threshold)
    below, above, half = plan.subs(**{args.free: value}).mfu(), None, value // 2
    try:
        above = plan.subs(**{args.free: half}).mfu() if half >= 1 else None
    except AnalyticError:  # half is not a valid layout
        pass
    out = {
        "question": "mfu",
        "free": args.free,
        "value": value,
        "mfu": below,
        "threshold": float(args.threshold),
        "notes": list(extra["notes"].values()),
    }
    text = (
        f"{args.free} = {value:,}: the predicted MFU (6·N·D) falls to {below:.3f}, below"
        f" {args.threshold}" + (f" (at {half:,}: {above:.3f})" if above is not None else "")
    )
    return out, text


def _solve_break_even(args) -> tuple[dict, str]:
    """The TP degree at which a layer's TP all-reduces take ``--threshold`` of its compute."""
    from .. import symbolic

    refuse_unread(
        args,
        {"model", "hardware", "seq", "microbatch_size", "dtype", "stack", "profile"},
        "solve tp-break-even",
        "the break-even depends on the model, hardware, sequence and microbatch",
    )
    args.global_batch = args.microbatch_size or "1"  # one microbatch: the batch does not enter
    plan, extra = build_plan(args)
    link = args.link or "scale-up"
    key = f"{link.replace('-', '_')}_bandwidth"
    inputs = plan.inputs
    from ..core.units import Q

    bandwidth = Q(
        float(inputs[key]) * float(inputs[key.replace("bandwidth", "efficiency")]), "byte/s"
    )
    answer = symbolic.tp_break_even(
        plan.model,
        plan.hardware,
        seq_len=int(plan.seq_len),
        bandwidth=bandwidth,
        microbatch_size=int(plan.microbatch_size),
        efficiency=float(inputs["matmul_efficiency"] * inputs["stack_efficiency"]),
        dtype=plan.dtype,
        threshold=args.threshold or 1.0,
    )
    out = {
        "question": "tp-break-even",
        "link": link,
        "tp": answer["break_even"],
        "threshold": float(args.threshold or 1.0),
        "bandwidth_GBps": float(bandwidth.to("GB/s").magnitude),
    }
    text = (
        f"tp = {answer['break_even']:.3g}: one layer's TP all-reduces on the {link} link"
        f" ({bandwidth.to('GB/s'):.4g~P} at NCCL's efficiency) take"
        f" {float(args.threshold or 1):g}× its compute time at the device's GEMM ceiling and"
        " the stack's efficiency"
    )
    return out, text


def _solve_smallest(args) -> tuple[dict, str]:
    """The smallest value of the free degree whose plan fits, with the reasons."""
    from .. import symbolic

    plan, extra = _free_plan(args, "smallest")
    detail = symbolic.smallest_fitting_detail(plan, args.free, at_limit=bool(args.at_limit))
    out, text = _smallest(args.free, detail, plan.subs(**{args.free: detail["value"]}))
    out["notes"] = list(extra["notes"].values())
    return out, text
