"""Co-design sweeps: hardware, model and layout searched together, on Dask.

:func:`codesign` varies hardware fields over a grid (every combination a hardware point), runs the
layout search (:func:`.layouts.search`) for every point and model, and keeps each one's best layouts
by an objective. The work is one Dask task per (model, chunk of points): in-process
(``scheduler="synchronous"``), on a local ``dask.distributed`` cluster sized to the machine (the
default), or on an existing cluster (``scheduler="tcp://..."``), with the same result. Every point
of a structure evaluates the programs of that structure (:mod:`analytic.plan.programs`), built once
and kept in the user's cache, so a point costs what a warm search costs.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import math
import os
import re
import sys
import time

import numpy as np

from ..core.choices import CODESIGN_OBJECTIVES, default_stack
from ..core.errors import InputError
from ..core.units import DimensionalityError, is_quantity
from ..core.values import count, flag, quantity
from ..presets import as_hardware, as_model
from ..presets.hardware import FIELD_ALIASES, field_quantity

#: hardware fields a formula reads, with the unit their columns are written in ("": a count);
#: ``price`` (per GPU-hour) is no hardware field: it prices the GPU-hours of each kept layout
FIELDS = {
    "peak_flops": "TFLOP/s",
    "hbm": "GB",
    "hbm_bandwidth": "TB/s",
    "scale_up_bandwidth": "GB/s",
    "scale_out_bandwidth": "GB/s",
    "scale_up_domain": "",
    "gpus_per_node": "",
    "sms": "",
    "price": "USD/hour",
}
#: hardware points × models a sweep runs without ``force=True``
MAX_POINTS = 1_000_000
#: a grid written as text: start:stop:num, then a unit (ASCII digits only)
_RANGE = re.compile(r"\s*([^:\s]+)\s*:\s*([^:\s]+)\s*:\s*(\d+)\s*([^:]*)", re.ASCII)
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", re.ASCII)
#: the unit each quantity field is checked in (its dimension; a value any unit of it)
_DIMENSION = {
    "peak_flops": "FLOP/s",
    "hbm": "byte",
    "hbm_bandwidth": "byte/s",
    "scale_up_bandwidth": "byte/s",
    "scale_out_bandwidth": "byte/s",
}


def _field(field) -> str:
    if not isinstance(field, str) or field not in FIELDS:
        raise InputError(
            f"vary: {field!r} is not a hardware field a formula reads; expected one of "
            f"{', '.join(FIELDS)}"
        )
    return field


def _range(field: str, text: str) -> tuple[str, str, int, str]:
    """(start, stop, num, unit) of ``"start:stop:num unit"``, each part checked, nothing built."""
    m = _RANGE.fullmatch(text)
    if not m:
        raise InputError(
            f"vary: {field}: expected a list or start:stop:num[unit] (num a whole number), got "
            f"{text!r}"
        )
    if not (_NUMBER.fullmatch(m.group(1)) and _NUMBER.fullmatch(m.group(2))):
        raise InputError(f"vary: {field}: start and stop must be numbers, got {text!r}")
    start, stop, num, unit = m.group(1), m.group(2), int(m.group(3)), m.group(4).strip()
    if not FIELDS[field] and (unit or not (float(start).is_integer() and float(stop).is_integer())):
        raise InputError(f"vary: {field}: a count takes whole numbers without a unit, got {text!r}")
    if num == 0:
        raise InputError(f"vary: {field}: an empty grid")
    return start, stop, num, unit


def _size(field: str, values) -> int:
    """How many values ``values`` describes, from its description (a range's num, a list's
    length)."""
    if isinstance(values, str):
        return _range(_field(field), values)[2]
    if is_quantity(values):
        if np.ndim(values.magnitude) == 0:
            raise InputError(
                f"vary: {field}: expected a list of values or start:stop:num[unit], got the single "
                f"value {values!r}; write [{values!r}]"
            )
        return int(np.size(values.magnitude))
    if (
        isinstance(values, (bytes, dict, set, frozenset))
        or not isinstance(values, (list, tuple, range))
        and not hasattr(values, "__len__")
    ):
        raise InputError(
            f"vary: {field}: expected a list of values or start:stop:num[unit], got {values!r:.80}"
        )
    if len(values) == 0:
        raise InputError(f"vary: {field}: an empty grid")
    return len(values)


def _value(field: str, v):
    """One grid value, checked as the hardware field (or the price) reads it."""
    if field == "price":
        return _price(v)
    if not FIELDS[field]:
        return count(field, v, allow_symbol=False)
    return field_quantity(field, v, _DIMENSION[field])


def grid(field: str, values) -> list:
    """The values of one varied field: a list (numbers, strings with units, Quantities), a pint
    Quantity holding an array, or text ``"start:stop:num unit"`` (``num`` evenly spaced values, both
    ends included). Each value is checked as the hardware field reads it (a range at its two
    ends)."""
    _size(_field(field), values)
    if isinstance(values, str):
        start, stop, num, unit = _range(field, values)
        if not FIELDS[field]:
            ends = [_value(field, int(float(x))) for x in (start, stop)]
            spaced = np.linspace(*ends, num)
            if not all(float(v).is_integer() for v in spaced):
                raise InputError(
                    f"vary: {field}: a count takes whole numbers without a unit, got {values!r}"
                )
            return [int(v) for v in spaced]
        for x in (start, stop):
            _value(field, f"{x} {unit}".strip())
        return [f"{v:.12g} {unit}".strip() for v in np.linspace(float(start), float(stop), num)]
    return [_value(field, v) for v in list(values)]


def _price(value) -> float:
    """USD per GPU-hour, from a bare number (read in USD/hour), a string with its unit or a
    Quantity."""
    if value is None or isinstance(value, bool):
        raise InputError(f"vary: price: expected a rate in USD/hour, got {value!r}")
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


def _grids(vary, models: int = 1, force: bool = False) -> dict:
    """field → its values (:func:`grid`), for every field of ``vary``; the number of points is
    counted from the grids' descriptions, and more than MAX_POINTS (with ``models`` models) refused
    unless ``force``, before any grid is built."""
    if not isinstance(vary, dict) or not vary:
        raise InputError(
            "vary: give at least one hardware field and its values, e.g. {'hbm': ['80 GB', '141"
            " GB']}"
        )
    n_points = math.prod(_size(_field(k), v) for k, v in vary.items())
    if n_points * models > MAX_POINTS and not force:
        raise InputError(
            f"vary: {n_points:,} hardware points × {models} models is more than {MAX_POINTS:,}; "
            "pass force=True (--force) to run it"
        )
    try:
        return {k: grid(k, v) for k, v in vary.items()}
    except MemoryError:
        raise InputError(
            f"vary: {n_points:,} hardware points do not fit in this machine's memory"
        ) from None


def points(
    hardware, vary: dict, dtype: str = "bf16", force: bool = False
) -> list[tuple[dict, object]]:
    """Every combination of the grids of ``vary``: (the point's values in the columns' units, its
    Hardware); more than MAX_POINTS only where ``force``."""
    grids = _grids(vary, force=force)
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
                got = (
                    hw.peak_flops(dtype)
                    if k == "peak_flops"
                    else getattr(hw, FIELD_ALIASES.get(k, k))
                )
                row[k] = float(got.to(FIELDS[k]).magnitude)
            else:
                row[k] = int(getattr(hw, k))
        out.append((row, hw))
    return out


def _chunk(
    model, hardware_points, gpus, seq_len, global_batch, objective, keep, search_kw
) -> tuple[list, int]:
    """One task: the kept layouts of ``model`` at each (index, values, Hardware) point; rows,
    layouts evaluated."""
    from .layouts import ranking, search

    at_limit = search_kw.get("at_limit", False)
    rows, evaluated = [], 0
    for index, values, hw in hardware_points:
        res = search(
            model, hw, gpus=gpus, seq_len=seq_len, global_batch=global_batch, progress=False, top=1,
            **search_kw,
        )
        evaluated += res.evaluated
        order, ranked = ranking(res.arrays, objective, at_limit)
        kept = order[: min(keep, ranked)]
        base = {"model": model.name, "point": index, **values}
        if not len(kept):
            rows.append({**base, "rank": None})
        for rank, j in enumerate(kept, 1):
            r = res.row(int(j))
            lay = r.layout
            rows.append(
                {
                    **base,
                    "rank": rank,
                    "gpus": lay.gpus,
                    "tp": lay.tp,
                    "cp": lay.cp,
                    "pp": lay.pp,
                    "dp": lay.dp,
                    "ep": lay.ep,
                    "vpp": lay.vpp,
                    "zero": lay.zero,
                    "recompute": lay.recompute,
                    "schedule": lay.schedule,
                    "microbatch_size": r.microbatch_size,
                    "step_time": r.step_time,
                    "mfu": r.mfu,
                    "memory": r.memory / 1e9,
                    "verdict": r.verdict,
                    "cost": r.cost * 1e6 / 3600,
                }
            )
    return rows, evaluated


def _prepare(models, hardware, seq_len, global_batch, search_kw) -> None:
    """Build (or read from the cache) the programs of each model's search structures, before the
    tasks: here, and in each worker (``Client.run``) so that no task waits on them."""
    from .programs import COUNTED, structure_programs

    # each search builds its own program
    if search_kw.get("pipeline_layout") or search_kw.get("layout_options"):
        return
    for model in models:
        structure_programs(
            model,
            hardware,
            seq_len,
            global_batch,
            **{
                k: v
                for k, v in search_kw.items()
                if k
                in (
                    "dtype",
                    "flash_attention",
                    "async_tp",
                    "comm_sms",
                    "zero3_gather",
                    "stack",
                )
            },
            counted={k: search_kw[k] for k in COUNTED if k in search_kw},
        )


#: seconds of work a task is sized to (Dask's cost per task, milliseconds, under 1 % of it), where
#: the points allow as many tasks as workers
TASK_SECONDS = 0.5


def _bounds(points: int, size: int | None, workers: int, seconds: float) -> list[int]:
    """Where each model's tasks cut the points: every ``size`` points where given, else into a
    multiple of ``workers`` tasks of near-equal size (one point more or less), each about
    TASK_SECONDS of work at ``seconds`` a point."""
    if size is not None:
        return [*range(0, points, size), points]
    if points == 0:
        return [0]
    tasks = 1 if workers == 1 else max(1, round(points * seconds / TASK_SECONDS))
    tasks = min(points, workers * -(-tasks // workers))
    return [points * i // tasks for i in range(tasks + 1)]


def _timed(model, hardware_points, *job) -> tuple:
    """:func:`_chunk`'s result and the seconds it took, where it ran."""
    start = time.perf_counter()
    out = _chunk(model, hardware_points, *job)
    return out, time.perf_counter() - start


