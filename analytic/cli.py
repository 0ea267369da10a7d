"""The ``analytic`` command. User errors print one line on stderr and exit 2."""

from __future__ import annotations

import argparse
import difflib
import json
import sys

from .choices import RECOMPUTE, SCHEDULES, ZERO3_GATHERS, ZERO_STAGES


class CLIError(Exception):
    """A command-line mistake: one line, exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2
        raise CLIError(f"{self.prog}: {message}")


def _unrecognized(top: argparse.ArgumentParser, command: str | None, extra: list) -> CLIError:
    """Arguments the given command does not take, with its close matches for a mistyped flag, or the
    commands that do take the flag."""
    commands = top._subparsers._group_actions[0].choices
    p = commands.get(command, top)
    message = f"{p.prog}: unrecognized arguments: {' '.join(extra)}"
    flag = extra[0].split("=")[0]
    if flag.startswith("--"):
        elsewhere = [name for name, q in commands.items() if q is not p and flag in q._option_string_actions]
        close = difflib.get_close_matches(flag, sorted(p._option_string_actions), n=3)
        if elsewhere:
            message += f" ({flag} is an option of {', '.join(elsewhere)})"
        elif close:
            message += f" (did you mean {', '.join(close)}?)"
    return CLIError(message)


def _count(text: str, name: str, minimum: int = 1) -> int:
    """A count flag, read exactly (never through a float): '8', '16384', '16Ki', '2e3'."""
    from .errors import InputError
    from .values import parse_count
    try:
        return parse_count(f"--{name}", str(text), minimum=minimum)
    except InputError as exc:
        raise CLIError(str(exc)) from None


def _fraction(text: str, name: str):
    from .errors import AnalyticError
    from .values import fraction
    try:
        return fraction(f"--{name}", text)
    except AnalyticError as exc:
        raise CLIError(str(exc)) from None


def _global_batch(tokens, sequences, seq: int) -> tuple[int, str]:
    """Sequences per step from --batch-tokens or --global-batch (exactly one), and any note."""
    if tokens is not None and sequences is not None:
        raise CLIError("--batch-tokens and --global-batch: give one")
    if tokens is not None:
        from .values import batch_tokens
        count, note = batch_tokens(str(tokens), seq, name="--batch-tokens")
        return count // seq, note
    if sequences is not None:
        return _count(str(sequences), "global-batch"), ""
    raise CLIError("--batch-tokens or --global-batch: give the batch")


#: the plan flags (dests) that search and the search-based plots read; any other is refused
SEARCH_FLAGS = {"model", "hardware", "gpus", "seq", "batch_tokens", "global_batch", "dtype", "async_tp", "comm_sms",
                "zero", "recompute", "schedule", "microbatch_size", "vpp", "scale_up_bandwidth", "scale_out_bandwidth",
                "flash_attention", "zero3_gather"}
PLAN_FLAGS = SEARCH_FLAGS | {"tp", "pp", "dp", "cp", "ep", "sequence_parallel", "mfu", "tokens"}


def _refuse_unread(args, read: set, what: str, why: str) -> None:
    """A flag the command would ignore is an error, not a silent no-op."""
    unread = [k for k in sorted(PLAN_FLAGS - read) if getattr(args, k, None) is not None]
    if unread:
        flags = ", ".join("--sp/--no-sp" if k == "sequence_parallel" else "--" + k.replace("_", "-") for k in unread)
        raise CLIError(f"{what}: {flags} not read here ({why})")


def _zero3_gather(flag, zero: int) -> str:
    """The ZeRO-3 gather policy of ``--zero3-gather`` (default per-block), refused with another stage."""
    if flag is not None and zero != 3:
        raise CLIError(f"--zero3-gather: says how ZeRO-3 gathers parameters; not read with --zero {zero}")
    return flag or "per-block"


def _search_inputs(args, what: str):
    """Model, hardware (with any link overrides), GPUs, sequence length, global batch, the search's
    keyword arguments and a note, for search and the plots built on it."""
    import analytic as an
    _refuse_unread(args, SEARCH_FLAGS, what, "search tries every tp, pp, dp, cp and ep, with sequence parallelism; "
                   "'analytic step' evaluates one layout")
    if not (args.model and args.hardware and args.gpus and args.seq):
        raise CLIError(f"{what}: give --model, --hardware, --gpus and --seq (and --batch-tokens or --global-batch)")
    seq = _count(args.seq, "seq")
    gb, note = _global_batch(args.batch_tokens, args.global_batch, seq)
    hw = an.hardware(args.hardware)
    links = {k: getattr(args, k) for k in ("scale_up_bandwidth", "scale_out_bandwidth") if getattr(args, k)}
    if links:
        hw = hw.replace(**links)
    kw = {"dtype": "bf16" if args.dtype is None else args.dtype, "async_tp": bool(args.async_tp), "flash_attention": args.flash_attention is not False,
          "comm_sms": _count(str(args.comm_sms or 0), "comm-sms", minimum=0),
          "zero3_gather": _zero3_gather(args.zero3_gather, 3 if args.zero is None else int(args.zero))}
    if args.zero is not None:
        kw["zero"] = (int(args.zero),)
    if args.recompute:
        kw["recompute"] = (args.recompute,)
    if args.schedule:
        kw["schedules"] = (args.schedule,)
    if args.microbatch_size:
        kw["microbatch_sizes"] = (_count(args.microbatch_size, "microbatch-size"),)
    if args.vpp:
        kw["vpps"] = (_count(args.vpp, "vpp", minimum=2),)
    return an.model(args.model), hw, _count(args.gpus, "gpus"), seq, gb, kw, note


def _plan_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("plan")
    g.add_argument("--model", help="preset model name (llama3-8b, llama3-70b, llama3-405b, gpt3-175b, bloom-176b, palm-540b, deepseek-v3)")
    g.add_argument("--hardware", help="preset hardware name")
    g.add_argument("--gpus", help="GPU count; dp is inferred as gpus / (tp·cp·pp)")
    for axis in ("tp", "pp", "dp", "cp", "ep", "vpp"):
        g.add_argument(f"--{axis}", help=f"{axis} degree")
    g.add_argument("--zero", choices=[str(z) for z in ZERO_STAGES], help="ZeRO stage")
    g.add_argument("--sp", dest="sequence_parallel", action="store_true", default=None, help="sequence parallelism")
    g.add_argument("--no-sp", dest="sequence_parallel", action="store_false", help="no sequence parallelism")
    g.add_argument("--async-tp", dest="async_tp", action="store_true", default=None,
                   help="TP collectives overlapped with their GEMMs (PyTorch async TP, Megatron TP comm overlap)")
    g.add_argument("--comm-sms", dest="comm_sms",
                   help="SMs reserved for communication kernels (DeepSeek-V3: 20 of the H800's 132)")
    g.add_argument("--zero3-gather", dest="zero3_gather", choices=ZERO3_GATHERS,
                   help="how ZeRO-3 gathers parameters: per-block, prefetched (default; FSDP), or per-tensor, "
                        "blocking, again in a recomputed forward (DeepSpeed ZeRO-3 of 2021)")
    g.add_argument("--recompute", choices=RECOMPUTE)
    g.add_argument("--flash-attention", dest="flash_attention", action="store_true", default=None,
                   help="FlashAttention (the default): no s×s tensor kept, QKᵀ recomputed in the backward")
    g.add_argument("--no-flash-attention", dest="flash_attention", action="store_false",
                   help="attention as plain matmuls and softmax (Korthikanti's GPT layer: MHA, GELU)")
    g.add_argument("--schedule", choices=SCHEDULES)
    g.add_argument("--seq", help="sequence length")
    g.add_argument("--batch-tokens", help="tokens per step (16M, 16Mi, 16777216)")
    g.add_argument("--global-batch", help="sequences per step")
    g.add_argument("--microbatch-size", help="sequences per microbatch (default 1)")
    g.add_argument("--dtype", help="training dtype: bf16 (default), fp16 or fp8 (FP8 matmuls in the linear layers)")
    g.add_argument("--scale-up-bandwidth", help="override the hardware's scale-up link, per direction (e.g. '600 GB/s')")
    g.add_argument("--scale-out-bandwidth", help="override the hardware's NIC, per direction (e.g. '400 Gbit/s')")
    g.add_argument("--mfu", help="also give the step time at this MFU")
    g.add_argument("--tokens", help="training tokens, for steps and days (e.g. 15.6e12)")
    g.add_argument("--json", action="store_true", help="print JSON")


def build_plan(args) -> tuple[object, dict]:
    """A Plan from the flags; no flags at all gives the source text's configuration."""
    import analytic as an

    from .story import essay

    given = {k: v for k, v in vars(args).items() if v is not None and k not in ("json", "command", "func", "top", "text")}
    defaults = essay()["config"] if not any(k in given for k in ("model", "hardware")) else {}
    text_config = bool(defaults) and not any(k in given for k in (
        "gpus", "tp", "pp", "dp", "cp", "ep", "vpp", "zero", "sequence_parallel", "async_tp", "comm_sms", "zero3_gather",
        "recompute", "schedule", "seq",
        "batch_tokens", "global_batch", "microbatch_size", "dtype", "flash_attention"))
    get = lambda k: given.get(k, defaults.get(k))  # noqa: E731
    if get("model") is None or get("hardware") is None:
        raise CLIError("--model and --hardware: give both (or neither, for the source text's configuration)")
    model, hw = an.model(get("model")), an.hardware(get("hardware"))
    tp, pp, cp, ep, vpp = (_count(str(get(k) or 1), k) for k in ("tp", "pp", "cp", "ep", "vpp"))
    dp = _count(str(get("dp")), "dp") if get("dp") is not None else None
    if get("gpus") is not None:
        gpus = _count(str(get("gpus")), "gpus")
        if gpus % (tp * cp * pp):
            raise CLIError(f"--gpus: {gpus} is not divisible by tp·cp·pp = {tp * cp * pp}")
        inferred = gpus // (tp * cp * pp)
        if dp is not None and dp != inferred:
            raise CLIError(f"--dp: {dp} disagrees with --gpus {gpus} / (tp·cp·pp = {tp * cp * pp}) = {inferred}")
        dp = inferred
    dp = dp or 1
    seq = _count(str(get("seq") or "0"), "seq") if get("seq") is not None else None
    if seq is None:
        raise CLIError("--seq: give the sequence length")
    global_batch, note = _global_batch(get("batch_tokens"), get("global_batch"), seq)
    notes = {"batch_tokens": note} if note else {}
    sp = get("sequence_parallel")
    layout = an.Layout(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, vpp=vpp, zero=int(get("zero") or 0),
                       sequence_parallel=bool(sp) if sp is not None else tp > 1, async_tp=bool(get("async_tp")),
                       comm_sms=_count(str(get("comm_sms") or 0), "comm-sms", minimum=0),
                       recompute=get("recompute") or "none",
                       zero3_gather=_zero3_gather(get("zero3_gather"), int(get("zero") or 0)),
                       schedule=get("schedule") or ("interleaved" if vpp > 1 else "1f1b"))
    links = {k: get(k) for k in ("scale_up_bandwidth", "scale_out_bandwidth") if get(k) is not None}
    plan = an.Plan(model, hw, layout, seq_len=seq, global_batch=global_batch,
                   microbatch_size=_count(str(get("microbatch_size") or 1), "microbatch-size"),
                   dtype="bf16" if get("dtype") is None else get("dtype"), flash_attention=get("flash_attention") is not False, **links)
    tokens = get("tokens")
    if tokens is not None and " " not in str(tokens):
        tokens = f"{tokens} token"  # a count of tokens, e.g. --tokens 15.6e12
    extra = {"mfu": _fraction(str(get("mfu")), "mfu") if get("mfu") is not None else None,
             "training_tokens": tokens, "text": text_config, "notes": notes}
    return plan, extra


