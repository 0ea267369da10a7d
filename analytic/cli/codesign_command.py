"""``analytic codesign``: hardware, model and layout swept together (:func:`analytic.search.codesign.codesign`)."""

from __future__ import annotations

import re

from ..core.choices import CODESIGN_OBJECTIVES, RECOMPUTE, SCHEDULES, ZERO_STAGES
from .flags import CLIError, count_flag, layout_choices
from .output import json_text


def add_parser(sub) -> None:
    p = sub.add_parser("codesign", help="vary hardware fields over a grid and search every model's layouts at each "
                       "point (on Dask)", allow_abbrev=False)
    p.add_argument("--model", required=True, help="preset names or config.json paths, comma-separated")
    p.add_argument("--hardware", required=True, help="the preset every point changes")
    p.add_argument("--gpus", required=True)
    p.add_argument("--seq", required=True)
    p.add_argument("--batch-tokens", dest="batch_tokens")
    p.add_argument("--global-batch", dest="global_batch")
    p.add_argument("--vary", action="append", metavar="FIELD=START:STOP:NUM[UNIT]", required=True,
                   help="a hardware field and its values (a range, or a comma-separated list: hbm=80GB,141GB); repeat "
                   "for a grid of several fields")
    p.add_argument("--objective", choices=CODESIGN_OBJECTIVES, default="step_time")
    p.add_argument("--keep", default="1", help="layouts kept a point and model")
    for axis in ("tp", "pp", "dp", "cp", "ep", "vpp"):
        p.add_argument(f"--{axis}", help=f"pin the {axis} degree (the other degrees are searched)")
    p.add_argument("--zero", choices=[str(z) for z in ZERO_STAGES], help="search this ZeRO stage only")
    p.add_argument("--recompute", choices=RECOMPUTE, help="search this recomputation only")
    p.add_argument("--schedule", choices=SCHEDULES, help="search this pipeline schedule only")
    p.add_argument("--microbatch-size", dest="microbatch_size", help="search this microbatch size only")
    p.add_argument("--stack")
    p.add_argument("--dtype")
    p.add_argument("--scheduler", help="'synchronous' (in this process) or a Dask scheduler's address (default: a "
                   "local cluster sized to this machine)")
    p.add_argument("--out", metavar="FILE.parquet", help="write every row as Parquet (only once the sweep is complete)")
    p.add_argument("--force", action="store_true", help="run a grid of more than a million points")
    p.add_argument("--json", action="store_true")
    p.add_argument("--quiet", action="store_true", help="no progress bar (none is drawn when stderr is not a terminal)")
    p.set_defaults(func=cmd_codesign)


def vary_flags(flags: list[str]) -> dict:
    """``--vary`` flags as codesign's ``vary``: FIELD=START:STOP:NUM[UNIT], or FIELD=V1,V2,... (each a number
    with its unit); a field given twice is refused."""
    out = {}
    for text in flags:
        field, sep, values = text.partition("=")
        field = field.strip().replace("-", "_")
        if not sep or not field or not values.strip():
            raise CLIError(f"--vary: expected FIELD=START:STOP:NUM[UNIT] or FIELD=V1,V2, got {text!r}")
        if field in out:
            raise CLIError(f"--vary: {field} is given twice")
        if ":" in values:
            out[field] = values
        else:
            items = [v.strip() for v in values.split(",")]
            out[field] = [int(v) if re.fullmatch(r"\d+", v, re.ASCII) else v for v in items]
    return out


def cmd_codesign(args) -> int:
    from ..search.codesign import codesign
    models = [m.strip() for m in args.model.split(",") if m.strip()]
    batch = {"batch_tokens": args.batch_tokens} if args.batch_tokens else {}
    if args.global_batch:
        batch["global_batch"] = count_flag(args.global_batch, "global-batch")
    kw = {**{k: getattr(args, k) for k in ("stack", "dtype") if getattr(args, k)}, **layout_choices(args)}
    frame = codesign(models, args.hardware, count_flag(args.gpus, "gpus"), seq_len=count_flag(args.seq, "seq"),
                     vary=vary_flags(args.vary), objective=args.objective, keep=count_flag(args.keep, "keep"),
                     scheduler=args.scheduler, out=args.out, force=args.force, **batch, **kw)
    if args.json:
        print(json_text({"attrs": {k: v for k, v in frame.attrs.items()},
                         "rows": frame.astype(object).where(frame.notna(), None).to_dict("records")}))
        return 0
    for note in frame.attrs["notes"]:
        print(f"note: {note}")
    print(f"{len(frame.drop_duplicates(['point'])):,} hardware points × {frame['model'].nunique()} models: "
          f"{frame.attrs['layouts_evaluated']:,} layouts in {frame.attrs['seconds']:.1f} s; the best by "
          f"{frame.attrs['objective']}" + (f", written to {args.out}" if args.out else ""))
    print(frame.to_string(index=False, na_rep="—", float_format=lambda v: f"{v:.4g}"))
    return 0
