"""Layouts: how the accelerators are split, the choices a layout makes, and the one check of
whether a layout can exist for a model, hardware and batch (without sympy, for numeric layouts)."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, replace

from .. import presets
from ..core.choices import (
    BLOCK_SCALED,
    DISPATCHERS,
    FP8_RECIPES,
    QUANTIZED_PARAMS_ZERO,
    RECOMPUTE,
    RECOMPUTE_MODULES,
    SCHEDULES,
    TRAINING_DTYPES,
    ZERO3_GATHERS,
    ZERO_STAGES,
)
from ..core.errors import InputError, LayoutError
from ..core.symbols import canonical, sym
from ..core.terms import Term, is_symbol
from ..core.values import choice, count, flag, is_number, is_sympy, share
from ..presets.hardware import Hardware


def _open(value, keyword: str) -> bool:
    """Whether a discrete choice of a layout is left open as its symbol (``an.sym("zero")``)."""
    return is_symbol(value, keyword) or (
        is_sympy(value) and value.is_Symbol and value == sym(keyword)
    )


@dataclass(frozen=True)
class Layout:
    """How the accelerators are split. GPUs = tp·cp·pp·dp. The expert layers fold their own
    expert tensor (``etp``, by default ``tp``), expert (``ep``) and expert data parallel degrees
    over tp·cp·dp, as Megatron-Core's MoE parallel folding does: etp·ep divides tp·cp·dp, so EP
    may exceed DP. CP ranks hold the same weights, so gradients are reduced and ZeRO shards over
    dp·cp ranks.

    Degrees may be sympy symbols (``an.sym("dp")``). So may the ZeRO stage (``an.sym("zero")``), the
    recomputation policy (``an.sym("recompute")``, its index in RECOMPUTE: 0 none, 1 selective, 2
    full) and the schedule (``an.sym("schedule")``, its index in SCHEDULES): the plan's expressions
    then cover every choice at once as Piecewise functions of them.

    ``async_tp``, ``comm_sms`` and ``zero3_gather`` describe the training stack: TP collectives
    overlapped with their GEMMs, SMs reserved for communication kernels, and whether ZeRO-3 gathers
    a block at a time ahead of compute (``"per-block"``) or each parameter tensor alone, blocking
    (``"per-tensor"``, DeepSpeed's ZeRO-3 of 2021, which gathers again in a recomputed forward).

    ``ep_overlap`` runs each microbatch's forward beside another's backward so that each hides the
    other's expert-parallel all-to-alls, as Megatron-Core's ``--overlap-moe-expert-parallel-comm``
    (combined 1F1B) does: an MoE model with ep > 1, no full recomputation, and the interleaved
    schedule where there is a pipeline (Megatron-Core's TransformerConfig checks).

    ``first_stage_layers`` and ``last_stage_layers`` split the layers unevenly, as Megatron-LM's
    ``--decoder-first/last-pipeline-num-layers`` and Llama 3 (§3.3.2) do: the stages not given
    share the rest evenly (under interleaving, evenly over each stage's chunks too, as Megatron-Core
    requires). By default every stage holds L/p layers; the first also the embedding, the last the
    output layer and the loss.

    ``ends_as_layers`` counts the embedding and the output layer with the loss as a layer each in
    the split, as Megatron-Core's ``--account-for-embedding-in-pipeline-split`` and
    ``--account-for-loss-in-pipeline-split`` do: the L + 2 slots split evenly over the p·v model
    chunks, so the first chunk of the first stage and the last chunk of the last stage hold a layer
    fewer. Llama 3 405B trains so with a layer a chunk: "the first model chunk on the first stage
    has only the embedding" (§3.3.2).

    ``pipeline_layout`` places the layers chunk by chunk in Megatron-Core's grammar
    (``--pipeline-model-parallel-layout``, :mod:`.pipeline_layout`): ``"Et|(tt|)*30mL"`` puts
    DeepSeek-V3's embedding and first layer in the first of 8 × 4 chunks, two layers in each of the
    next 30, its MTP block and the loss in the last. Each stage holds the layers of its chunks (its
    memory and time follow them, the MTP blocks in the last chunk) and the first and last stages'
    counts are set from it. A hybrid model's layout is its pattern with ``|`` between the chunks,
    as Megatron-Core's ``--hybrid-layer-pattern`` marks them: each stage then holds the
    segments it is given, however many layers of each kind.

    ``recompute_layers`` (with ``recompute="full"``) recomputes only the first N layers of each
    stage (of each model chunk under interleaving) and keeps every activation of the others, as
    Megatron-LM's ``--recompute-method block --recompute-num-layers N``; None recomputes them all.

    ``recompute_modules`` (with ``recompute="selective"``) names what selective recomputation
    recomputes, as Megatron-Core's ``--recompute-modules`` and DeepSeek-V3 (§3.2.3) do: "core_attn"
    (the attention core; what selective means when none are named), and, freeing their outputs,
    "layernorm" (a layer's two norms), "mla_up_proj" (MLA's up-projections with RoPE and the
    latents' norms) and "moe_act" (the routed experts' SwiGLU), and, keeping only its input, "mlp"
    (a dense layer's whole MLP).

    ``fp8_activations`` caches in FP8 what a layer saves as the input of a matmul or of its SwiGLU
    (the norms' outputs, MLA's latents, each token's routed copies, the SwiGLU's input and output),
    as DeepSeek-V3 does (§3.3.2); it needs FP8 training.

    ``quantized_params`` keeps a linear layer's parameters only in the recipe's quantized form,
    with no 16-bit copy: the distributed optimizer casts its fp32 master straight into them and
    all-gathers them at the recipe's width (Megatron-Core's ``--fp8-param-gather`` and
    ``--fp4-param-gather``); it needs a low-precision recipe on a Transformer Engine stack.

    ``offload_activations`` copies what each layer keeps for its backward to host memory and back
    (TransformerEngine's CPU offload under Megatron-LM's ``--cpu-offloading``; MaxText's ``offload``
    remat policies): the device holds two layers' worth, the host the rest.

    ``offload_optimizer`` is the share of each rank's parameters whose Adam step runs on the host
    (Megatron-Core's ``--optimizer-cpu-offload --optimizer-offload-fraction F``): their fp32 copies,
    gradients and moments live in host memory; 0 keeps the whole step on the device."""

    tp: object = 1
    pp: object = 1
    dp: object = 1
    cp: object = 1
    ep: object = 1
    # expert tensor parallel: the TP of the expert layers (None: tp, Megatron-Core's default)
    etp: object = None
    vpp: object = 1
    zero: object = 0
    sequence_parallel: bool = False
    recompute: object = "none"
    schedule: object = None  # None: "interleaved" where vpp > 1, else "1f1b"
    async_tp: bool = False  # TP collectives overlapped with the GEMMs they feed
    comm_sms: object = 0  # SMs reserved for communication kernels (DeepSeek-V3: 20 of 132)
    zero3_gather: str = "per-block"  # how ZeRO-3 gathers (ZERO3_GATHERS); no effect below stage 3
    # MoE all-to-alls beside another microbatch's compute (Megatron-Core's combined 1F1B)
    ep_overlap: bool = False
    first_stage_layers: object = None  # layers on the first pipeline stage (None: an even split)
    last_stage_layers: object = None  # layers on the last pipeline stage (None: an even split)
    # the embedding and the output layer + loss each take a layer's place in the split
    ends_as_layers: bool = False
    # layers of each stage (chunk) recomputed under full (None: all)
    recompute_layers: object = None
    # kept activations copied to host memory between forward and backward
    offload_activations: bool = False
    # submodules recomputed under selective (RECOMPUTE_MODULES; () the attention core)
    recompute_modules: tuple = ()
    # saved matmul and SwiGLU inputs cached in FP8 (DeepSeek-V3 §3.3.2)
    fp8_activations: bool = False
    # linear layers' parameters kept only quantized (Megatron-Core's --fp8-param-gather)
    quantized_params: bool = False
    # share of the parameters whose optimizer step and state are on the host
    offload_optimizer: object = 0
    # Megatron-Core's layout of the chunks ("Et|(tt|)*30mL"; pipeline_layout.py)
    pipeline_layout: object = None

    def __post_init__(self):
        self._read_counts()
        self._read_recompute()
        self._read_schedule()
        if self.pipeline_layout is not None:
            self._read_pipeline_layout()

    def _read_counts(self) -> None:
        """The degrees, the ZeRO stage, the flags and the optimizer's offloaded share, read."""
        for k in ("tp", "pp", "dp", "cp", "ep", "vpp"):
            object.__setattr__(self, k, canonical(count(k, getattr(self, k))))
        object.__setattr__(self, "comm_sms", canonical(count("comm_sms", self.comm_sms, minimum=0)))
        if self.etp is not None:
            object.__setattr__(self, "etp", canonical(count("etp", self.etp)))
        for k in ("first_stage_layers", "last_stage_layers"):
            if getattr(self, k) is not None:
                object.__setattr__(
                    self, k, int(count(k, getattr(self, k), minimum=0, allow_symbol=False))
                )
        if not _open(self.zero, "zero"):
            if (
                isinstance(self.zero, bool)
                or not isinstance(self.zero, numbers.Integral)
                or self.zero not in ZERO_STAGES
            ):
                raise InputError(f"zero: expected 0, 1, 2, 3 or an.sym('zero'), got {self.zero!r}")
            object.__setattr__(self, "zero", int(self.zero))
        for k in (
            "sequence_parallel",
            "async_tp",
            "ep_overlap",
            "offload_activations",
            "fp8_activations",
            "quantized_params",
            "ends_as_layers",
        ):
            flag(k, getattr(self, k))
        object.__setattr__(
            self, "offload_optimizer", share("offload_optimizer", self.offload_optimizer)
        )

    def _read_recompute(self) -> None:
        """The recomputation policy, its layers and modules, and ZeRO-3's gathering, read."""
        if not _open(self.recompute, "recompute"):
            choice("recompute", self.recompute, RECOMPUTE)
        if self.recompute_layers is not None:
            object.__setattr__(
                self,
                "recompute_layers",
                int(count("recompute_layers", self.recompute_layers, allow_symbol=False)),
            )
            if not _open(self.recompute, "recompute") and self.recompute != "full":
                raise LayoutError(
                    "recompute_layers: recomputes N layers of each stage under recompute='full', "
                    f"not {self.recompute!r}"
                )
        if isinstance(self.recompute_modules, str) or not isinstance(
            self.recompute_modules, (tuple, list)
        ):
            raise InputError(
                f"recompute_modules: expected a tuple of {', '.join(RECOMPUTE_MODULES)}, "
                f"got {self.recompute_modules!r}"
            )
        for name in self.recompute_modules:
            choice("recompute_modules", name, RECOMPUTE_MODULES)
        object.__setattr__(
            self,
            "recompute_modules",
            tuple(sorted(set(self.recompute_modules), key=RECOMPUTE_MODULES.index)),
        )
        if self.recompute_modules and self.recompute != "selective":
            raise LayoutError(
                f"recompute_modules: recomputed under recompute='selective', not {self.recompute!r}"
            )
        choice("zero3_gather", self.zero3_gather, ZERO3_GATHERS)

    def _read_schedule(self) -> None:
        """The schedule (implied by model chunks where not given) and what it needs of pp, vpp,
        the expert fold and the ends of the split."""
        # model chunks imply the schedule that runs them; an explicit other one is refused
        if self.schedule is None:
            chunks = is_number(self.vpp) and self.vpp > 1
            if chunks and is_number(self.pp) and self.pp < 2:
                raise LayoutError(
                    f"vpp: {self.vpp} model chunks a stage need pipeline stages (pp ≥ 2), got pp"
                    f" = {self.pp}"
                )
            object.__setattr__(self, "schedule", "interleaved" if chunks else "1f1b")
        if not _open(self.schedule, "schedule"):
            choice("schedule", self.schedule, SCHEDULES)
        if self.schedule == "interleaved" and is_number(self.vpp) and self.vpp < 2:
            raise LayoutError(
                "vpp: the interleaved schedule needs vpp ≥ 2 model chunks per stage"
            )
        if self.schedule == "interleaved" and is_number(self.pp) and self.pp < 2:
            raise LayoutError(f"pp: the interleaved schedule needs pp ≥ 2 stages, got {self.pp}")
        if (
            self.schedule in SCHEDULES
            and self.schedule != "interleaved"
            and is_number(self.vpp)
            and self.vpp != 1
        ):
            raise LayoutError(
                f"vpp: {self.vpp} virtual stages need schedule='interleaved' (got"
                f" {self.schedule!r})"
            )
        self._check_folding()
        if self.schedule == "dualpipe" and is_number(self.pp) and self.pp % 2:
            raise LayoutError(f"pp: DualPipe needs an even number of stages, got {self.pp}")
        if self.ends_as_layers and (
            self.first_stage_layers is not None or self.last_stage_layers is not None
        ):
            raise LayoutError(
                "ends_as_layers: the split it makes leaves no first_stage_layers/last_stage_layers"
                " to give (Megatron-Core refuses both at once)"
            )
        if self.ends_as_layers and self.schedule == "dualpipe":
            raise LayoutError(
                "ends_as_layers: DualPipe places both ends of the model on the same ranks; the"
                " split is Megatron-Core's, for its 1F1B and interleaved schedules"
            )

    def _check_folding(self) -> None:
        """The expert layers' ETP × EP × EDP fold over the attention layers' TP × CP × DP
        (Megatron-Core's MoE parallel folding: parallel_state.initialize_model_parallel checks that
        ETP × EP divides TP × CP × DP), so EP may exceed DP."""
        etp = self.tp if self.etp is None else self.etp
        sizes = (self.tp, self.cp, self.dp, self.ep, etp)
        if all(is_number(x) for x in sizes) and (self.tp * self.cp * self.dp) % (etp * self.ep):
            raise LayoutError(
                f"ep: etp × ep = {etp} × {self.ep} does not divide tp × cp × dp = {self.tp} ×"
                f" {self.cp} × {self.dp} (the expert layers fold their ETP × EP × EDP over TP ×"
                " CP × DP)"
            )

    def _read_pipeline_layout(self) -> None:
        """The first and last stages' layers the layout gives (Megatron-Core's checks of it
        applied)."""
        from .pipeline_layout import chunks, is_hybrid, rank_layers

        if not (is_number(self.pp) and is_number(self.vpp)):
            raise LayoutError("pipeline_layout: needs numeric pp and vpp, whose chunks it fills")
        if self.ends_as_layers or self.schedule == "dualpipe":
            raise LayoutError(
                "pipeline_layout: places the ends itself, for Megatron-Core's 1F1B and interleaved "
                "schedules; not with ends_as_layers or DualPipe"
            )
        parts = chunks(self.pipeline_layout)
        if is_hybrid(self.pipeline_layout):  # each stage its own segments (plan.stage_split)
            if len(parts) != self.pp * self.vpp:
                raise LayoutError(
                    f"pipeline_layout: {len(parts)} segments, not pp {self.pp} × vpp {self.vpp}"
                    f" = {self.pp * self.vpp}"
                )
            if self.first_stage_layers is not None or self.last_stage_layers is not None:
                raise LayoutError(
                    "first_stage_layers/last_stage_layers: a hybrid pattern's '|' marks place"
                    " the stages' layers (Megatron-Core's select_pipeline_segment)"
                )
            return
        ranks = rank_layers(parts, self.pp, self.vpp)
        first, last = ranks[0], ranks[-1]
        if self.pp < 2:
            return
        for k, n in (("first_stage_layers", first), ("last_stage_layers", last)):
            if getattr(self, k) not in (None, n):
                raise LayoutError(f"{k}: {getattr(self, k)}, but pipeline_layout gives {n}")
            object.__setattr__(self, k, n)

    @property
    def gpus(self):
        return self.tp * self.cp * self.pp * self.dp

    @property
    def savers_label(self) -> str:
        """The memory savers as text: the recomputation policy with its modules or layers,
        offloading, FP8 activations, quantized parameters (``recompute=selective(layernorm,moe_act)
        fp8_activations``)."""
        modules = f"({','.join(self.recompute_modules)})" if self.recompute_modules else ""
        layers = (
            f" recompute_layers={self.recompute_layers}"
            if self.recompute_layers is not None
            else ""
        )
        flags = "".join(
            f" {k}"
            for k in ("offload_activations", "fp8_activations", "quantized_params")
            if getattr(self, k)
        )
        optimizer = (
            f" offload_optimizer={float(self.offload_optimizer):g}"
            if self.offload_optimizer
            else ""
        )
        return f"recompute={self.recompute}{modules}{layers}{flags}{optimizer}"

    @property
    def offloaded(self) -> str:
        """What goes to host memory, as text ("activations and optimizer", the optimizer's partition
        with its gradient copies; "" for nothing)."""
        return " and ".join(
            what
            for what, on in (
                ("activations", self.offload_activations),
                ("optimizer", self.offload_optimizer),
            )
            if on
        )

    @property
    def uneven(self) -> bool:
        """Whether the first and last stages hold other layer counts than the rest (given, or with
        the ends counted as layers)."""
        return (
            self.first_stage_layers is not None
            or self.last_stage_layers is not None
            or self.ends_as_layers
            or self.pipeline_layout is not None
        )

    def replace(self, **changes) -> "Layout":
        return replace(self, **changes)


#: how a step's DP traffic runs, the first that holds wins: (label, the least ZeRO stage, whether
#: under a pipeline or not, None for either). Without a pipeline, sharded gradients are
#: reduce-scattered after every microbatch and ZeRO-3 gathers twice per microbatch (per-tensor under
#: full recomputation: three times); under one (and for ZeRO-1), once per step
DP_REGIMES = (
    ("per microbatch: RS + 2 AG", 3, False),
    ("RS every microbatch + AG", 2, False),
    ("reduce-scatter + all-gather", 1, None),
    ("all-reduce", 0, None),
)
#: which catalogue formula counts ZeRO-3's unsharded copies (None: none), as :data:`DP_REGIMES`
GATHERED_REGIMES = (
    ("memory.zero3_held", 3, True),
    ("memory.zero3_gathered", 3, None),
    (None, 0, None),
)


def regime(regimes: tuple, layout: Layout):
    """The label of the regime (:data:`DP_REGIMES`, :data:`GATHERED_REGIMES`) a layout with a
    numeric ZeRO stage and pipeline degree is in."""
    if not (is_number(layout.zero) and is_number(layout.pp)):
        raise InputError("regime: needs a numeric ZeRO stage and pipeline degree")
    return next(
        label
        for label, zero, piped in regimes
        if layout.zero >= zero and (piped is None or piped == (layout.pp > 1))
    )


def choice_indices(layout: Layout) -> dict:
    """The layout's discrete choices as numbers: the ZeRO stage, and the recomputation policy and
    schedule by their index in RECOMPUTE / SCHEDULES (a choice left open stays its symbol)."""
    index = lambda v, names: v if is_sympy(v) or type(v) is Term else names.index(v)  # noqa: E731
    return {
        "zero": layout.zero,
        "recompute": index(layout.recompute, RECOMPUTE),
        "schedule": index(layout.schedule, SCHEDULES),
    }


def check_comm_sms(comm_sms: int, sms, hardware: str) -> None:
    """SMs reserved for communication need an accelerator whose SM count is known and larger."""
    if sms is None:
        raise InputError(f"comm_sms: {hardware} has no sourced SM count; pass Plan(..., sms=...)")
    if comm_sms >= sms:
        raise LayoutError(
            f"comm_sms: {comm_sms} reserved SMs leave none of the {sms} of {hardware} for compute"
        )


def training_dtype(dtype, hardware: Hardware) -> str:
    """``dtype`` if it is one of TRAINING_DTYPES, ``hardware``'s tensor cores run its format and it
    has the peak the format's GEMMs run at (presets/precisions.toml)."""
    from ..presets import precision

    choice("dtype", dtype, TRAINING_DTYPES)
    recipe = precision(dtype) or {}
    generations = recipe.get("generations")
    if generations and hardware.generation not in generations:
        raise InputError(
            f"dtype: {dtype} runs on the block-scaled tensor cores of {', '.join(generations)}, not"
            f" on {hardware.name} ({hardware.generation or 'no generation stated'})"
        )
    if recipe.get("peak", dtype) not in hardware.peaks:
        runs = [d for d in TRAINING_DTYPES if (precision(d) or {}).get("peak", d) in hardware.peaks]
        raise InputError(
            f"dtype: {hardware.name} has no {recipe.get('peak', dtype)} peak; its training dtypes"
            f" are {', '.join(runs) or 'none'}"
        )
    return dtype


def sequence_unit(cp: int, tp: int, sequence_parallel: bool) -> int:
    """What every sequence length must be a multiple of: load-balanced context parallelism cuts a
    sequence into 2·cp chunks, two a rank (TransformerEngine's context-parallel attention asserts
    "Sequence length per GPU needs to be divisible by 2!"), and sequence parallelism splits each CP
    rank's tokens over the tp ranks."""
    return cp * math.lcm(2 if cp > 1 else 1, tp if sequence_parallel else 1)


def divisors(n: int) -> list[int]:
    """The divisors of ``n``, ascending."""
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def tiles(extent, domain) -> bool:
    """Whether blocks of ``extent`` consecutive ranks tile scale-up domains of ``domain`` GPUs: the
    extent divides the domain or is a whole number of domains (True while either is a symbol)."""
    if not (is_number(extent) and is_number(domain)):
        return True
    return domain % extent == 0 or extent % domain == 0


def check_sequence(model, seq_len) -> None:
    """A LayoutError where ``model`` cannot read sequences of ``seq_len`` tokens: a learned position
    table has no row past its last (Megatron-LM asserts max_position_embeddings ≥ seq_length)."""
    if (
        model.position == "learned"
        and is_number(seq_len)
        and is_number(model.max_seq_len)
        and seq_len > model.max_seq_len
    ):
        raise LayoutError(
            f"seq_len: {seq_len} tokens exceed the {model.max_seq_len} rows of the model's learned "
            "position table (max_seq_len); give a model with max_seq_len ≥ seq_len"
        )


def _numbers(*xs) -> bool:
    """Every one of ``xs`` a number (what is still a symbol is not checked)."""
    return all(is_number(x) for x in xs)


def check_layout(
    model,
    layout: Layout,
    *,
    seq_len,
    global_batch,
    microbatch_size,
    scale_up_domain,
    sms=None,
    hardware: str = "the hardware",
    allow_cross_node_tp: bool = False,
) -> None:
    """The one check that ``layout`` can run ``model`` on ``global_batch`` sequences of ``seq_len``
    (Plan, search and the strategies all use it): a LayoutError naming the first constraint that
    fails. What is still a symbol is not checked."""
    lay, m = layout, model
    if _numbers(lay.tp, m.heads) and m.heads % lay.tp:
        raise LayoutError(f"tp: {lay.tp} does not divide the {m.heads} attention heads")
    if _numbers(lay.tp, m.kv_heads) and m.kv_heads % lay.tp and lay.tp % m.kv_heads:
        raise LayoutError(
            f"tp: {lay.tp} and the {m.kv_heads} KV heads do not divide one another "
            "(KV heads are split when tp ≤ kv_heads, replicated when kv_heads divides tp)"
        )
    _check_split(lay, m)
    for why in (
        hybrid_refusal(m, lay.tp, lay.cp),
        hybrid_pipeline_refusal(
            m, lay.pp, lay.vpp, lay.uneven, lay.ends_as_layers, lay.pipeline_layout is not None
        ),
    ):
        if why:
            raise LayoutError(why)
    if _numbers(lay.dp, global_batch, microbatch_size) and global_batch % (
        lay.dp * microbatch_size
    ):
        raise LayoutError(
            f"global_batch: {global_batch} sequences do not split into dp {lay.dp} × "
            f"microbatch_size {microbatch_size}"
        )
    mb = global_batch / (lay.dp * microbatch_size)
    if lay.schedule == "interleaved" and _numbers(mb, lay.pp) and mb % lay.pp:
        raise LayoutError(
            f"microbatches: interleaved 1F1B needs the {mb} microbatches to be a multiple of pp"
            f" {lay.pp}"
        )
    if lay.schedule == "dualpipe" and _numbers(mb) and mb % 2:
        raise LayoutError(f"microbatches: DualPipe needs an even number of microbatches, got {mb}")
    _check_sequence_split(lay, m, seq_len)
    _check_experts(lay, m)
    _check_placement(lay, scale_up_domain, allow_cross_node_tp)
    for k in ("sequence_parallel", "async_tp"):
        if getattr(lay, k) and _numbers(lay.tp) and lay.tp == 1:
            raise LayoutError(f"{k}: needs tp > 1")
    if lay.async_tp and not lay.sequence_parallel:  # Megatron-LM asserts it for --tp-comm-overlap
        raise LayoutError(
            "async_tp: overlaps sequence parallelism's all-gathers and reduce-scatters with their "
            "GEMMs; pass sequence_parallel=True"
        )
    _check_ep_overlap(lay, m)
    if _numbers(lay.comm_sms) and lay.comm_sms and (sms is None or _numbers(sms)):
        check_comm_sms(lay.comm_sms, sms, hardware)


def _check_sequence_split(lay: Layout, m, seq_len) -> None:
    """The sequence splits over CP (two chunks a rank) and, under sequence parallelism, over TP."""
    if _numbers(lay.cp, seq_len) and seq_len % lay.cp:
        raise LayoutError(f"cp: {lay.cp} does not divide the sequence length {seq_len}")
    if _numbers(lay.cp, seq_len) and seq_len % sequence_unit(lay.cp, 1, False):
        raise LayoutError(
            f"cp: the {seq_len // lay.cp} tokens of each CP rank do not split into the two chunks"
            " load-balanced context parallelism gives a rank (seq_len a multiple of 2·cp ="
            f" {2 * lay.cp})"
        )
    check_sequence(m, seq_len)
    if (
        lay.sequence_parallel
        and _numbers(seq_len, lay.cp, lay.tp)
        and seq_len % sequence_unit(lay.cp, lay.tp, True)
    ):
        # Megatron-LM's and TransformerEngine's sequence-parallel reduce-scatter asserts it (CP's
        # chunks checked above)
        raise LayoutError(
            f"sequence_parallel: tp {lay.tp} does not divide the {seq_len // lay.cp} tokens of a "
            "sequence on each CP rank, which sequence parallelism splits over the TP ranks"
        )


def _check_placement(lay: Layout, g, allow_cross_node_tp: bool) -> None:
    """TP within a scale-up domain of ``g`` GPUs (unless allowed across), and the groups of tp,
    tp·cp and etp consecutive ranks tiling the domains."""
    if not allow_cross_node_tp and _numbers(lay.tp, g) and lay.tp > g:
        raise LayoutError(
            f"tp: {lay.tp} exceeds the {g} GPUs of a scale-up domain (pass"
            " allow_cross_node_tp=True; CLI: --allow-cross-node-tp)"
        )
    etp = lay.tp if lay.etp is None else lay.etp
    # the strides of cp, dp and ep
    for axes, extent in (("tp", lay.tp), ("tp·cp", lay.tp * lay.cp), ("etp", etp)):
        if not tiles(extent, g):
            raise LayoutError(
                f"{axes}: {extent} consecutive ranks neither divide nor fill whole scale-up domains"
                f" of {g} GPUs, so some groups would straddle two domains unevenly"
            )


def _check_split(lay: Layout, m) -> None:
    """The layers' split over pp stages × vpp chunks: the ends as layers, or uneven end stages."""
    slots = m.layers + 2 if lay.ends_as_layers else m.layers
    if _numbers(lay.pp, lay.vpp, m.layers) and lay.pp * lay.vpp > slots:
        raise LayoutError(
            f"pp: {lay.pp} stages × {lay.vpp} chunks exceed the {m.layers} layers"
            + (" and the two ends" if lay.ends_as_layers else "")
        )
    if lay.ends_as_layers and not _numbers(lay.pp, lay.vpp, m.layers):
        # a symbolic split, (L + 2)/p a stage: checked where its numbers are given, as the batch's
        # split is
        pass
    elif lay.ends_as_layers:
        if lay.pp < 2:
            raise LayoutError(
                f"ends_as_layers: splits a pipeline's layers; pp {lay.pp} has no stages to split"
                " over"
            )
        if slots % (lay.pp * lay.vpp):
            raise LayoutError(
                f"ends_as_layers: the {m.layers} layers and the two ends ({slots} slots) do not"
                f" split evenly over {lay.pp} stages × {lay.vpp} chunks (Megatron-Core's"
                " TransformerConfig)"
            )
    elif lay.uneven:
        if _check_pipeline_layout(lay, m):  # a hybrid pattern's marks: any split
            return
        given = [x for x in (lay.first_stage_layers, lay.last_stage_layers) if x is not None]
        if not _numbers(lay.pp, m.layers):
            raise LayoutError(
                "first_stage_layers/last_stage_layers: need a numeric pp and layer count"
            )
        if lay.pp < 2:
            raise LayoutError(
                f"first_stage_layers/last_stage_layers: split a pipeline's layers; pp {lay.pp} has"
                " no stages to split over"
            )
        rest, stages = m.layers - sum(given), lay.pp - len(given)
        if rest < 0 or (stages and (rest % stages or rest < stages)) or (not stages and rest):
            raise LayoutError(
                f"first_stage_layers/last_stage_layers: {' and '.join(map(str, given))} layers"
                f" leave {rest} of the {m.layers} for the other {stages} of {lay.pp} stages, which"
                " must share them evenly, at least one each"
            )
        if (
            lay.pipeline_layout is None
            and _numbers(lay.vpp)
            and any(n % lay.vpp for n in (*given, rest // stages if stages else 0))
        ):
            raise LayoutError(
                "first_stage_layers/last_stage_layers: under interleaving every stage's layers"
                f" split evenly over its {lay.vpp} model chunks (Megatron-Core's"
                f" TransformerConfig): {', '.join(map(str, given))} and"
                f" {rest // stages if stages else 0} a middle stage"
            )


def _check_ep_overlap(lay, m) -> None:
    """Megatron-Core's checks of ``--overlap-moe-expert-parallel-comm`` (NVIDIA/Megatron-LM
    megatron/core/transformer/transformer_config.py, TransformerConfig.__post_init__): expert
    parallelism, no full recomputation, virtual stages where there is a pipeline; DualPipe, which
    overlaps the all-to-alls itself, is refused with it."""
    if not lay.ep_overlap:
        return
    if not m.is_moe or (_numbers(lay.ep) and lay.ep == 1):
        raise LayoutError(
            "ep_overlap: overlaps an MoE model's expert-parallel all-to-alls; needs experts and"
            f" ep > 1, got ep {lay.ep} for {m.name or 'the model'}"
        )
    if lay.recompute == "full":
        raise LayoutError("ep_overlap: Megatron-Core refuses it under full recomputation")
    schedule = lay.schedule if isinstance(lay.schedule, str) else None
    if schedule == "dualpipe":
        raise LayoutError("ep_overlap: DualPipe overlaps the all-to-alls itself; pass one of them")
    if _numbers(lay.pp) and lay.pp > 1 and schedule not in (None, "interleaved"):
        raise LayoutError(
            "ep_overlap: with a pipeline Megatron-Core pairs the passes on the interleaved"
            f" schedule (vpp ≥ 2), not {schedule}"
        )


def ep_overlap_refusal(stack: str, props: dict, dispatcher) -> str | None:
    """Why ``stack`` (its properties ``props``) cannot overlap the all-to-alls of ``dispatcher``
    (None: a dense model's) with another microbatch's compute, or None (stacks.toml ep_overlap;
    Megatron-Core runs it with its alltoall and flex dispatchers)."""
    if dispatcher is None:
        return "ep_overlap: overlaps an MoE model's expert-parallel all-to-alls; needs experts"
    if not props.get("ep_overlap"):
        return f"ep_overlap: stack {stack} does not overlap the all-to-alls with another microbatch"
    if dispatcher not in ("alltoall", "flex"):
        return f"ep_overlap: runs with the alltoall and flex dispatchers, not {dispatcher}"
    return None


def quantized_zero_refusal(zero) -> str | None:
    """Why quantized primary weights (``quantized_params``) do not run at ZeRO stage ``zero``, or
    None (a stage of the distributed optimizer, choices.QUANTIZED_PARAMS_ZERO, or an open one)."""
    if not is_number(zero) or zero in QUANTIZED_PARAMS_ZERO:
        return None
    stages = " or ".join(map(str, QUANTIZED_PARAMS_ZERO))
    return (
        "quantized_params: Megatron-Core's quantized primary weights need the distributed"
        f" optimizer (zero {stages}), not zero {zero}"
    )


def hybrid_refusal(m, tp, cp) -> str | None:
    """Why a hybrid model's Mamba-2 layers refuse TP ``tp`` or CP ``cp``, or None: TP divides their
    heads and groups (Megatron-Core's MambaMixer splits both); no context parallelism (its Mamba
    layers' all-to-all is not modelled). One rule for Plan and search; what is still a symbol is not
    checked."""
    if not m.mamba_blocks:
        return None
    for k in ("ssm_heads", "ssm_groups"):
        if is_number(tp) and is_number(getattr(m, k)) and getattr(m, k) % tp:
            return f"tp: {tp} does not divide the {getattr(m, k)} Mamba-2 {k[4:]}"
    if is_number(cp) and cp != 1:
        return f"cp: context parallelism over Mamba-2 layers is not modelled (cp {cp}); use cp=1"
    return None


def hybrid_pipeline_refusal(
    m, pp, vpp, uneven: bool = False, ends_as_layers: bool = False, marked: bool = False
) -> str | None:
    """Why a hybrid model's layers do not split over ``pp`` stages of ``vpp`` chunks, or None:
    Megatron-Core splits a pattern without its '|' stage marks evenly, or by the first and last
    stages' given counts, into one chunk a stage (select_pipeline_segment); a layout ``marked`` so
    (``pipeline_layout``) places any split. One rule for Plan and search; what is still a symbol is
    not checked."""
    if not m.is_hybrid or marked:
        return None
    if is_number(vpp) and vpp != 1:
        return (
            f"vpp: a hybrid pattern splits into one chunk a stage (vpp {vpp}); Megatron-Core"
            " interleaves a pattern with '|' between its chunks: give it as pipeline_layout"
        )
    if ends_as_layers:
        return (
            "ends_as_layers: a hybrid pattern's stages hold layers only (Megatron-Core's"
            " select_pipeline_segment); give first_stage_layers/last_stage_layers"
        )
    if not uneven and is_number(pp) and len(m.layer_pattern) % pp:
        return (
            f"pp: {pp} does not divide the {len(m.layer_pattern)} layers of the hybrid pattern"
            " (Megatron-Core splits it evenly unless first_stage_layers/last_stage_layers say"
            " otherwise)"
        )
    return None


def _check_experts(lay: Layout, m) -> None:
    """EP and ETP only for an MoE model, EP dividing its routed experts."""
    if lay.etp is not None and not m.is_moe:
        raise LayoutError(
            f"etp: expert tensor parallelism {lay.etp} needs an MoE model (experts > 0)"
        )
    if lay.ep != 1:
        if not m.is_moe:
            raise LayoutError(f"ep: expert parallelism {lay.ep} needs an MoE model (experts > 0)")
        if is_number(lay.ep) and is_number(m.experts) and m.experts % lay.ep:
            raise LayoutError(f"ep: {lay.ep} does not divide the {m.experts} routed experts")


def selective_refusal(
    stack: str, selective: str | None, model, flash_attention: bool
) -> str | None:
    """Why recompute="selective" is refused on ``stack`` (whose policy is ``selective``, its
    property) for ``model``, or None where it is modelled: one rule for Plan and search."""
    if selective is None:
        return (
            f"recompute: stack {stack}'s selective recomputation is not modelled; use"
            " recompute='none' or 'full'"
        )
    if selective == "op" and not (flash_attention and model.mlp == "swiglu" and not model.is_moe):
        return (
            f"recompute: stack {stack}'s op-level selective policy is modelled for dense"
            " Llama-style blocks (SwiGLU, fused attention)"
        )
    return None


def optimizer_refusal(
    stack: str, props: dict, optimizer: str, zero=None, offload=False
) -> str | None:
    """Why ``stack`` (with properties ``props``) does not run ``optimizer`` at ZeRO stage ``zero``
    (with the optimizer offloaded where ``offload``), or None: one rule for Plan and search. Muon is
    modelled with Megatron-Core's layer-wise distributed optimizer, ZeRO-1 on the device; a symbol
    is not checked."""
    runs = props.get("optimizers", ("adam",))
    if optimizer not in runs:
        return f"optimizer: stack {stack} runs {', '.join(runs)}, not {optimizer}"
    if optimizer == "muon" and ((zero is not None and is_number(zero) and zero != 1) or offload):
        return (
            "optimizer: Muon is modelled with Megatron-Core's layer-wise distributed optimizer,"
            " ZeRO-1 on the device (zero=1, no offload), not"
            f" zero={zero}{' with the optimizer offloaded' if offload else ''}"
        )
    return None


def check_offload(stack: str, kind: str | None, layout: Layout) -> None:
    """Refuse an optimizer offload the stack's kind does not run: none modelled; Megatron's hybrid
    optimizer above ZeRO-2; DeepSpeed's ZeRO-Offload without ZeRO, or of a share of the
    partition."""
    zero, share = layout.zero, layout.offload_optimizer
    if kind is None:
        raise InputError(
            f"offload_optimizer: stack {stack} has no optimizer CPU offload modelled"
            " (Megatron-Core's HybridDeviceOptimizer: stack='megatron-core'; DeepSpeed's"
            " ZeRO-Offload: stack='deepspeed')"
        )
    if not is_number(zero):
        return
    if kind == "hybrid" and zero > 2:
        raise InputError(
            "offload_optimizer: the hybrid optimizer offload is modelled with ZeRO 0-2 (Megatron's "
            f"optimizer, distributed or not), not with zero={zero}"
        )
    if kind == "zero-offload" and zero == 0:
        raise InputError("offload_optimizer: DeepSpeed's ZeRO-Offload needs ZeRO 1-3, not zero=0")
    if kind == "zero-offload" and is_number(share) and share != 1:
        raise InputError(
            "offload_optimizer: DeepSpeed's ZeRO-Offload offloads the whole partition (1), not "
            f"{float(share):g} (ZeRO-3's offload_optimizer.ratio is not modelled)"
        )


def _check_pipeline_layout(lay: Layout, m) -> bool:
    """A pipeline layout places the model's layers and MTP blocks, no more and no fewer; a hybrid
    model's is its pattern with '|' marks (Megatron-Core's --hybrid-layer-pattern), and only
    it's. Whether the layout is a hybrid pattern's."""
    if lay.pipeline_layout is None:
        return False
    from .pipeline_layout import is_hybrid, layer_counts

    if m.is_hybrid or is_hybrid(lay.pipeline_layout):
        if not (m.is_hybrid and is_hybrid(lay.pipeline_layout)):
            raise LayoutError(
                "pipeline_layout: a hybrid model's layout is its pattern with '|' between stages"
                " (Megatron-Core's --hybrid-layer-pattern); a transformer's is Megatron-Core's"
                " layout grammar (E, t, m, L)"
            )
        if lay.pipeline_layout.replace("|", "") != m.layer_pattern:
            raise LayoutError(
                f"pipeline_layout: without its '|' marks it is not {m.name}'s pattern of"
                f" {m.layers} layers"
            )
        return True
    layers, mtp = layer_counts(lay.pipeline_layout)
    if (layers, mtp) != (m.layers, m.mtp_modules):
        raise LayoutError(
            f"pipeline_layout: places {layers} layers and {mtp} MTP blocks; {m.name} has {m.layers}"
            f" and {m.mtp_modules}"
        )
    return False


def fp8_recipe_of(stack: str, props: dict, dtype: str, given: str | None) -> str | None:
    """FP8's scaling recipe for a plan of ``stack`` (its properties ``props``) in ``dtype``:
    ``given``, where the stack runs it, else the stack's first (stacks.toml fp8_recipes; absent:
    Transformer Engine's default, delayed); None for another dtype, for which a recipe given is
    refused. One rule for Plan and search."""
    runs = props.get("fp8_recipes", FP8_RECIPES[:1])
    if dtype != "fp8":
        if given is not None:
            raise InputError(f"fp8_recipe: a scaling recipe of dtype fp8, not of {dtype}")
        return None
    recipe = runs[0] if given is None else choice("fp8_recipe", given, FP8_RECIPES)
    if recipe not in runs:
        raise InputError(
            f"fp8_recipe: stack {stack} runs FP8 with {', '.join(runs)} scaling, not {recipe}"
        )
    return recipe


def dispatcher_of(stack: str, props: dict, model, given: str | None) -> str | None:
    """The MoE token dispatcher of a plan of ``stack`` (its properties ``props``) for ``model``:
    ``given``, where the stack runs it, else the stack's first (stacks.toml dispatchers; absent:
    all-to-all); None for a dense model, for which one given is refused. One rule for Plan and
    search."""
    if not model.is_moe:
        if given is not None:
            raise InputError(
                f"dispatcher: routes an MoE model's tokens; {model.name or 'the model'} is dense"
            )
        return None
    runs = props.get("dispatchers", DISPATCHERS[:1])
    dispatcher = runs[0] if given is None else choice("dispatcher", given, DISPATCHERS)
    if dispatcher not in runs:
        raise InputError(
            f"dispatcher: stack {stack} dispatches with {', '.join(runs)}, not {dispatcher}"
        )
    return dispatcher


def _stacks_that_run(schedule: str) -> str:
    """The stacks whose schedules list ``schedule``, for a refusal to name."""
    names = [s for s in presets.stacks() if schedule in presets.stack(s).get("schedules", ())]
    return f" (the stacks that run it: {', '.join(names)})" if names else ""


def stack_refusal(
    stack: str,
    props: dict,
    *,
    dtype: str | None = None,
    schedule=None,
    cp=None,
    pp=None,
    zero=None,
    vpp=None,
    layers=None,
    uneven: bool = False,
    hardware=None,
) -> str | None:
    """Why ``stack`` (its stacks.toml properties ``props``) does not run on ``hardware``'s platform,
    in ``dtype``, ``schedule``, with context parallelism ``cp``, with ZeRO ``zero`` (under a
    pipeline of ``pp`` stages), or ``layers`` split evenly (not ``uneven``) over ``pp`` stages of
    ``vpp`` model chunks, or None: one rule for Plan and search; what is not given, or not a number,
    is not checked."""

    def known(v):  # a number to check against, not absent and not a symbol
        return v is not None and is_number(v)

    platform = getattr(hardware, "platform", "")
    if platform and "platforms" in props and platform not in props["platforms"]:
        return (
            f"stack: {stack} runs on {', '.join(props['platforms'])}, not on {platform} "
            f"({hardware.key or hardware.name}); name a stack that does (analytic.stacks())"
        )
    if dtype is not None and "dtypes" in props and dtype not in props["dtypes"]:
        return f"dtype: stack {stack} trains in {', '.join(props['dtypes'])}, not {dtype}"
    if dtype in BLOCK_SCALED and "dtypes" not in props:
        return (
            f"dtype: stack {stack} is not known to train in {dtype} (presets/stacks.toml lists the"
            " dtypes of the stacks that run block-scaled formats)"
        )
    if isinstance(schedule, str) and "schedules" in props and schedule not in props["schedules"]:
        return (
            f"schedule: stack {stack} runs {', '.join(props['schedules'])}, not {schedule}"
            f"{_stacks_that_run(schedule)}"
        )
    if props.get("context_parallel") is False and known(cp) and cp > 1:
        return f"cp: stack {stack} has no context parallelism"
    if props.get("max_zero") is not None and known(zero) and zero > props["max_zero"]:
        return f"zero: stack {stack} runs ZeRO {props['max_zero']} at most, not zero={zero}"
    most = props.get("pipeline_zero")
    if most is not None and known(pp) and pp > 1 and known(zero) and zero > most:
        return (
            f"zero: stack {stack} runs ZeRO {most} at most with pipeline parallelism, not"
            f" zero={zero}"
        )
    # (more chunks than layers is the layout's own refusal)
    if (
        props.get("even_chunks")
        and schedule == "interleaved"
        and not uneven
        and known(pp)
        and known(vpp)
        and known(layers)
        and pp * vpp <= layers
        and layers % (pp * vpp)
    ):
        return (
            f"vpp: stack {stack} gives every model chunk the same layers: {layers} layers do not"
            f" split over {pp} stages × {vpp} chunks"
        )
    return None