def _fmt(v) -> str:
    import pint
    if isinstance(v, pint.Quantity):
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
    from .story import lines
    plan, extra = build_plan(args)
    story = lines(plan, mfu=extra["mfu"], training_tokens=extra["training_tokens"], text=extra["text"])
    if args.json:
        print(json.dumps({"plan": repr(plan), "notes": list(extra["notes"].values()),
                          "lines": [ln.as_dict() for ln in story]}, indent=1, default=str))
        return 0
    for note in extra["notes"].values():
        print(f"note: {note}")
    print(repr(plan))
    section = None
    for ln in story:
        if ln.section != section:
            section = ln.section
            print(f"\n{section}")
        text = f"   (text: {ln.text})" if ln.text else ""
        print(f"  {ln.label:<74} {_fmt(ln.value):>16}{text}   [{ln.formula}]")
    return 0


def cmd_memory(args) -> int:
    _refuse_unread(args, PLAN_FLAGS - {"mfu", "tokens"}, "memory", "memory depends only on the layout and the batch")
    plan, extra = build_plan(args)
    mem = plan.memory()
    rows = {k: v.to("GB") for k, v in mem.as_dict().items()}
    notes = list(extra["notes"].values())
    if args.json:
        print(json.dumps({k: float(v.magnitude) for k, v in rows.items()} | {"unit": "GB", "fits": mem.fits,
                                                                             "notes": notes}))
        return 0
    for note in notes:
        print(f"note: {note}")
    print(repr(plan))
    for k in ("weights", "gradients", "optimizer", "gathered", "activations"):
        print(f"  {k:<12} {_fmt(rows[k]):>12}")
    print(f"  {'total':<12} {_fmt(rows['total']):>12}   of {_fmt(rows['hbm'])} HBM: {'fits' if mem.fits else 'does not fit'}")
    print(f"  (logits on the last stage, included where it is the worst: {_fmt(rows['logits'])})")
    return 0


