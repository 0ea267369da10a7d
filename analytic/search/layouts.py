"""Layout search: enumerate every valid layout, evaluate them as numpy arrays, rank those that fit.

The numbers come from the same expressions as :class:`~analytic.plan.Plan`: one Plan is built
with the degrees, the microbatch size, the ZeRO stage, the recomputation policy and the schedule
left as symbols, and its ``memory.total``, ``step_time`` and ``flops`` are evaluated on numpy
arrays (:mod:`analytic.search.programs`: the module shipped compiled for the plan's structure, or a
program compiled once and cached as data).

Sequence parallelism is on whenever tp > 1 (``plan.sequence_parallel_default``). Async TP is a
property of the training stack, not a layout choice: ``search(..., async_tp=True)`` turns it on
wherever tp > 1. So are SMs reserved for communication kernels: ``search(..., comm_sms=20)`` applies
to every layout, how ZeRO-3 gathers: ``search(..., zero3_gather="per-tensor")`` to every ZeRO-3
layout, and the stack whose allocations and kernels every layout is counted with: ``search(...,
stack="torchtitan")``.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import sympy

from ..core.choices import (
    DEFAULT_STACK,
    MEMORY_VERDICTS,
    OBJECTIVES,
    OPTIMIZERS,
    ZERO_STAGES,
    default_stack,
)
from ..core.errors import InputError, PresetError, ReinterpretedWarning
from ..core.progress import bar, shown
from ..core.symbols import read_magnitude
from ..core.values import batch_tokens as read_batch_tokens
from ..core.values import choice, count, distinct, exact, flag
from ..formulas import formula
from ..plan import (
    RECOMPUTE,
    SCHEDULES,
    ZERO3_GATHERS,
    Layout,
    Plan,
    check_comm_sms,
    check_offload,
    check_sequence,
    dispatcher_of,
    divisors,
    ep_overlap_refusal,
    fp8_recipe_of,
    hybrid_pipeline_refusal,
    hybrid_refusal,
    optimizer_refusal,
    quantized_zero_refusal,
    selective_refusal,
    sequence_parallel_default,
    sequence_unit,
    stack_refusal,
    tiles,
    training_dtype,
)
from ..plan.pipeline_layout import chunks
from ..plan.verdict import verdicts
from ..presets import as_hardware, as_model, calibration, outside_floor, stacks
from ..presets import stack as read_stack
from ..presets.hardware import Hardware
from ..presets.model import Model
from .programs import COUNTED, DEGREES, INPUTS, LAYOUT_OPTIONS, PLAN_OPTIONS, _compiled

MAX_GPUS = 1 << 24  # enumeration is by divisors; beyond this no cluster exists to plan


@dataclass
class Ranked:
    """One evaluated layout."""

    layout: Layout
    microbatch_size: int
    step_time: float  # seconds
    memory: float  # bytes per GPU, worst stage
    mfu: float
    fits: bool
    step_time_interval: tuple[float, float] | None = None  # seconds: calibration.toml's [interval]
    cost: float | None = None  # GPU-seconds per token: step time × GPUs / tokens per step
    stack: str = DEFAULT_STACK  # the stack the search counted it with (presets/stacks.toml)
    # as Plan.memory_verdict: fits, at the allocator's limit, does not fit
    verdict: str = MEMORY_VERDICTS[0]
    fp8_recipe: str | None = None  # the FP8 scaling the search counted it with (None: not FP8)
    # the other Plan options it was counted with (PLAN_OPTIONS)
    options: dict = field(default_factory=dict)

    @property
    def gpus(self) -> int:
        """GPUs of the layout: tp·cp·pp·dp."""
        return self.layout.gpus

    def plan(self, model, hardware, **kw) -> Plan:
        """The Plan of this layout on the search's stack (``stack=`` in ``kw`` to count it on
        another)."""
        given = {
            k: v
            for k, v in {**self.options, "fp8_recipe": self.fp8_recipe}.items()
            if v is not None
        }
        return Plan(
            model, hardware, self.layout, microbatch_size=self.microbatch_size,
            **{"stack": self.stack, **given, **kw},
        )

    @property
    def optimizer(self) -> str:
        return self.options.get("optimizer", "adam")

    @property
    def dispatcher(self) -> str | None:
        return self.options.get("dispatcher")

    def as_dict(self) -> dict:
        lay = self.layout
        return {
            "tp": lay.tp,
            "pp": lay.pp,
            "dp": lay.dp,
            "cp": lay.cp,
            "ep": lay.ep,
            "vpp": lay.vpp,
            "zero": lay.zero,
            "sequence_parallel": lay.sequence_parallel,
            "async_tp": lay.async_tp,
            "comm_sms": lay.comm_sms,
            "zero3_gather": lay.zero3_gather,
            "recompute": lay.recompute,
            "schedule": lay.schedule,
            "microbatch_size": self.microbatch_size,
            "gpus": lay.gpus,
            "step_time_s": self.step_time,
            "step_time_interval_s": self.step_time_interval,
            "gpu_hours_per_million_tokens": None if self.cost is None else self.cost * 1e6 / 3600,
            "memory_GB": self.memory / 1e9,
            "mfu": self.mfu,
            "fits": self.fits,
            "verdict": self.verdict,
            "stack": self.stack,
            "fp8_recipe": self.fp8_recipe,
            "optimizer": self.optimizer,
            **{k: v for k, v in self.options.items() if k not in ("fp8_recipe", "optimizer")},
            **{k: getattr(lay, k) for k in LAYOUT_OPTIONS},
        }


class _Ranking(Sequence):
    """The fitting layouts, fastest first, built into Ranked objects only when read."""

    def __init__(self, arrays, order, stack):
        self._a, self._order, self._stack = arrays, order, stack

    def __len__(self):
        return len(self._order)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return _row(self._a, self._order[i], self._stack)


def _row(a: dict, j: int, stack: dict) -> Ranked:
    """Row ``j`` of the evaluated columns as a Ranked layout (``stack``: async_tp, comm_sms,
    zero3_gather, the interval's ratios of measured/predicted step time or None, and the stack's
    name)."""
    d = {k: int(a[k][j]) for k in INPUTS}
    layout = Layout(
        **{k: d[k] for k in (*DEGREES[:-1], "zero")},
        sequence_parallel=sequence_parallel_default(d["tp"]),
        async_tp=stack["async_tp"] and d["tp"] > 1,
        comm_sms=stack["comm_sms"],
        zero3_gather=stack["zero3_gather"],
        recompute=RECOMPUTE[d["recompute"]],
        schedule=SCHEDULES[d["schedule"]],
        **{k: stack[k] for k in LAYOUT_OPTIONS if stack.get(k) is not None},
    )
    t, ratios = float(a["step_time"][j]), stack.get("ratios")
    return Ranked(
        layout,
        d["microbatch_size"],
        t,
        float(a["memory"][j]),
        float(a["mfu"][j]),
        bool(a["fits"][j]),
        None if ratios is None else (t * ratios[0], t * ratios[1]),
        float(a["cost"][j]),
        stack["stack"],
        MEMORY_VERDICTS[int(a["verdict"][j])],
        stack.get("fp8_recipe"),
        {k: stack.get(k) for k in PLAN_OPTIONS if k != "fp8_recipe"},
    )


@dataclass
class SearchResult:
    # layouts that fit at their predicted peak (at_limit: or at the allocator's limit), best first
    ranked: Sequence
    evaluated: int  # valid layouts, every one evaluated
    fitting: int  # how many are ranked
    seconds: float
    # every evaluated layout, as columns: INPUTS
    arrays: dict = field(repr=False, default_factory=dict)
    # (recompute and schedule by index), gpus, memory (bytes), step_time (s), cost (GPU-s/token),
    # mfu, fits
    objective: str = "step_time"  # what ranked orders by (choices.OBJECTIVES)
    compiled: bool = False  # whether this search built its expressions (False: from the cache)
    async_tp: bool = False
    comm_sms: int = 0
    zero3_gather: str = "per-block"
    # measured/predicted step time, (low, high): calibration.toml's [interval]
    ratios: tuple | None = None
    # inputs read otherwise than written (e.g. '16M' tokens as 16Mi)
    notes: list = field(default_factory=list)
    # bytes a layout's memory leaves free: the least measured outside the allocator
    outside: float = 0.0
    stack: str = DEFAULT_STACK  # whose allocations and kernels the layouts are counted with
    fp8_recipe: str | None = None  # the FP8 scaling the layouts are counted with (None: not FP8)
    # the other Plan options and Layout fields every layout takes
    counted: dict = field(default_factory=dict)

    def __iter__(self):
        return iter(self.ranked)

    def __len__(self):
        return len(self.ranked)

    def __getitem__(self, i):
        return self.ranked[i]

    def row(self, j: int) -> Ranked:
        """Evaluated layout ``j`` (an index into :attr:`arrays`), fitting or not."""
        return _row(
            self.arrays,
            j,
            {
                "async_tp": self.async_tp,
                "comm_sms": self.comm_sms,
                "zero3_gather": self.zero3_gather,
                "ratios": self.ratios,
                "stack": self.stack,
                "fp8_recipe": self.fp8_recipe,
                **self.counted,
            },
        )

    @property
    def best(self) -> Ranked:
        if not self.ranked:
            raise InputError(
                "search: no layout fits in memory; SearchResult.closest() says what stood closest"
            )
        return self.ranked[0]

    def frame(self):
        """The ranked layouts as a pandas DataFrame, best first, one row a layout: its degrees and
        choices, step time, MFU, memory, GPU-hours per million tokens and verdict, each column's
        unit in its name and in ``attrs["units"]`` (as sweeps and co-design give theirs)."""
        from .sweeps import frame_with_units

        rows = list(self.ranked)
        lay = [r.layout for r in rows]
        columns = {
            **{
                k: [getattr(x, k) for x in lay]
                for k in ("tp", "cp", "pp", "dp", "ep", "vpp", "zero", "recompute", "schedule")
            },
            "microbatch_size": [r.microbatch_size for r in rows],
            "gpus": [x.gpus for x in lay],
            "step_time": [r.step_time for r in rows],
            "mfu": [r.mfu for r in rows],
            "memory": [r.memory / 1e9 for r in rows],
            "cost": [r.cost * 1e6 / 3600 for r in rows],
            "verdict": [r.verdict for r in rows],
        }
        return frame_with_units(
            columns,
            {"step_time": "s", "memory": "GB", "cost": "GPU-hour/Mtoken"},
            stack=self.stack,
            objective=self.objective,
            evaluated=self.evaluated,
        )

    def closest(self) -> Ranked | None:
        """The evaluated layout that comes nearest to fitting: of those with the best verdict, the
        least memory counted (None when no layout was evaluated)."""
        if not len(self.arrays.get("memory", ())):
            return None
        return self.row(int(np.lexsort((self.arrays["memory"], self.arrays["verdict"]))[0]))


#: the microbatch sizes and the chunks a stage under the interleaved schedule that search tries
#: unless told (enumerate_layouts, search)
MICROBATCH_SIZES, VPPS = (1, 2, 4, 8), (2, 4)


def enumerate_layouts(
    model: Model,
    hardware: Hardware,
    *,
    gpus: int,
    seq_len: int,
    global_batch: int,
    microbatch_sizes=MICROBATCH_SIZES,
    zero=ZERO_STAGES,
    recompute=RECOMPUTE,
    schedules=SCHEDULES,
    vpps=VPPS,
    max_tp: int | None = None,
    max_cp: int | None = None,
    pins: dict | None = None,
    etp: int | None = None,
    uneven: bool = False, marked: bool = False, ends_as_layers: bool = False,
) -> dict:
    """Every valid layout as columns: {input: float array} over :data:`INPUTS` (recompute and
    schedule as their index in RECOMPUTE and SCHEDULES).

    Constraints: degrees multiply to ``gpus``; TP divides the heads and divides or is divided by the
    KV heads, and stays in a scale-up domain unless ``max_tp`` says otherwise; blocks of tp and
    tp·cp consecutive ranks tile the scale-up domains (plan.tiles); the sequence is a multiple of
    plan.sequence_unit (CP's two chunks a rank, SP's split of them over TP); ``pins`` (axis →
    degree, of tp, pp, dp, cp, ep) keeps only layouts with those degrees; PP·v ≤ layers; EP
    divides cp·dp (the expert layers fold EP over CP × DP, their ETP being tp) and the experts;
    microbatches per replica ≥ 1 and a multiple of pp for the interleaved schedule, even for
    DualPipe (with pp even); with pp = 1 only 1F1B; a hybrid pattern split as Megatron-Core does,
    ``uneven`` or ``marked`` (plan.hybrid_pipeline_refusal); ``ends_as_layers``: pp > 1 (_rows)."""
    g = hardware.scale_up_domain
    max_tp = max_tp or g
    pins = pins or {}

    def free(axis, value):
        """``axis`` unpinned, or pinned to ``value``."""
        return pins.get(axis, value) == value

    rows = []
    for tp in divisors(gpus):
        if (
            tp > max_tp
            or model.heads % tp
            or (model.kv_heads % tp and tp % model.kv_heads)
            or not tiles(tp, g)
            or not free("tp", tp)
        ):
            continue
        for cp in divisors(gpus // tp):
            if (
                seq_len % sequence_unit(cp, tp, sequence_parallel_default(tp))
                or (max_cp and cp > max_cp)
                or not tiles(tp * cp, g)
                or not free("cp", cp)
                or hybrid_refusal(model, tp, cp)
            ):
                continue
            for pp in divisors(gpus // (tp * cp)):
                dp = gpus // (tp * cp * pp)
                if (
                    pp > model.layers
                    or (ends_as_layers and pp < 2)
                    or not free("pp", pp)
                    or not free("dp", dp)
                    or hybrid_pipeline_refusal(model, pp, 1, uneven, False, marked)
                ):
                    continue
                eps = _expert_degrees(model, tp, cp, dp, etp, free)
                rows += _rows(
                    model, (tp, pp, dp, cp), eps, global_batch, microbatch_sizes, schedules, vpps,
                    (uneven, ends_as_layers, marked),
                )
    degrees = np.array(rows, dtype=float).reshape(-1, 8)
    choices = np.array([(z, RECOMPUTE.index(rc)) for rc in recompute for z in zero], dtype=float)
    # every degree row with every (zero, recompute) choice
    table = np.hstack(
        [np.repeat(degrees, len(choices), axis=0), np.tile(choices, (len(degrees), 1))]
    )
    columns = (*DEGREES, "schedule", "zero", "recompute")
    return {k: np.ascontiguousarray(table[:, columns.index(k)]) for k in INPUTS}


def _expert_degrees(model: Model, tp: int, cp: int, dp: int, etp, free) -> list[int]:
    """The EP degrees of one (tp, cp, dp): the expert layers fold ETP × EP over TP × CP × DP
    (their ETP tp, or the one given), and EP divides the experts."""
    fold = cp * dp if etp is None else (tp * cp * dp // etp if (tp * cp * dp) % etp == 0 else 0)
    if not model.is_moe:
        return [1]
    return [e for e in divisors(fold) if model.experts % e == 0 and free("ep", e)] if fold else []


def _rows(
    model: Model, degrees, eps, global_batch, microbatch_sizes, schedules, vpps, split
) -> list:
    """The rows of one (tp, pp, dp, cp): each EP degree, microbatch size, schedule and chunk count
    the batch and the layers allow (a hybrid model's, its ``split`` too: uneven, ends counted as
    layers, marked)."""
    tp, pp, dp, cp = degrees
    rows = []
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
                vs = [v for v in vs if not hybrid_pipeline_refusal(model, pp, v, *split)]
                if split[1]:  # the ends as layers: every chunk whole (Layout's _check_split)
                    vs = [v for v in vs if (model.layers + 2) % (pp * v) == 0]
                rows += [(tp, pp, dp, cp, ep, v, mbs, SCHEDULES.index(sched)) for v in vs]
    return rows


#: layouts evaluated per numpy call: temporaries of 64 KiB, which malloc keeps on its heap (of
#: blocks of 2K to 1M layouts the fastest measured, and the least slowed where Dask's workers trim
#: freed memory)
CHUNK = 1 << 13


def ranking(arrays: dict, objective: str, at_limit: bool = False) -> tuple[np.ndarray, int]:
    """Every layout's index, those ranked first, best first by ``objective``
    (``choices.CODESIGN_OBJECTIVES``: step time, cost, MFU, or the least memory), ties by step time,
    then as evaluated; and how many are ranked: those that fit at their predicted peak
    (``at_limit``: or at the allocator's limit)."""
    ranked = arrays["verdict"] <= (1 if at_limit else 0)
    key = {
        "step_time": arrays["step_time"],
        "cost": arrays["cost"],
        "mfu": -arrays["mfu"],
        "headroom": arrays["memory"],
    }[objective]
    return np.lexsort((arrays["step_time"], np.where(ranked, key, np.inf))), int(ranked.sum())


def search_batch(seq_len: int, batch_tokens=None, global_batch=None) -> tuple[int, list[str]]:
    """The global batch in sequences from exactly one of ``global_batch`` or ``batch_tokens``, and
    the notes on how a batch in tokens was read (``'16M'`` at 8,192 tokens: as 16Mi)."""
    if (global_batch is None) == (batch_tokens is None):
        raise InputError(
            "global_batch: give exactly one of global_batch (sequences) or batch_tokens"
        )
    notes = []
    if batch_tokens is not None:
        tokens, note = read_batch_tokens(batch_tokens, seq_len)
        global_batch = tokens // seq_len
        notes += [note] if note else []
    return count("global_batch", global_batch, allow_symbol=False), notes


def search(
    model: Model,
    hardware: Hardware,
    *,
    gpus,
    seq_len,
    global_batch=None,
    batch_tokens=None,
    dtype: str = "bf16",
    microbatch_sizes=MICROBATCH_SIZES,
    zero=ZERO_STAGES,
    recompute=RECOMPUTE,
    schedules=SCHEDULES,
    vpps=VPPS,
    max_tp: int | None = None,
    max_cp: int | None = None,
    flash_attention: bool = True,
    async_tp: bool = False,
    comm_sms: int = 0,
    zero3_gather: str = "per-block",
    top: int | None = None,
    progress: bool = True,
    tp: int | None = None,
    pp: int | None = None,
    dp: int | None = None,
    cp: int | None = None,
    ep: int | None = None,
    objective: str = "step_time",
    outside_bytes=None,
    stack: str | None = None,
    at_limit: bool = False,
    fp8_recipe: str | None = None,
    optimizer: str = "adam",
    etp: int | None = None,
    pipeline_layout: str | None = None,
    dispatcher: str | None = None,
    bf16_layers=None,
    grad_dtype: str | None = None,
    moment_dtype: str | None = None,
    expert_capacity=None,
    pad_to_capacity: bool = True,
    routing_imbalance=None,
    layout_options: dict | None = None,
) -> SearchResult:
    """Every valid layout of ``gpus`` accelerators (a count, or several: the layouts of each),
    evaluated with Plan's expressions; the ones that fit in HBM ranked by ``objective``
    (``choices.OBJECTIVES``): predicted step time, GPU-seconds per token, or MFU. At one GPU count
    the three rank alike; across counts they differ. ``tp``, ``pp``, ``dp``, ``cp``, ``ep``: pin
    that degree. ``outside_bytes``: the memory a layout leaves free for what lies outside the
    allocator, as ``Plan(..., outside_bytes=)`` (default: the least measured, ``memory.headroom``).
    ``stack``: the training stack every layout is counted with, as ``Plan(..., stack=)`` (by default
    the platform's), and ``fp8_recipe``, ``optimizer``, ``dispatcher``, ``bf16_layers``,
    ``grad_dtype``, ``moment_dtype``, ``expert_capacity``, ``pad_to_capacity`` and
    ``routing_imbalance`` as Plan takes them; ``etp``, ``pipeline_layout`` and
    ``layout_options`` (a dict of Layout's recompute_modules, fp8_activations, quantized_params,
    offload_activations, offload_optimizer, first_stage_layers, last_stage_layers, ep_overlap,
    ends_as_layers) every layout's, as Layout takes them (a pipeline layout or uneven stages with
    ``pp`` pinned; the ends as layers on the layouts with a pipeline). The schedules are those the
    stack runs (stacks.toml ``schedules``; one it does not, asked for, is refused). Each layout
    carries its memory verdict, as :meth:`Plan.memory_verdict`; ranked: those that fit at their
    predicted peak (``at_limit``: and at the limit)."""
    start = time.time()
    return _ranked(_arguments(**{k: v for k, v in locals().items() if k != "start"}), start)


def _arguments(**given) -> SimpleNamespace:
    """:func:`search`'s arguments read and checked: counts as integers, flags as booleans, the
    batch in sequences (its notes warned), the stack's properties and the choices it runs."""
    q = SimpleNamespace(**given)
    # objects, names or a config.json path
    q.model, q.hardware = _numeric(as_model(q.model)), as_hardware(q.hardware)
    q.counts = distinct("gpus", q.gpus) if isinstance(q.gpus, (list, tuple)) else (q.gpus,)
    q.counts = tuple(count("gpus", g, allow_symbol=False) for g in q.counts)
    q.seq_len = count("seq_len", q.seq_len, allow_symbol=False)
    check_sequence(q.model, q.seq_len)
    choice("objective", q.objective, OBJECTIVES)
    q.comm_sms = count("comm_sms", q.comm_sms, minimum=0, allow_symbol=False)
    choice("zero3_gather", q.zero3_gather, ZERO3_GATHERS)
    q.stack = (
        default_stack(q.hardware.platform)
        if q.stack is None
        else choice("stack", q.stack, stacks())
    )
    q.props = read_stack(q.stack)
    q.allocator = q.props["allocator"]
    training_dtype(q.dtype, q.hardware)
    if q.comm_sms:
        check_comm_sms(q.comm_sms, q.hardware.sms, q.hardware.key or q.hardware.name)
    if max(q.counts) > MAX_GPUS:
        raise InputError(
            f"gpus: search enumerates layouts of at most {MAX_GPUS:,} GPUs, got {max(q.counts):,}"
        )
    q.global_batch, q.notes = search_batch(q.seq_len, q.batch_tokens, q.global_batch)
    for note in q.notes:
        warnings.warn(note, ReinterpretedWarning, stacklevel=3)
    q.async_tp, q.flash_attention, q.progress, q.at_limit = (
        flag(k, v)
        for k, v in zip(
            ("async_tp", "flash_attention", "progress", "at_limit"),
            (q.async_tp, q.flash_attention, q.progress, q.at_limit),
        )
    )
    q.zero, q.recompute, q.schedules = (
        _subset(k, v, allowed)
        for k, v, allowed in (
            ("zero", q.zero, ZERO_STAGES),
            ("recompute", q.recompute, RECOMPUTE),
            ("schedules", q.schedules, SCHEDULES),
        )
    )
    q.zero, q.recompute, q.schedules = _stack_runs(
        q.stack, q.props, q.model, q.hardware, q.dtype, q.flash_attention, q.zero, q.recompute,
        q.schedules,
    )
    q.microbatch_sizes, q.vpps = (
        tuple(count(name, v, minimum=least, allow_symbol=False) for v in distinct(name, values))
        for name, values, least in (
            ("microbatch_sizes", q.microbatch_sizes, 1),
            ("vpps", q.vpps, 2),
        )
    )
    q.max_tp, q.max_cp, q.top = (
        None if v is None else count(name, v, allow_symbol=False)
        for name, v in (("max_tp", q.max_tp), ("max_cp", q.max_cp), ("top", q.top))
    )
    q.pins = _pins(q.stack, q.props, tp=q.tp, pp=q.pp, dp=q.dp, cp=q.cp, ep=q.ep)
    q.max_cp = 1 if q.props.get("context_parallel") is False else q.max_cp
    return q


def _ranked(q: SimpleNamespace, start: float) -> SearchResult:
    """The layouts of the read arguments enumerated, evaluated, judged and ranked."""
    counted, narrowed = _counted(
        q.stack,
        q.props,
        (q.model, q.dtype, q.pins),
        dict(zero=q.zero, recompute=q.recompute, schedules=q.schedules, vpps=q.vpps),
        etp=q.etp,
        optimizer=q.optimizer,
        fp8_recipe=q.fp8_recipe,
        dispatcher=q.dispatcher,
        pipeline_layout=q.pipeline_layout,
        bf16_layers=q.bf16_layers,
        grad_dtype=q.grad_dtype,
        moment_dtype=q.moment_dtype,
        expert_capacity=q.expert_capacity,
        pad_to_capacity=q.pad_to_capacity,
        routing_imbalance=q.routing_imbalance,
        layout_options=q.layout_options,
    )
    arrays = _layouts(
        q.model, q.hardware, q.props, q.counts, seq_len=q.seq_len, global_batch=q.global_batch,
        microbatch_sizes=q.microbatch_sizes, max_tp=q.max_tp, max_cp=q.max_cp, pins=q.pins,
        etp=counted.get("etp"), explicit="pp" in counted,
        marked=counted["pipeline_layout"] is not None,
        ends_as_layers=bool(counted.get("ends_as_layers")), **narrowed,
    )
    out, built = _evaluated(
        arrays, q.progress, q.model, q.hardware, q.seq_len, q.global_batch, q.dtype,
        q.flash_attention, q.async_tp, q.comm_sms, q.zero3_gather, q.stack, counted,
    )
    outside = _judged(
        arrays, out, q.hardware, q.dtype, q.global_batch * q.seq_len, q.allocator, q.outside_bytes
    )
    order, n_fit = ranking(arrays, q.objective, q.at_limit)
    keep = order[: (n_fit if q.top is None else min(q.top, n_fit))]
    fixed = {
        "async_tp": bool(q.async_tp),
        "comm_sms": q.comm_sms,
        "zero3_gather": q.zero3_gather,
        "ratios": _interval(q.stack),
        "stack": q.stack,
        "fp8_recipe": counted["fp8_recipe"],
    }
    others = {k: counted.get(k) for k in COUNTED if k != "fp8_recipe"}
    return SearchResult(
        _Ranking(arrays, keep, {**fixed, **others}),
        evaluated=len(arrays["tp"]),
        fitting=n_fit,
        seconds=time.time() - start,
        arrays=arrays,
        compiled=built,
        notes=q.notes,
        objective=q.objective,
        outside=outside,
        counted=others,
        **fixed,
    )


def _judged(arrays: dict, out: dict, hardware, dtype, tokens, allocator, outside_bytes) -> float:
    """``arrays`` with each layout's memory, step time, MFU, cost (GPU-seconds per token), whether
    it fits and its verdict; the bytes a layout leaves free for what lies outside the allocator."""
    hbm = float(exact(hardware.hbm.to("byte").magnitude))
    peak = float(hardware.peak_flops(dtype).to("FLOP/s").magnitude)
    arrays.update(
        memory=out["memory"],
        step_time=out["step_time"],
        mfu=formula("compute.mfu").lambdify()(
            flops=out["flops"], step_time=out["step_time"], gpus=arrays["gpus"], peak_flops=peak
        ),
        cost=out["step_time"] * arrays["gpus"] / tokens,
    )
    outside = (
        float(outside_floor(allocator).to("byte").magnitude)
        if outside_bytes is None
        else float(read_magnitude("outside_bytes", outside_bytes))
    )
    fits = (
        formula("memory.headroom").lambdify()(
            hbm=hbm, outside_bytes=outside, counted_bytes=arrays["memory"]
        )
        >= 0
    )
    arrays["fits"] = fits
    arrays["verdict"] = verdicts(arrays["memory"], fits, hbm, allocator, outside_bytes)
    return outside


def _numeric(model: Model) -> Model:
    """``model``, refused where a field is left as a symbol (search enumerates numbers)."""
    free = [
        f.name
        for f in dataclasses.fields(model)
        if isinstance(getattr(model, f.name), sympy.Basic) and not getattr(model, f.name).is_number
    ]
    if free:
        raise InputError(
            f"model: search enumerates the layouts of a numeric model; {', '.join(free)} "
            "left as symbols (give numbers with model.replace(...))"
        )
    return model


def _subset(name: str, values, allowed: tuple) -> tuple:
    """``values`` as a tuple of distinct choices of ``allowed``, refused naming ``name``
    otherwise."""
    values = distinct(name, values)
    if any(isinstance(v, bool) or v not in allowed for v in values):
        raise InputError(f"{name}: expected a subset of {allowed}, got {values!r}")
    return values


def _pins(stack: str, props: dict, **degrees) -> dict:
    """The degrees pinned (those not None), refused where the stack does not run one (CP > 1 on a
    stack without context parallelism)."""
    pins = {k: count(k, v, allow_symbol=False) for k, v in degrees.items() if v is not None}
    if props.get("context_parallel") is False and pins.get("cp", 1) > 1:
        raise InputError(stack_refusal(stack, props, cp=pins["cp"]))
    return pins


def _interval(stack: str):
    """The stack's calibrated interval ratios (None without a calibration file)."""
    try:
        return calibration(stack).interval
    except PresetError:
        return None


def _counted(stack, props, plan, narrowed: dict, **given) -> tuple:
    """How every layout is counted beyond its degrees (:data:`~.programs.COUNTED`; with the pp, vpp
    and recomputation its options fix), and the ZeRO stages, recomputations, schedules and virtual
    stages (``narrowed``) that leaves: Muon at ZeRO-1
    (:func:`~analytic.plan.layout.optimizer_refusal`), the layout options'
    (:func:`_layout_counted`). ``plan``: the model, dtype and pinned degrees."""
    model, dtype, pins = plan
    options = dict(given.pop("layout_options") or {})
    counted = {
        **given,
        "optimizer": choice("optimizer", given["optimizer"], OPTIMIZERS),
        "fp8_recipe": fp8_recipe_of(stack, props, dtype, given["fp8_recipe"]),
        "dispatcher": dispatcher_of(stack, props, model, given["dispatcher"]),
    }
    if counted["etp"] is not None:
        counted["etp"] = count("etp", counted["etp"], allow_symbol=False)
    refusal = optimizer_refusal(stack, props, counted["optimizer"])
    zero = narrowed["zero"]
    if counted["optimizer"] == "muon":
        refusal = refusal or next(
            (
                optimizer_refusal(stack, props, "muon", z)
                for z in zero
                if z != 1 and zero != ZERO_STAGES
            ),
            None,
        )
        narrowed = {**narrowed, "zero": (1,)}
    if options.get("ends_as_layers"):  # a hybrid pattern's stages hold layers only
        refusal = refusal or hybrid_pipeline_refusal(model, 2, 1, ends_as_layers=True)
    if refusal:
        raise InputError(refusal)
    return _layout_counted(counted, options, stack, props, pins, narrowed)


def _layout_counted(counted: dict, options: dict, stack, props, pins, narrowed: dict) -> tuple:
    """``counted`` with the Layout fields ``options`` every layout takes, and the choices they
    leave: recompute modules under selective recomputation; quantized parameters at the
    distributed optimizer's ZeRO stages (:func:`~analytic.plan.layout.quantized_zero_refusal`); an
    optimizer offload at the ZeRO stages the stack's kind runs it
    (:func:`~analytic.plan.layout.check_offload`); uneven end stages or a pipeline layout with
    ``pp`` pinned, a layout's chunks pp × vpp on the 1F1B-family schedules (interleaved where vpp
    > 1)."""
    unknown = sorted(set(options) - set(LAYOUT_OPTIONS[2:]))
    if unknown:
        raise InputError(
            f"layout_options: {unknown[0]!r} is not a Layout field search takes; it takes "
            f"{', '.join(LAYOUT_OPTIONS[2:])} (and etp=, pipeline_layout=)"
        )
    counted = {**counted, **options}
    if options.get("ep_overlap"):
        narrowed = _paired(counted, stack, props, narrowed)
    if options.get("quantized_params"):
        refused = [z for z in narrowed["zero"] if quantized_zero_refusal(z)]
        if refused and narrowed["zero"] != ZERO_STAGES:
            raise InputError(quantized_zero_refusal(refused[0]))
        narrowed = {**narrowed, "zero": tuple(z for z in narrowed["zero"] if z not in refused)}
    if options.get("recompute_modules"):
        if "selective" not in narrowed["recompute"]:
            raise InputError(
                "recompute_modules: recomputed under recompute='selective', not searched here"
            )
        counted["recompute"], narrowed = "selective", {**narrowed, "recompute": ("selective",)}
    if options.get("offload_optimizer"):
        kept = []
        for z in narrowed["zero"]:
            try:
                check_offload(
                    stack,
                    props.get("optimizer_offload"),
                    Layout(zero=z, offload_optimizer=options["offload_optimizer"]),
                )
                kept.append(z)
            except InputError:
                if narrowed["zero"] != ZERO_STAGES:
                    raise
        narrowed = {**narrowed, "zero": tuple(kept)}
    if options.get("ends_as_layers"):
        narrowed = _ends_as_layers(counted["pipeline_layout"], options, narrowed)
    text, uneven = counted["pipeline_layout"], options.get("first_stage_layers") or options.get(
        "last_stage_layers"
    )
    if text is None and not uneven:
        return counted, narrowed
    what = "pipeline_layout" if text is not None else "first_stage_layers"
    if "pp" not in pins:
        raise InputError(f"{what}: places layers on numbered stages; pin pp")
    chunks_ = len(chunks(text)) if text is not None else pins["pp"]
    if chunks_ % pins["pp"]:
        raise InputError(
            f"pipeline_layout: its {chunks_} chunks are pp × vpp; pin pp to a divisor of {chunks_}"
            f" (got {pins['pp']})"
        )
    vpp = chunks_ // pins["pp"]
    schedules = tuple(
        s for s in narrowed["schedules"] if (s == "interleaved") == (vpp > 1) and s != "dualpipe"
    )
    if not schedules:
        runs_on = (
            "the interleaved schedule"
            if vpp > 1
            else "a schedule other than interleaved or DualPipe"
        )
        raise InputError(
            f"{what}: {vpp} chunks a stage run on {runs_on},"
            f" not on {', '.join(narrowed['schedules'])}"
        )
    narrowed = {**narrowed, "schedules": schedules, "vpps": (vpp,) if vpp > 1 else narrowed["vpps"]}
    return {**counted, "pp": pins["pp"], "vpp": vpp}, narrowed


def _ends_as_layers(text, options: dict, narrowed: dict) -> dict:
    """The schedules the ends counted as layers leave: not DualPipe, whose ranks hold both ends
    (dropped from the defaults); with DualPipe asked for by name, a pipeline layout ``text`` or the
    end stages' layers given, Layout's refusal."""
    placed = {k: options.get(k) for k in ("first_stage_layers", "last_stage_layers")}
    named = "dualpipe" in narrowed["schedules"] and tuple(narrowed["schedules"]) != SCHEDULES
    if named or text is not None or any(v is not None for v in placed.values()):
        schedule = "dualpipe" if named else "1f1b"
        Layout(pp=2, ends_as_layers=True, schedule=schedule, pipeline_layout=text, **placed)
    return {**narrowed, "schedules": tuple(s for s in narrowed["schedules"] if s != "dualpipe")}


def _paired(counted: dict, stack, props, narrowed: dict) -> dict:
    """The choices that Megatron-Core's combined 1F1B (``ep_overlap``) leaves, its stack and
    dispatcher checked (:func:`~analytic.plan.layout.ep_overlap_refusal`): no full recomputation and
    no DualPipe (dropped from the defaults, refused where asked for by name); :func:`_layouts` keeps
    the layouts with EP and, where there is a pipeline, the interleaved schedule."""
    refusal = ep_overlap_refusal(stack, props, counted["dispatcher"])
    if refusal:
        raise InputError(refusal)
    refused_by_name = (("recompute", "full", RECOMPUTE), ("schedules", "dualpipe", SCHEDULES))
    for key, refused, default in refused_by_name:
        if refused in narrowed[key] and tuple(narrowed[key]) != tuple(default):
            raise InputError(f"ep_overlap: Megatron-Core refuses it with {refused}; drop {refused}")
        narrowed = {**narrowed, key: tuple(k for k in narrowed[key] if k != refused)}
    return {**narrowed, "ep_overlap": True}


def _stack_runs(
    stack, props, model, hardware, dtype, flash_attention, zero, recompute, schedules
) -> tuple:
    """The ZeRO stages, recomputations and schedules ``stack`` runs, of those asked for: what it
    does not run is dropped from the defaults, and refused (one line, as Plan refuses it) where
    asked for by name."""
    whole = stack_refusal(stack, props, dtype=dtype, hardware=hardware)
    if whole:
        raise InputError(whole)
    # as the selective policy: asked for, a schedule the stack does not run is refused
    if "schedules" in props:
        refused = [sched for sched in schedules if sched not in props["schedules"]]
        if refused and schedules != SCHEDULES:
            raise InputError(stack_refusal(stack, props, schedule=refused[0]))
        schedules = tuple(sched for sched in schedules if sched in props["schedules"])
    # as the schedules: asked for, a ZeRO stage it does not run is refused
    if props.get("max_zero") is not None:
        refused = [z for z in zero if z > props["max_zero"]]
        if refused and zero != ZERO_STAGES:
            raise InputError(stack_refusal(stack, props, zero=refused[0]))
        zero = tuple(z for z in zero if z <= props["max_zero"])
    refusal = selective_refusal(stack, props.get("selective"), model, flash_attention)
    # the layouts Plan refuses are not searched: asked for, it says why
    if refusal and "selective" in recompute:
        if recompute != RECOMPUTE:
            raise InputError(refusal)
        recompute = tuple(r for r in recompute if r != "selective")
    return zero, recompute, schedules


def _layouts(
    model, hardware, props, counts, *, zero, explicit=False, ep_overlap=False, marked=False,
    **options
) -> dict:
    """The layouts of each GPU count as arrays (``INPUTS`` and ``gpus``), less those that are
    another's twin or that the stack does not run (with ``ep_overlap``, those Megatron-Core runs no
    combined 1F1B on: without EP, or pipelined other than interleaved)."""
    parts = [
        enumerate_layouts(
            model, hardware, gpus=g, zero=zero, uneven=explicit, marked=marked, **options
        )
        for g in counts
    ]
    arrays = {k: np.concatenate([p[k] for p in parts]) for k in INPUTS}
    # one replica has nothing to shard: ZeRO-0, 1 and 2 are the same layout there (the lowest asked
    # for is kept); ZeRO-3 stays one of its own (FSDP on one rank: 16-bit gradients, blocks gathered
    # one at a time)
    keep = ~(
        (arrays["dp"] * arrays["cp"] == 1) & (arrays["zero"] < 3) & (arrays["zero"] != min(zero))
    )
    # stack_refusal's pipeline ZeRO limit, on every row at once
    if props.get("pipeline_zero") is not None:
        keep &= ~((arrays["pp"] > 1) & (arrays["zero"] > props["pipeline_zero"]))
    # and its even model chunks (a pipeline layout places its own; the ends as layers' chunks are
    # whole already, _rows)
    if props.get("even_chunks") and not explicit and not options.get("ends_as_layers"):
        keep &= ~(
            (arrays["schedule"] == SCHEDULES.index("interleaved"))
            & (model.layers % (arrays["pp"] * arrays["vpp"]) != 0)
        )
    if ep_overlap:
        keep &= (arrays["ep"] > 1) & (
            (arrays["pp"] == 1) | (arrays["schedule"] == SCHEDULES.index("interleaved"))
        )
    arrays = {k: v[keep] for k, v in arrays.items()}
    arrays["gpus"] = arrays["tp"] * arrays["cp"] * arrays["pp"] * arrays["dp"]
    return arrays


def _groups(arrays: dict, model) -> list:
    """(sequence parallelism, pp or None, rows) of the layouts one program evaluates: those with
    tp > 1 run sequence parallelism, those with tp = 1 none, as Plan has them; a hybrid model's
    stages hold the layers their number gives them (plan.stage_split), so each pp has its own."""
    groups = []
    for sp, rows in ((True, arrays["tp"] > 1), (False, arrays["tp"] == 1)):
        if not model.is_hybrid:
            groups.append((sp, None, np.flatnonzero(rows)))
            continue
        for pp in np.unique(arrays["pp"][rows]):
            groups.append((sp, int(pp), np.flatnonzero(rows & (arrays["pp"] == pp))))
    return groups


def _evaluated(
    arrays,
    progress,
    model,
    hardware,
    seq_len,
    global_batch,
    dtype,
    flash_attention,
    async_tp,
    comm_sms,
    zero3_gather,
    stack,
    counted=None,
) -> tuple[dict, bool]:
    """Memory, step time and FLOPs of every layout from the structure's programs (layouts with tp >
    1 run sequence parallelism, those with tp = 1 none, as Plan has them: one program each); and
    whether a program was built."""
    n = len(arrays["tp"])
    out = {k: np.empty(n) for k in ("memory", "step_time", "flops")}
    built = False
    with shown(progress), bar(desc="search", total=n, unit="layouts") as drawn:
        note = lambda: drawn.set_description_str(
            "search: compiling this configuration's expressions"
        )  # noqa: E731
        for sp, pp, rows in _groups(arrays, model):
            if not len(rows):  # nothing to compile for when no layout of the kind is valid
                continue
            fn, new = _compiled(
                model, hardware, seq_len, global_batch, dtype, flash_attention, async_tp, comm_sms,
                zero3_gather, stack, note, sequence_parallel=sp,
                counted=counted if pp is None else {**(counted or {}), "pp": pp},
            )
            drawn.set_description_str("search")
            built = built or new
            for lo in range(0, len(rows), CHUNK):
                chunk = rows[lo : lo + CHUNK]
                with np.errstate(all="ignore"):
                    for k, v in zip(
                        ("memory", "step_time", "flops"), fn(*(arrays[k][chunk] for k in INPUTS))
                    ):
                        out[k][chunk] = v  # broadcasts a constant
                drawn.update(len(chunk))
    return out, built
