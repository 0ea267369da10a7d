"""Co-design sweeps: hardware, model and layout searched together, on Dask.

:func:`codesign` varies hardware fields over a grid (every combination a hardware point), runs the layout
search (:func:`.layouts.search`) for every point and model, and keeps each one's best layouts by an
objective. The work is one Dask task per (model, chunk of points): in-process (``scheduler="synchronous"``),
on a local ``dask.distributed`` cluster sized to the machine (the default), or on an existing cluster
(``scheduler="tcp://..."``), with the same result. Every point of a structure evaluates the programs of
that structure (:mod:`analytic.plan.programs`), built once and kept in the user's cache, so a point
costs what a warm search costs.
"""

from __future__ import annotations

import io
import itertools
import math
import os
import re
import sys
import time

import numpy as np

from ..core.choices import CODESIGN_OBJECTIVES
from ..core.errors import InputError
from ..core.units import DimensionalityError
from ..core.values import count, flag, quantity
from ..presets import as_hardware, as_model
from ..presets.hardware import FIELD_ALIASES

#: hardware fields a formula reads, with the unit their columns are written in ("": a count); ``price``
#: (per GPU-hour) is no hardware field: it prices the GPU-hours of each kept layout
FIELDS = {"peak_flops": "TFLOP/s", "hbm": "GB", "hbm_bandwidth": "TB/s", "scale_up_bandwidth": "GB/s",
          "scale_out_bandwidth": "GB/s", "scale_up_domain": "", "gpus_per_node": "", "sms": "", "price": "USD/hour"}
#: hardware points × models a sweep runs without ``force=True``
MAX_POINTS = 1_000_000
#: a grid written as text: start:stop:num, then a unit
_RANGE = re.compile(r"\s*([^:\s]+)\s*:\s*([^:\s]+)\s*:\s*(\d+)\s*([^:]*)")


def grid(field: str, values) -> list:
    """The values of one varied field: a list (numbers, strings with units, Quantities), a pint Quantity
    holding an array, or text ``"start:stop:num unit"`` (``num`` evenly spaced values, both ends included)."""
    if field not in FIELDS:
        raise InputError(f"vary: {field!r} is not a hardware field a formula reads; expected one of "
                         f"{', '.join(FIELDS)}")
    if isinstance(values, str):
        m = _RANGE.fullmatch(values)
        if not m:
            raise InputError(f"vary: {field}: expected a list or start:stop:num[unit] (num a whole number), got "
                             f"{values!r}")
        try:
            start, stop = float(m.group(1)), float(m.group(2))
        except ValueError:
            raise InputError(f"vary: {field}: start and stop must be numbers, got {values!r}") from None
        unit, spaced = m.group(4).strip(), np.linspace(start, stop, int(m.group(3)))
        if not FIELDS[field]:  # a count: whole numbers only
            if unit or not all(float(v).is_integer() for v in spaced):
                raise InputError(f"vary: {field}: a count takes whole numbers without a unit, got {values!r}")
            values = [int(v) for v in spaced]
        else:
            values = [f"{v:.12g} {unit}".strip() for v in spaced]
    elif hasattr(values, "magnitude") and np.ndim(values.magnitude):
        values = list(values)
    elif isinstance(values, (bytes, dict)) or not hasattr(values, "__iter__"):
        raise InputError(f"vary: {field}: expected a list of values or start:stop:num[unit], got {values!r}")
    values = list(values)
    if not values:
        raise InputError(f"vary: {field}: an empty grid")
    if not FIELDS[field]:
        values = [count(field, v, allow_symbol=False) for v in values]
    return values


def _price(value) -> float:
    """USD per GPU-hour, from a bare number (read in USD/hour), a string with its unit or a Quantity."""
    q = quantity("price", value)
    if hasattr(q, "to"):
        try:
            q = q.to("USD/hour").magnitude
        except DimensionalityError:
            raise InputError(f"vary: price: expected a rate in USD/hour, got {value!r}") from None
    q = float(q)
    if not (q > 0 and math.isfinite(q)):
        raise InputError(f"vary: price: expected a positive rate, got {value!r}")
    return q


def _grids(vary) -> dict:
    """field → its values (:func:`grid`), for every field of ``vary``."""
    if not isinstance(vary, dict) or not vary:
        raise InputError("vary: give at least one hardware field and its values, e.g. {'hbm': ['80 GB', '141 GB']}")
    return {k: grid(k, v) for k, v in vary.items()}


