"""Plots (matplotlib, the optional 'plot' extra): scaling, memory, bubble and the Pareto front."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .errors import InputError
from .values import count


def _plt():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InputError("plots need matplotlib: pip install -e '.[plot]'") from None
    return plt


#: the formats a plot is written in, picked by the suffix of its file name (matplotlib's Agg and vector backends)
FORMATS = ("png", "pdf", "svg", "svgz", "eps", "ps", "jpg", "jpeg", "tif", "tiff", "webp")


def output_format(out) -> str:
    """The format of the file ``out`` names (its suffix); an InputError for no file name, a folder or
    a suffix that names no format."""
    if not isinstance(out, (str, Path)) or not str(out) or Path(out).is_dir() or str(out).endswith(("/", "\\")):
        raise InputError(f"out: expected a file name such as plot.png, got {str(out)!r}")
    suffix = Path(out).suffix[1:].lower()
    if suffix not in FORMATS:
        raise InputError(f"out: the suffix of {str(out)!r} picks the format; expected one of "
                         f"{', '.join('.' + f for f in FORMATS)}")
    return suffix


def _save(plt, fig, out) -> None:
    """Write the figure to exactly ``out``, in the format its suffix names."""
    try:
        fig.savefig(out, format=output_format(out))
    finally:
        plt.close(fig)

def scaling(model, hardware, *, gpus, seq_len, global_batch, out, **search_kw):
    """Step time (and MFU) of the best layout at each GPU count."""
    from .search import search
    plt = _plt()
    best = [search(model, hardware, gpus=g, seq_len=seq_len, global_batch=global_batch, top=1, progress=False, **search_kw)
            for g in gpus]
    ok = [(g, r.best) for g, r in zip(gpus, best) if len(r)]
    if not ok:
        raise InputError("scaling plot: " + (f"no layout of {', '.join(map(str, gpus))} GPUs fits" if len(gpus)
                                             else "give at least one GPU count"))
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([g for g, _ in ok], [b.step_time for _, b in ok], "o-", label="step time")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("GPUs")
    ax.set_ylabel("step time (s)")
    ax2 = ax.twinx()
    ax2.plot([g for g, _ in ok], [b.mfu for _, b in ok], "s--", color="tab:orange", label="MFU")
    ax2.set_ylabel("MFU")
    ax.set_title(f"{model.name or 'model'} on {hardware.key or hardware.name}: best layout per size")
    fig.tight_layout()
    _save(plt, fig, out)
    return out


def memory(result, model, hardware, *, seq_len, global_batch, out, top: int = 10):
    """Stacked memory breakdown of the top layouts of a search against the HBM line."""
    plt = _plt()
    rows = result.ranked[:top]
    if not rows:
        raise InputError("memory plot: the search found no layout that fits")
    fig, ax = plt.subplots(figsize=(7, 4))
    labels = []
    bottoms = np.zeros(len(rows))
    parts = {"weights": [], "gradients": [], "optimizer": [], "activations": []}
    for r in rows:
        lay = r.layout
        labels.append(f"t{lay.tp} c{lay.cp} p{lay.pp} d{lay.dp}\nz{lay.zero} {lay.recompute[:3]} {lay.schedule}")
        m = r.plan(model, hardware, seq_len=seq_len, global_batch=global_batch).memory()
        for k in parts:
            parts[k].append(getattr(m, k).to("GB").magnitude)
    for k, vals in parts.items():
        ax.bar(range(len(rows)), vals, bottom=bottoms, label=k)
        bottoms += np.asarray(vals)
    ax.axhline(hardware.hbm.to("GB").magnitude, color="black", linestyle="--", label="HBM")
    ax.set_xticks(range(len(rows)), labels, fontsize=6, rotation=45, ha="right")
    ax.set_xlabel("layout")
    ax.set_ylabel("memory per GPU (GB)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    _save(plt, fig, out)
    return out


def bubble(pp: int, *, out, microbatches=None):
    """Bubble fraction against microbatches for each schedule."""
    from .sweep import bubble as sweep_bubble
    plt = _plt()
    pp = count("pp", pp, allow_symbol=False)
    m = microbatches if microbatches is not None else np.unique(np.geomspace(pp, 64 * pp, 24).astype(int))
    data = sweep_bubble(pp, m)
    fig, ax = plt.subplots(figsize=(6, 4))
    for s, y in data.items():
        if s != "microbatches":
            ax.plot(data["microbatches"], y, label=s)
    ax.set_xscale("log")
    ax.set_xlabel("microbatches per step")
    ax.set_ylabel("bubble / ideal time")
    ax.set_title(f"pipeline bubble, p = {pp}")
    ax.legend()
    fig.tight_layout()
    _save(plt, fig, out)
    return out


def pareto(result, *, out):
    """Memory against step time for every fitting layout of a search, with the Pareto front."""
    plt = _plt()
    a = result.arrays
    fit = a["fits"]
    t, mem = a["step_time"][fit], a["memory"][fit] / 1e9
    order = np.argsort(t)
    front_t, front_m, best = [], [], np.inf
    for i in order:
        if mem[i] < best:
            best = mem[i]
            front_t.append(t[i])
            front_m.append(mem[i])
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.scatter(t, mem, s=2, alpha=0.3, label="layouts that fit")
    ax.plot(front_t, front_m, "r.-", label="Pareto front")
    ax.set_xlabel("predicted step time (s)")
    ax.set_ylabel("memory per GPU (GB)")
    ax.legend()
    fig.tight_layout()
    _save(plt, fig, out)
    return out