def _parse_set(items) -> dict:
    out = {}
    for item in items or []:
        if "=" not in item:
            raise CLIError(f"--set: expected keyword=value, got {item!r}")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip().strip("'\"")  # read exactly, as one number with one unit, by the formula
    return out


def cmd_formula(args) -> int:
    import sympy

    import analytic as an
    if args.list or not args.name:
        names = sorted(an.formulas())
        if args.json:
            print(json.dumps({n: an.formula(n).description for n in names}))
        else:
            for n in names:
                print(f"{n:<58} {an.formula(n).description}")
        return 0
    f = an.formula(args.name)
    values = _parse_set(args.set)
    data = {"name": f.name, "expr": str(f.expr), "latex": f.latex(), "unit": f"{f.unit:~P}",
            "symbols": {k: {"unit": f"{u:~P}", "display": an.symbols.info(k).display, "meaning": an.symbols.info(k).meaning}
                        for k, u in f.symbols.items()},
            "source": f.source, "assumptions": list(f.assumptions), "description": f.description}
    free = [k for k in f.symbols if k not in values]
    if values and free:  # partial application: the expression in what is left
        part = f.subs(**values)
        data["partial"], data["free"] = str(part.expr), free
    elif values:
        result = f.evaluate(**values)
        data["value"] = float(result.magnitude)
        data["value_unit"] = f"{result.units:~P}"
    if args.json:
        print(json.dumps(data))
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
        print(f"value: {_fmt(result)}" + (f" = {_fmt(result.to_compact())}" if not result.dimensionless else ""))
    return 0


