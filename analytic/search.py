"""Layout search: enumerate every valid layout, evaluate them as numpy arrays, rank those that fit.

The numbers come from the same expressions as :class:`~analytic.plan.Plan`: for each combination of
the discrete choices (schedule, recompute policy, ZeRO stage) one Plan is built with the degrees
and the microbatch size left as symbols, and its ``memory.total``, ``step_time`` and ``flops`` are
compiled to numpy once. The compiled source is cached on disk, keyed by everything it depends on.

Sequence parallelism is on whenever tp > 1: in this model it never costs time (its reduce-scatter
+ all-gather equals the all-reduce it replaces) and always saves memory.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import __version__
from .errors import InputError
from .formula import compile_source, exact, numpy_source
from .hardware import Hardware
from .model import Model, count
from .plan import RECOMPUTE, SCHEDULES, Layout, Plan
from .symbols import sym

DEGREES = ("tp", "pp", "dp", "cp", "ep", "vpp", "microbatch_size")
OUTPUTS = ("memory.total", "step_time", "flops")


MAX_GPUS = 1 << 24  # enumeration is by divisors; beyond this no cluster exists to plan


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _source_digest() -> str:
    """A digest of the library's own code and data: compiled expressions are valid for exactly it."""
    root = Path(__file__).parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.suffix in (".py", ".toml", ".txt") and "__pycache__" not in path.parts:
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _cache_dir() -> Path:
    return Path(os.environ.get("ANALYTIC_CACHE", Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "analytic"))


@dataclass
class Ranked:
    """One evaluated layout."""

    layout: Layout
    microbatch_size: int
    step_time: float  # seconds
    memory: float  # bytes per GPU, worst stage
    mfu: float
    fits: bool

    def plan(self, model, hardware, **kw) -> Plan:
        return Plan(model, hardware, self.layout, microbatch_size=self.microbatch_size, **kw)

    def as_dict(self) -> dict:
        lay = self.layout
        return {"tp": lay.tp, "pp": lay.pp, "dp": lay.dp, "cp": lay.cp, "ep": lay.ep, "vpp": lay.vpp,
                "zero": lay.zero, "sequence_parallel": lay.sequence_parallel, "recompute": lay.recompute,
                "schedule": lay.schedule, "microbatch_size": self.microbatch_size,
                "step_time_s": self.step_time, "memory_GB": self.memory / 1e9, "mfu": self.mfu, "fits": self.fits}


class _Ranking(Sequence):
    """The fitting layouts, fastest first, built into Ranked objects only when read."""

    def __init__(self, arrays, order, group_keys):
        self._a, self._order, self._keys = arrays, order, group_keys

    def __len__(self):
        return len(self._order)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        j = self._order[i]
        a = self._a
        sched, rc, z = self._keys[int(a["group"][j])]
        d = {k: int(a[k][j]) for k in DEGREES}
        layout = Layout(tp=d["tp"], pp=d["pp"], dp=d["dp"], cp=d["cp"], ep=d["ep"], vpp=d["vpp"], zero=z,
                        sequence_parallel=d["tp"] > 1, recompute=rc, schedule=sched)
        return Ranked(layout, d["microbatch_size"], float(a["step_time"][j]), float(a["memory"][j]),
                      float(a["mfu"][j]), True)


@dataclass
class SearchResult:
    ranked: Sequence  # fitting layouts, fastest first
    evaluated: int  # valid layouts, every one evaluated
    fitting: int
    seconds: float
    arrays: dict = field(repr=False, default_factory=dict)  # every evaluated layout, as columns
    compiled: int = 0  # expression sets compiled by this search (0 when all came from the cache)

    def __iter__(self):
        return iter(self.ranked)

    def __len__(self):
        return len(self.ranked)

    def __getitem__(self, i):
        return self.ranked[i]

    @property
    def best(self) -> Ranked:
        if not self.ranked:
            raise InputError("search: no layout fits in memory")
        return self.ranked[0]


_COMPILED: dict = {}  # (cache file, group) → compiled functions, for repeated searches in one process


