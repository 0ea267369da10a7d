"""Stage 1 of a plan: its arguments read and checked once, and every input as an exact number or a
symbol (the model's architecture, the layout's degrees, the batch, the hardware's numbers, the
calibrated constants, the failure statistics), with each override in its symbol's unit and domain.

A numeric plan's inputs are read without sympy (:attr:`Inputs.given`: ints and Fractions); their
sympy forms (:attr:`Inputs.values`, :attr:`Inputs.deg`) are made when an expression is built."""

from __future__ import annotations

import warnings
from functools import cached_property
from typing import TYPE_CHECKING

from ..core.algebra import Gt, Le, Min, Piecewise
from ..core.choices import (
    GRAD_DTYPES,
    MOMENT_DTYPES,
    OPTIMIZERS,
    ROUTINGS,
    SP_SAVED_INPUTS,
    default_stack,
)
from ..core.errors import InputError, PresetError, ReinterpretedWarning, UnitError, UnknownNameError
from ..core.symbols import canonical, sym
from ..core.terms import Term, input_, ratio
from ..core.units import Quantity
from ..core.values import batch_tokens as read_batch_tokens
from ..core.values import choice, count, exact, exact_number, flag, is_number, is_sympy
from ..presets import as_hardware, as_model, outside_floor, precision, stacks
from ..presets import stack as read_stack
from ..presets.hardware import Hardware, check_domain, check_full_mesh
from ..presets.model import Model
from .arguments import ARGUMENTS, CALIBRATED, OVERRIDES, read
from .layout import (
    Layout,
    check_layout,
    check_offload,
    dispatcher_of,
    ep_overlap_refusal,
    fp8_recipe_of,
    optimizer_refusal,
    selective_refusal,
    stack_refusal,
    training_dtype,
)

if TYPE_CHECKING:
    from ..core.formula import Formula
    from .degrees import Degrees

#: (hardware identity, dtype, stack, flash, overrides) → (hardware, inputs, notes, calibration
#: error)
_SHARED: dict = {}