def points(hardware, vary: dict, dtype: str = "bf16") -> list[tuple[dict, object]]:
    """Every combination of the grids of ``vary``: (the point's values in the columns' units, its Hardware)."""
    grids = _grids(vary)
    out = []
    for combo in itertools.product(*grids.values()):
        changes = dict(zip(grids, combo))
        price = changes.pop("price", None)
        if "peak_flops" in changes:  # the plan's dtype's peak
            changes["peak_flops"] = {**hardware.peaks, dtype: changes["peak_flops"]}
        hw = hardware.replace(**changes) if changes else hardware
        row = {}
        for k in grids:
            if k == "price":
                row[k] = _price(price)
            elif FIELDS[k]:
                got = hw.peak_flops(dtype) if k == "peak_flops" else getattr(hw, FIELD_ALIASES.get(k, k))
                row[k] = float(got.to(FIELDS[k]).magnitude)
            else:
                row[k] = int(getattr(hw, k))
        out.append((row, hw))
    return out


def _chunk(model, hardware_points, gpus, seq_len, global_batch, objective, keep, search_kw) -> tuple[list, int]:
    """One task: the kept layouts of ``model`` at each (index, values, Hardware) point; rows, layouts evaluated."""
    from .layouts import ranking, search
    at_limit = search_kw.get("at_limit", False)
    rows, evaluated = [], 0
    for index, values, hw in hardware_points:
        res = search(model, hw, gpus=gpus, seq_len=seq_len, global_batch=global_batch, progress=False, top=1,
                     **search_kw)
        evaluated += res.evaluated
        order, ranked = ranking(res.arrays, objective, at_limit)
        kept = order[: min(keep, ranked)]
        base = {"model": model.name, "point": index, **values}
        if not len(kept):
            rows.append({**base, "rank": None})
        for rank, j in enumerate(kept, 1):
            r = res.row(int(j))
            lay = r.layout
            rows.append({**base, "rank": rank, "gpus": lay.gpus, "tp": lay.tp, "cp": lay.cp, "pp": lay.pp,
                         "dp": lay.dp, "ep": lay.ep, "vpp": lay.vpp, "zero": lay.zero, "recompute": lay.recompute,
                         "schedule": lay.schedule, "microbatch_size": r.microbatch_size, "step_time": r.step_time,
                         "mfu": r.mfu, "memory": r.memory / 1e9, "verdict": r.verdict,
                         "cost": r.cost * 1e6 / 3600})
    return rows, evaluated


def _prepare(model, hardware, seq_len, global_batch, search_kw) -> None:
    """Build (or read from the cache) the programs of ``model``'s search structures once, before the tasks."""
    from .programs import structure_programs
    structure_programs(model, hardware, seq_len, global_batch, **{k: v for k, v in search_kw.items() if k in (
        "dtype", "flash_attention", "async_tp", "comm_sms", "zero3_gather", "stack")})


