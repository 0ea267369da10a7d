"""Plots (matplotlib, the optional 'plot' extra): scaling, memory, bubble and the Pareto front."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..core.errors import InputError, install_hint
from ..core.progress import steps
from ..core.values import count


def _plt():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InputError(f"plots need matplotlib: {install_hint('plot')}") from None
    return plt


#: the formats a plot is written in, picked by the suffix of its file name (matplotlib's Agg and
#: vector backends)
FORMATS = ("png", "pdf", "svg", "svgz", "eps", "ps", "jpg", "jpeg", "tif", "tiff", "webp")


def output_format(out) -> str:
    """The format of the file ``out`` names (its suffix); an InputError for no file name, a folder
    or a suffix that names no format."""
    if (
        not isinstance(out, (str, Path))
        or not str(out)
        or Path(out).is_dir()
        or str(out).endswith(("/", "\\"))
    ):
        raise InputError(f"out: expected a file name such as plot.png, got {str(out)!r}")
    suffix = Path(out).suffix[1:].lower()
    if suffix not in FORMATS:
        raise InputError(
            f"out: the suffix of {str(out)!r} picks the format; expected one of "
            f"{', '.join('.' + f for f in FORMATS)}"
        )
    return suffix


def _finish(plt, fig, out):
    """Write the figure to exactly ``out`` (in the format its suffix names) and return ``out``; with
    ``out`` None, return the figure itself (to inspect, adjust or save)."""
    fig.tight_layout()
    if out is None:
        return fig
    import io

    from ..core.files import write_text

    try:
        image = io.BytesIO()
        fig.savefig(image, format=output_format(out))
        write_text(out, image.getvalue())
    finally:
        plt.close(fig)
    return out


def _layout_label(layout) -> str:
    return (
        f"TP{layout.tp} CP{layout.cp} PP{layout.pp} DP{layout.dp}"
        + (f" EP{layout.ep}" if layout.ep > 1 else "")
        + f" ZeRO-{layout.zero} {layout.schedule}"
    )


def _log_if_wide(ax, axis: str, values) -> None:
    """A log scale where the values span more than a decade, so one outlier does not flatten the
    rest."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    if len(v) and v.max() > 10 * v.min():
        (ax.set_xscale if axis == "x" else ax.set_yscale)("log")


