"""Plan: one (model, hardware, layout, batch), every quantity composed from catalogue formulas.

Each quantity is a :class:`~analytic.core.formula.Formula` built by binding catalogue formulas to
the plan's inputs. An input given as a sympy symbol (``an.sym("dp")``) stays free, so the same code
gives numbers, closed forms and the vectorised expressions that search compiles.

The work is a one-way flow of stages, each a module whose functions take the results of the stages
before it: :mod:`.inputs` (arguments read and checked, every input) → :mod:`.placement` (strides,
links, parameters per GPU) → :mod:`.memory` and :mod:`.compute` → :mod:`.communication` (one
function per axis) → :mod:`.timing`. :class:`Plan` builds them lazily; :mod:`.quantities` names
their quantities.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from fractions import Fraction
from functools import cached_property
from typing import TYPE_CHECKING

from ..core import held
from ..core.choices import AXES, CONVENTIONS, MEMORY_PARTS, OP_CLASSES, TIME_PARTS
from ..core.errors import FreeSymbolError, InputError, PresetError, UnknownNameError
from ..core.symbols import info
from ..core.units import Quantity, readable
from ..core.values import choice, count, exact, flag, fraction, is_number, is_sympy
from ..presets.hardware import Hardware
from ..presets.model import Model
from . import programs, ranks, verdict
from .inputs import Inputs
from .label import provenance
from .layout import Layout

if TYPE_CHECKING:
    from ..core.formula import Formula
    from .degrees import Degrees


@dataclass(frozen=True)
class Memory:
    """Memory per GPU on one pipeline stage (``stage``), or on the worst one, at its peak, in GB;
    the parts (choices.MEMORY_PARTS) sum to ``total``. Where the optimizer step is the peak,
    ``optimizer_step`` holds its temporaries and the activations and gathered copies are 0."""

    weights: Quantity
    gradients: Quantity
    optimizer: Quantity
    gathered: Quantity  # ZeRO-3's unsharded parameters and gradients (in flight, or the held stage)
    activations: Quantity
    total: Quantity
    hbm: Quantity
    logits: Quantity  # one microbatch's logits on the last stage
    # the loss's working set at its peak (logits included), in the last stage's activations
    loss: Quantity
    stage: int | None = None  # the stage's index (0 the first), where known
    # the step's temporaries where the optimizer step is the peak
    optimizer_step: Quantity = Quantity(0, "byte")
    # offloaded activations and optimizer in host memory (any stage's most)
    host: Quantity = Quantity(0, "byte")
    # the least measured outside the allocator: the count must leave it
    outside: Quantity = Quantity(0, "byte")

    def __post_init__(self):  # the defaults, as the library gives a plan's quantities
        for k in ("optimizer_step", "host", "outside"):
            if isinstance(self.__dict__[k], Quantity):
                object.__setattr__(self, k, readable(self.__dict__[k]))

    @property
    def fits(self) -> bool:
        """Whether the count and the memory outside the allocator are within the HBM
        (memory.headroom ≥ 0)."""
        return self.total + self.outside <= self.hbm

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def __repr__(self) -> str:
        """The parts in GB, as the command line and the docs show them; a part that is zero left
        out, but for the weights and gradients."""

        def gb(name) -> str:
            return f"{name} {float(getattr(self, name).to('GB').magnitude):.4g} GB"

        where = "the fullest stage" if self.stage is None else f"stage {self.stage}"
        held = [
            gb(n)
            for n in MEMORY_PARTS
            if n in ("weights", "gradients") or getattr(self, n).magnitude
        ]
        extra = [gb(n) for n in ("logits", "loss", "outside", "host") if getattr(self, n).magnitude]
        tail = f"; {', '.join(extra)}" if extra else ""
        return f"Memory({where}: {', '.join(held)}; {gb('total')}, {gb('hbm')}{tail})"


class Plan:
    """A training step of ``model`` on ``hardware`` with ``layout``.

    ``global_batch`` counts sequences (or give ``batch_tokens``); microbatches per replica =
    global_batch / (dp · microbatch_size). Keyword overrides replace any hardware or calibration
    input by number or symbol: ``peak_flops``, ``sms``, ``hbm``, ``scale_up_bandwidth``,
    ``scale_out_bandwidth``, ``gpus_per_node``, ``scale_up_domain``, ``matmul_efficiency`` (the
    device's GEMM ceiling over its peak), ``stack_efficiency``, ``attention_factor``,
    ``link_efficiency``, ``overlap``, ``scale_up_latency``, ``scale_out_latency`` (``latency`` sets
    both), ``interruption_rate``, ``checkpoint_time`` (the stall of an asynchronous checkpoint),
    ``checkpoint_write_time`` (how long after it the copy is durable), ``restart_time``. ``stack``:
    the training stack of presets/stacks.toml whose kernels, allocations and efficiency the plan
    takes; by default the hardware platform's (``choices.default_stack``: Megatron-Core on CUDA and
    ROCm). ``dispatcher``: how an MoE layer's tokens reach their experts (``choices.DISPATCHERS``),
    by default the stack's first. ``bf16_layers=(first, last)``: the layers at each end a
    low-precision plan keeps in BF16. ``expert_capacity=c``: an MoE plan's experts padded to c times
    their balanced share of tokens (``pad_to_capacity=False``: the tokens beyond it dropped instead,
    the busiest rank's share capped at it). ``routing_imbalance``: an MoE plan's busiest
    expert-parallel rank's routed tokens over that share (a number ≥ 1; "balanced", 1, the
    default; "dropless", the model's value fitted on its runs).
    """

    def __init__(
        self,
        model: Model,
        hardware: Hardware,
        layout: Layout | None = None,
        *,
        seq_len=None,
        global_batch=None,
        microbatch_size=1,
        dtype: str = "bf16",
        batch_tokens=None,
        flash_attention: bool | None = None,
        training_tokens=None,
        allow_cross_node_tp: bool = False,
        grad_dtype: str | None = None,
        moment_dtype: str | None = None,
        stack: str | None = None,
        profile=None,
        optimizer: str = "adam",
        fp8_recipe: str | None = None,
        dispatcher: str | None = None,
        bf16_layers=None,
        expert_capacity=None,
        pad_to_capacity: bool = True,
        **overrides,
    ):
        self._in = inp = Inputs(
            model, hardware, layout, seq_len=seq_len, global_batch=global_batch,
            microbatch_size=microbatch_size, dtype=dtype, batch_tokens=batch_tokens,
            flash_attention=flash_attention, training_tokens=training_tokens,
            allow_cross_node_tp=allow_cross_node_tp, grad_dtype=grad_dtype,
            moment_dtype=moment_dtype, stack=stack, optimizer=optimizer, fp8_recipe=fp8_recipe,
            dispatcher=dispatcher, bf16_layers=bf16_layers, expert_capacity=expert_capacity,
            pad_to_capacity=pad_to_capacity, profile=profile, **overrides,
        )
        self.model, self.hardware, self.layout = inp.model, inp.hardware, inp.layout
        self.dtype, self.flash_attention, self.overrides, self.notes = (
            inp.dtype,
            inp.flash_attention,
            inp.overrides,
            inp.notes,
        )
        self.seq_len, self.global_batch, self.microbatch_size = (
            inp.seq_len,
            inp.global_batch,
            inp.microbatch_size,
        )
        self.training_tokens, self.allow_cross_node_tp = (
            inp.training_tokens,
            inp.allow_cross_node_tp,
        )
        self.grad_dtype, self.moment_dtype, self.stack = inp.grad_dtype, inp.moment_dtype, inp.stack
        self.optimizer, self.fp8_recipe, self.dispatcher = (
            inp.optimizer,
            inp.fp8_recipe,
            inp.dispatcher,
        )
        self.bf16_layers, self.expert_capacity = inp.bf16_layers, inp.expert_capacity
        self.pad_to_capacity = inp.pad_to_capacity
        # None follows a replaced plan's stack
        self._fp8_recipe_given, self._dispatcher_given = fp8_recipe, dispatcher
        # None follows the stack and the ZeRO stage of a replaced plan
        self._grad_dtype_given = grad_dtype
        # quantity → its Formula, and stage → its parts' Formulas, once built
        self._exprs, self._stages = {}, {}

    # --- stages, built when first needed
    #   ------------------------------------------------------------
    @property
    def deg(self) -> Degrees:
        """The layout's degrees and choices as sympy numbers, symbols and conditions."""
        return self._in.deg

    @property
    def inputs(self) -> dict:
        """keyword → every input of the plan: an exact number (int or Fraction) or a sympy
        expression."""
        return self._in.given

    @property
    def calibration(self):
        """The stack's fitted constants (None when missing or all overridden)."""
        return self._in.calibration

    @cached_property
    def _params(self) -> dict:
        from . import placement

        return placement.parameters(self._in)

    @cached_property
    def _activation_parts(self) -> dict:
        from . import memory

        return memory.activation_parts(self._in)

    @cached_property
    def _worst(self) -> dict:
        from . import memory

        return memory.worst(self._in, self._activation_parts, self._stage)

    @cached_property
    def _numbers(self) -> programs.Numbers:
        """The numbers of the programs of the plan's structure, where it has them."""

        def lower():
            from . import template

            return template.build(self)

        return programs.Numbers(self._in, lower)

    def value(self, name: str) -> Quantity:
        """Plan quantity ``name`` (see :meth:`quantities`) as a number with its unit: from the
        programs of the plan's structure where they give it, else from its expression (which also
        says what is missing)."""
        q = self._numbers.quantity(name)
        return readable(q if q is not None else self.expr(name).value())

    @cached_property
    def _comm(self) -> dict:
        from . import communication

        return communication.communication(self._in, self._params)

    @cached_property
    def _time(self) -> dict:
        from . import ops, timing

        return timing.timing(self._in, ops.op_times(self._in, self._params), self._comm)

    # --- placement ------------------------------------------------------------------------
    @property
    def gpus(self):
        return self._count("gpus")

    @property
    def microbatches(self):
        return self._count("microbatches")

    @property
    def tokens_per_step(self) -> Quantity:
        return self.value("tokens_per_step")

    def placement(self) -> dict:
        """For each axis: its size, its stride in the rank order and the link it uses."""
        return ranks.placement(self.layout, self._in.given_number("scale_up_domain"))

    # --- expressions ----------------------------------------------------------------------
    def expr(self, name: str, stage: int | None = None) -> Formula:
        """Any plan quantity as a Formula in the plan's free inputs (see :meth:`quantities`); with
        ``stage``, a memory quantity (``memory.total``, ``memory.weights``, ...) on that pipeline
        stage alone (where ``memory.total`` is the fullest stage's, a maximum over stages)."""
        if stage is not None:
            return self._stage_expr(name, stage)
        builders = self._builders
        if name not in builders:
            raise UnknownNameError("plan quantity", name, builders)
        if name not in self._exprs:
            f = builders[name]()
            self._exprs[name] = f.renamed(f"plan.{name}", source=provenance(self))
        return self._exprs[name]

    def sources(self, name: str) -> list[str]:
        """The catalogue formulas (names, sorted) that quantity ``name`` is composed from: for a
        numeric layout those of the branches it takes, for a symbolic one those of every branch it
        may take."""
        found = self._numbers.sources(name)
        return found if found is not None else sorted(self.expr(name).sources)

    def quantities(self) -> list[str]:
        """Names accepted by :meth:`expr`."""
        return list(self._builders)

    @cached_property
    def _builders(self) -> dict:
        from . import quantities

        return quantities.builders(self)

    # --- numbers ------------------------------------------------------------------------------
    def model_flops(self, convention: str = "6nd") -> Quantity:
        """Model FLOPs per step (no recomputation) under a convention: ``6nd`` (6·N_active·D),
        ``palm`` (6N + 12LHQT per token), ``megatron`` (Narayanan eq. 3, GPT shape, with recompute),
        ``megatron-core`` (the count behind the TFLOP/s Megatron-Core logs: GEMM weights, causal
        attention)."""
        choice("convention", convention, CONVENTIONS)
        return self.value(f"flops.{convention}")

    def hardware_flops(self) -> Quantity:
        """FLOPs executed per step, recomputation included (PaLM convention for the model part;
        FlashAttention's backward recomputes QKᵀ)."""
        return self.value("flops.hardware")

    def communication(self) -> dict:
        """Bytes sent per step per GPU, by axis (tp, pp, dp, cp, ep)."""
        return {a: self.value(f"communication.{a}") for a in AXES}

    def communication_time(self) -> dict:
        """Seconds per step per GPU spent in each axis's collectives (before overlap)."""
        if not all(self._numbers.has(f"communication_time.{a}") for a in AXES):
            self._comm  # noqa: B018  (the walk that records what the times lack)
            self._in.require_times()
        return {a: self.value(f"communication_time.{a}") for a in AXES}

    def step_time(self, mfu=None) -> Quantity:
        """Seconds per step. With ``mfu``: model FLOPs (6ND) / (GPUs · peak · mfu). Without: the
        predictive model (compute at the device's measured ceilings and the stack's efficiency +
        bubble + exposed communication; see :meth:`time_breakdown`)."""
        if mfu is None:
            return self.value("step_time")
        return self._formula(
            "compute.train_time", {"flops": "flops", "gpus": "gpus"}, mfu=fraction("mfu", mfu)
        )

    def step_time_interval(self) -> tuple[Quantity, Quantity]:
        """(low, high): where the measured step time falls with the calibration's coverage (80%):
        the predicted step time times the quantiles of measured/predicted over the validation cases,
        each predicted with its whole source left out of the fit (calibration.toml's [interval])."""
        cal = self._in.calibration
        if cal is None or cal.interval is None:
            raise PresetError(
                "step_time_interval: the interval comes with the shipped calibration; a plan whose "
                "constants are all given has none"
            )
        t = self.step_time()
        return t * cal.interval[0], t * cal.interval[1]

    def memory_peak(self, stage: int | None = None) -> Quantity:
        """Peak memory per GPU the allocator reserves (``memory.allocator_peak``): :meth:`memory`'s
        total (the fullest stage, or ``stage``) times the reserve fitted for the stack's
        allocator."""
        return readable(verdict.allocator_peak(self, stage))

    def memory_outside(self) -> Quantity:
        """Device memory a process holds outside the stack's allocator (the driver's reservation,
        the CUDA context, NCCL's buffers): the mean of the snapshots of validation/outside.toml
        (calibration.toml [memory]); ``memory().outside`` is the least of them. ``Plan(...,
        outside_bytes=)`` replaces both."""
        return readable(verdict.outside(self))

    def memory_verdict(self, stage: int | None = None) -> str:
        """Whether the stage (default the fullest) fits, one of
        :data:`~analytic.core.choices.MEMORY_VERDICTS`: "does not fit" where :meth:`memory`'s count
        and the least memory measured outside the allocator are above the HBM (``Memory.fits``);
        "fits" where the process's peak (``memory.device_peak``: :meth:`memory_peak` and
        :meth:`memory_outside`) is within it; "fits at the allocator's limit" between: short of
        memory, PyTorch's caching allocator releases its cached blocks and retries before it fails
        (``torch.cuda.memory_stats``: num_alloc_retries). Without a fitted reserve: the count's."""
        return verdict.verdict(self, stage)

    def memory_interval(self, stage: int | None = None) -> tuple[Quantity, Quantity]:
        """(low, high): :meth:`memory_peak` times the smallest and largest measured/predicted peak
        of the validation runs, each predicted with its source left out of the reserve's fit."""
        return tuple(readable(q) for q in verdict.interval(self, stage))

    def time_breakdown(self, ops: bool = False) -> dict:
        """compute, bubble and exposed communication by axis; the values sum to step_time(). With
        ``ops``: compute split into its op classes (gemm, attention, memory_bound, optimizer)."""
        names = TIME_PARTS if flag("ops", ops) else ("compute", *TIME_PARTS[len(OP_CLASSES) :])
        return {k: self.value(f"time.{k}") for k in names}

    def exposure(self) -> dict:
        """axis → {"exposed": seconds it adds to the step, "traffic": seconds of its collectives,
        "why": why what is exposed is not hidden}; dp also "window", the compute its traffic hides
        behind."""
        from .timing import why_exposed

        if not self._in.numeric:
            raise FreeSymbolError(
                "exposure: the reasons need a numeric layout; use "
                "plan.expr('time.dp') and plan.expr('communication_time.dp')"
            )
        why = why_exposed(self._in.deg)
        out = {
            a: {
                "exposed": self.value(f"time.{a}"),
                "traffic": self.value(f"communication_time.{a}"),
                "why": why[a],
            }
            for a in AXES
        }
        out["dp"]["window"] = self.value("time.dp_window")
        return out

    def slowest_stage(self) -> dict:
        """The pipeline stage that sets the step's pace: ``stage`` (its index), ``compute`` (its
        compute for the step), ``average`` (the average stage's) and ``imbalance`` (what it adds to
        the step)."""
        # the ends first on ties
        times = {k: self.value(f"time.stage.{k}") for k in ("last", "first", "middle")}
        name = max(times, key=lambda k: times[k].to("s").magnitude)
        from .timing import middle_stage

        pp, parts = int(self.layout.pp), self.time_breakdown(ops=True)
        return {
            "stage": {"first": 0, "middle": middle_stage(self._in), "last": pp - 1}[name],
            "compute": times[name],
            "average": parts["gemm"] + parts["attention"] + parts["memory_bound"],
            "imbalance": parts["imbalance"],
        }

    def mfu(self, step_time=None) -> float:
        """Model FLOPs utilisation (6ND convention) at ``step_time`` (default: the predicted
        one)."""
        if step_time is None:
            return float(self.value("mfu").to("").magnitude)
        mfu = self._formula("compute.mfu", {"flops": "flops", "gpus": "gpus"}, step_time=step_time)
        return float(mfu.to("").magnitude)

    def _formula(self, name: str, quantities: dict, **values) -> Quantity:
        """Catalogue formula ``name`` at the plan's inputs, ``quantities`` (keyword → the plan
        quantity it takes) and ``values``: a numeric plan's at the quantities' numbers, else from
        their expressions."""
        if self._in.numeric:
            return self._in.f(
                name, **{k: self.value(q) for k, q in quantities.items()}, **values
            ).value()
        return self._in.f(
            name, **{k: self.expr(q) for k, q in quantities.items()}, **values
        ).value()

    def memory(self, stage: int | None = None) -> Memory:
        """Per-GPU memory on pipeline stage ``stage`` (0 the first), or on the worst stage; parts
        sum to the total."""
        if stage is None:
            parts = {k: self.value(f"memory.{k}") for k in (*MEMORY_PARTS, "total", "host")}
            from . import memory

            self._numeric_pp()
            fullest = sorted({int(k) for k in memory.fullest_candidates(self._in)})
            worst = fullest[0] if len(fullest) == 1 else max(fullest, key=self._stage_total)
        else:
            worst = count("stage", stage, minimum=0, allow_symbol=False)
            if worst >= self._numeric_pp():
                raise InputError(
                    f"stage: expected 0 to {self._numeric_pp() - 1} (pp = {self.layout.pp}), got"
                    f" {stage}"
                )
            parts = self._stage_values(worst)
        hbm, outside = (
            readable(Quantity(float(self._in.given_number(k)), "byte"))
            for k in ("hbm", "outside_bytes")
        )
        return Memory(
            **parts, hbm=hbm, outside=outside, logits=self.value("memory.logits"),
            loss=self.value("memory.loss"), stage=worst,
        )

    def memory_by_stage(self) -> list[Memory]:
        """:meth:`memory` of every pipeline stage, first to last."""
        return [self.memory(stage=k) for k in range(self._numeric_pp())]

    def layers_by_stage(self, ranks: bool = False) -> list[int]:
        """The model's layers on every pipeline stage, first to last, as the plan counts them (the
        MTP modules' not among them; where pp does not divide the layers, each stage not given a
        count holds the most any does); with ``ranks``, under DualPipe each stage's rank's, the
        mirrored stage's too (pipeline.mirror_stage.dualpipe), as :meth:`memory_by_stage` counts
        it."""
        from ..formulas import formula
        from . import stage_split

        pp = self._numeric_pp()
        if stage_split.placed(self._in):
            layers = [len(held) for held in stage_split.held(self._in)]
        else:
            layers = stage_split.stage_counts(self._in)
        if not ranks or self.layout.schedule != "dualpipe":
            return layers
        mirror = formula("pipeline.mirror_stage.dualpipe")
        return [n + layers[int(mirror.bind({"pp": pp, "stage": k}).term)]
                for k, n in enumerate(layers)]

    def _numeric_pp(self) -> int:
        if not is_number(self.layout.pp):
            raise FreeSymbolError(
                "pp: the stages need a numeric pipeline degree; use plan.expr('memory.total')"
            )
        return int(self.layout.pp)

    def _stage_expr(self, name: str, stage) -> Formula:
        """:meth:`expr` of memory quantity ``name`` on ``stage`` (a count below pp, or a symbol)."""
        part = name.removeprefix("memory.")
        parts = (*MEMORY_PARTS, "total", "host")
        if not name.startswith("memory.") or part not in parts:
            raise InputError(
                f"stage: a stage's expression is one of memory.{', memory.'.join(parts)}; "
                f"{name} is the whole step's"
            )
        if not is_sympy(stage):
            stage = count("stage", stage, minimum=0, allow_symbol=False)
            if is_number(self.layout.pp) and stage >= int(self.layout.pp):
                raise InputError(
                    f"stage: expected a stage below pp = {int(self.layout.pp)}, got {stage}"
                )
        return self._stage(stage)[part].renamed(
            f"plan.{name}[stage {stage}]", source=provenance(self)
        )

    def _stage(self, k) -> dict:
        """Stage ``k``'s memory parts as Formulas (built once per stage)."""
        if k not in self._stages:
            from . import memory

            exact_k = k if self._in.numeric or self._in.on_terms else exact(k)
            self._stages[k] = memory.stage(self._in, exact_k, self._activation_parts)
        return self._stages[k]

    def _stage_values(self, k: int) -> dict:
        """Stage ``k``'s memory parts and total: from the programs, or from their expressions."""
        parts = self._numbers.stage(k)
        if parts is None:
            parts = {name: f.value() for name, f in self._stage(k).items()}
        return {name: readable(q) for name, q in parts.items()}

    def _stage_total(self, k: int) -> float:
        """Bytes per GPU on stage ``k``."""
        total = self._numbers.stage_total(k)
        if total is not None:
            return total
        return _number(self._stage(k)["total"], "memory of a stage")

    # --- symbolic helpers ----------------------------------------------------------------------
    def _count(self, name: str):
        """Quantity ``name``, a count: an int where it is whole."""
        n = self._numbers.count(name)
        if n is not None:
            return n
        f = self.expr(name)
        if not held.holds_number(f) and f.expr.free_symbols:
            raise FreeSymbolError(
                f"{f.name}: free symbols remain ({', '.join(f.symbols)}); use plan.expr()"
            )
        x = f.term if held.holds_number(f) else f.expr
        whole = (
            type(x) is int
            or (type(x) is Fraction and x.denominator == 1)
            or (is_sympy(x) and x.is_integer)
        )
        return int(x) if whole else _number(f, f.name)

    def smallest(self, keyword: str, limit: int | None = None, at_limit: bool = False) -> int:
        """Smallest integer value of the free input ``keyword`` whose plan fits
        (:meth:`memory_verdict`; with ``at_limit`` at the allocator's limit too), up to ``limit``
        (default :func:`analytic.symbolic.smallest_fitting`'s)."""
        from ..symbolic import smallest_fitting

        return smallest_fitting(
            self, keyword, at_limit=at_limit, **({} if limit is None else {"limit": limit})
        )

    def best(self, keyword: str, limit: int | None = None, objective: str = "step_time") -> int:
        """The integer value of the free input ``keyword``, among those that fit
        (:meth:`memory_verdict`), that minimises the predicted step time, or optimises another
        ``objective`` (``"cost"``: GPU-seconds per token; ``"mfu"``), up to ``limit`` (default
        :func:`analytic.symbolic.optimise`'s)."""
        from ..symbolic import optimise

        return optimise(self, keyword, objective, **({} if limit is None else {"limit": limit}))[
            "best"
        ]

    def subs(self, **values) -> "Plan":
        """A new plan with free inputs of the layout or model given values."""
        lay = {k: v for k, v in values.items() if k in ("tp", "pp", "dp", "cp", "ep", "etp", "vpp")}
        mod = {k: v for k, v in values.items() if k in {f.name for f in fields(Model)}}
        rest = set(values) - set(lay) - set(mod)
        if rest:
            raise UnknownNameError("plan input", sorted(rest)[0], list(lay) + list(mod))
        return self.replace(
            model=self.model.replace(**mod) if mod else None, layout=self.layout.replace(**lay)
        )

    def _arguments(self) -> dict:
        """The keyword arguments that build this plan again (overrides as quantities or symbols)."""
        return dict(
            seq_len=self.seq_len,
            global_batch=self.global_batch,
            microbatch_size=self.microbatch_size,
            dtype=self.dtype,
            flash_attention=self.flash_attention,
            training_tokens=self.training_tokens,
            allow_cross_node_tp=self.allow_cross_node_tp,
            grad_dtype=self._grad_dtype_given,
            moment_dtype=self.moment_dtype,
            stack=self.stack,
            optimizer=self.optimizer,
            fp8_recipe=self._fp8_recipe_given,
            dispatcher=self._dispatcher_given,
            bf16_layers=self.bf16_layers if any(self.bf16_layers) else None,
            expert_capacity=self.expert_capacity,
            pad_to_capacity=self.pad_to_capacity,
            **{
                k: v if is_sympy(v) else Quantity(v, info(k).unit)
                for k, v in self.overrides.items()
            },
        )

    def replace(
        self, *, model: Model | None = None, layout: Layout | None = None, **changes
    ) -> "Plan":
        """A new plan with the model, layout or any keyword argument of Plan changed."""
        args = self._arguments()
        if "batch_tokens" in changes:
            args.pop("global_batch")
        if changes.get("dtype", self.dtype) != "fp8":  # a recipe of fp8 only
            args["fp8_recipe"] = None
        # no layer is kept in BF16 of a 16-bit plan
        if changes.get("dtype", self.dtype) in ("bf16", "fp16"):
            args["bf16_layers"] = None
        args.update(changes)
        return Plan(model or self.model, self.hardware, layout or self.layout, **args)

    def __reduce__(self):
        """Pickled as its arguments (a Dask worker builds the plan again; its caches stay
        behind)."""
        return _rebuilt, (self.model, self.hardware, self.layout, self._arguments())

    def __repr__(self) -> str:
        return f"Plan({provenance(self).removeprefix('analytic Plan: ')})"


def _rebuilt(model: Model, hardware: Hardware, layout: Layout, arguments: dict) -> Plan:
    """The plan ``Plan.__reduce__`` pickled."""
    return Plan(model, hardware, layout, **arguments)


def _number(f: Formula, name: str) -> float:
    """The number a Formula without free symbols stands for, its domain unchecked."""
    if held.holds_number(f):
        return float(f.term)
    from ..core.expressions import to_float

    return to_float(f.expr, name)
