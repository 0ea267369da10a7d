"""What layout search evaluates: the function of the layouts' degrees and choices giving memory,
step time and FLOPs. It is the search program of the configuration's structure
(:mod:`analytic.plan.programs`) where it has one, so a new model of a known architecture costs no
lowering; otherwise a :class:`~analytic.core.numeric.Program` built once from the plan's expressions
and cached on disk as data (:mod:`analytic.core.cache`), keyed by every field of every input it
depends on."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import numpy as np

from ..core import cache
from ..core.lowering import program
from ..core.numeric import Program
from ..core.symbols import sym
from ..plan import Layout, Plan, programs
from ..plan.structure import SEARCH_OUTPUTS, numbers

DEGREES = ("tp", "pp", "dp", "cp", "ep", "vpp", "microbatch_size")
INPUTS = (*DEGREES, "zero", "recompute", "schedule")  # recompute and schedule by index
OUTPUTS = SEARCH_OUTPUTS


def _key(*parts) -> str:
    """A digest of every field of every part (dataclasses by all their fields, recursively)."""

    def plain(x):
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            return [
                type(x).__name__,
                {f.name: plain(getattr(x, f.name)) for f in dataclasses.fields(x)},
            ]
        if isinstance(x, dict):
            return {str(k): plain(v) for k, v in sorted(x.items(), key=lambda kv: str(kv[0]))}
        if isinstance(x, (list, tuple)):
            return [plain(v) for v in x]
        return x if isinstance(x, (str, int, float, bool, type(None))) else repr(x)

    return hashlib.sha256(json.dumps(plain(parts), sort_keys=True).encode()).hexdigest()[:32]


_COMPILED: dict = {}  # key → Program, for repeated searches in one process


#: how search counts every layout beyond its degrees and choices (:data:`COUNTED`): Plan's options
#: and Layout's fields every layout takes, as given to search
PLAN_OPTIONS = ("fp8_recipe", "optimizer", "dispatcher", "bf16_layers", "grad_dtype",
                "moment_dtype", "expert_capacity", "pad_to_capacity", "routing_imbalance")
LAYOUT_OPTIONS = ("etp", "pipeline_layout", "recompute_modules", "fp8_activations",
                  "quantized_params", "offload_activations", "offload_optimizer",
                  "first_stage_layers", "last_stage_layers", "ep_overlap", "ends_as_layers")
COUNTED = PLAN_OPTIONS + LAYOUT_OPTIONS


def _template_plan(model, hardware, seq_len, global_batch, dtype, flash_attention, async_tp,
                   comm_sms, zero3_gather, stack, sequence_parallel=True, counted=None) -> Plan:
    """The plan whose expressions search evaluates: degrees, microbatch size and choices left open
    (but pp and vpp, which a given pipeline layout fixes); sequence parallelism on (the layouts with
    tp > 1) or off (tp = 1, where Plan has none); ``counted`` (:data:`COUNTED`) as given."""
    counted = {k: v for k, v in (counted or {}).items() if v is not None}
    # where the options fix them
    fixed = {
        k: counted[k] for k in ("pp", "vpp", "recompute") if k in counted
    }
    layout = Layout(
        tp=sym("tp"),
        pp=fixed.get("pp", sym("pp")),
        dp=sym("dp"),
        cp=sym("cp"),
        ep=sym("ep") if model.is_moe else 1,
        vpp=fixed.get("vpp", sym("vpp")),
        zero=sym("zero"),
        sequence_parallel=sequence_parallel,
        async_tp=async_tp and sequence_parallel,
        comm_sms=comm_sms,
        zero3_gather=zero3_gather,
        recompute=fixed.get("recompute", sym("recompute")),
        schedule=sym("schedule"),
        **{k: counted[k] for k in LAYOUT_OPTIONS if k in counted},
    )
    return Plan(
        model,
        hardware,
        layout,
        seq_len=seq_len,
        global_batch=global_batch,
        microbatch_size=sym("microbatch_size"),
        dtype=dtype,
        flash_attention=flash_attention,
        stack=stack,
        **{k: counted[k] for k in PLAN_OPTIONS if k in counted},
    )


def _of_structure(plan: Plan):
    """Search's function of :data:`INPUTS` from the programs of the plan's structure
    (:mod:`analytic.plan.programs`, built where they are not), or None where it has none."""
    from ..plan import template

    found = programs.bundle(plan._in, lambda: template.build(plan))
    if found is None:
        return None
    fixed, search = numbers(plan._in), found.search.program

    def evaluate(*args):
        values = {**fixed, **dict(zip(INPUTS, args))}
        return search(*(values.get(k, np.nan) for k in search.inputs))

    return evaluate


def structure_programs(model, hardware, seq_len, global_batch, *, dtype="bf16",
                       flash_attention=True, async_tp=False, comm_sms=0, zero3_gather="per-block",
                       stack=None, counted=None) -> None:
    """Build the programs of the structures search evaluates for ``model`` (layouts with tp > 1 and
    with tp = 1), or read them from the cache: every hardware of the same structure then searches
    without building anything (a co-design sweep's points)."""
    from ..plan import template

    for sp in (True, False):
        plan = _template_plan(model, hardware, seq_len, global_batch, dtype, flash_attention,
                              async_tp, comm_sms, zero3_gather, stack, sp, counted)
        programs.bundle(plan._in, lambda plan=plan: template.build(plan))


def _compiled(model, hardware, seq_len, global_batch, dtype, flash_attention, async_tp=False,
              comm_sms=0, zero3_gather="per-block", stack=None, on_build=None,
              sequence_parallel=True, counted=None) -> tuple:
    """A function of :data:`INPUTS` (arrays) giving (memory, step time, flops), and whether it had
    to be built now. It is the search program of the configuration's structure where that is built
    (in memory or in the cache); otherwise a :class:`~analytic.core.numeric.Program` from memory or
    the disk cache, or built now (``on_build()`` is called first). The cache holds data only,
    validated when read; a file that is not a valid program is rebuilt."""
    plan = _template_plan(model, hardware, seq_len, global_batch, dtype, flash_attention, async_tp,
                          comm_sms, zero3_gather, stack, sequence_parallel, counted)
    found = _of_structure(plan)
    if found is not None:
        return found, False
    key = _key(
        cache.library_digest(),
        model,
        hardware,
        seq_len,
        global_batch,
        dtype,
        flash_attention,
        async_tp and sequence_parallel,
        comm_sms,
        zero3_gather,
        plan.stack,
        sequence_parallel,
        plan.fp8_recipe,
        {k: v for k, v in (counted or {}).items() if k != "fp8_recipe"},
    )
    if key in _COMPILED:
        return _COMPILED[key], False
    folder = cache.cache_dir()
    path = folder / f"search-{key}.json" if folder else None
    try:
        fn = Program.from_json(cache.read_json(path) if path is not None else None)
        if fn.inputs != INPUTS or len(fn.outputs) != len(OUTPUTS):
            raise ValueError("a program of other inputs")
        built = False
    except ValueError:
        if on_build:
            on_build()
        fn, built = program([plan.expr(q).expr for q in OUTPUTS], {sym(k): k for k in INPUTS}), True
        if path is not None:
            # a read-only cache only costs the next search its compile time
            cache.write_json(
                path, fn.to_json()
            )
    _COMPILED[key] = fn
    return fn, built