def cmd_validate(args) -> int:
    from . import validation
    folder = validation.find_folder(args.cases)
    results = validation.run(folder)
    failed = validation.failed(results)
    if args.json:
        cases = [{"id": r.id, "kind": r.kind, "quantity": r.quantity, "published": r.published, "ours": r.ours,
                  "error": r.error, "tolerance": r.tolerance, "status": r.status, "expected": r.expected,
                  "source": r.source, "reason": r.reason,
                  **({"in_fit": r.extra["in_fit"], "in_fit_error": r.extra["in_fit_error"]} if r.kind == "predicted" else {})}
                 for r in results]
        print(json.dumps({"cases": cases, "summary": validation.statistics(results), "failed": [r.id for r in failed]}))
    else:
        print(validation.table(results))
        print()
        print("\n".join(validation.summary(results)))
    if args.report:
        _write_text(args.report, validation.markdown(results))
    if failed:
        print(f"{len(failed)} non-claim cases outside their tolerance: {', '.join(r.id for r in failed)}", file=sys.stderr)
        return 1
    return 0


def _write_text(path: str, text: str) -> None:
    """Write ``text`` to exactly ``path`` (a file the user named), or fail with one line."""
    from pathlib import Path
    if not path or Path(path).is_dir():
        raise CLIError(f"{path!r}: expected a file name to write")
    Path(path).write_text(text)