class Inputs:
    """A plan's arguments, checked, and its inputs (:attr:`values`) for binding catalogue
    formulas."""

    def __init__(
        self,
        model: Model,
        hardware: Hardware,
        layout: Layout | None,
        *,
        seq_len,
        global_batch,
        microbatch_size,
        dtype: str,
        batch_tokens,
        flash_attention,
        training_tokens,
        allow_cross_node_tp: bool,
        grad_dtype: str,
        moment_dtype: str | None,
        stack: str,
        profile,
        optimizer: str,
        fp8_recipe: str | None,
        dispatcher: str | None,
        bf16_layers,
        expert_capacity,
        pad_to_capacity: bool,
        **overrides,
    ):  # Plan's arguments, its defaults applied
        model, hardware = as_model(model), as_hardware(hardware)
        layout = Layout() if layout is None else layout
        if not isinstance(layout, Layout):
            raise InputError(f"layout: expected an analytic Layout, got {type(layout).__name__}")
        unknown = [k for k in overrides if k not in OVERRIDES]
        if unknown:
            raise UnknownNameError("Plan argument", unknown[0], list(OVERRIDES) + list(ARGUMENTS))
        self.model, self.hardware, self.layout = model, hardware, layout
        self.dtype = training_dtype(dtype, hardware)
        self._read_stack(stack, flash_attention)
        self.fp8_recipe = fp8_recipe_of(self.stack, self.stack_properties, self.dtype, fp8_recipe)
        self.dispatcher = dispatcher_of(self.stack, self.stack_properties, model, dispatcher)
        if layout.ep_overlap:
            refusal = ep_overlap_refusal(self.stack, self.stack_properties, self.dispatcher)
            if refusal:
                raise InputError(refusal)
        self.recipe = precision(self.dtype, self.fp8_recipe)  # None for a 16-bit dtype
        self.low_precision = self.recipe is not None
        if layout.quantized_params:
            self._check_quantized_params()
        self._read_bf16_layers(bf16_layers)
        self._check_delayed_scaling()
        self._read_capacity(expert_capacity, pad_to_capacity)
        if self.low_precision and self.compiled_blocks and "cast_compiled" in self.recipe:
            self.recipe = {**self.recipe, "cast": self.recipe["cast_compiled"]}
        if profile is not None:  # measured constants; explicit keywords win
            from ..presets.profile import read_profile

            overrides = {**read_profile(profile, hardware.key), **overrides}
        self._read_dtypes(grad_dtype, moment_dtype)
        self._read_optimizer(optimizer)
        self._read_batch(seq_len, microbatch_size, global_batch, batch_tokens)
        self.training_tokens = None if training_tokens is None else read("tokens", training_tokens)
        overrides = self._named_imbalance(overrides)
        # each in its symbol's unit and domain
        self.overrides = {k: read(k, v) for k, v in overrides.items()}
        self._check_imbalance()
        self.allow_cross_node_tp = flag("allow_cross_node_tp", allow_cross_node_tp)
        self._read_domain()
        check_layout(
            model,
            layout,
            seq_len=self.seq_len,
            global_batch=self.global_batch,
            microbatch_size=self.microbatch_size,
            allow_cross_node_tp=self.allow_cross_node_tp,
            scale_up_domain=self.scale_up_domain,
            sms=self.overrides.get("sms", hardware.sms),
            hardware=hardware.key or hardware.name,
        )
        # inputs only times need, found missing by the communication stage
        self.missing_for_times: dict = {}
        self._calibration_error = None

    def _read_stack(self, stack, flash_attention) -> None:
        """The stack (the platform's by default) and what it runs, checked against the model and the
        layout."""
        model, hardware, layout = self.model, self.hardware, self.layout
        self.stack = (
            default_stack(hardware.platform) if stack is None else choice("stack", stack, stacks())
        )
        # presets/stacks.toml, sources checked
        self.stack_properties = props = read_stack(self.stack)
        refusal = stack_refusal(
            self.stack, props, dtype=self.dtype, schedule=layout.schedule, cp=layout.cp,
            pp=layout.pp, zero=layout.zero, vpp=layout.vpp, layers=model.layers,
            uneven=layout.uneven, hardware=hardware,
        )
        if refusal:
            raise InputError(refusal)
        kernels = props["attention"]
        if flash_attention is None:
            flash_attention = bool(kernels)
        self.flash_attention = flag("flash_attention", flash_attention)
        if self.flash_attention and not kernels:
            raise InputError(
                f"flash_attention: stack {self.stack} has no fused attention kernel; pass "
                "flash_attention=False, or a stack that has one"
            )
        self.attention_kernels = tuple(kernels)
        #: what recompute="selective" recomputes: "attention", "op" or None (not modelled); compiled
        #: blocks keep less
        self.selective, self.compiled_blocks = props.get("selective"), props.get(
            "compiled_blocks", False
        )
        #: the dtype the stack's FSDP reduces and accumulates unsharded gradients in (None: the
        #: parameters')
        self.fsdp_reduce_dtype = props.get("fsdp_reduce_dtype")
        #: how the stack's Adam updates (choices.OPTIMIZER_KERNELS; None: fused, temporaries not
        #: modelled), and weight decay
        self.optimizer_kernel, self.weight_decay = props.get("optimizer_kernel"), props.get(
            "weight_decay", False
        )
        #: whose ZeRO optimizer the stack runs where it allocates beyond the model states
        #: (choices.ZERO_OPTIMIZERS; None: one that allocates nothing more)
        self.zero_optimizer = props.get("zero_optimizer")
        # choices.FP8_WEIGHT_CACHES; None: cast at each use
        self.fp8_weight_cache = props.get("fp8_weight_cache")
        #: whose rules decide what the stack's linears save quantized under a low-precision
        #: recipe (choices.QUANTIZED_SAVED_INPUTS); None: their 16-bit inputs
        self.quantized_saved_inputs = props.get("quantized_saved_inputs")
        # choices.CP_ATTENTIONS; None: its buffers not counted
        self.cp_attention = props.get("cp_attention")
        #: what a sequence-parallel matmul saves of its input: "split" (Megatron's shard) or
        #: "gathered" (DTensor TP's)
        self.sp_saved_inputs = props.get("sp_saved_inputs", SP_SAVED_INPUTS[0])
        # sequence-dim collectives copy their whole tensor
        self.sp_relayout = props.get("sp_relayout", False)
        #: a QK-norm model's queries and keys all-gathered over TP after their norms (TorchTitan's
        #: Qwen3 plan, 2025)
        self.qk_gathered = props.get("qk_norm_gathered", False) and model.qk_norm
        #: what the stack's layer saves beyond the fused count (choices.SAVED_EXTRAS,
        #: memory.activations.legacy.*)
        self.saved_extra = tuple(props.get("saved_extra", ()))
        self._check_stack_runs()

    def _check_delayed_scaling(self) -> None:
        """What Megatron-Core refuses with FP8's delayed scaling (megatron/core/transformer/
        transformer_config.py): the layernorm and moe_act recompute modules, whose consumers must
        save their original inputs (Transformer Engine refuses save_original_input with delayed
        scaling's Float8Quantizer), and layers kept in BF16 at the ends."""
        if self.quantized_saved_inputs != "megatron-core" or self.fp8_recipe != "delayed":
            return
        modules = [m for m in self.layout.recompute_modules if m in ("layernorm", "moe_act")]
        if modules:
            raise InputError(
                f"recompute_modules: Megatron-Core refuses {' and '.join(modules)} recomputation"
                " under FP8's delayed scaling; take fp8_recipe='tensorwise' or 'blockwise'"
            )
        if any(self.bf16_layers):
            raise InputError(
                "bf16_layers: Megatron-Core refuses layers in BF16 under FP8's delayed scaling;"
                " take fp8_recipe='tensorwise' or 'blockwise'"
            )

    def _check_stack_runs(self) -> None:
        """What the layout asks of the stack (saved tensors, selective recomputation and its
        modules, FP8 activations, optimizer offload), refused where the stack does not run it as
        modelled."""
        model, layout, props = self.model, self.layout, self.stack_properties
        if self.saved_extra and not (
            self.flash_attention and model.attention != "mla" and not model.is_moe
        ):
            raise InputError(
                f"stack: {self.stack}'s saved tensors are modelled for dense layers with a fused "
                "attention kernel"
            )
        refusal = selective_refusal(self.stack, self.selective, model, self.flash_attention)
        if layout.recompute == "selective" and refusal:
            raise InputError(refusal)
        modules = layout.recompute_modules
        if modules and (self.selective != "attention" or not self.flash_attention):
            raise InputError(
                "recompute_modules: Megatron-Core's recompute modules are modelled with a fused"
                " attention kernel on a stack whose selective recomputation is by module, not"
                f" {self.stack}'s"
            )
        if layout.fp8_activations and not (
            self.dtype == "fp8"
            and self.flash_attention
            and model.mlp_formulas == "swiglu"
            and self.selective != "op"
        ):
            raise InputError(
                "fp8_activations: caching activations in FP8 is modelled for FP8 training"
                " (dtype='fp8') of SwiGLU models with a fused attention kernel, on a stack that"
                " recomputes by module"
            )
        if layout.offload_optimizer:  # the stack's kind of offload: choices.OPTIMIZER_OFFLOADS
            check_offload(self.stack, props.get("optimizer_offload"), layout)
        for name, needs, what in (
            ("mla_up_proj", model.attention == "mla", "multi-head latent attention"),
            ("mlp", model.dense_blocks != 0, "dense MLP layers"),
            ("moe_act", model.is_moe, "MoE layers"),
        ):
            if name in modules and not needs:
                raise InputError(
                    f"recompute_modules: {name!r} recomputes a part of {what}, which"
                    f" {model.name or 'the model'} does not have"
                )

    def _check_quantized_params(self) -> None:
        """Quantized primary weights, refused where they are not run as modelled: with a recipe
        whose parameter all-gather is known (presets/precisions.toml param_gather_bytes), on a stack
        that keeps Transformer Engine's quantized weights, at a ZeRO stage of the distributed
        optimizer (:func:`~.layout.quantized_zero_refusal`) and without optimizer offload
        (yanring/Megatron-MoE-ModelZoo sbatch_benchmarking.sh: "Optimizer CPU offload does not
        support fp8 param gather")."""
        from .layout import quantized_zero_refusal

        need = None
        if not (self.low_precision and "param_gather_bytes" in self.recipe):
            need = "a low-precision dtype (fp8, mxfp8 or nvfp4)"
        elif self.fp8_weight_cache != "transformer-engine":
            need = f"a Transformer Engine stack, not {self.stack}"
        elif self.layout.offload_optimizer:
            need = "the optimizer on the device (no offload_optimizer)"
        if need is not None:
            raise InputError(
                f"quantized_params: Megatron-Core's quantized primary weights need {need}"
            )
        refusal = quantized_zero_refusal(self.layout.zero)
        if refusal:
            raise InputError(refusal)

    def _read_bf16_layers(self, given) -> None:
        """The first and last layers a low-precision plan keeps in BF16 (Megatron-LM's
        --first-last-layers-bf16 with --num-layers-at-start-in-bf16 and
        --num-layers-at-end-in-bf16), and ``kept_16`` their share of the layers."""
        self.bf16_layers, self.kept_16 = (0, 0), 0
        if given is None:
            return
        if not isinstance(given, (tuple, list)) or len(given) != 2:
            raise InputError(
                "bf16_layers: expected (first, last), the layers kept in BF16 at each end, got"
                f" {given!r:.80}"
            )
        first, last = (
            count(k, v, minimum=0, allow_symbol=False)
            for k, v in zip(("bf16_layers", "bf16_layers"), given)
        )
        if (first or last) and not self.low_precision:
            raise InputError(
                f"bf16_layers: the layers a low-precision recipe keeps in BF16; dtype {self.dtype}"
                " has none"
            )
        if is_number(self.model.layers) and first + last > self.model.layers:
            raise InputError(f"bf16_layers: {first} + {last} exceed the {self.model.layers} layers")
        self.bf16_layers, self.kept_16 = (first, last), ratio(first + last, self.model.layers)

    def _read_capacity(self, given, pad=True) -> None:
        """An MoE plan's expert capacity: None (dropless), or c ≥ 1 times each expert's balanced
        share (Megatron-Core's --moe-expert-capacity-factor), its input padded to it (``pad``:
        --moe-pad-expert-input-to-capacity) or the tokens beyond it dropped. ``routed_topk``: the
        copies of a token the routed experts' GEMMs, permutations, all-to-all and saved tensors
        carry, k·c padded, else k (a node-limited or DeepEP dispatch sends a token once a node,
        unpadded)."""
        self.expert_capacity, self.routed_topk, self.pad_to_capacity = None, self.model.topk, pad
        if not isinstance(pad, bool):
            raise InputError(f"pad_to_capacity: expected True or False, got {pad!r:.80}")
        if given is None:
            if not pad:
                raise InputError(
                    "pad_to_capacity: drops the tokens beyond an expert_capacity; "
                    "none is given (dropless routing has no capacity to pad to)"
                )
            return
        if not self.model.is_moe:
            raise InputError(
                "expert_capacity: bounds an MoE model's experts; "
                f"{self.model.name or 'the model'} is dense"
            )
        if (
            isinstance(given, (bool, str))
            or not is_number(given)
            or not given >= 1
            or given == float("inf")
        ):
            raise InputError(
                "expert_capacity: expected a number ≥ 1 (each expert's tokens, at "
                f"most it times its balanced share), got {given!r:.80}"
            )
        self.expert_capacity = given
        self.routed_topk = self.model.topk * exact_number(given) if pad else self.model.topk

    def _named_imbalance(self, overrides: dict) -> dict:
        """``overrides`` with a routing imbalance given by name (choices.ROUTINGS) as its number."""
        given = overrides.get("routing_imbalance")
        if not isinstance(given, str):
            return overrides
        if given not in ROUTINGS:
            try:
                read("routing_imbalance", given)
            except (InputError, UnitError):
                names = " or ".join(map(repr, ROUTINGS))
                raise InputError(
                    f"routing_imbalance: expected {names} or a number ≥ 1, got {given!r:.80}"
                ) from None
            return overrides
        if given == "balanced":
            return {**overrides, "routing_imbalance": 1}
        from ..presets import dropless_imbalance

        fitted = dropless_imbalance()
        entry = fitted.get(self.model.name)
        if entry is None:
            known = ", ".join(f"{k} {v['imbalance']:.2f}" for k, v in fitted.items()) or "none"
            raise InputError(
                "routing_imbalance: 'dropless' is fitted by model, on published runs "
                f"of its own (presets/calibration.toml [routing]: {known}); for "
                f"{self.model.name or 'this model'} give a number ≥ 1"
            )
        value = entry["imbalance"]
        spread = (
            f" ± {entry['stderr']:.3f} ({entry['low']:.2f} to {entry['high']:.2f} over its "
            f"{entry['pairs']} pairs)"
            if "stderr" in entry
            else " (one pair)"
        )
        self._note(
            f"routing_imbalance: dropless, {value:.3f}{spread}; presets/calibration.toml [routing]"
        )
        return {**overrides, "routing_imbalance": value}

    def _check_imbalance(self) -> None:
        """``routing_imbalance`` only where an MoE model's tokens are routed without a capacity."""
        if "routing_imbalance" not in self.overrides:
            return
        if not self.model.is_moe:
            name = self.model.name or "the model"
            raise InputError(
                "routing_imbalance: the busiest expert-parallel rank's share of an "
                f"MoE model's routed tokens; {name} is dense"
            )
        if self.expert_capacity is not None and self.pad_to_capacity:
            raise InputError(
                "routing_imbalance: experts padded to a capacity take its rows "
                "however the tokens are routed (expert_capacity="
                f"{self.expert_capacity}); give one of the two, or "
                "pad_to_capacity=False"
            )

    @property
    def imbalance(self):
        """The routing's imbalance where the experts are spread over expert-parallel ranks; 1 where
        every rank holds every expert (ep = 1: each takes its tokens' copies, however routed)."""
        from ..core.algebra import Eq
        from ..core.composition import cases

        rho = self.values["routing_imbalance"]
        return cases("imbalance", "", (1, Eq(self.deg.ep, 1)), (rho, True)).term

    @property
    def busiest_share(self):
        """The busiest expert-parallel rank's routed tokens over its balanced share: the
        :attr:`imbalance`, at most the capacity where the tokens beyond it are dropped (its experts
        evenly loaded)."""
        if self.expert_capacity is None or self.pad_to_capacity:
            return self.imbalance
        from ..core.algebra import Min

        return Min(self.imbalance, exact_number(self.expert_capacity))

    @property
    def busiest_topk(self):
        """The copies of a token the busiest expert-parallel rank's experts take, in its GEMMs,
        permutations and saved tensors: ``routed_topk`` times its :attr:`busiest_share`."""
        return self.routed_topk * self.busiest_share

    def _read_optimizer(self, optimizer) -> None:
        """Adam, or Muon where the stack runs it: with its layer-wise distributed optimizer
        (ZeRO-1), on the device."""
        self.optimizer = choice("optimizer", optimizer, OPTIMIZERS)
        refusal = optimizer_refusal(
            self.stack, self.stack_properties, self.optimizer, self.layout.zero,
            bool(self.layout.offload_optimizer),
        )
        if refusal:
            raise InputError(refusal)

    def _read_dtypes(self, grad_dtype, moment_dtype) -> None:
        """The gradients' and Adam moments' dtypes (the stack's by default), checked against the
        layout."""
        layout, props = self.layout, self.stack_properties
        if grad_dtype is not None:
            choice("grad_dtype", grad_dtype, GRAD_DTYPES)
        if grad_dtype == "fp32" and is_number(layout.zero) and layout.zero > 2:
            raise InputError(
                "grad_dtype: fp32 gradient buffers are modelled with ZeRO 0-2 (Megatron's"
                f" distributed optimizer), not with zero={layout.zero}"
            )
        if grad_dtype is None:  # the stack's buffers for bf16 and FP8 training
            grad_dtype = props["grad_dtype"] if self.dtype != "fp16" else "bf16"
        #: "bf16" (ZeRO's 2-byte gradients) or "fp32" (fp32 buffers with ZeRO 0-2, sharded 16-bit
        #: with ZeRO-3)
        self.grad_rule = grad_dtype
        if grad_dtype == "bf16":
            self.grad_dtype = "bf16"
        elif is_number(layout.zero):
            self.grad_dtype = "fp32" if layout.zero <= 2 else "bf16"
        else:
            self.grad_dtype = "fp32 with ZeRO 0-2"
        #: Adam's moments: "fp32" (the default, ZeRO's K = 12) or "bf16" (K = 8), and the bytes of
        #: one element
        self.moment_dtype = (
            "fp32" if moment_dtype is None else choice("moment_dtype", moment_dtype, MOMENT_DTYPES)
        )
        self.moment_bytes = 4 if self.moment_dtype == "fp32" else 2
        if layout.offload_optimizer and self.moment_dtype != "fp32":
            raise InputError(
                "moment_dtype: the optimizer offload keeps fp32 moments (a CPU Adam on the host, "
                f"Adam without precision-aware moments on the device), not {self.moment_dtype}"
            )

    def _read_batch(self, seq_len, microbatch_size, global_batch, batch_tokens) -> None:
        """Sequence length, microbatch and global batch (from exactly one of sequences or
        tokens)."""
        if seq_len is None:
            raise InputError("seq_len: required (tokens per sequence)")
        self.seq_len = canonical(count("seq_len", seq_len))
        self.microbatch_size = canonical(count("microbatch_size", microbatch_size))
        if (global_batch is None) == (batch_tokens is None):
            raise InputError(
                "global_batch: give exactly one of global_batch (sequences) or batch_tokens"
            )
        self.notes: list[str] = []  # inputs read otherwise than written, each said here and warned
        if batch_tokens is not None:
            if not is_number(batch_tokens):
                global_batch = read("batch_tokens", batch_tokens) / self.seq_len
            else:
                tokens, note = read_batch_tokens(batch_tokens, self.seq_len)
                global_batch = tokens // self.seq_len
                if note:
                    self.notes.append(note)
                    warnings.warn(note, ReinterpretedWarning, stacklevel=4)
        self.global_batch = canonical(count("global_batch", global_batch))

    def _read_domain(self) -> None:
        """The scale-up domain (the override, else a node given alone, else the hardware's),
        checked."""
        hardware = self.hardware
        #: accelerators of a scale-up domain: the override, else a node given alone, else the
        #: hardware's
        self.scale_up_domain = domain = self.overrides.get(
            "scale_up_domain", self.overrides.get("gpus_per_node", hardware.scale_up_domain)
        )
        node = self.overrides.get("gpus_per_node", hardware.gpus_per_node)
        if is_number(domain) and is_number(node):  # the rule the hardware's own domain follows
            check_domain(int(domain), int(node))
        if hardware.scale_up_links is not None and is_number(domain):
            check_full_mesh("scale_up_domain", hardware.scale_up_links, domain)

    @cached_property
    def calibration(self):
        """The stack's fitted constants (None when missing or all overridden)."""
        if all(k in self.overrides for k in CALIBRATED):
            return None
        from ..presets import calibration

        try:
            return calibration(self.stack)
        except PresetError as exc:
            self._calibration_error = str(exc)
            return None

    @cached_property
    def numeric(self) -> bool:
        """Whether every input is a number: the plan's formulas then hold numbers, without sympy
        (:mod:`analytic.core.held`); else they hold sympy expressions."""
        from .layout import choice_indices

        lay = self.layout
        return (
            all(
                is_number(getattr(lay, k))
                for k in ("tp", "pp", "dp", "cp", "ep", "vpp", "comm_sms")
            )
            and (lay.etp is None or is_number(lay.etp))
            and all(is_number(v) for v in choice_indices(lay).values())
            and not any(is_sympy(v) for v in self.given.values())
        )

    @cached_property
    def on_terms(self) -> bool:
        """Whether the plan is a template on terms (:mod:`.template`): an input is a term, none a
        sympy expression; its formulas then hold terms in its inputs."""
        from .layout import choice_indices

        lay = self.layout
        given = [
            *self.given.values(),
            *(getattr(lay, k) for k in ("tp", "pp", "dp", "cp", "ep", "vpp")),
            lay.etp,
            *choice_indices(lay).values(),
        ]
        return any(type(v) is Term for v in given) and not any(is_sympy(v) for v in given)

    @cached_property
    def deg(self) -> Degrees:
        """The layout's degrees and choices as exact numbers and bools, terms, or sympy numbers,
        symbols and conditions."""
        from .degrees import Degrees

        return Degrees(
            self.layout, "number" if self.numeric else "term" if self.on_terms else "sympy"
        )

    @cached_property
    def fp32_grads(self):
        """Condition: this plan keeps fp32 gradient buffers (:attr:`grad_dtype` as a condition)."""
        if self.grad_dtype in ("bf16", "fp32"):
            return self.deg.condition(self.grad_dtype == "fp32")
        return Le(self.layout.zero, 2)

    @cached_property
    def values(self) -> dict:
        """keyword → every input of the plan (:attr:`given`): exact numbers for a numeric plan,
        else exact sympy numbers and expressions."""
        if self.numeric or self.on_terms:
            return self.given
        return {k: v if is_sympy(v) else exact(v) for k, v in self.given.items()}

    @cached_property
    def given(self) -> dict:
        """keyword → every input of the plan: an int or Fraction, or a sympy expression where it
        is one."""
        lay = self.layout
        out = dict(self.model.counts())
        out.update({k: getattr(lay, k) for k in ("tp", "pp", "dp", "cp", "ep", "vpp")})
        if lay.etp is not None:
            out["etp"] = lay.etp
        out.update(
            seq_len=self.seq_len, microbatch_size=self.microbatch_size,
            global_batch=self.global_batch, comm_sms=lay.comm_sms,
        )
        key = (
            id(self.hardware),
            self.dtype,
            self.stack,
            self.flash_attention,
            tuple(sorted(self.overrides.items(), key=lambda kv: kv[0])),
        )
        hit = _SHARED.get(key)
        if hit is None or hit[0] is not self.hardware:
            if len(_SHARED) >= 256:
                _SHARED.clear()
            notes = len(self.notes)
            hit = _SHARED[key] = (
                self.hardware,
                self._shared_values(),
                self.notes[notes:],
                self._calibration_error,
            )
        _, shared, notes, self._calibration_error = hit
        for text in notes:
            self._note(text)
        out.update(shared)
        out["loss_bytes"] = self._loss_bytes()
        return {k: v for k, v in out.items() if v is not None}

    def _shared_values(self) -> dict:
        """The inputs that depend only on the hardware, dtype, stack and overrides (kept for the
        plans that share them: a Hardware is immutable, and the cache holds it, so its identity is a
        key)."""
        from ..presets import (
            llama3_interruption_rate,
            nccl_ctas,
            nccl_efficiency,
            nccl_latency,
            synchronous_restart_time,
        )

        hw, ov, out = self.hardware, self.overrides, {}

        def pick(key, default, given=None):
            """The override of ``key``, else of ``given`` (read already), else ``default()``
            read."""
            for k in (key, given):
                if k in ov:
                    return ov[k]
            value = default()
            return None if value is None else read(key, value)

        # 16-bit (TRAINING_DTYPES)
        out["element_bytes"] = pick("element_bytes", lambda: Quantity(2, "byte"))
        out["peak_flops"] = pick("peak_flops", lambda: hw.peak_flops(self.dtype))
        # the GEMMs a low-precision recipe keeps in 16 bits (peak_flops= given alone sets both)
        if self.low_precision:
            out["peak_flops_16"] = pick(
                "peak_flops_16", lambda: hw.peak_flops("bf16"), given="peak_flops"
            )
        out["hbm"] = pick("hbm", lambda: hw.hbm)
        out["outside_bytes"] = pick(
            "outside_bytes", lambda: outside_floor(self.stack_properties["allocator"])
        )
        out["sms"] = pick("sms", lambda: hw.sms)
        out["overlap"] = pick(
            "overlap", lambda: self._overlap(out["sms"], pick("comm_ctas", nccl_ctas))
        )
        out["gpus_per_node"] = pick("gpus_per_node", lambda: hw.gpus_per_node)
        out["scale_up_domain"] = pick("scale_up_domain", lambda: self.scale_up_domain)
        out["scale_up_bandwidth"] = pick("scale_up_bandwidth", lambda: hw.scale_up)
        out["scale_up_links"] = hw.scale_up_links  # a fully connected domain (None: switched)
        out["scale_out_bandwidth"] = pick("scale_out_bandwidth", lambda: hw.scale_out)
        out["hbm_bandwidth"] = pick("hbm_bandwidth", lambda: hw.hbm_bandwidth)
        out.update(self._kernel_values(pick))
        out["matmul_efficiency"] = pick(
            "matmul_efficiency", lambda: self._matmul_ceiling(self.dtype)
        )
        # its 16-bit GEMMs at the 16-bit ceiling (matmul_efficiency= given alone sets both)
        if self.low_precision:
            out["matmul_efficiency_16"] = pick(
                "matmul_efficiency_16",
                lambda: self._matmul_ceiling("bf16"),
                given="matmul_efficiency",
            )
        cal = self.calibration
        if cal is not None and cal.pooled and "stack_efficiency" not in ov:
            self._note(
                f"stack {self.stack}: no published run of its family ({cal.key}) is fitted, so its"
                " efficiency is the one pooled over the fitted stacks"
            )
        for key in CALIBRATED:
            out[key] = pick(key, lambda k=key: getattr(cal, k) if cal is not None else None)
        # latency= and link_efficiency= given alone set both links'
        for link in ("scale_up", "scale_out"):
            out[f"{link}_latency"] = pick(
                f"{link}_latency", lambda link=link: nccl_latency(link), given="latency"
            )
            out[f"{link}_efficiency"] = pick(
                f"{link}_efficiency",
                lambda link=link: nccl_efficiency(link),
                given="link_efficiency",
            )
        out["routing_imbalance"] = pick("routing_imbalance", lambda: 1)  # balanced (benchmarks')
        out["interruption_rate"] = pick("interruption_rate", llama3_interruption_rate)
        out["restart_time"] = pick("restart_time", synchronous_restart_time)
        out["checkpoint_write_time"] = pick("checkpoint_write_time", lambda: Quantity(0, "s"))
        out["checkpoint_time"] = ov.get("checkpoint_time")
        return out

    def _overlap(self, sms, ctas):
        """φ from the SMs a collective's kernel holds of the device's (``parallelism.overlap``);
        1 where the device has no SM count (noted)."""
        from ..formulas import formula

        hw = self.hardware
        if sms is None:
            self._note(
                f"{hw.key or hw.name}: no SM count, so overlapped collectives are taken to cost the"
                " compute beside them nothing (overlap φ = 1)"
            )
            return 1
        if is_number(sms) and is_number(ctas) and ctas >= sms:
            raise InputError(
                f"comm_ctas: {ctas} SMs held by a collective leave none of the {sms} of"
                f" {hw.key or hw.name} to the compute beside it; pass Plan(..., comm_ctas=...)"
            )
        return formula("parallelism.overlap").bind({"comm_ctas": ctas, "sms": sms}).term

    def _matmul_ceiling(self, dtype: str):
        """The device's measured GEMM ceiling over its peak for ``dtype``, else the one pooled over
        the measured devices (noted)."""
        from ..presets import matmul_efficiency

        return self._noted(matmul_efficiency(self.hardware, dtype))

    def _noted(self, value_note: tuple):
        """A (value, note) pair's value, its note added to :attr:`notes`."""
        if value_note[1]:
            self._note(value_note[1])
        return value_note[0]

    def _loss_bytes(self):
        """The stack's bytes per logit at the loss's peak (its vocabulary-parallel loss's under TP);
        the 16-bit logits alone where the stack has no figure (noted)."""
        if "loss_bytes" in self.overrides:
            return self.overrides["loss_bytes"]
        props = self.stack_properties
        if "loss_bytes" not in props:
            self._note(
                f"stack {self.stack}: its loss's working set is not known; the 16-bit logits alone"
                " are counted"
            )
            return 2
        alone, parallel, tp = (
            props["loss_bytes"],
            props.get("loss_bytes_tp", props["loss_bytes"]),
            self.layout.tp,
        )
        if alone == parallel or is_number(tp):
            return parallel if alone == parallel or tp > 1 else alone
        return Piecewise((parallel, Gt(tp, 1)), (alone, True))

    def _kernel_values(self, pick) -> dict:
        """The op-level model's kernel constants (kernels.toml): GEMM tile, HBM efficiency, the
        stack's attention kernel's efficiency; what the hardware lacks is said in :attr:`notes`."""
        from ..presets import attention_efficiency, gemm_tile, memory_efficiency

        hw, ov = self.hardware, self.overrides
        out = {
            "memory_efficiency": pick(
                "memory_efficiency", lambda: self._noted(memory_efficiency(hw))
            )
        }
        tile = gemm_tile(hw.generation)
        out["tile_m"] = pick("tile_m", lambda: tile and tile[0])
        out["tile_n"] = pick("tile_n", lambda: tile and tile[1])
        if (out["tile_m"] is None or out["tile_n"] is None) or ("sms" not in ov and hw.sms is None):
            self._note(
                f"{hw.key or hw.name}: no GEMM tile or SM count, so GEMMs are timed without tile"
                " and wave quantisation"
            )
        if self.flash_attention:
            eff = next(
                (
                    e
                    for e in (
                        attention_efficiency(k, hw.generation) for k in self.attention_kernels
                    )
                    if e is not None
                ),
                None,
            )
            out["attention_efficiency"] = pick("attention_efficiency", lambda: eff)
            if out["attention_efficiency"] is None:
                self._note(
                    f"stack {self.stack}: no measured {'/'.join(self.attention_kernels)} efficiency"
                    f" on {hw.generation}, so attention runs at the matmul efficiency"
                )
        return out

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def need(self, key):
        """The input ``key`` as a sympy number or expression, or an error saying how to give it."""
        return self._required(self.values, key)

    def given_number(self, key):
        """The input ``key`` as :attr:`given` holds it (an int or Fraction where it is a number), or
        :meth:`need`'s error."""
        return self._required(self.given, key)

    def _required(self, inputs: dict, key):
        if key not in inputs and self._calibration_error:
            raise PresetError(self._calibration_error)
        if key in ("stack_efficiency", "attention_factor") and key not in inputs:
            raise PresetError(
                f"{key}: no fitted constants (presets/calibration.toml); run 'analytic calibrate "
                f"--published --write FILE' or pass Plan(..., {key}=...)"
            )
        if key not in inputs:
            raise InputError(
                f"{self.hardware.key or self.hardware.name} has no {key.replace('_', ' ')}; "
                f"pass Plan(..., {key}=...) (CLI: --{key.replace('_', '-')})"
            )
        return inputs[key]

    def time_input(self, key):
        """An input that only times need (a link's bandwidth, its efficiency, the latency): when
        missing it stands as its symbol, so the bytes still come out, and :meth:`require_times`
        raises :meth:`need`'s error for anything that needs a time."""
        if key in self.values:
            return self.values[key]
        self.missing_for_times[key] = None
        return sym(key)

    def require_times(self) -> None:
        """Raise for the inputs that the communication stage found missing (times need them)."""
        for key in self.missing_for_times:
            self.need(key)

    def f(self, name: str, **values) -> Formula:
        """Catalogue formula ``name`` bound to the plan's inputs (``values`` override some)."""
        from ..formulas import formula

        f = formula(name)
        if self.on_terms:  # a keyword the plan does not give is an input of the template
            return f.bind({**{k: input_(k) for k in f.symbols}, **self.values, **values})
        return f.bind({**self.values, **values})

    @cached_property
    def recomputed(self):
        """Share of a stage's layers whose forward runs again under full recomputation: all of them,
        or the N of each model chunk that ``recompute_layers`` names (the average over the
        stages)."""
        n = self.layout.recompute_layers
        if n is None:
            return 1
        chunk = ratio(self.model.layers, self.deg.pp * self.deg.vpp)
        return ratio(Min(n, chunk, decide=True), chunk)

    @cached_property
    def microbatches(self):
        """Microbatches per replica per step: global_batch / (dp · microbatch_size)."""
        return self.global_batch / (self.deg.dp * self.microbatch_size)

    @cached_property
    def tokens_per_step(self) -> Formula:
        from ..core.formula import Formula

        tokens = self.global_batch * self.seq_len
        return Formula(
            "D_B", tokens if self.numeric or self.on_terms else exact(tokens), "token", ""
        )

    def training_tokens_or_raise(self):
        if self.training_tokens is None:
            raise InputError(
                "training_tokens: give Plan(..., training_tokens='15.6e12 token') for steps and"
                " days"
            )
        return self.training_tokens