def doubling(text: str) -> list[int]:
    """GPU counts from START doubling while at most STOP ("64:16384"), for ``--gpus-range``."""
    start, sep, stop = str(text).partition(":")
    if not sep or not start.strip().isdigit() or not stop.strip().isdigit():
        raise InputError(
            f"--gpus-range: expected START:STOP, two whole numbers of GPUs, got {text!r}"
        )
    start, stop = count("gpus-range start", int(start)), count("gpus-range stop", int(stop))
    if stop < start:
        raise InputError(f"--gpus-range: {stop} is below {start}")
    return [start * 2**i for i in range(int(math.log2(stop // start)) + 1)]


def scaling(model, hardware, *, gpus, seq_len, global_batch, out=None, **search_kw):
    """Step time and MFU of the best layout at each GPU count (log GPU axis, MFU from zero, each
    point's layout annotated). Returns ``out``, or the figure when ``out`` is None."""
    from ..search.layouts import search

    plt = _plt()
    best = [
        search(model, hardware, gpus=g, seq_len=seq_len, global_batch=global_batch, top=1,
               progress=False, **search_kw)
        for g in steps(gpus, desc="scaling: the best layout of each count", unit="searches")
    ]
    ok = [(g, r.best) for g, r in zip(gpus, best) if len(r)]
    if not ok:
        raise InputError(
            "scaling plot: "
            + (
                f"no layout of {', '.join(map(str, gpus))} GPUs fits"
                if len(gpus)
                else "give at least one GPU count"
            )
        )
    xs = [g for g, _ in ok]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    (time_line,) = ax.plot(xs, [b.step_time for _, b in ok], "o-", label="step time (s)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("GPUs")
    ax.set_ylabel("step time (s)")
    _log_if_wide(ax, "y", [b.step_time for _, b in ok])
    ax2 = ax.twinx()
    mfus = [b.mfu for _, b in ok]
    (mfu_line,) = ax2.plot(xs, mfus, "s--", color="tab:orange", label="MFU (6·N·D)")
    # from zero: a wobble of two points stays one
    ax2.set_ylim(
        0, min(1.0, max(0.6, 1.2 * max(mfus)))
    )
    ax2.set_ylabel("MFU")
    for g, b in ok:
        ax.annotate(_layout_label(b.layout), (g, b.step_time), textcoords="offset points",
                    xytext=(4, 6), fontsize=6)
    ax.legend(handles=[time_line, mfu_line], loc="upper center", fontsize=8)
    ax.set_title(
        f"{model.name or 'model'} on {hardware.key or hardware.name}, sequence {seq_len:,}, "
        f"{global_batch:,} sequences a step: the fastest layout that fits",
        fontsize=9,
    )
    return _finish(plt, fig, out)


def memory(result, model, hardware, *, seq_len, global_batch, out=None, top: int = 10):
    """Stacked memory breakdown of the top layouts of a search against the HBM line. Returns
    ``out``, or the figure when ``out`` is None."""
    plt = _plt()
    rows = result.ranked[:top]
    if not rows:
        raise InputError("memory plot: the search found no layout that fits")
    fig, ax = plt.subplots(figsize=(7, 4.5))
    labels = []
    bottoms = np.zeros(len(rows))
    parts = {"weights": [], "gradients": [], "optimizer": [], "gathered": [], "activations": []}
    for r in rows:
        lay = r.layout
        labels.append(
            f"t{lay.tp} c{lay.cp} p{lay.pp} d{lay.dp}\nz{lay.zero} {lay.recompute[:3]}"
            f" {lay.schedule}"
        )
        m = r.plan(model, hardware, seq_len=seq_len, global_batch=global_batch).memory()
        for k in parts:
            parts[k].append(getattr(m, k).to("GB").magnitude)
    for k, vals in parts.items():
        if any(vals):
            ax.bar(range(len(rows)), vals, bottom=bottoms, label=k)
            bottoms += np.asarray(vals)
    ax.axhline(hardware.hbm.to("GB").magnitude, color="black", linestyle="--", label="HBM")
    ax.set_ylim(0, None)
    ax.set_xticks(range(len(rows)), labels, fontsize=6, rotation=45, ha="right")
    ax.set_xlabel("layout, fastest first")
    ax.set_ylabel("memory per GPU, fullest stage (GB)")
    ax.legend(fontsize=7)
    ax.set_title(
        f"{model.name or 'model'} on {hardware.key or hardware.name}, sequence {seq_len:,}, "
        f"{global_batch:,} sequences: the {len(rows)} fastest layouts",
        fontsize=9,
    )
    return _finish(plt, fig, out)


def bubble(pp: int, *, out=None, microbatches=None):
    """Bubble fraction against microbatches for each schedule (fractions from zero, log microbatch
    axis). Returns ``out``, or the figure when ``out`` is None."""
    from ..search.sweeps import bubble as sweep_bubble

    plt = _plt()
    pp = count("pp", pp, allow_symbol=False)
    m = (
        microbatches
        if microbatches is not None
        else np.unique(np.geomspace(pp, 64 * pp, 24).astype(int))
    )
    data = sweep_bubble(pp, m)
    fig, ax = plt.subplots(figsize=(6, 4))
    for s, y in data.items():
        if s != "microbatches":
            ax.plot(data["microbatches"], y, label=s)
    ax.set_xscale("log")
    ax.set_ylim(0, None)
    ax.set_xlabel("microbatches per step")
    ax.set_ylabel("bubble / ideal time")
    ax.set_title(f"pipeline bubble by schedule, p = {pp} stages")
    ax.legend()
    return _finish(plt, fig, out)


def pareto(result, *, out=None, title: str | None = None):
    """Memory against step time for every fitting layout of a search, with the Pareto front and the
    fastest layout marked (a log step-time axis where the times span more than a decade). Returns
    ``out``, or the figure when ``out`` is None."""
    plt = _plt()
    a = result.arrays
    fit = a["fits"]
    if not fit.any():
        raise InputError("pareto plot: the search found no layout that fits")
    t, mem = a["step_time"][fit], a["memory"][fit] / 1e9
    order = np.argsort(t)
    front_t, front_m, best = [], [], np.inf
    for i in order:
        if mem[i] < best:
            best = mem[i]
            front_t.append(t[i])
            front_m.append(mem[i])
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.scatter(t, mem, s=2, alpha=0.3, label=f"{int(fit.sum()):,} layouts that fit")
    ax.plot(front_t, front_m, "r.-", label="Pareto front")
    top = result.best
    ax.plot([top.step_time], [top.memory / 1e9], "k*", markersize=12, label="fastest")
    ax.annotate(
        f"{_layout_label(top.layout)}, {top.step_time:.3g} s",
        (top.step_time, top.memory / 1e9),
        textcoords="offset points",
        xytext=(6, 6),
        fontsize=7,
    )
    _log_if_wide(ax, "x", t)
    ax.set_ylim(0, None)
    ax.set_xlabel("predicted step time (s)")
    ax.set_ylabel("memory per GPU (GB)")
    ax.legend(fontsize=8)
    ax.set_title(
        title or f"{result.evaluated:,} layouts evaluated, {result.fitting:,} fit", fontsize=9
    )
    return _finish(plt, fig, out)


def read_sweep(path):
    """A co-design sweep written by ``analytic codesign --out`` (Parquet: data, read by pyarrow)."""
    from pathlib import Path

    import pandas as pd

    if not Path(path).is_file():
        raise InputError(f"--from: {path} is not a file")
    try:
        return pd.read_parquet(path)
    except Exception as exc:  # not Parquet, or not a sweep's
        raise InputError(f"--from: {path}: not a co-design sweep ({str(exc)[:80]})") from None


def codesign(frame, *, out=None, value: str = "step_time [s]"):
    """A co-design sweep's best layouts: with one varied field, ``value`` against it, a line a
    model; with two, a heat map a model of ``value`` over both, the points where no layout fits
    blank and the fit boundary drawn. Returns ``out``, or the figure when ``out`` is None."""
    from ..search.codesign import FIELDS

    plt = _plt()
    fields = [c for c in frame.columns if c.split(" [")[0] in FIELDS]
    if value not in frame.columns or not 1 <= len(fields) <= 2:
        raise InputError(
            f"codesign plot: expected a sweep of one or two fields with a {value!r} column"
        )
    best = frame[(frame["rank"] == 1) | frame["rank"].isna()]
    models = list(dict.fromkeys(best["model"]))
    if len(fields) == 1:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for m in models:
            rows = best[best["model"] == m].sort_values(fields[0])
            ax.plot(rows[fields[0]], rows[value], "o-", label=m)
        ax.set_xlabel(fields[0])
        ax.set_ylabel(f"{value}, the best layout")
        ax.set_ylim(0, None)
        ax.legend(fontsize=8)
    else:
        fig, axes = plt.subplots(1, len(models), figsize=(5 * len(models), 4.2), squeeze=False)
        for ax, m in zip(axes[0], models):
            grid = best[best["model"] == m].pivot_table(
                index=fields[1], columns=fields[0], values=value, aggfunc="first", dropna=False
            )
            x, y = grid.columns.to_numpy(float), grid.index.to_numpy(float)
            z = grid.to_numpy(float)
            mesh = ax.pcolormesh(x, y, np.ma.masked_invalid(z), shading="nearest")
            fig.colorbar(mesh, ax=ax, label=value)
            if np.isnan(z).any() and not np.isnan(z).all():
                ax.contour(
                    x, y, np.isnan(z).astype(float), levels=[0.5], colors="black", linewidths=1.5
                )
            ax.set_xlabel(fields[0])
            ax.set_ylabel(fields[1])
            ax.set_title(f"{m}: the best layout (blank: none fits)", fontsize=9)
    fig.suptitle(
        f"{frame.attrs.get('hardware', '')}, {frame.attrs.get('gpus', '')} GPUs, sequence "
        f"{frame.attrs.get('seq_len', '')}",
        fontsize=9,
    )
    return _finish(plt, fig, out)