def cmd_calibrate(args) -> int:
    if args.backend:
        if args.cases:
            raise CLIError("--cases: read with --published (the measured cases to fit), not with --backend")
        from .reference.calibrate import main as backend_main
        return backend_main(args)
    if not args.published:
        raise CLIError("calibrate: give --published (fit on the validation cases) or --backend gloo|nccl")
    from . import calibration, validation
    folder = validation.find_folder(args.cases)
    cases = [c for c in calibration.load_cases(folder / "predicted.toml") if c.in_fit]
    constants = calibration.fit(cases)
    text = calibration.render(constants, cases, source=f"{folder.name}/predicted.toml")
    if args.write:
        _write_text(args.write, text)
    if args.json:
        print(json.dumps(calibration.as_json(constants, cases)))
    elif not args.write:
        print(text, end="")
    return 0


def cmd_derive(args) -> int:
    from .derive import main as derive_main
    return derive_main(args)


def cmd_search(args) -> int:
    """A ranked table of the best layouts (``--json`` for data)."""
    from .search import search
    model, hw, gpus, seq, gb, kw, note = _search_inputs(args, "search")
    res = search(model, hw, gpus=gpus, seq_len=seq, global_batch=gb, top=_count(args.top, "top"), **kw)
    if not res.evaluated:
        raise CLIError(f"search: no valid layout of {gpus:,} GPUs for {model.name} with {gb:,} sequences (each "
                       "layout needs the batch to split over its replicas and microbatches, and TP to divide the heads)")
    if args.json:
        print(json.dumps({"evaluated": res.evaluated, "fitting": res.fitting, "seconds": res.seconds,
                          "notes": [note] if note else [], "ranked": [r.as_dict() for r in res.ranked]}))
        return 0
    if note:
        print(f"note: {note}")
    stack = [text for on, text in ((res.async_tp, "async TP wherever tp > 1"),
                                   (res.comm_sms, f"{res.comm_sms} SMs reserved for communication"),
                                   (res.zero3_gather == "per-tensor", "ZeRO-3 gathering tensor by tensor, blocking")) if on]
    if stack:
        print("stack: " + "; ".join(stack))
    print(f"{res.evaluated:,} layouts evaluated, {res.fitting:,} fit in {hw.hbm:~P}; search took {res.seconds:.2f} s"
          + (" (including compiling the expressions of this configuration, cached for the next search)"
             if res.compiled else ""))
    print(f"{'#':>3} {'tp':>3} {'cp':>3} {'pp':>4} {'dp':>5} {'ep':>3} {'v':>2} {'mb':>3} {'zero':>4} {'recompute':>9} "
          f"{'schedule':>11} {'step (s)':>9} {'MFU':>6} {'mem (GB)':>9}")
    for i, r in enumerate(res.ranked, 1):
        lay = r.layout
        print(f"{i:>3} {lay.tp:>3} {lay.cp:>3} {lay.pp:>4} {lay.dp:>5} {lay.ep:>3} {lay.vpp:>2} {r.microbatch_size:>3} "
              f"{lay.zero:>4} {lay.recompute:>9} {lay.schedule:>11} {r.step_time:>9.3f} {r.mfu:>6.3f} {r.memory / 1e9:>9.2f}")
    return 0