def _on_cluster(models, indexed, job, client, workers: int) -> list:
    """Each model's results on the cluster, in point order: the first k points of each model a task
    each (k·models ≥ workers: every worker busy), timed where they ran; the first of them to
    finish sizes the tasks of the other points, which are sent at once, while the rest of the first
    run."""
    from distributed import as_completed

    k = min(len(indexed), -(-workers // len(models)))
    sent = []

    def send(tasks):
        sent.extend(client.compute(_delayed(tasks)))

    def sized():
        send([(_timed, (m, indexed[j : j + 1], *job)) for m in models for j in range(k)])
        per_point = next(as_completed(sent)).result()[1]
        cut = _bounds(len(indexed) - k, None, workers, per_point)
        send(
            [
                (_chunk, (m, indexed[k + lo : k + hi], *job))
                for m in models
                for lo, hi in zip(cut, cut[1:])
            ]
        )
        return len(cut) - 1

    n, got = _gathered(client, sent, sized)  # n tasks a model after its first points
    first, later = [r for r, _ in got[: k * len(models)]], got[k * len(models) :]
    return [
        r
        for i in range(len(models))
        for r in [*first[i * k : (i + 1) * k], *later[i * n : (i + 1) * n]]
    ]


def local_cluster(workers: int):
    """A local ``dask.distributed`` cluster of ``workers`` processes, one thread each, whose workers
    keep malloc's own trimming: Dask's default for its workers (MALLOC_TRIM_THRESHOLD_ of 64 KiB)
    returns every freed array to the system, and the layouts' temporaries are then paged in anew at
    every step (twice the time per layout, measured); and without Dask's statistical profiler,
    which samples the task's stack every 10 ms and took a twelfth of a sweep's time (87 % of
    in-process per core with it, 94 % without, measured). A cluster of one's own: start its workers
    without that variable and with the profiler off. This process's environment is left as it was
    (Dask's nanny writes its workers' variables into it, which processes this one starts later
    would inherit). Each worker imports this module as it starts, so that its first task does
    not."""
    import dask
    from distributed import LocalCluster

    saved = dict(os.environ)
    try:
        with dask.config.set(
            {
                "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
                "distributed.worker.profile.enabled": False,
            }
        ):
            # imported as each worker starts
            return LocalCluster(
                n_workers=workers,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                preload=[__name__, "analytic.search.layouts"],
            )
    finally:
        os.environ.clear()
        os.environ.update(saved)


#: seconds a scheduler named by its address has to answer
SCHEDULER_TIMEOUT = 10
_ADDRESS = re.compile(r"(?:(tcp|tls)://)?(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):(\d{1,5})", re.ASCII)


def _is_client(x) -> bool:
    """Whether ``x`` is a ``distributed`` Client (False without importing distributed where it is
    not)."""
    distributed = sys.modules.get("distributed")
    return distributed is not None and isinstance(x, distributed.Client)


def scheduler_of(scheduler):
    """``scheduler`` checked: None (a local cluster), ``"synchronous"`` (any case, trimmed), a
    ``distributed`` Client (used as it is, left open) or a Dask scheduler's TCP or TLS address,
    ``[tcp://]host:port`` or ``tls://host:port``."""
    if scheduler is None or _is_client(scheduler):
        return scheduler
    if not isinstance(scheduler, str):
        raise InputError(
            "scheduler: expected None, 'synchronous', a distributed Client or a scheduler's "
            f"address, got {scheduler!r:.80}"
        )
    text = scheduler.strip()
    if text.lower() == "synchronous":
        return "synchronous"
    m = _ADDRESS.fullmatch(text)
    if not m or not 0 < int(m.group(3)) < 65536:
        raise InputError(
            "scheduler: expected 'synchronous' or a Dask scheduler's address (tcp://host:port or "
            f"tls://host:port), got {scheduler!r:.80}"
        )
    return text if m.group(1) else f"tcp://{text}"


def _answers(address: str) -> bool:
    """Whether what listens at ``tcp://host:port`` speaks first as a Dask server does: within
    SCHEDULER_TIMEOUT seconds of the connection, unprompted, a message whose 8-byte little-endian
    length (distributed.comm.tcp's framing) is that of a handshake. An HTTP or other server that
    waits for a request says nothing (Dask's client would wait on it, or read its reply as a length
    of exabytes)."""
    import socket
    import struct

    host, port = address.removeprefix("tcp://").rsplit(":", 1)
    try:
        with socket.create_connection(
            (host.strip("[]"), int(port)), timeout=SCHEDULER_TIMEOUT
        ) as s:
            s.settimeout(SCHEDULER_TIMEOUT)
            head = s.recv(8, socket.MSG_WAITALL)
    except OSError:  # refused, unreachable, or silent past the timeout
        return False
    return len(head) == 8 and 0 < struct.unpack("<Q", head)[0] <= 2**20


@contextlib.contextmanager
def _client(scheduler):
    """A ``distributed`` Client on the scheduler at its address, or on a local cluster sized to this
    machine (None); the caller's Client as it is; None for ``"synchronous"``. A scheduler that does
    not answer within SCHEDULER_TIMEOUT seconds, or answers as no Dask scheduler does, is one
    InputError."""
    if scheduler == "synchronous":
        yield None
        return
    if _is_client(scheduler):  # the caller's: its connection stays theirs
        yield scheduler
        return
    try:
        import dask  # noqa: F401
        from distributed import Client
    except ImportError:
        from ..core.errors import install_hint

        raise InputError(f"codesign runs on Dask: {install_hint('dask')}") from None
    if scheduler is not None and scheduler.startswith("tcp://") and not _answers(scheduler):
        raise InputError(
            f"scheduler: no Dask scheduler answered at {scheduler} within {SCHEDULER_TIMEOUT} s"
        )
    cluster = local_cluster(os.cpu_count() or 1) if scheduler is None else None
    try:
        client = Client(cluster if cluster is not None else scheduler, timeout=SCHEDULER_TIMEOUT)
    # no answer, or a server that is no scheduler
    except (OSError, MemoryError, ValueError, TypeError) as exc:
        if cluster is not None:
            cluster.close()
            raise
        raise InputError(
            f"scheduler: no Dask scheduler answered at {scheduler} within {SCHEDULER_TIMEOUT} s "
            f"({type(exc).__name__})"
        ) from None
    try:
        yield client
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def _delayed(tasks: list) -> list:
    import dask

    return [dask.delayed(fn, pure=False)(*args) for fn, args in tasks]


def _run(tasks: list, client):
    """The results of ``tasks`` ((function, args) pairs) on ``client`` (None: in this process), in
    order."""
    from ..core.progress import steps

    delayed = _delayed(tasks)
    if client is None:  # one task after the other, as the synchronous scheduler runs them
        return [
            d.compute(scheduler="synchronous")
            for d in steps(delayed, desc="co-design", unit="task")
        ]
    sent = []
    return _gathered(client, sent, lambda: sent.extend(client.compute(delayed)))[1]


def _gathered(client, futures: list, send) -> tuple:
    """``send()``'s value and the results of the ``futures`` it sends (in order), the library's bar
    beside them (Dask's is 40 columns and its text); every one cancelled on an interrupt."""
    from distributed import as_completed

    from ..core.progress import is_shown, steps

    try:
        out = send()
        if is_shown():
            for _ in steps(
                as_completed(futures), desc="co-design", total=len(futures), unit="task"
            ):
                pass
        return out, client.gather(futures)
    except KeyboardInterrupt:
        client.cancel(futures)
        raise


def codesign(
    models,
    hardware,
    gpus,
    *,
    seq_len,
    batch_tokens=None,
    global_batch=None,
    vary: dict,
    objective: str = "step_time",
    keep: int = 1,
    scheduler=None,
    chunk: int | None = None,
    out=None,
    force: bool = False,
    **search_kw,
):
    """The best ``keep`` layouts of each model at every hardware point of ``vary``'s grids, as a
    pandas DataFrame: one row a (point, model, kept layout), each varied field's value, the layout,
    its step time, MFU, memory, verdict and GPU-hours per million tokens (and USD per million tokens
    where ``price`` is varied); each column's unit is in its name and in ``attrs["units"]``, the
    stack every layout is counted with in ``attrs["stack"]``. A point where no layout fits keeps one
    row without a layout.

    ``models``: preset names, config.json paths or Models (one or a list); ``hardware``: one preset
    or Hardware, the base every point changes. ``vary``: field → values (see :data:`FIELDS`,
    :func:`grid`). ``objective``: step_time, cost (GPU-hours per token), mfu or headroom (the least
    memory). ``scheduler``: None for a local ``dask.distributed`` cluster sized to this machine,
    ``"synchronous"`` to run in this process, a ``distributed`` Client (left open), or a scheduler's
    address. ``chunk``: points a task (default: in process, one task a model; on Dask, tasks of
    about TASK_SECONDS of work by the measured cost of a point, a multiple of the workers). ``out``:
    a Parquet file, written only once the sweep is complete. Other keywords are search's."""
    from ..core.values import choice
    from .layouts import search_batch

    objective = choice("objective", objective, CODESIGN_OBJECTIVES)
    keep = count("keep", keep, allow_symbol=False)
    force = flag("force", force)
    models = [as_model(m) for m in (models if isinstance(models, (list, tuple)) else [models])]
    if not models:
        raise InputError("models: give at least one model")
    hardware = as_hardware(hardware)
    if out is not None:
        _parquet_path(out)
    grids = _grids(vary, len(models), force)
    scheduler = scheduler_of(scheduler)
    seq_len = count("seq_len", seq_len, allow_symbol=False)
    global_batch, notes = search_batch(seq_len, batch_tokens, global_batch)
    size = count("chunk", chunk, allow_symbol=False) if chunk is not None else None
    pts = points(hardware, grids, search_kw.get("dtype", "bf16"), force=force)
    job = (gpus, seq_len, global_batch, objective, keep, search_kw)
    results, seconds = _swept(models, pts, job, scheduler, size)
    frame = _frame(
        results,
        list(pts[0][0]),
        layouts_evaluated=sum(n for _, n in results),
        seconds=seconds,
        objective=objective,
        notes=list(notes),
        gpus=gpus,
        seq_len=int(seq_len),
        global_batch=int(global_batch),
        hardware=hardware.key or hardware.name,
        stack=search_kw.get("stack") or default_stack(hardware.platform),
    )
    if out is not None:
        write_parquet(frame, out)
    return frame


def _swept(models, pts, job: tuple, scheduler, size) -> tuple[list, float]:
    """Every point of ``pts`` searched for every model, in this process or on the scheduler's
    workers, and the seconds it took (the programs prepared first, everywhere)."""
    indexed = [(i, values, hw) for i, (values, hw) in enumerate(pts)]
    with _client(scheduler) as client:  # the scheduler answers before the programs are built
        start = time.perf_counter()
        _, seq_len, global_batch, _, _, search_kw = job
        work = (models, pts[0][1], seq_len, global_batch, search_kw)
        _prepare(*work)  # the programs once, here, and in every worker before a task reads them
        if client is not None:
            client.run(_prepare, *work)
        workers = 1 if client is None else max(1, sum(client.nthreads().values()))
        if client is not None and size is None and workers > 1:
            results = _on_cluster(models, indexed, job, client, workers)
        else:
            cut = _bounds(len(indexed), size, workers, 0.0)
            results = _run(
                [
                    (_chunk, (m, indexed[lo:hi], *job))
                    for m in models
                    for lo, hi in zip(cut, cut[1:])
                ],
                client,
            )
        seconds = time.perf_counter() - start
    return results, seconds


def _frame(results: list, varied: list[str], **attrs):
    """The sweep's DataFrame from the tasks' ``results`` (rows, layouts evaluated), the ``varied``
    fields' columns first, units in the column names and ``attrs``."""
    import pandas as pd

    from .sweeps import frame_with_units

    rows = [r for part, _ in results for r in part]
    units = {
        **{k: FIELDS[k] for k in varied},
        "step_time": "s",
        "memory": "GB",
        "cost": "GPU-hour/Mtoken",
    }
    priced = ["usd"] if "price" in varied else []
    if priced:
        for r in rows:
            r["usd"] = None if r.get("cost") is None else r["cost"] * r["price"]
        units["usd"] = "USD/Mtoken"
    columns = [
        "model",
        "point",
        *varied,
        "rank",
        "gpus",
        "tp",
        "cp",
        "pp",
        "dp",
        "ep",
        "vpp",
        "zero",
        "recompute",
        "schedule",
        "microbatch_size",
        "step_time",
        "mfu",
        "memory",
        "verdict",
        "cost",
        *priced,
    ]
    data = {c: [r.get(c) for r in rows] for c in columns}
    for c in ("rank", "gpus", "tp", "cp", "pp", "dp", "ep", "vpp", "zero", "microbatch_size"):
        data[c] = pd.array(data[c], dtype="Int64")  # None where no layout fits
    for c in ("step_time", "mfu", "memory", "cost", *priced):
        data[c] = np.array([np.nan if v is None else v for v in data[c]], dtype=float)
    return frame_with_units(
        data, units, **{**attrs, "layouts_evaluated": int(attrs["layouts_evaluated"])}
    )


def _parquet_path(out) -> None:
    """Refuse an ``out`` that is no path of a .parquet file in a folder this process can write."""
    from pathlib import Path

    if not isinstance(out, (str, os.PathLike)):
        raise InputError(f"out: expected the path of a .parquet file, got {out!r:.80}")
    path = Path(out)
    if path.suffix != ".parquet":
        raise InputError(f"out: expected a .parquet file, got {str(out)!r}")
    folder = path.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK):
        raise InputError(f"out: {str(folder)!r} is no folder this process can write into")


def write_parquet(frame, out) -> None:
    """``frame`` as Parquet at exactly ``out``, written whole or not at all (a file created beside
    it, then renamed over it)."""
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


__all__ = [
    "FIELDS",
    "MAX_POINTS",
    "SCHEDULER_TIMEOUT",
    "codesign",
    "grid",
    "local_cluster",
    "points",
    "scheduler_of",
    "write_parquet",
]
