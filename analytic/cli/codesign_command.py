"""``analytic codesign``: hardware, model and layout swept together
(:func:`analytic.search.codesign.codesign`)."""

from __future__ import annotations

import re

from ..core.choices import CODESIGN_OBJECTIVES
from .flags import (
    SEARCH_FLAGS,
    CLIError,
    count_flag,
    hardware_overrides,
    refuse_unread,
    search_keywords,
)
from .output import json_text


def add_parser(sub, plan_args) -> None:
    """``analytic codesign``: the plan flags search reads (``plan_args`` adds them), and the sweep's
    own."""
    p = sub.add_parser(
        "codesign",
        help=(
            "vary hardware fields over a grid and search every model's layouts at each "
            "point (on Dask)"
        ),
        allow_abbrev=False,
    )
    plan_args(p)
    p.add_argument(
        "--vary",
        action="append",
        metavar="FIELD=START:STOP:NUM[UNIT]",
        help=(
            "a hardware field and its values (a range, or a comma-separated list: hbm=80GB,141GB);"
            " repeat for a grid of several fields"
        ),
    )
    p.add_argument("--objective", choices=CODESIGN_OBJECTIVES, default="step_time")
    p.add_argument("--keep", default="1", help="layouts kept a point and model")
    p.add_argument(
        "--scheduler",
        help=(
            "'synchronous' (in this process) or a Dask scheduler's address (default: a "
            "local cluster sized to this machine)"
        ),
    )
    p.add_argument(
        "--out",
        metavar="FILE.parquet",
        help="write every row as Parquet (only once the sweep is complete)",
    )
    p.add_argument("--force", action="store_true", help="run a grid of more than a million points")
    p.add_argument(
        "--quiet",
        action="store_true",
        help="no progress bar (none is drawn when stderr is not a terminal)",
    )
    p.set_defaults(func=cmd_codesign)


def vary_flags(flags: list[str]) -> dict:
    """``--vary`` flags as codesign's ``vary``: FIELD=START:STOP:NUM[UNIT], or FIELD=V1,V2,... (each
    a number with its unit); a field given twice is refused."""
    out = {}
    for text in flags:
        field, sep, values = text.partition("=")
        field = field.strip().replace("-", "_")
        if not sep or not field or not values.strip():
            raise CLIError(
                f"--vary: expected FIELD=START:STOP:NUM[UNIT] or FIELD=V1,V2, got {text!r}"
            )
        if field in out:
            raise CLIError(f"--vary: {field} is given twice")
        if ":" in values:
            out[field] = values
        else:
            items = [v.strip() for v in values.split(",")]
            out[field] = [int(v) if re.fullmatch(r"\d+", v, re.ASCII) else v for v in items]
    return out


def cmd_codesign(args) -> int:
    import analytic as an

    from ..search.codesign import codesign

    refuse_unread(
        args, SEARCH_FLAGS, "codesign", "a sweep searches every layout alike, as search does"
    )
    if not (args.model and args.hardware and args.gpus and args.seq and args.vary):
        raise CLIError(
            "codesign: give --model, --hardware, --gpus, --seq, --vary (and --batch-tokens or "
            "--global-batch)"
        )
    models = [m.strip() for m in args.model.split(",") if m.strip()]
    batch = {"batch_tokens": args.batch_tokens} if args.batch_tokens else {}
    if args.global_batch:
        batch["global_batch"] = count_flag(args.global_batch, "global-batch")
    vary = vary_flags(args.vary)
    overrides = hardware_overrides(lambda k: getattr(args, k))
    both = sorted(set(overrides) & set(vary))
    if both:
        raise CLIError(
            f"--{both[0].replace('_', '-')}: also varied (--vary {both[0]}=...); give it one way"
        )
    hardware = an.hardware(args.hardware)
    frame = codesign(
        models,
        hardware.replace(**overrides) if overrides else hardware,
        count_flag(args.gpus, "gpus"),
        seq_len=count_flag(args.seq, "seq"),
        vary=vary,
        objective=args.objective,
        keep=count_flag(args.keep, "keep"),
        scheduler=args.scheduler,
        out=args.out,
        force=args.force,
        **batch,
        **search_keywords(args),
    )
    if args.json:
        print(
            json_text(
                {
                    "attrs": {k: v for k, v in frame.attrs.items()},
                    "rows": frame.astype(object).where(frame.notna(), None).to_dict("records"),
                }
            )
        )
        return 0
    from .stack_spread import stack_text

    print(stack_text(frame.attrs["stack"]) + " (--stack counts the layouts on another)")
    from .commands import _wrapped

    base = hardware.replace(**overrides) if overrides else hardware
    print(_wrapped(_spread_text(args, models[0], base, vary, frame.attrs)))
    for note in frame.attrs["notes"]:
        print(f"note: {note}")
    print(
        f"{len(frame.drop_duplicates(['point'])):,} hardware points × {frame['model'].nunique()}"
        f" models: {frame.attrs['layouts_evaluated']:,} layouts in {frame.attrs['seconds']:.1f} s;"
        f" the best by {frame.attrs['objective']}"
        + (f", written to {args.out}" if args.out else "")
    )
    print(frame.to_string(index=False, na_rep="—", float_format=lambda v: f"{v:.4g}"))
    return 0


def _spread_text(args, model, hardware, vary: dict, attrs: dict) -> str:
    """The step the other stacks of the platform predict for ``model``'s fastest layout at the
    sweep's first point (a search of that point alone), as one line."""
    from ..presets import as_model
    from ..search.codesign import points
    from ..search.layouts import search
    from .stack_spread import plan_of_row, spread, spread_line

    kw = search_keywords(args)
    model, (_, hw) = as_model(model), points(hardware, vary, kw.get("dtype", "bf16"))[0]
    res = search(model, hw, gpus=count_flag(args.gpus, "gpus"), seq_len=attrs["seq_len"],
                 global_batch=attrs["global_batch"], top=1, progress=False, **kw)
    what = f"the fastest layout of {model.name} at point 0"
    if not res.ranked:
        return f"no layout of {model.name} fits at point 0: no other stack to set beside it"
    others = spread(plan_of_row(res.best, model, hw, attrs["seq_len"], attrs["global_batch"], kw))
    return spread_line(hw, res.best.step_time, others, what)