def cmd_plot(args) -> int:
    from . import plots
    from .search import search
    plots.output_format(args.out)  # before any work: the file name must say the format
    if args.kind == "bubble":
        _refuse_unread(args, {"pp"}, "plot bubble", "the bubble plot takes --pp")
        plots.bubble(_count(args.pp or "8", "pp"), out=args.out)
    else:
        model, hw, gpus, seq, gb, kw, _ = _search_inputs(args, f"plot {args.kind}")
        if args.kind == "scaling":
            sizes = [g for g in (gpus // 8, gpus // 4, gpus // 2, gpus, gpus * 2) if g >= 1]
            plots.scaling(model, hw, gpus=sizes, seq_len=seq, global_batch=gb, out=args.out, **kw)
        else:
            res = search(model, hw, gpus=gpus, seq_len=seq, global_batch=gb, progress=False, **kw)
            if args.kind == "memory":
                plots.memory(res, model, hw, seq_len=seq, global_batch=gb, out=args.out)
            else:
                plots.pareto(res, out=args.out)
    print(f"wrote {args.out}")
    return 0


def parser() -> argparse.ArgumentParser:
    top = _Parser(prog="analytic", description="Closed-form models of distributed LLM training.", allow_abbrev=False)
    sub = top.add_subparsers(dest="command", parser_class=_Parser)
    p = sub.add_parser("step", help="the story of one training step", allow_abbrev=False)
    _plan_args(p)
    p.set_defaults(func=cmd_step)
    p = sub.add_parser("memory", help="memory per GPU as a table", allow_abbrev=False)
    _plan_args(p)
    p.set_defaults(func=cmd_memory)
    p = sub.add_parser("formula", help="print or evaluate a catalogue formula", allow_abbrev=False)
    p.add_argument("name", nargs="?")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="evaluate with this input (units allowed)")
    p.add_argument("--list", action="store_true")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_formula)
    p = sub.add_parser("validate", help="run the published validation cases", allow_abbrev=False)
    p.add_argument("--json", action="store_true")
    p.add_argument("--cases", metavar="DIR", help="the cases' folder (default: validation/ of this source checkout)")
    p.add_argument("--report", metavar="PATH", help="also write the Markdown report to PATH (validation/REPORT.md)")
    p.set_defaults(func=cmd_validate)
    p = sub.add_parser("calibrate", help="fit the predictive model's constants", allow_abbrev=False)
    p.add_argument("--published", action="store_true", help="fit on the published measurements (prints the "
                   "calibration file; --write PATH writes it)")
    p.add_argument("--cases", metavar="DIR", help="with --published: the cases' folder (default: validation/ of "
                   "this source checkout)")
    p.add_argument("--backend", choices=["gloo", "nccl"], help="time real collectives with torch.distributed")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--write", metavar="PATH", help="write the fitted profile (TOML)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_calibrate)
    p = sub.add_parser("derive", help="run a derivation (or render them all to Markdown)", allow_abbrev=False)
    p.add_argument("name", nargs="?")
    p.add_argument("--markdown", action="store_true")
    p.add_argument("--list", action="store_true")
    p.set_defaults(func=cmd_derive)
    p = sub.add_parser("search", help="rank every valid layout by predicted step time", allow_abbrev=False)
    _plan_args(p)
    p.add_argument("--top", default="10")
    p.set_defaults(func=cmd_search)
    p = sub.add_parser("plot", help="write a plot (needs the 'plot' extra)", allow_abbrev=False)
    p.add_argument("kind", choices=["scaling", "memory", "bubble", "pareto"])
    p.add_argument("--out", required=True)
    _plan_args(p)
    p.set_defaults(func=cmd_plot)
    return top


def _one_line(text: str) -> str:
    """The message on one line: control characters (a newline in a user's value) escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def main(argv=None) -> int:
    try:
        top = parser()
        args, extra = top.parse_known_args(argv)
        if extra:
            raise _unrecognized(top, args.command, extra)
        if not getattr(args, "func", None):
            raise CLIError("analytic: give a command: step, memory, search, formula, validate, derive, calibrate, plot")
        return args.func(args)
    except CLIError as exc:
        print(_one_line(str(exc)), file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into head and closed
        sys.stderr.close()
        return 0
    except Exception as exc:  # library errors are user errors; anything else is a bug and keeps its traceback
        from .errors import AnalyticError
        if isinstance(exc, AnalyticError):
            print(_one_line(f"analytic: {exc}"), file=sys.stderr)
            return 2
        if isinstance(exc, OSError) and exc.filename:  # a file the user named cannot be written or read
            print(_one_line(f"analytic: {exc.filename}: {exc.strerror or exc}"), file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
