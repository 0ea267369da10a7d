"""The commands that hold the library to its sources: validate (the published cases), calibrate (the
fitted constants, from published runs or GEMMs timed here) and derive (the derivations)."""

from __future__ import annotations

import sys

from .flags import CLIError
from .output import json_text


def cmd_validate(args) -> int:
    from ..fit import report, validation

    folder = validation.find_folder(args.cases)
    results = validation.run(folder)
    failed = validation.failed(results)
    if args.json:
        cases = [
            {
                "id": r.id,
                "kind": r.kind,
                "quantity": r.quantity,
                "published": r.published,
                "ours": r.ours,
                "error": r.error,
                "tolerance": r.tolerance,
                "status": r.status,
                "expected": r.expected,
                "source": r.source,
                "reason": r.reason,
                **(
                    {
                        k: r.extra[k]
                        for k in ("in_fit", "group", "in_fit_error", "leave_one_out_error",
                                  "baseline_error")
                    }
                    if r.kind == "predicted"
                    else {}
                ),
            }
            for r in results
        ]
        print(
            json_text(
                {
                    "cases": cases,
                    "summary": validation.statistics(results),
                    "failed": [r.id for r in failed],
                    "known_misses": [r.id for r in validation.known_misses(results)],
                }
            )
        )
    else:
        print(report.table(results))
        print()
        print("\n".join(report.summary(results)))
    if args.report:
        _write_text(args.report, report.markdown(results, folder))
    known = validation.known_misses(results)
    if known:
        print(
            f"{len(known)} known misses, each with its reason: {', '.join(r.id for r in known)}",
            file=sys.stderr,
        )
    if failed:
        what = ", ".join(f"{r.id} ({r.status}, recorded {r.expected})" for r in failed)
        print(f"{len(failed)} non-claim cases not as recorded: {what}", file=sys.stderr)
        return 1
    return 0


def _write_text(path: str, text: str) -> None:
    """Write ``text`` to exactly ``path`` (a file the user named; ``-``: standard output), through a
    file created exclusively beside it (:func:`analytic.core.files.write_text`), or fail with one
    line."""
    from pathlib import Path

    from ..core.files import write_text

    if path == "-":
        sys.stdout.write(text)
        return
    if not path or Path(path).is_dir():
        raise CLIError(f"{path[:80]!r}: expected a file name to write")
    write_text(path, text)


def _calibrate_gemm(args) -> int:
    """``calibrate --gemm``: time GEMMs and a copy here, fit, print (or ``--json``), ``--write`` a
    profile."""
    try:
        import torch
    except ImportError:
        from ..core.errors import install_hint

        raise CLIError(f"calibrate --gemm: needs torch ({install_hint('torch')})") from None

    from ..reference import gemm

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise CLIError("--device cuda: torch sees no CUDA device here")
    peak = hbm = tile = None
    if args.hardware:
        if args.peak_flops or args.hbm_bandwidth:
            raise CLIError("--peak-flops/--hbm-bandwidth: give them or --hardware, not both")
        import analytic as an

        from ..presets import gemm_tile

        hw = an.hardware(args.hardware)
        peak = hw.peak_flops("bf16").to("FLOP/s").magnitude  # the dtype measure() times on CUDA
        hbm = hw.hbm_bandwidth.to("byte/s").magnitude if hw.hbm_bandwidth is not None else None
        tile = gemm_tile(hw.generation)
    else:
        from ..core.values import as_quantity

        if args.peak_flops:
            peak = as_quantity("peak-flops", args.peak_flops).to("FLOP/s").magnitude
        if args.hbm_bandwidth:
            hbm = as_quantity("hbm-bandwidth", args.hbm_bandwidth).to("byte/s").magnitude
    if args.write and peak is None and hbm is None:
        raise CLIError(
            "calibrate --gemm --write: give --hardware NAME (or --peak-flops and --hbm-bandwidth):"
            " a profile's efficiencies are shares of the device's peaks"
        )
    samples = gemm.measure(device)
    result = gemm.fit(samples, tile=tile if device == "cuda" else None)
    table = gemm.profile(samples, result, peak, hbm, args.hardware)
    why = gemm.poor(result)
    if why and args.write:
        raise CLIError(
            f"calibrate --gemm: the GEMM model fits this device poorly ({why}); not written"
        )
    if why:
        print(
            f"analytic: warning: the GEMM model fits this device poorly ({why}); its constants do"
            " not describe the device",
            file=sys.stderr,
        )
    if args.write:
        _write_text(args.write, gemm.to_toml(table))
    if args.json:
        print(json_text(table))
    elif not args.write:
        print(gemm.to_toml(table), end="")
    return 0


def cmd_calibrate(args) -> int:
    if args.gemm:
        if args.published or args.backend or args.cases:
            raise CLIError(
                "calibrate --gemm: measures this device; not read with --published, --backend or"
                " --cases"
            )
        return _calibrate_gemm(args)
    if args.device or args.hardware or args.peak_flops or args.hbm_bandwidth:
        raise CLIError("--device/--hardware/--peak-flops/--hbm-bandwidth: read with --gemm")
    if args.ranks is not None and not args.backend:
        raise CLIError("--ranks: read with --backend (the processes that time the collectives)")
    if args.backend:
        if args.cases:
            raise CLIError(
                "--cases: read with --published (the measured cases to fit), not with --backend"
            )
        if args.ranks is None:
            args.ranks = 4
        if args.ranks < 2:
            raise CLIError(f"--ranks: a collective needs at least 2 processes, got {args.ranks}")
        from ..reference.calibrate import main as backend_main

        return backend_main(args)
    if not args.published:
        raise CLIError(
            "calibrate: give --published (fit the step-time constants on the validation cases),"
            " --gemm (time GEMMs and copies on this device) or --backend gloo|nccl (time"
            " collectives)"
        )
    from ..fit import calibration, outside, reserve, routing, validation

    folder = validation.find_folder(args.cases)
    validation.load(folder)  # every case read as validate reads it: the same one-line errors
    cases = [c for c in calibration.load_cases(folder / "predicted.toml") if c.in_fit]
    constants = calibration.fit(cases)
    ratios = calibration.interval(cases, calibration.leave_one_source_out(cases))
    memory, beyond = reserve.summary(folder), outside.summary(folder)
    imbalance = routing.summary(folder)
    text = calibration.render(constants, cases, source=f"{folder.name}/predicted.toml",
                              ratios=ratios, memory=memory, outside=beyond, routing=imbalance)
    if args.write:
        _write_text(args.write, text)
    if args.json:
        print(json_text(calibration.as_json(constants, cases, ratios, memory, beyond, imbalance)))
    elif not args.write:
        print(text, end="")
    return 0


def cmd_derive(args) -> int:
    from ..fit.derive import main as derive_main

    return derive_main(args)