class _Templates:
    """Compiled (memory, step time, flops) per discrete group, in memory and on disk."""

    def __init__(self, model, hardware, seq_len, global_batch, dtype, flash_attention):
        self.args = (model, hardware, seq_len, global_batch, dtype, flash_attention)
        key = json.dumps([__version__, _source_digest(), repr(model), hardware.name, {k: str(v) for k, v in hardware.peaks.items()},
                          str(hardware.hbm), str(hardware.scale_up), str(hardware.scale_out), hardware.gpus_per_node,
                          repr(hardware.calibrations), seq_len, global_batch, dtype, flash_attention], sort_keys=True)
        self.path = _cache_dir() / f"search-{hashlib.sha256(key.encode()).hexdigest()[:24]}.json"
        self.sources = {}
        try:
            self.sources = json.loads(self.path.read_text())
        except (OSError, ValueError):
            pass
        self.dirty = False
        self.compiled = 0  # expression sets built by this search (not found in the cache)

    def get(self, schedule, recompute, zero, moe):
        gkey = f"{schedule}|{recompute}|{zero}"
        if (self.path, gkey) not in _COMPILED:
            if gkey not in self.sources:
                model, hardware, seq_len, global_batch, dtype, flash = self.args
                layout = Layout(tp=sym("tp"), pp=sym("pp"), dp=sym("dp"), cp=sym("cp"),
                                ep=sym("ep") if moe else 1, vpp=sym("vpp") if schedule == "interleaved" else 1,
                                zero=zero, sequence_parallel=True, recompute=recompute, schedule=schedule)
                plan = Plan(model, hardware, layout, seq_len=seq_len, global_batch=global_batch,
                            microbatch_size=sym("microbatch_size"), dtype=dtype, flash_attention=flash)
                self.sources[gkey] = [numpy_source(plan.expr(q).expr, list(DEGREES)) for q in OUTPUTS]
                self.dirty = True
                self.compiled += 1
            _COMPILED[(self.path, gkey)] = [compile_source(src) for src in self.sources[gkey]]
        return _COMPILED[(self.path, gkey)]

    def save(self):
        if self.dirty:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                tmp = self.path.with_suffix(".tmp")
                tmp.write_text(json.dumps(self.sources))
                tmp.replace(self.path)
            except OSError:
                pass  # a read-only home only costs the next search its compile time


