"""Plan: one (model, hardware, layout, batch), every quantity composed from catalogue formulas.

Each quantity is a :class:`~analytic.formula.Formula` built by binding catalogue formulas to the
plan's inputs. An input given as a sympy symbol (``an.sym("dp")``) stays free, so the same code
gives numbers, closed forms and the vectorised expressions that search compiles.

Placement follows Megatron-Core's rank order, innermost first: tp, cp, dp (ep inside dp), pp.
An axis whose group fits in a node uses the scale-up link, one whose ranks are all on other nodes
the scale-out link. One that spans both all-reduces in two levels, and reduce-scatters and
all-gathers as NCCL does, in a ring over every rank whose bytes cross the nodes' NICs together.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, fields
from functools import cached_property

import pint
import sympy

from ..choices import AXES, CONVENTIONS
from ..errors import FreeSymbolError, InputError, PresetError, ReinterpretedWarning, UnknownNameError
from ..formula import Formula, cases, composed, magnitude, to_float
from ..formulas import formula
from ..hardware import Hardware
from ..model import Model
from ..schedules import BUBBLE_FORMULAS, at_least_critical_path, is_number, lazy_max, lazy_min
from ..symbolic import minimise_step_time, smallest_fitting
from ..symbols import canonical, sym
from ..units import Q_
from ..values import batch_tokens as read_batch_tokens
from ..values import choice, count, flag, fraction
from .layout import Layout, _Degrees, check_layout, training_dtype


@dataclass(frozen=True)
class Memory:
    """Memory per GPU on the worst pipeline stage; the parts sum to ``total``."""

    weights: pint.Quantity
    gradients: pint.Quantity
    optimizer: pint.Quantity
    gathered: pint.Quantity  # ZeRO-3's unsharded parameters and gradients (in flight, or the held stage)
    activations: pint.Quantity
    total: pint.Quantity
    hbm: pint.Quantity
    logits: pint.Quantity  # included in activations where the last stage is the worst

    @property
    def fits(self) -> bool:
        return self.total <= self.hbm

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class Plan:
    """A training step of ``model`` on ``hardware`` with ``layout``.

    ``global_batch`` counts sequences (or give ``batch_tokens``); microbatches per replica =
    global_batch / (dp · microbatch_size). Keyword overrides replace any hardware or calibration
    input by number or symbol: ``peak_flops``, ``sms``, ``hbm``, ``scale_up_bandwidth``,
    ``scale_out_bandwidth``, ``gpus_per_node``, ``matmul_efficiency``, ``link_efficiency``,
    ``latency``, ``overlap``, ``interruption_rate``, ``checkpoint_time``, ``restart_time``.
    """

    _OVERRIDES = ("peak_flops", "sms", "hbm", "scale_up_bandwidth", "scale_out_bandwidth", "gpus_per_node",
                  "matmul_efficiency", "link_efficiency", "latency", "overlap", "interruption_rate",
                  "checkpoint_time", "restart_time", "element_bytes")

    def __init__(self, model: Model, hardware: Hardware, layout: Layout | None = None, *, seq_len=None,
                 global_batch=None, microbatch_size=1, dtype: str = "bf16", batch_tokens=None,
                 flash_attention: bool = True, training_tokens=None, allow_cross_node_tp: bool = False,
                 **overrides):
        if not isinstance(model, Model):
            raise InputError(f"model: expected an analytic Model (an.model(name)), got {type(model).__name__}")
        if not isinstance(hardware, Hardware):
            raise InputError(f"hardware: expected an analytic Hardware (an.hardware(name)), got {type(hardware).__name__}")
        layout = Layout() if layout is None else layout
        if not isinstance(layout, Layout):
            raise InputError(f"layout: expected an analytic Layout, got {type(layout).__name__}")
        unknown = [k for k in overrides if k not in self._OVERRIDES]
        if unknown:
            raise UnknownNameError("Plan argument", unknown[0], list(self._OVERRIDES) + [
                "seq_len", "global_batch", "microbatch_size", "dtype", "batch_tokens", "flash_attention",
                "training_tokens", "allow_cross_node_tp"])
        self.model, self.hardware, self.layout = model, hardware, layout
        self.dtype = training_dtype(dtype, hardware)
        self.flash_attention = flag("flash_attention", flash_attention)
        if seq_len is None:
            raise InputError("seq_len: required (tokens per sequence)")
        self.seq_len = canonical(count("seq_len", seq_len))
        self.microbatch_size = canonical(count("microbatch_size", microbatch_size))
        if (global_batch is None) == (batch_tokens is None):
            raise InputError("global_batch: give exactly one of global_batch (sequences) or batch_tokens")
        self.notes: list[str] = []  # inputs read otherwise than written, each said here and warned
        if batch_tokens is not None:
            if isinstance(batch_tokens, sympy.Basic) and not batch_tokens.is_number:
                global_batch = magnitude("batch_tokens", batch_tokens) / self.seq_len
            else:
                tokens, note = read_batch_tokens(batch_tokens, self.seq_len)
                global_batch = tokens // self.seq_len
                if note:
                    self.notes.append(note)
                    warnings.warn(note, ReinterpretedWarning, stacklevel=2)
        self.global_batch = canonical(count("global_batch", global_batch))
        self.training_tokens = None if training_tokens is None else magnitude("tokens", training_tokens)
        self.overrides = {k: magnitude(k, v) for k, v in overrides.items()}  # each in its symbol's unit and domain
        self.allow_cross_node_tp = flag("allow_cross_node_tp", allow_cross_node_tp)
        check_layout(model, layout, seq_len=self.seq_len, global_batch=self.global_batch,
                     microbatch_size=self.microbatch_size, allow_cross_node_tp=self.allow_cross_node_tp,
                     gpus_per_node=self.overrides.get("gpus_per_node", hardware.gpus_per_node),
                     sms=self.overrides.get("sms", hardware.sms), hardware=hardware.key or hardware.name)
        # exact sympy values for the algebra (Python's / would make floats)
        self.deg = _Degrees(layout)
        self._missing_for_times: dict = {}  # inputs only times need, found missing by the communication walk
        self.seq_len, self.global_batch, self.microbatch_size = (
            sympy.sympify(self.seq_len), sympy.sympify(self.global_batch), sympy.sympify(self.microbatch_size))

    # --- inputs ---------------------------------------------------------------------------
    @cached_property
    def calibration(self):
        """The hardware's fitted constants for this dtype (None when missing or all overridden)."""
        if all(k in self.overrides for k in ("matmul_efficiency", "link_efficiency", "latency", "overlap")):
            return None
        try:
            return self.hardware.calibration(self.dtype)
        except PresetError as exc:
            self._calibration_error = str(exc)
            return None

    @cached_property
    def inputs(self) -> dict:
        """keyword → exact number or sympy expression for every input of the plan."""
        hw, lay = self.hardware, self.deg
        out = dict(self.model.inputs())
        out.update({k: getattr(lay, k) for k in ("tp", "pp", "dp", "cp", "ep", "vpp")})
        out.update(seq_len=self.seq_len, microbatch_size=self.microbatch_size, global_batch=self.global_batch)
        ov = self.overrides

        def pick(key, default):
            if key in ov:
                return magnitude(key, ov[key])
            value = default()
            return None if value is None else magnitude(key, value)

        out["element_bytes"] = pick("element_bytes", lambda: Q_(2, "byte"))  # 16-bit (TRAINING_DTYPES)
        out["peak_flops"] = pick("peak_flops", lambda: hw.peak_flops(self.dtype))
        out["hbm"] = pick("hbm", lambda: hw.hbm)
        out["sms"] = pick("sms", lambda: hw.sms)
        out["comm_sms"] = lay.comm_sms
        out["gpus_per_node"] = pick("gpus_per_node", lambda: hw.gpus_per_node)
        out["scale_up_bandwidth"] = pick("scale_up_bandwidth", lambda: hw.scale_up)
        out["scale_out_bandwidth"] = pick("scale_out_bandwidth", lambda: hw.scale_out)
        cal = self.calibration
        for key in ("matmul_efficiency", "link_efficiency", "latency", "overlap"):
            out[key] = pick(key, lambda k=key: getattr(cal, k) if cal is not None else None)
        from ..presets import llama3_interruption_rate
        out["interruption_rate"] = pick("interruption_rate", llama3_interruption_rate)
        out["restart_time"] = pick("restart_time", lambda: Q_(0, "s"))
        out["checkpoint_time"] = (magnitude("checkpoint_time", ov["checkpoint_time"]) if "checkpoint_time" in ov
                                  else None)
        return {k: v for k, v in out.items() if v is not None}

    def _need(self, key):
        if key not in self.inputs and hasattr(self, "_calibration_error"):
            raise PresetError(self._calibration_error)
        if key not in self.inputs:
            raise InputError(f"{self.hardware.key or self.hardware.name} has no {key.replace('_', ' ')}; "
                             f"pass Plan(..., {key}=...) (CLI: --{key.replace('_', '-')})")
        return self.inputs[key]

    def _f(self, name: str, **values) -> Formula:
        """Catalogue formula ``name`` bound to the plan's inputs (``values`` override some)."""
        return formula(name).bind({**self.inputs, **values})

    # --- placement ------------------------------------------------------------------------
    @property
    def gpus(self):
        return self._value(self.expr("gpus"), integer=True)

    @property
    def microbatches(self):
        return self._value(self.expr("microbatches"), integer=True)

    @property
    def tokens_per_step(self) -> pint.Quantity:
        return self.expr("tokens_per_step").value()

    def _stride(self, axis: str):
        lay = self.deg
        return {"tp": 1, "cp": lay.tp, "dp": lay.tp * lay.cp, "ep": lay.tp * lay.cp, "pp": lay.tp * lay.cp * lay.dp}[axis]

    def _replica_groups(self):
        """(parameters per GPU, ranks, stride) of the groups that hold the same parameters: they
        reduce gradients together and ZeRO shards over them. CP ranks hold the same weights and see
        different tokens, so they join DP (Megatron's data-parallel group with context parallelism;
        torchtitan's FSDP over the flattened dp_shard × cp mesh). Experts: dp·cp/ep replicas."""
        lay = self.deg
        return [(self._params["dense_local"], lay.dp * lay.cp, lay.tp),
                (self._params["expert_local"], lay.dp * lay.cp / lay.ep, self._stride("dp"))]

    def placement(self) -> dict:
        """For each axis: its size, its stride in the rank order and the link it uses."""
        g = self.inputs["gpus_per_node"]
        out = {}
        for axis in AXES:
            size, stride = getattr(self.layout, axis), self._stride(axis)
            link = "-" if size == 1 else self._link_kind(size, stride, g)
            out[axis] = {"size": size, "stride": stride, "link": link}
        return out

    @staticmethod
    def _link_kind(size, stride, g):
        if not all(is_number(x) for x in (size, stride, g)):
            low = lambda x: sympy.sympify(x).subs({s: 1 for s in sympy.sympify(x).free_symbols})  # degrees ≥ 1  # noqa: E731
            if is_number(g) and is_number(low(stride)) and low(stride) >= g:
                return "scale-out"
            return "symbolic"
        if size * stride <= g:
            return "scale-up"
        if stride >= g:
            return "scale-out"
        return "two-level"

    @cached_property
    def _microbatches(self):
        """Microbatches per replica per step: global_batch / (dp · microbatch_size)."""
        return self.global_batch / (self.deg.dp * self.microbatch_size)

    @property
    def nodes(self):
        return sympy.ceiling(sympy.sympify(self.deg.gpus) / self.inputs["gpus_per_node"])

    # --- parameters per GPU ---------------------------------------------------------------
    @cached_property
    def _params(self) -> dict:
        """Total (the model's published count), stored (with the MTP modules), routed-expert and per-GPU
        (dense and expert) parameter expressions."""
        lay, m = self.deg, self.model
        total = m.params_formula()
        stored = total + m.mtp_params_formula() if m.mtp_modules else total
        routed = (formula("model.params.routed_experts").bind(m.inputs()) * m.moe_blocks if m.is_moe
                  else Formula("zero", sympy.Integer(0), "parameter", ""))
        dense_local = (stored - routed) / (lay.tp * lay.pp)
        expert_local = routed / (lay.tp * lay.pp * lay.ep)
        return {"total": total, "stored": stored, "routed": routed, "dense_local": dense_local,
                "expert_local": expert_local}

    # --- expressions ----------------------------------------------------------------------
    def expr(self, name: str) -> Formula:
        """Any plan quantity as a Formula in the plan's free inputs (see :meth:`quantities`)."""
        builders = self._builders()
        if name not in builders:
            raise UnknownNameError("plan quantity", name, builders)
        if name not in self._exprs:
            f = builders[name]()
            self._exprs[name] = f.renamed(f"plan.{name}", source=self._provenance())
        return self._exprs[name]

    @cached_property
    def _exprs(self) -> dict:
        return {}

    def sources(self, name: str) -> list[str]:
        """The catalogue formulas (names, sorted) that quantity ``name`` is composed from: for a numeric
        layout those of the branches it takes, for a symbolic one those of every branch it may take."""
        return sorted(self.expr(name).sources)

    def quantities(self) -> list[str]:
        """Names accepted by :meth:`expr`."""
        return list(self._builders())

    def _provenance(self) -> str:
        lay = self.layout
        return (f"analytic Plan: {self.model.name or 'model'} on {self.hardware.key or self.hardware.name}, "
                f"tp={lay.tp} pp={lay.pp} dp={lay.dp} cp={lay.cp} ep={lay.ep} vpp={lay.vpp} zero={lay.zero} "
                f"sp={lay.sequence_parallel}{' async_tp' if lay.async_tp else ''}"
                f"{' zero3_gather=per-tensor' if lay.zero3_gather == 'per-tensor' else ''}"
                f"{f' comm_sms={lay.comm_sms}' if lay.comm_sms else ''} recompute={lay.recompute} "
                f"schedule={lay.schedule}, "
                f"seq_len={self.seq_len} global_batch={self.global_batch} microbatch_size={self.microbatch_size} "
                f"dtype={self.dtype}{'' if self.flash_attention else ' no flash attention'}")

    def _builders(self) -> dict:
        b = {
            "gpus": lambda: Formula("gpus", sympy.sympify(self.deg.gpus), "", ""),
            "nodes": lambda: Formula("nodes", self.nodes, "", ""),
            "microbatches": lambda: Formula("m", self._microbatches, "", ""),
            "tokens_per_step": lambda: Formula("D_B", self.global_batch * self.seq_len * 1, "token", ""),
            "params": lambda: self._params["total"],
            "active_params": lambda: self.model.active_params_formula(),
            "params_per_gpu": lambda: self._params["dense_local"] + self._params["expert_local"],
            "layers_per_stage": lambda: Formula("L/p", self.model.layers / self.deg.pp, "", ""),
            "memory.weights": lambda: self._memory_parts["weights"],
            "memory.gradients": lambda: self._memory_parts["gradients"],
            "memory.optimizer": lambda: self._memory_parts["optimizer"],
            "memory.gathered": lambda: self._memory_parts["gathered"],
            "memory.activations": lambda: self._activations["worst"],
            "memory.activations.first_stage": lambda: self._activations["first"],
            "memory.activations.last_stage": lambda: self._activations["last"],
            "memory.activations.layer": lambda: self._activations["layer"],
            "memory.logits": lambda: self._activations["logits"],
            "memory.total": lambda: self._memory_total(),
            "memory.headroom": lambda: Formula("hbm", self._need("hbm"), "byte", "") - self.expr("memory.total"),
            "flops": lambda: self._flops("6nd"),
            "flops.6nd": lambda: self._flops("6nd"),
            "flops.palm": lambda: self._flops("palm"),
            "flops.megatron": lambda: self._flops("megatron"),
            "flops.hardware": lambda: self._hardware_flops(),
            "bubble": lambda: self._bubble_fraction(),
            "time.compute": lambda: self._time["compute"],
            "time.bubble": lambda: self._time["bubble"],
            "step_time": lambda: self._step_time(),
            "mfu": lambda: self._f("compute.mfu", flops=self.expr("flops"), step_time=self.expr("step_time"),
                                   gpus=self.deg.gpus),
            "steps": lambda: self._f("compute.steps", tokens=self._training_tokens(),
                                     batch_tokens=self.expr("tokens_per_step")),
            "mtbf": lambda: self._f("reliability.mtbf", gpus=self.deg.gpus),
            "checkpoint_time": lambda: self._checkpoint_time(),
            "checkpoint_interval": lambda: self._f("reliability.checkpoint_interval", mtbf=self.expr("mtbf"),
                                                   checkpoint_time=self.expr("checkpoint_time")),
            "goodput": lambda: self._f("reliability.goodput", mtbf=self.expr("mtbf"),
                                       checkpoint_time=self.expr("checkpoint_time")),
            "train_time": lambda: (self.expr("step_time") * self.expr("steps")) / self.expr("goodput"),
            "interruptions": lambda: self.expr("train_time") / self.expr("mtbf"),
        }
        for axis in AXES:
            b[f"communication.{axis}"] = (lambda a=axis: self._comm[a]["bytes"])
            b[f"communication_time.{axis}"] = (lambda a=axis: self._comm[a]["time"])
            b[f"time.{axis}"] = (lambda a=axis: self._time[a])
        return b

    # --- memory -----------------------------------------------------------------------------
    @cached_property
    def _memory_parts(self):
        lay = self.deg
        groups = [(local, size) for local, size, _ in self._replica_groups()]
        copies = formula("pipeline.parameter_copies.dualpipe")
        parts = {}
        for part, sharded_from in (("weights", 3), ("gradients", 2), ("optimizer", 1)):
            total = None
            for local, dp in groups:
                f = formula(f"memory.model_states.{part}").subs(params=local)
                f = cases(part, "byte", (f / dp, lay.zero_at_least(sharded_from)), (f, True))
                total = f if total is None else total + f
            if part in ("weights", "gradients"):  # DualPipe holds the parameters twice
                total = cases(part, "byte", (total * copies, lay.schedule_is("dualpipe")), (total, True))
            parts[part] = total
        # ZeRO-3's unsharded copies: a pipelined step holds its stage's parameters and gradients
        # from the first microbatch to the last backward; without a pipeline, blocks come and go
        stage = self.expr("params_per_gpu")
        one = self._f("memory.zero3_held", params=stage)
        held = cases("held", "byte", (one * copies, lay.schedule_is("dualpipe")), (one, True))
        unit = stage / (sympy.sympify(self.model.blocks) / lay.pp)  # one block's share
        value = {"memory.zero3_held": held, "memory.zero3_gathered": self._f("memory.zero3_gathered", params=unit), None: 0}
        parts["gathered"] = cases("gathered", "byte", *((value[name], cond) for name, cond in lay.gathered_regimes))
        return parts

    def _layer_activation_formula(self, ffn_hidden=None) -> Formula:
        lay, m = self.deg, self.model
        s_local = self.seq_len / lay.cp
        kw = {"seq_len": s_local}
        if ffn_hidden is not None:
            kw["ffn_hidden"] = ffn_hidden
        if m.kv_heads != m.heads and not self.flash_attention:
            raise InputError("flash_attention: the Korthikanti formulas assume multi-head attention; "
                             "use flash_attention=True for GQA models")
        if not self.flash_attention and m.mlp != "gelu":
            raise InputError("flash_attention: the Korthikanti formulas assume a GELU MLP; use flash_attention=True")
        sp = "_sp" if lay.sequence_parallel else ""
        if self.flash_attention:
            return self._f(f"memory.activations.layer_flash_{m.mlp}{sp}", **kw)
        return cases("layer", "byte", (self._f(f"memory.activations.layer_tp{sp}_selective", **kw), lay.recompute_is("selective")),
                      (self._f(f"memory.activations.layer_tp{sp}", **kw), True))

    @cached_property
    def _activations(self) -> dict:
        lay, m = self.deg, self.model
        layer = self._layer_activation_formula()
        if m.is_moe:  # a token's FFN activations across its k routed and shared experts
            moe_ffn = (m.topk + m.shared_experts) * m.expert_ffn_hidden
            moe_layer = self._layer_activation_formula(ffn_hidden=moe_ffn)
            layer = composed("layer", lazy_max(layer.expr, moe_layer.expr), "byte", layer, moe_layer)
        # full recomputation keeps each layer's input and, while recomputing, one layer's activations
        s_kept = self.seq_len / lay.cp / (lay.tp if lay.sequence_parallel else 1)
        kept = cases("kept", "byte", (self._f("memory.activations.layer_full_recompute", seq_len=s_kept), lay.recompute_is("full")),
                      (layer, True))
        working = cases("working", "byte", (layer, lay.recompute_is("full")), (0, True))
        layers_on_stage = sympy.ceiling(sympy.sympify(m.layers) / lay.pp)
        p, mb = lay.pp, self._microbatches
        # microbatches whose activations stage 0 holds, never more than the step has
        def at_most_mb(*parts):  # the product of catalogue counts, never more than the step's microbatches
            return composed("in_flight", lazy_min(sympy.Mul(*(f.expr for f in parts)), mb), "", *parts)

        peak = lambda name: formula(f"pipeline.in_flight.{name}").bind({"pp": p})  # noqa: E731
        factor = formula("memory.activations.first_stage_interleaved_factor").bind({"pp": p, "vpp": lay.vpp})
        in_flight = cases("in_flight", "",
                           (mb, lay.schedule_is("gpipe")),
                           (at_most_mb(peak("1f1b"), factor), lay.schedule_is("interleaved")),
                           (at_most_mb(peak("1f1b")), lay.schedule_is("1f1b", "zb-h1")),
                           (at_most_mb(peak("zb_h2")), lay.schedule_is("zb-h2")),
                           (at_most_mb(peak("dualpipe")), True))
        first = kept * (layers_on_stage * in_flight) + working
        # the last stage also holds the MTP modules: a block and a logits tensor each
        last = kept * (layers_on_stage + m.mtp_modules) + working
        logits = self._f("memory.logits", seq_len=self.seq_len / lay.cp) / lay.tp
        last = last + logits * (1 + m.mtp_modules)
        worst = composed("activations", lazy_max(first.expr, last.expr), "byte", first, last)
        return {"layer": layer, "first": first, "last": last, "logits": logits, "worst": worst}

    def _memory_total(self) -> Formula:
        parts = self._memory_parts
        return parts["weights"] + parts["gradients"] + parts["optimizer"] + parts["gathered"] + self._activations["worst"]

    # --- FLOPs -----------------------------------------------------------------------------
    def _training_tokens(self):
        if self.training_tokens is None:
            raise InputError("training_tokens: give Plan(..., training_tokens='15.6e12 token') for steps and days")
        return self.training_tokens

    def _flops(self, convention: str) -> Formula:
        choice("convention", convention, CONVENTIONS)
        tokens = self.expr("tokens_per_step")
        if convention == "6nd":
            return self._f("compute.training_flops", params=self.model.active_params_formula(), tokens=tokens)
        if convention == "palm":
            per_token = self._f(f"compute.flops_per_token_palm{self.model.attention_suffix}", params=self.model.active_params_formula())
            return per_token * tokens
        return self._f("compute.megatron_flops")

    def _recomputed(self, training: Formula, core_forward: Formula) -> Formula:
        """Training FLOPs plus what recomputation repeats: a whole forward (a third) for full, the
        attention core's forward for selective."""
        lay = self.deg
        return training + cases("recomputed", training.unit, (training / 3, lay.recompute_is("full")),
                                 (core_forward, lay.recompute_is("selective")), (0, True))

    def _attention_core(self) -> Formula:
        """Forward FLOPs of every block's attention core (MTP blocks included) over the step's tokens."""
        return (self._f(f"compute.attention_core_forward_flops_per_token{self.model.attention_suffix}") * self.model.blocks
                * self.expr("tokens_per_step"))

    def _flash_backward(self) -> Formula:
        """What a FlashAttention backward adds by recomputing every block's QKᵀ (zero without it)."""
        if not self.flash_attention:
            return Formula("0", sympy.Integer(0), "FLOP", "")
        return (self._f(f"compute.flash_backward_recompute_flops_per_token{self.model.attention_suffix}")
                * self.model.blocks * self.expr("tokens_per_step"))

    def _hardware_flops(self) -> Formula:
        """PaLM's count over everything a token passes through: the model, and each MTP module's
        projection, block and (shared) output head; FlashAttention's backward recomputation of QKᵀ."""
        m = self.model
        params = m.active_params_formula()
        if m.mtp_modules:
            params = (params + m.mtp_params_formula(active=True)
                      + self._f("model.params.embedding") * m.mtp_modules)
        per_token = self._f(f"compute.flops_per_token_palm{self.model.attention_suffix}", params=params, layers=m.blocks)
        return self._recomputed(per_token * self.expr("tokens_per_step"), self._attention_core()) + self._flash_backward()

    def _bf16_flops(self) -> Formula:
        """The part of the hardware FLOPs that FP8 recipes keep in 16 bits: attention core and logits
        (Transformer Engine; DeepSeek-V3 §3.3.1)."""
        core = self._attention_core()
        logits = (self._f("compute.logits_forward_flops_per_token") * self.expr("tokens_per_step")
                  * (1 + self.model.mtp_modules))
        return self._recomputed((core + logits) * 3, core) + self._flash_backward()

    def model_flops(self, convention: str = "6nd") -> pint.Quantity:
        """Model FLOPs per step (no recomputation) under a convention: ``6nd`` (6·N_active·D),
        ``palm`` (6N + 12LHQT per token), ``megatron`` (Narayanan eq. 3, GPT shape, with recompute)."""
        return self._flops(convention).value()

    def hardware_flops(self) -> pint.Quantity:
        """FLOPs executed per step, recomputation included (PaLM convention for the model part;
        FlashAttention's backward recomputes QKᵀ)."""
        return self.expr("flops.hardware").value()

    # --- communication ---------------------------------------------------------------------
    def _time_input(self, key):
        """An input that only times need (a link's bandwidth, its efficiency, the latency): when
        missing it stands as its symbol, so the bytes still come out, and anything that needs a
        time raises :meth:`_need`'s error through :meth:`_times_need`."""
        if key in self.inputs:
            return self.inputs[key]
        self._missing_for_times[key] = None
        return sym(key)

    def _times_need(self) -> None:
        self._comm  # noqa: B018  (the walk that records what the times lack)
        for key in self._missing_for_times:
            self._need(key)

    def _collective_time(self, kind: str, message: Formula, size, stride) -> Formula:
        """α–β time of one collective of ``kind`` over a group of ``size`` ranks ``stride`` apart in
        the rank order, on the link its placement implies."""
        g = self.inputs["gpus_per_node"]
        eff = self._time_input("link_efficiency")
        alpha = self._time_input("latency")

        def flat(bw_key):
            return formula(f"collectives.{kind}.time").bind(
                {"message": message, "ranks": size, "bandwidth": self._time_input(bw_key) * eff, "latency": alpha})

        def two_level():
            if kind in ("all_to_all", "broadcast"):  # pairwise exchanges cross nodes
                return flat("scale_out_bandwidth")
            per_node = g / stride
            name = "hierarchical_all_reduce" if kind == "all_reduce" else f"ring_across_nodes_{kind}"
            return formula(f"collectives.{name}.time").bind(
                {"message": message, "gpus_per_node": per_node, "nodes": size / per_node, "latency": alpha,
                 "scale_up_bandwidth": self._time_input("scale_up_bandwidth") * eff,
                 "scale_out_bandwidth": self._time_input("scale_out_bandwidth") * eff})

        kind_of_link = self._link_kind(size, stride, g)
        if kind_of_link == "scale-up":
            return flat("scale_up_bandwidth")
        if kind_of_link == "scale-out":
            return flat("scale_out_bandwidth")
        if kind_of_link == "two-level":
            return two_level()
        return cases("t", "s", (flat("scale_up_bandwidth"), sympy.Le(size * stride, g)),
                      (flat("scale_out_bandwidth"), sympy.Ge(stride, g)), (two_level(), True))

    def _gemm_input_bytes(self, default):
        """Bytes per element of an activation sent to the GEMM that consumes it: FP8 training casts
        before communicating (torchtitan docs/float8.md: float8 all-gather for TP by default;
        Transformer Engine likewise; DeepSeek-V3 §3.3: FP8 dispatch), otherwise ``default``."""
        return Q_(1, "byte") if self.dtype == "fp8" else default

    @cached_property
    def _comm(self) -> dict:
        lay, m = self.deg, self.model
        mb = self._microbatches
        s_local = self.seq_len / lay.cp
        layers_local = sympy.sympify(m.blocks) / lay.pp
        zero_b = Formula("0", sympy.Integer(0), "byte", "")
        zero_t = Formula("0", sympy.Integer(0), "s", "")
        out = {a: {"bytes": zero_b, "time": zero_t} for a in AXES}

        def add(axis, kind, message, calls, size=None, stride=None, into=None):
            """``calls`` collectives of ``kind`` on ``message`` over an axis's group (or ``size`` ranks
            ``stride`` apart), added to the axis's bytes and time (or to ``into``)."""
            size = getattr(lay, axis) if size is None else size
            stride = self._stride(axis) if stride is None else stride
            target = out[axis] if into is None else into
            sent = formula(f"collectives.{kind}.bytes_sent").bind({"message": message, "ranks": size})
            target["bytes"] = target["bytes"] + sent * calls
            target["time"] = target["time"] + self._collective_time(kind, message, size, stride) * calls

        # TP: 4 activation all-reduces per layer per microbatch (+2 with full recompute);
        # with sequence parallelism each is a reduce-scatter + all-gather of the same size
        if lay.tp != 1:
            per_layer = formula("parallelism.tp.allreduces_per_layer") + cases(
                "recomputed", "", (formula("parallelism.tp.allreduces_recomputed_per_layer"), lay.recompute_is("full")),
                (0, True))
            msg = self._f("parallelism.tp.allreduce_bytes", seq_len=s_local)
            calls = per_layer * layers_local * mb
            if lay.sequence_parallel:
                # the all-gathers carry the GEMMs' inputs (cast to FP8 in FP8 training); the
                # reduce-scatters sum partial outputs in 16 bits
                gathered = self._f("parallelism.tp.allreduce_bytes", seq_len=s_local,
                                   element_bytes=self._gemm_input_bytes(self.inputs["element_bytes"]))
                add("tp", "reduce_scatter", msg, calls)
                add("tp", "all_gather", gathered, calls)
            else:
                add("tp", "all_reduce", msg, calls)
        # PP: per microbatch, each of the p·v − 1 chunk boundaries carries one activation forward and
        # one gradient backward, split over the TP ranks (scatter/gather, Narayanan et al. §4.1);
        # per GPU that is 2(pv − 1)/p transfers, each a two-rank broadcast
        if lay.pp != 1:
            msg = self._f("parallelism.pp.p2p_bytes", seq_len=s_local) / lay.tp
            calls = self._f("parallelism.pp.transfers_per_gpu", microbatches=mb)
            out["pp"]["bytes"] = msg * calls
            one = self._collective_time("broadcast", msg, 2, self._stride("pp"))
            out["pp"]["time"] = one * calls
        # DP: gradients reduced once per step, one bucket per layer; ZeRO ≥ 1 as reduce-scatter +
        # all-gather of parameters. Without a pipeline, sharded gradients are reduce-scattered after
        # every microbatch's backward (a rank keeps only its partition: DeepSpeed issue #2252), and
        # ZeRO-3 also gathers the parameters twice per microbatch (forward and backward): 3Ψ each
        # (ZeRO §7). Under a pipeline schedule ZeRO-3 gathers its stage once and holds it
        # (memory.zero3_held), and ZeRO-2 is counted as the ZeRO paper does: 2Ψ per step.
        # Over the replica groups: dp·cp ranks for dense parameters, dp·cp/ep for experts.
        # Buckets of one layer each; per-tensor ZeRO-3 gathers each parameter tensor on its own,
        # blocking, and again in a recomputed forward (ZERO3_GATHERS): that part of the time is kept
        # apart, as out["dp"]["blocking"]
        buckets = layers_local
        routed = sympy.sympify(m.routed_expert_tensors)
        tensors = ((m.block_tensors - routed) / lay.pp, routed / (lay.pp * lay.ep))
        out["dp"]["blocking"] = zero_t
        for (local, size, stride), local_tensors in zip(self._replica_groups(), tensors, strict=True):
            if size == 1 or local.expr == 0:  # no replicas, or no experts to reduce (dense models)
                continue
            grad = self._f("parallelism.dp.gradient_bytes", params=local)
            c = {kind: {"bytes": zero_b, "time": zero_t} for kind in ("all_reduce", "reduce_scatter", "all_gather")}
            for kind in c:
                add("dp", kind, grad / buckets, buckets, size=size, stride=stride, into=c[kind])
            ar, rs, ag = (c[kind] for kind in c)
            ag3, gathers = ag, lay.zero3_gathers_per_microbatch  # ZeRO-3's parameter gathers, and how many
            if lay.per_tensor_gathers:
                ag3 = {"bytes": zero_b, "time": zero_t}
                add("dp", "all_gather", grad / local_tensors, local_tensors, size=size, stride=stride, into=ag3)
            stage3 = lay.zero_at_least(3)
            for k, unit in (("bytes", "byte"), ("time", "s")):
                held = cases(k, unit, (ag3[k], stage3), (ag[k], True))  # under a pipeline, as lay.dp_regimes
                values = ((rs[k] + ag3[k] * gathers) * mb, rs[k] * mb + ag[k], rs[k] + held, ar[k])
                out["dp"][k] = out["dp"][k] + cases(k, unit, *zip(values, (c for _, c in lay.dp_regimes), strict=True))
            if lay.per_tensor_gathers:
                values = (ag3["time"] * gathers * mb, 0, cases("t", "s", (ag3["time"], stage3), (0, True)), 0)
                out["dp"]["blocking"] = out["dp"]["blocking"] + cases(
                    "blocking", "s", *zip(values, (c for _, c in lay.dp_regimes), strict=True))
        # CP: all-gather K and V forward (again in the recomputed forward of full recomputation),
        # reduce-scatter their gradients backward (Llama 3 §3.3.2)
        if lay.cp != 1:
            kv = self._f("parallelism.cp.kv_bytes") / (lay.tp if m.kv_heads != 1 else 1)
            calls = layers_local * mb
            add("cp", "all_gather", kv, calls * (1 + sympy.Piecewise((1, lay.recompute_is("full")), (0, True))))
            add("cp", "reduce_scatter", kv, calls)
        # EP: dispatch and combine forward, and again backward, per MoE layer per microbatch;
        # dispatch in the compute dtype (FP8 for FP8 training), combine in 16 bits
        if m.is_moe and lay.ep != 1:
            tokens = Formula("tokens", s_local * self.microbatch_size / (lay.tp if lay.sequence_parallel else 1), "token", "")
            dispatch_e = self._gemm_input_bytes(Q_(2, "byte"))
            disp = self._f("parallelism.ep.dispatch_bytes", tokens=tokens, element_bytes=dispatch_e)
            comb = self._f("parallelism.ep.dispatch_bytes", tokens=tokens)
            calls = 2 * sympy.sympify(m.moe_blocks) / lay.pp * mb
            plain = {"bytes": zero_b, "time": zero_t}
            for msg in (disp, comb):
                add("ep", "all_to_all", msg, calls, into=plain)
            g = self.inputs["gpus_per_node"]
            link = self._link_kind(lay.ep, self._stride("ep"), g)
            if not m.nodes_per_token or link in ("scale-up", "-"):
                out["ep"] = plain
            else:
                # node-limited routing: one copy per destination node crosses the scale-out link,
                # NVLink forwards it to the experts inside the node (DeepSeek-V3 §3.2.2)
                nodes = lazy_min(lay.ep, lay.ep * self._stride("ep") / g)
                reach = lazy_min(m.nodes_per_token, nodes)
                limited = {"bytes": zero_b, "time": zero_t}
                for e_bytes in (dispatch_e, Q_(2, "byte")):
                    msg = self._f("parallelism.ep.node_limited_dispatch_bytes", tokens=tokens, nodes_per_token=reach,
                                  element_bytes=e_bytes)
                    add("ep", "all_to_all", msg, calls, size=nodes, stride=g, into=limited)
                if link == "symbolic":  # decided per layout: inside a node, or node-limited across nodes
                    inside = sympy.Le(lay.ep * self._stride("ep"), g)
                    out["ep"] = {k: cases(k, plain[k].unit, (plain[k], inside), (limited[k], True))
                                 for k in ("bytes", "time")}
                else:
                    out["ep"] = limited
        return out

    def communication(self) -> dict:
        """Bytes sent per step per GPU, by axis (tp, pp, dp, cp, ep)."""
        return {a: self.expr(f"communication.{a}").value() for a in AXES}

    def communication_time(self) -> dict:
        """Seconds per step per GPU spent in each axis's collectives (before overlap)."""
        self._times_need()
        return {a: self.expr(f"communication_time.{a}").value() for a in AXES}

    # --- time --------------------------------------------------------------------------------
    def _bubble_fraction(self) -> Formula:
        t = self._time
        return t["bubble"] / t["compute"]

    @cached_property
    def _time(self) -> dict:
        lay = self.deg
        eta = self._need("matmul_efficiency")
        share = None
        if lay.comm_sms != 0:  # SMs reserved for communication kernels do no compute
            self._need("sms")
            share = self._f("compute.sm_share")
            eta = eta * share.expr
        peak = composed("F", self.inputs["peak_flops"] * eta, "FLOP/s", share)
        compute = self.expr("flops.hardware") / self.deg.gpus / peak
        if self.dtype == "fp8":  # matmuls of the linear layers in FP8, the rest at the 16-bit peak
            bf16 = self._bf16_flops() / self.deg.gpus
            peak16 = composed("F16", magnitude("peak_flops", self.hardware.peak_flops("bf16")) * eta, "FLOP/s", share)
            compute = compute - bf16 / peak + bf16 / peak16
        mb = self._microbatches
        chunk = compute / (mb * lay.vpp)  # one microbatch through one model chunk
        third = chunk / 3  # forward 2 FLOPs/param, input-gradient 2, weight-gradient 2
        times = {"t_f": third, "t_b": third, "t_w": third, "t_fb": third * 3}
        values = {"pp": lay.pp, "vpp": lay.vpp, "microbatches": mb, **times}
        by_formula = {}  # catalogue bubble formula → the schedules it describes
        for schedule, name in BUBBLE_FORMULAS.items():
            by_formula.setdefault(name, []).append(schedule)
        pieces = [(formula(f"pipeline.bubble_time.{name}").bind(values), lay.schedule_is(*schedules))
                  for name, schedules in by_formula.items()]
        bubble = at_least_critical_path(cases("bubble", "s", *pieces[:-1], (pieces[-1][0], True)), values)
        comm = self._comm
        self._times_need()
        phi = self._need("overlap")
        # TP collectives sit between the GEMMs that produce and consume them: exposed, unless async TP
        # splits the GEMMs to overlap them like the other axes' traffic. CP all-gathers K and V before
        # the attention that needs them: exposed in the critical path (Llama 3 §3.3.2)
        out = {"compute": compute, "bubble": bubble,
               "tp": comm["tp"]["time"] * (1 - phi) if lay.async_tp else comm["tp"]["time"],
               "cp": comm["cp"]["time"], "pp": comm["pp"]["time"] * (1 - phi)}
        # DP hides behind compute: ZeRO-2/3 without a pipeline reduce (and ZeRO-3 gathers) around every
        # block of every microbatch, so through the whole step; otherwise the gradient reduction hides
        # behind the last microbatch (on every chunk of this stage) and the parameter all-gather behind
        # the next step's first one
        # (per-tensor ZeRO-3 gathers block: exposed in full)
        per_microbatch = lay.dp_regimes[1][1]  # ZeRO ≥ 2 without a pipeline
        window = cases("window", "s", (compute, per_microbatch), (chunk * lay.vpp, True)) * phi
        blocking = comm["dp"]["blocking"]
        out["dp"] = composed("dp", lazy_max(0, (comm["dp"]["time"] - blocking).expr - window.expr) + blocking.expr, "s",
                             comm["dp"]["time"], blocking, window)
        # DualPipe overlaps all-to-all with the paired chunk's compute
        hidden_behind_pair = composed("ep", lazy_max(0, comm["ep"]["time"].expr - compute.expr), "s", comm["ep"]["time"], compute)
        out["ep"] = cases("ep", "s", (hidden_behind_pair, lay.schedule_is("dualpipe")),
                           (comm["ep"]["time"] * (1 - phi), True))
        return out

    def _step_time(self) -> Formula:
        t = self._time
        total = t["compute"]
        for k in ("bubble", "tp", "cp", "pp", "dp", "ep"):
            total = total + t[k]
        return total

    def step_time(self, mfu=None) -> pint.Quantity:
        """Seconds per step. With ``mfu``: model FLOPs (6ND) / (GPUs · peak · mfu). Without: the
        predictive model (compute at the calibrated matmul efficiency + bubble + exposed
        communication; see :meth:`time_breakdown`)."""
        if mfu is not None:
            eta = fraction("mfu", mfu)
            f = self._f("compute.train_time", flops=self.expr("flops"), gpus=self.deg.gpus, mfu=eta)
            return f.value()
        return self.expr("step_time").value()

    def time_breakdown(self) -> dict:
        """compute, bubble and exposed communication by axis; the values sum to step_time()."""
        return {k: self.expr(f"time.{k}").value() for k in ("compute", "bubble", "tp", "cp", "pp", "dp", "ep")}

    def mfu(self, step_time=None) -> float:
        """Model FLOPs utilisation (6ND convention) at ``step_time`` (default: the predicted one)."""
        if step_time is None:
            return float(self.expr("mfu").value().to("").magnitude)
        f = self._f("compute.mfu", flops=self.expr("flops"), gpus=self.deg.gpus, step_time=step_time)
        return float(f.value().to("").magnitude)

    # --- memory accessor ---------------------------------------------------------------------
    def memory(self) -> Memory:
        """Per-GPU memory on the worst pipeline stage; parts sum to the total."""
        return Memory(weights=self.expr("memory.weights").value(), gradients=self.expr("memory.gradients").value(),
                      optimizer=self.expr("memory.optimizer").value(), gathered=self.expr("memory.gathered").value(),
                      activations=self.expr("memory.activations").value(),
                      total=self.expr("memory.total").value(), hbm=Q_(to_float(self._need("hbm")), "byte"),
                      logits=self.expr("memory.logits").value())

    # --- failures ------------------------------------------------------------------------------
    def _checkpoint_time(self) -> Formula:
        if "checkpoint_time" in self.inputs:
            return Formula("delta", self.inputs["checkpoint_time"], "s", "")
        # one copy of the model states written at the storage bandwidth of Llama 3's cluster
        from ..presets import llama3_storage_bandwidth
        states = self._f("memory.model_states.zero0", params=self._params["stored"])
        return states / Formula("B", magnitude("bandwidth", llama3_storage_bandwidth()), "byte/s", "")

    # --- symbolic helpers ----------------------------------------------------------------------
    def _value(self, f: Formula, integer=False):
        if f.expr.free_symbols:
            raise FreeSymbolError(f"{f.name}: free symbols remain ({', '.join(f.symbols)}); use plan.expr()")
        v = f.expr
        if integer and v.is_integer:
            return int(v)
        return to_float(v, f.name)

    def smallest(self, keyword: str, limit: int = 1 << 20) -> int:
        """Smallest integer value of the free input ``keyword`` for which the plan fits in HBM."""
        return smallest_fitting(self, keyword, limit=limit)

    def best(self, keyword: str, limit: int = 1 << 16) -> int:
        """The integer value of the free input ``keyword`` that minimises the predicted step time."""
        return minimise_step_time(self, keyword, limit=limit)["best"]

    def subs(self, **values) -> "Plan":
        """A new plan with free inputs of the layout or model given values."""
        lay = {k: v for k, v in values.items() if k in ("tp", "pp", "dp", "cp", "ep", "vpp")}
        mod = {k: v for k, v in values.items() if k in {f.name for f in fields(Model)}}
        rest = set(values) - set(lay) - set(mod)
        if rest:
            raise UnknownNameError("plan input", sorted(rest)[0], list(lay) + list(mod))
        return self.replace(model=self.model.replace(**mod) if mod else None, layout=self.layout.replace(**lay))

    def replace(self, *, model: Model | None = None, layout: Layout | None = None, **changes) -> "Plan":
        """A new plan with the model, layout or any keyword argument of Plan changed."""
        args = dict(seq_len=self.seq_len, global_batch=self.global_batch, microbatch_size=self.microbatch_size,
                    dtype=self.dtype, flash_attention=self.flash_attention, training_tokens=self.training_tokens,
                    allow_cross_node_tp=self.allow_cross_node_tp, **self.overrides)
        if "batch_tokens" in changes:
            args.pop("global_batch")
        args.update(changes)
        return Plan(model or self.model, self.hardware, layout or self.layout, **args)

    def __repr__(self) -> str:
        return f"Plan({self._provenance()})"