def local_cluster(workers: int):
    """A local ``dask.distributed`` cluster of ``workers`` processes, one thread each, whose workers keep
    malloc's own trimming: Dask's default for its workers (MALLOC_TRIM_THRESHOLD_ of 64 KiB) returns every
    freed array to the system, and the layouts' temporaries are then paged in anew at every step (twice the
    time per layout, measured). A cluster of one's own: start its workers without that variable. This
    process's environment is left as it was (Dask's nanny writes its workers' variables into it, which
    processes this one starts later would inherit)."""
    import dask
    from distributed import LocalCluster
    saved = dict(os.environ)
    try:
        with dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}):
            return LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _run(tasks: list, scheduler):
    """The results of ``tasks`` ((function, args) pairs) on ``scheduler``, in their order."""
    try:
        import dask
        import distributed  # noqa: F401
    except ImportError:
        from ..core.errors import install_hint
        raise InputError(f"codesign runs on Dask: {install_hint('dask')}") from None

    from ..core.progress import is_shown
    delayed = [dask.delayed(fn, pure=False)(*args) for fn, args in tasks]
    if scheduler == "synchronous":
        from contextlib import nullcontext

        from dask.diagnostics import ProgressBar
        with ProgressBar(out=sys.stderr) if is_shown() else nullcontext():
            return list(dask.compute(*delayed, scheduler="synchronous"))
    from distributed import Client, progress
    cluster = None
    if scheduler is None:
        cluster = local_cluster(os.cpu_count() or 1)
        client = Client(cluster)
    else:
        client = Client(scheduler)
    futures = []
    try:
        futures = client.compute(delayed)
        if is_shown():
            progress(futures)
        return client.gather(futures)
    except KeyboardInterrupt:
        client.cancel(futures)
        raise
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def codesign(models, hardware, gpus, *, seq_len, batch_tokens=None, global_batch=None, vary: dict,
             objective: str = "step_time", keep: int = 1, scheduler=None, chunk: int | None = None,
             out=None, force: bool = False, **search_kw):
    """The best ``keep`` layouts of each model at every hardware point of ``vary``'s grids, as a pandas
    DataFrame: one row a (point, model, kept layout), each varied field's value, the layout, its step
    time, MFU, memory, verdict and GPU-hours per million tokens (and USD per million tokens where
    ``price`` is varied); each column's unit is in its name and in ``attrs["units"]``. A point where no
    layout fits keeps one row without a layout.

    ``models``: preset names, config.json paths or Models (one or a list); ``hardware``: one preset or
    Hardware, the base every point changes. ``vary``: field → values (see :data:`FIELDS`, :func:`grid`).
    ``objective``: step_time, cost (GPU-hours per token), mfu or headroom (the least memory). ``scheduler``:
    None for a local ``dask.distributed`` cluster sized to this machine, ``"synchronous"`` to run in this
    process, or a scheduler's address. ``chunk``: points a task (default: about four tasks a worker).
    ``out``: a Parquet file, written only once the sweep is complete. Other keywords are search's."""
    import pandas as pd

    from ..core.values import choice
    from .layouts import search_batch
    from .sweeps import frame_with_units
    objective = choice("objective", objective, CODESIGN_OBJECTIVES)
    keep = count("keep", keep, allow_symbol=False)
    force = flag("force", force)
    models = [as_model(m) for m in (models if isinstance(models, (list, tuple)) else [models])]
    if not models:
        raise InputError("models: give at least one model")
    hardware = as_hardware(hardware)
    if out is not None:
        _parquet_path(out)
    grids = _grids(vary)
    n_points = math.prod(len(g) for g in grids.values())
    if n_points * len(models) > MAX_POINTS and not force:
        raise InputError(f"vary: {n_points:,} hardware points × {len(models)} models is more than {MAX_POINTS:,}; "
                         "pass force=True (--force) to run it")
    pts = points(hardware, grids, search_kw.get("dtype", "bf16"))
    seq_len = count("seq_len", seq_len, allow_symbol=False)
    global_batch, notes = search_batch(seq_len, batch_tokens, global_batch)
    if scheduler is not None and scheduler != "synchronous" and not isinstance(scheduler, str):
        raise InputError(f"scheduler: expected None, 'synchronous' or a scheduler's address, got {scheduler!r}")
    workers = 1 if scheduler == "synchronous" else (os.cpu_count() or 1)
    size = count("chunk", chunk, allow_symbol=False) if chunk is not None else max(1, -(-len(pts) // (4 * workers)))
    indexed = [(i, values, hw) for i, (values, hw) in enumerate(pts)]
    for m in models:  # the programs once, here, before the tasks read them from the cache
        _prepare(m, pts[0][1], seq_len, global_batch, search_kw)
    tasks = [(_chunk, (m, indexed[lo:lo + size], gpus, seq_len, global_batch, objective, keep, search_kw))
             for m in models for lo in range(0, len(indexed), size)]
    start = time.perf_counter()
    results = _run(tasks, scheduler)
    seconds = time.perf_counter() - start
    rows = [r for part, _ in results for r in part]
    evaluated = sum(n for _, n in results)
    varied = list(pts[0][0])
    units = {**{k: FIELDS[k] for k in varied}, "step_time": "s", "memory": "GB", "cost": "GPU-hour/Mtoken"}
    if "price" in varied:
        for r in rows:
            r["usd"] = None if r.get("cost") is None else r["cost"] * r["price"]
        units["usd"] = "USD/Mtoken"
    columns = ["model", "point", *varied, "rank", "gpus", "tp", "cp", "pp", "dp", "ep", "vpp", "zero", "recompute",
               "schedule", "microbatch_size", "step_time", "mfu", "memory", "verdict", "cost",
               *(["usd"] if "price" in varied else [])]
    data = {c: [r.get(c) for r in rows] for c in columns}
    for c in ("rank", "gpus", "tp", "cp", "pp", "dp", "ep", "vpp", "zero", "microbatch_size"):
        data[c] = pd.array(data[c], dtype="Int64")  # None where no layout fits
    for c in ("step_time", "mfu", "memory", "cost", *(["usd"] if "price" in varied else [])):
        data[c] = np.array([np.nan if v is None else v for v in data[c]], dtype=float)
    frame = frame_with_units(data, units, layouts_evaluated=int(evaluated), seconds=seconds, objective=objective,
                             notes=list(notes), gpus=gpus, seq_len=int(seq_len), global_batch=int(global_batch),
                             hardware=hardware.key or hardware.name)
    if out is not None:
        write_parquet(frame, out)
    return frame


def _parquet_path(out) -> None:
    from pathlib import Path
    if Path(out).suffix != ".parquet":
        raise InputError(f"out: expected a .parquet file, got {str(out)!r}")


def write_parquet(frame, out) -> None:
    """``frame`` as Parquet at exactly ``out``, written whole or not at all (a file created beside it, then
    renamed over it)."""
    from ..core.errors import install_hint
    from ..core.files import write_text
    _parquet_path(out)
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise InputError(f"out: writing Parquet needs pyarrow: {install_hint('parquet')}") from None
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    write_text(out, buffer.getvalue())


__all__ = ["FIELDS", "MAX_POINTS", "codesign", "grid", "local_cluster", "points", "write_parquet"]