def enumerate_layouts(model: Model, hardware: Hardware, *, gpus: int, seq_len: int, global_batch: int,
                      microbatch_sizes=(1, 2, 4, 8), zero=(0, 1, 2, 3), recompute=RECOMPUTE, schedules=SCHEDULES,
                      vpps=(2, 4), max_tp: int | None = None, max_cp: int | None = None):
    """Valid layouts grouped by (schedule, recompute, zero): {group: {degree: int array}}.

    Constraints: degrees multiply to ``gpus``; TP divides the heads and divides or is divided by the
    KV heads, and stays in a node unless ``max_tp`` says otherwise; CP divides the sequence; PP·v ≤
    layers; EP divides dp and the experts; microbatches per replica ≥ 1 and a multiple of pp for the
    interleaved schedule, even for DualPipe (with pp even); with pp = 1 only 1F1B is listed."""
    max_tp = max_tp or hardware.gpus_per_node
    rows = []
    for tp in _divisors(gpus):
        if tp > max_tp or model.heads % tp or (model.kv_heads % tp and tp % model.kv_heads):
            continue
        for cp in _divisors(gpus // tp):
            if seq_len % cp or (max_cp and cp > max_cp):
                continue
            for pp in _divisors(gpus // (tp * cp)):
                if pp > model.layers:
                    continue
                dp = gpus // (tp * cp * pp)
                eps = [e for e in _divisors(dp) if model.experts % e == 0] if model.is_moe else [1]
                for ep in eps:
                    for mbs in microbatch_sizes:
                        if global_batch % (dp * mbs):
                            continue
                        m = global_batch // (dp * mbs)
                        for sched in schedules:
                            if pp == 1 and sched != "1f1b":
                                continue
                            if sched == "interleaved":
                                vs = [v for v in vpps if pp > 1 and m % pp == 0 and pp * v <= model.layers]
                            elif sched == "dualpipe":
                                vs = [1] if pp % 2 == 0 and m % 2 == 0 else []
                            else:
                                vs = [1]
                            for v in vs:
                                rows.append((sched, tp, pp, dp, cp, ep, v, mbs))
    groups = {}
    for sched, *degrees in rows:
        for rc, z in itertools.product(recompute, zero):
            groups.setdefault((sched, rc, z), []).append(degrees)
    return {g: {k: np.array(col, dtype=float) for k, col in zip(DEGREES, zip(*vals))} for g, vals in groups.items()}


def _progress(done, total, start):
    if sys.stderr.isatty():
        width = 30
        filled = int(width * done / total)
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} groups, {time.time() - start:.1f} s")
        if done == total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def search(model: Model, hardware: Hardware, *, gpus, seq_len, global_batch=None, batch_tokens=None,
           dtype: str = "bf16", microbatch_sizes=(1, 2, 4, 8), zero=(0, 1, 2, 3), recompute=RECOMPUTE,
           schedules=SCHEDULES, vpps=(2, 4), max_tp: int | None = None, max_cp: int | None = None,
           flash_attention: bool = True, top: int | None = None, progress: bool = True) -> SearchResult:
    """Every valid layout of ``gpus`` accelerators, evaluated with Plan's expressions; the ones that
    fit in HBM ranked by predicted step time."""
    start = time.time()
    if not isinstance(model, Model) or not isinstance(hardware, Hardware):
        raise InputError("search: give an analytic Model and Hardware (an.model(name), an.hardware(name))")
    gpus, seq_len = count("gpus", gpus, allow_symbol=False), count("seq_len", seq_len, allow_symbol=False)
    if gpus > MAX_GPUS:
        raise InputError(f"gpus: search enumerates layouts of at most {MAX_GPUS:,} GPUs, got {gpus:,}")
    if (global_batch is None) == (batch_tokens is None):
        raise InputError("global_batch: give exactly one of global_batch (sequences) or batch_tokens")
    if batch_tokens is not None:
        tokens = count("batch_tokens", batch_tokens, allow_symbol=False)
        if tokens % seq_len:
            raise InputError(f"batch_tokens: {tokens} is not a whole number of {seq_len}-token sequences")
        global_batch = tokens // seq_len
    global_batch = count("global_batch", global_batch, allow_symbol=False)
    for name, values, allowed in (("zero", zero, (0, 1, 2, 3)), ("recompute", recompute, RECOMPUTE),
                                  ("schedules", schedules, SCHEDULES)):
        bad = [v for v in values if v not in allowed]
        if bad or not values:
            raise InputError(f"{name}: expected a non-empty subset of {allowed}, got {values!r}")
    groups = enumerate_layouts(model, hardware, gpus=gpus, seq_len=seq_len, global_batch=global_batch,
                               microbatch_sizes=microbatch_sizes, zero=zero, recompute=recompute,
                               schedules=schedules, vpps=vpps, max_tp=max_tp, max_cp=max_cp)
    templates = _Templates(model, hardware, seq_len, global_batch, dtype, flash_attention)
    hbm = float(exact(hardware.hbm.to("byte").magnitude))
    peak = float(hardware.peak_flops(dtype).to("FLOP/s").magnitude)
    cols = {k: [] for k in (*DEGREES, "memory", "step_time", "mfu", "group")}
    group_keys = list(groups)
    show = progress and sys.stderr.isatty()
    for i, g in enumerate(group_keys):
        arrs = groups[g]
        mem_f, time_f, flops_f = templates.get(*g, model.is_moe)
        args = [arrs[k] for k in DEGREES]
        with np.errstate(all="ignore"):
            memory = np.broadcast_to(mem_f(*args), arrs["tp"].shape).astype(float)
            step = np.broadcast_to(time_f(*args), arrs["tp"].shape).astype(float)
            flops = np.broadcast_to(flops_f(*args), arrs["tp"].shape).astype(float)
        for k in DEGREES:
            cols[k].append(arrs[k])
        cols["memory"].append(memory)
        cols["step_time"].append(step)
        cols["mfu"].append(flops / (step * gpus * peak))
        cols["group"].append(np.full(arrs["tp"].shape, i))
        if show:
            _progress(i + 1, len(group_keys), start)
    templates.save()
    arrays = {k: (np.concatenate(v) if v else np.array([])) for k, v in cols.items()}
    fits = arrays["memory"] <= hbm
    order = np.argsort(np.where(fits, arrays["step_time"], np.inf), kind="stable")
    n_fit = int(fits.sum())
    keep = order[: (n_fit if top is None else min(top, n_fit))]
    arrays["fits"] = fits
    arrays["group_keys"] = group_keys
    n = len(arrays["memory"])
    return SearchResult(_Ranking(arrays, keep, group_keys), evaluated=n, fitting=n_fit,
                        seconds=time.time() - start, arrays=arrays, compiled=templates.compiled)
