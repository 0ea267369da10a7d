"""What layout search evaluates: the function of the layouts' degrees and choices giving memory, step
time and FLOPs. It is the module the library ships compiled for the configuration's structure
(:mod:`analytic.compiled`) where there is one, so a new model of a known architecture costs no
compile; otherwise a :class:`~analytic.numeric.Program` built once from the plan's expressions and
cached on disk as data, keyed by every field of every input it depends on."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
from pathlib import Path

import numpy as np

from . import compiled
from .choices import DEFAULT_STACK
from .numeric import Program, program
from .plan import Layout, Plan
from .plan.structure import SEARCH_OUTPUTS, numbers, structure
from .symbols import sym

DEGREES = ("tp", "pp", "dp", "cp", "ep", "vpp", "microbatch_size")
INPUTS = (*DEGREES, "zero", "recompute", "schedule")  # recompute and schedule by index
OUTPUTS = SEARCH_OUTPUTS
MAX_CACHE_BYTES = 1 << 24  # a cache file larger than this is not read


@functools.cache
def _source_digest() -> str:
    """A digest of the library's own code and data: compiled expressions are valid for exactly it."""
    root = Path(__file__).parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.suffix in (".py", ".toml", ".txt") and "__pycache__" not in path.parts:
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def cache_dir() -> Path | None:
    """Where search keeps its compiled expressions: ``$ANALYTIC_CACHE``, else ``$XDG_CACHE_HOME/analytic``,
    else ``~/.cache/analytic``. An empty or relative path is ignored, as the XDG Base Directory
    specification says of ``XDG_CACHE_HOME``; None when no absolute folder results."""
    for var, leaf in (("ANALYTIC_CACHE", ""), ("XDG_CACHE_HOME", "analytic")):
        value = os.environ.get(var, "")
        if value and Path(value).is_absolute():
            return Path(value) / leaf
    try:
        return Path.home() / ".cache" / "analytic"
    except RuntimeError:  # no home directory
        return None


def _key(*parts) -> str:
    """A digest of every field of every part (dataclasses by all their fields, recursively)."""
    def plain(x):
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            return [type(x).__name__, {f.name: plain(getattr(x, f.name)) for f in dataclasses.fields(x)}]
        if isinstance(x, dict):
            return {str(k): plain(v) for k, v in sorted(x.items(), key=lambda kv: str(kv[0]))}
        if isinstance(x, (list, tuple)):
            return [plain(v) for v in x]
        return x if isinstance(x, (str, int, float, bool, type(None))) else repr(x)
    return hashlib.sha256(json.dumps(plain(parts), sort_keys=True).encode()).hexdigest()[:32]


_COMPILED: dict = {}  # key → Program, for repeated searches in one process


def _template_plan(model, hardware, seq_len, global_batch, dtype, flash_attention, async_tp, comm_sms,
                   zero3_gather, stack) -> Plan:
    """The plan whose expressions search evaluates: degrees, microbatch size and choices left open."""
    layout = Layout(tp=sym("tp"), pp=sym("pp"), dp=sym("dp"), cp=sym("cp"), ep=sym("ep") if model.is_moe else 1,
                    vpp=sym("vpp"), zero=sym("zero"), sequence_parallel=True, async_tp=async_tp,
                    comm_sms=comm_sms, zero3_gather=zero3_gather, recompute=sym("recompute"), schedule=sym("schedule"))
    return Plan(model, hardware, layout, seq_len=seq_len, global_batch=global_batch,
                microbatch_size=sym("microbatch_size"), dtype=dtype, flash_attention=flash_attention, stack=stack)


def _shipped(plan: Plan):
    """Search's function of :data:`INPUTS` from the module compiled for the plan's structure, or None."""
    found = compiled.module(structure(plan._in))
    if found is None:
        return None
    fixed, kernels = numbers(plan._in), compiled.ARRAY

    def evaluate(*args):
        values = {**fixed, **dict(zip(INPUTS, args))}
        return found.search(tuple(values.get(k, np.nan) for k in found.SEARCH_INPUTS), kernels)
    return evaluate


def _compiled(model, hardware, seq_len, global_batch, dtype, flash_attention, async_tp=False, comm_sms=0,
              zero3_gather="per-block", stack=DEFAULT_STACK, on_build=None) -> tuple:
    """A function of :data:`INPUTS` (arrays) giving (memory, step time, flops), and whether it had
    to be built now. It is the module the library ships compiled for the configuration's structure
    (:mod:`analytic.compiled`) where there is one; otherwise a :class:`~analytic.numeric.Program`
    from memory or the disk cache, or built now (``on_build()`` is called first). The cache holds
    data only, validated when read; a file that is not a valid program is rebuilt."""
    plan = _template_plan(model, hardware, seq_len, global_batch, dtype, flash_attention, async_tp, comm_sms,
                          zero3_gather, stack)
    shipped = _shipped(plan)
    if shipped is not None:
        return shipped, False
    key = _key(_source_digest(), model, hardware, seq_len, global_batch, dtype, flash_attention,
               async_tp, comm_sms, zero3_gather, stack)
    if key in _COMPILED:
        return _COMPILED[key], False
    folder = cache_dir()
    path = folder / f"search-{key}.json" if folder else None
    try:
        if path is None or path.stat().st_size > MAX_CACHE_BYTES:
            raise ValueError("no cache")
        fn = Program.from_json(json.loads(path.read_text()))
        if fn.inputs != INPUTS or len(fn.outputs) != len(OUTPUTS):
            raise ValueError("a program of other inputs")
        built = False
    except (OSError, ValueError, RecursionError, UnicodeDecodeError):
        if on_build:
            on_build()
        fn, built = program([plan.expr(q).expr for q in OUTPUTS], {sym(k): k for k in INPUTS}), True
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text(json.dumps(fn.to_json()))
                tmp.replace(path)
            except OSError:
                pass  # a read-only cache only costs the next search its compile time
    _COMPILED[key] = fn
    return fn, built
