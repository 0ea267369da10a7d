"""The notation: every symbol of the library, declared once.

Each symbol has a keyword (snake_case, used in ``evaluate(**kwargs)``), a display name (the papers'
letter), a unit and a meaning. A sympy symbol stands for the *magnitude* of its quantity in its
declared unit. Counts of things (layers, heads, degrees) are dimensionless. The sympy symbols are
made when one is first asked for, so reading and checking a keyword's value does not import sympy.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from .choices import CHOICES
from .errors import InputError, UnitError, UnknownNameError
from .units import Quantity, Unit, as_unit, is_count, takes_bare_number
from .values import check_domain, exact_number, in_range, is_sympy, quantity


@dataclass(frozen=True)
class SymbolInfo:
    keyword: str
    display: str
    unit: Unit
    meaning: str
    domain: (
        object  # a name of values.DOMAINS, or ("choice", options) for a discrete choice by index
    )

    @property
    def symbol(self):
        """The sympy symbol (integer and ≥ 0 for a discrete choice's index and a stage's; else
        positive)."""
        return _symbols()[0][self.keyword]

    def check(self, value, shown=None):
        """``value`` (an exact number in :attr:`unit`) if it is in this symbol's domain and
        range."""
        return check_domain(
            self.keyword,
            self.domain,
            in_range(self.keyword, value, shown if shown is not None else value),
            shown,
        )


# keyword, display, unit, domain (values.DOMAINS, or a key of CHOICES), meaning
_TABLE = [
    # model
    ("params", "Psi", "parameter", "nonnegative", "parameter count Ψ (ZeRO's notation; N in 6ND)"),
    (
        "active_params",
        "N_a",
        "parameter",
        "nonnegative",
        "parameters active per token (MoE); = Ψ for dense models",
    ),
    ("layers", "L", "", "count", "transformer layers"),
    ("hidden", "h", "", "count", "hidden size (d_model)"),
    ("heads", "a", "", "count", "attention heads"),
    ("kv_heads", "a_kv", "", "count", "key/value heads (GQA; = a for MHA, 1 for MQA)"),
    ("head_dim", "d_h", "", "count", "dimension of one attention head"),
    ("ffn_hidden", "h_ff", "", "count", "FFN (MLP) inner size"),
    ("vocab", "V", "", "count", "vocabulary size"),
    ("max_seq_len", "s_max", "", "count", "rows of a learned position table"),
    ("experts", "E", "", "count0", "routed experts per MoE layer"),
    ("shared_experts", "E_s", "", "count0", "shared (always active) experts per MoE layer"),
    (
        "topk",
        "k",
        "",
        "nonnegative",
        (
            "routed experts each token is sent to (the copies an expert rank takes: times a"
            " capacity or an imbalance)"
        ),
    ),
    ("expert_ffn_hidden", "h_e", "", "count", "FFN inner size of one expert"),
    ("moe_layers", "L_moe", "", "count0", "layers whose FFN is a mixture of experts"),
    (
        "mtp_modules",
        "D_mtp",
        "",
        "count0",
        "multi-token prediction modules (DeepSeek-V3 §2.2's depth D)",
    ),
    ("q_lora_rank", "r_q", "", "count0", "MLA query compression rank"),
    ("kv_lora_rank", "r_kv", "", "count0", "MLA key/value compression rank"),
    ("rope_dim", "d_r", "", "count0", "MLA decoupled RoPE dimension per head"),
    (
        "sliding_window",
        "W",
        "",
        "count0",
        "keys a sliding-window attention layer lets a query see (0: none)",
    ),
    (
        "sliding_layers",
        "L_w",
        "",
        "count0",
        "layers whose attention is limited to the sliding window",
    ),
    ("ssm_heads", "H_m", "", "count", "Mamba-2 heads of a hybrid model's SSM layers"),
    (
        "ssm_head_dim",
        "P_m",
        "",
        "count",
        "channels of one Mamba-2 head (the mixer's inner width is H_m·P_m)",
    ),
    ("ssm_state", "N_m", "", "count", "Mamba-2 state size per head (d_state)"),
    ("ssm_groups", "G_m", "", "count", "Mamba-2 groups sharing one B and one C projection"),
    ("ssm_conv", "K_m", "", "count", "width of a Mamba-2 layer's causal depthwise convolution"),
    (
        "expert_width",
        "w_e",
        "",
        "count",
        "width routed experts work in: the hidden size, or LatentMoE's latent size (Nemotron 3)",
    ),
    # data
    ("tokens", "D", "token", "nonnegative", "training tokens"),
    ("seq_len", "s", "", "count", "sequence length"),
    ("microbatch_size", "b", "", "count", "sequences per microbatch"),
    ("global_batch", "B", "", "count", "sequences per step (global batch)"),
    ("microbatches", "m", "", "count", "microbatches per pipeline per step"),
    (
        "batch_tokens",
        "D_B",
        "token",
        "positive",
        "tokens per step (global batch × sequence length)",
    ),
    ("element_bytes", "e", "byte", "positive", "bytes per element (2 for bf16, 1 for fp8)"),
    (
        "quantized_ratio",
        "rho_q",
        "",
        "fraction",
        "bytes an element saved quantized takes, its scales included, per byte of its 16-bit form"
        " (half the recipe's operand bytes)",
    ),
    (
        "loss_bytes",
        "e_ℓ",
        "byte",
        "positive",
        "bytes per logit the loss holds at its peak, the logits included",
    ),
    (
        "kept_bytes",
        "M_k",
        "byte",
        "nonnegative",
        "bytes of activations one layer keeps for its backward, per microbatch",
    ),
    (
        "layers_in_flight",
        "n_fl",
        "",
        "nonnegative",
        "layer-microbatches whose kept activations a pipeline stage holds at its peak",
    ),
    (
        "optimizer_offload",
        "f_o",
        "",
        "fraction0",
        "share of a rank's parameters whose optimizer step and state are on the host",
    ),
    (
        "optimizer_bytes",
        "M_o",
        "byte",
        "nonnegative",
        "bytes of optimizer state a rank holds (master weights and moments)",
    ),
    (
        "counted_bytes",
        "M_c",
        "byte",
        "nonnegative",
        (
            "memory per GPU the count holds: model states, gathered parameters and activations of a"
            " stage"
        ),
    ),
    (
        "allocator_reserve",
        "rho",
        "",
        "positive",
        "an allocator's measured peak over the count (its cached blocks, buffers and workspaces)",
    ),
    (
        "outside_bytes",
        "M_x",
        "byte",
        "nonnegative",
        (
            "device memory a process holds outside its caching allocator: the driver's reservation,"
            " the CUDA context, NCCL's buffers"
        ),
    ),
    # layout
    ("gpus", "n", "", "count", "accelerators"),
    ("dp", "N_d", "", "count", "data-parallel degree (ZeRO's N_d)"),
    ("tp", "t", "", "count", "tensor-parallel degree"),
    ("pp", "p", "", "count", "pipeline-parallel degree (stages)"),
    ("cp", "c", "", "count", "context-parallel degree"),
    ("ep", "E_p", "", "count", "expert-parallel degree (folded with etp over tp·cp·dp)"),
    (
        "etp",
        "E_t",
        "",
        "count",
        "expert tensor-parallel degree: the expert layers' TP (tp by default)",
    ),
    ("vpp", "v", "", "count", "virtual stages (model chunks) per pipeline rank"),
    ("stage", "k_s", "", "count0", "a pipeline stage's index, 0 for the first"),
    ("chunk", "j_c", "", "count0", "a model chunk's index on its pipeline stage, 0 for the first"),
    ("forwards", "n_F", "", "count0", "chunk forwards a pipeline stage has run"),
    ("backwards", "n_B", "", "count0", "chunk backwards a pipeline stage has run"),
    (
        "gpus_per_node",
        "g",
        "",
        "count",
        "accelerators per node (server or tray; in a collective: ranks per scale-up domain)",
    ),
    (
        "scale_up_domain",
        "g_up",
        "",
        "count",
        "accelerators on one scale-up (NVLink-class) domain: a node, or a rack of nodes",
    ),
    (
        "scale_up_links",
        "n_up",
        "",
        "count",
        (
            "direct scale-up links per accelerator on a fully connected domain without a switch"
            " (MI300X: 7)"
        ),
    ),
    (
        "routing_imbalance",
        "rho_E",
        "",
        "one_or_more",
        "routed tokens of the busiest expert-parallel rank over its balanced share (1: balanced)",
    ),
    ("nodes_per_token", "M", "", "count0", "nodes a token may be routed to (node-limited routing)"),
    (
        "zero",
        "z",
        "",
        "zero",
        "ZeRO stage: 0 none, 1 optimizer states, 2 + gradients, 3 + parameters sharded",
    ),
    ("recompute", "r_c", "", "recompute", "recomputation policy: 0 none, 1 selective, 2 full"),
    (
        "schedule",
        "P_s",
        "",
        "schedule",
        "pipeline schedule: 0 1F1B, 1 interleaved, 2 GPipe, 3 ZB-H1, 4 ZB-H2, 5 DualPipe",
    ),
    (
        "comm_sms",
        "N_c",
        "",
        "count0",
        "streaming multiprocessors reserved for communication kernels for the whole step",
    ),
    # hardware
    ("peak_flops", "F", "FLOP/s", "positive", "peak dense FLOP/s of one accelerator"),
    (
        "peak_flops_16",
        "F_16",
        "FLOP/s",
        "positive",
        "16-bit peak dense FLOP/s, at which an FP8 plan runs the GEMMs it keeps in 16 bits",
    ),
    ("hbm", "H_bm", "byte", "positive", "HBM capacity of one accelerator"),
    ("sms", "N_SM", "", "count", "streaming multiprocessors (compute units) of one accelerator"),
    ("bandwidth", "B_w", "byte/s", "positive", "link bandwidth per rank, one direction"),
    (
        "scale_up_bandwidth",
        "B_up",
        "byte/s",
        "positive",
        "NVLink-class bandwidth per accelerator, one direction",
    ),
    (
        "scale_out_bandwidth",
        "B_out",
        "byte/s",
        "positive",
        "NIC bandwidth per accelerator, one direction",
    ),
    (
        "latency",
        "alpha",
        "s",
        "nonnegative",
        "per-step latency of a collective (α of the α–β model)",
    ),
    (
        "scale_up_latency",
        "alpha_up",
        "s",
        "nonnegative",
        "per-step latency of a ring step over the scale-up link",
    ),
    (
        "scale_out_latency",
        "alpha_out",
        "s",
        "nonnegative",
        "per-step latency of a ring step through a NIC",
    ),
    (
        "matmul_efficiency",
        "eta_mm",
        "",
        "fraction",
        (
            "measured fraction of peak of a large GEMM whose tiles fill whole waves of the SMs (the"
            " device's ceiling)"
        ),
    ),
    (
        "matmul_efficiency_16",
        "eta_mm16",
        "",
        "fraction",
        (
            "the device's measured 16-bit GEMM ceiling over its 16-bit peak, at which an FP8 plan"
            " runs its 16-bit GEMMs"
        ),
    ),
    (
        "attention_efficiency",
        "eta_att",
        "",
        "fraction",
        "fraction of peak of the fused attention kernel in its benchmarks",
    ),
    (
        "attention_factor",
        "kappa_att",
        "",
        "fraction",
        "share of its benchmark efficiency the fused attention kernel keeps in a training step",
    ),
    (
        "stack_efficiency",
        "eta_stack",
        "",
        "fraction",
        (
            "share of the op-level ideal time a software stack realises (launch gaps, unfused"
            " kernels, host sync)"
        ),
    ),
    ("hbm_bandwidth", "B_hbm", "byte/s", "positive", "HBM bandwidth of one accelerator"),
    (
        "memory_efficiency",
        "eta_hbm",
        "",
        "fraction",
        "achievable fraction of HBM bandwidth of a streaming kernel",
    ),
    ("tile_m", "T_m", "", "count", "rows of the output tile one SM computes in a GEMM"),
    ("tile_n", "T_n", "", "count", "columns of the output tile one SM computes in a GEMM"),
    ("link_efficiency", "eta_l", "", "fraction", "achievable fraction of a link's bandwidth"),
    (
        "scale_up_efficiency",
        "eta_up",
        "",
        "fraction",
        "share of the scale-up link's bandwidth NCCL's rings reach",
    ),
    (
        "scale_out_efficiency",
        "eta_out",
        "",
        "fraction",
        "share of a NIC's bandwidth NCCL's rings reach",
    ),
    (
        "overlap",
        "phi",
        "",
        "fraction0",
        "share of overlapped traffic's time that costs the compute beside it nothing",
    ),
    (
        "comm_ctas",
        "N_cta",
        "",
        "count0",
        "SMs a collective's kernel holds while it runs (NCCL's CTAs)",
    ),
    (
        "comm_time",
        "T_c",
        "s",
        "nonnegative",
        "time of a step's overlapped collectives on their links",
    ),
    ("comm_window", "W_c", "s", "nonnegative", "compute the overlapped collectives run beside"),
    # collectives
    (
        "message",
        "S",
        "byte",
        "nonnegative",
        "message size: the full buffer (for all-gather: the gathered result)",
    ),
    ("ranks", "r", "", "count", "ranks taking part in a collective"),
    ("nodes", "n_n", "", "count", "nodes taking part in a collective"),
    # operations
    ("gemm_m", "M_g", "", "positive", "rows of a GEMM's output and of its left operand"),
    ("gemm_n", "N_g", "", "positive", "columns of a GEMM's output and of its right operand"),
    ("gemm_k", "K_g", "", "positive", "inner (reduction) dimension of a GEMM"),
    ("gemm_count", "G", "", "positive", "GEMMs of one shape run as one grouped kernel"),
    (
        "kernel_bytes",
        "Q_b",
        "byte",
        "nonnegative",
        "bytes a memory-bound kernel reads and writes in HBM",
    ),
    (
        "grad_bytes",
        "e_g",
        "",
        "positive",
        "bytes per gradient element the optimizer reads (2 for bf16, 4 for fp32)",
    ),
    (
        "moment_bytes",
        "e_m",
        "",
        "positive",
        "bytes per Adam moment element (4 for fp32, 2 for bf16)",
    ),
    # time and efficiency
    ("flops", "C", "FLOP", "nonnegative", "floating-point operations (FLOPs, not MACs)"),
    ("step_time", "T", "s", "positive", "time of one training step"),
    (
        "stage_time",
        "T_st",
        "s",
        "nonnegative",
        "compute of the average pipeline stage for a step's microbatches",
    ),
    (
        "slowest_stage_time",
        "T_max",
        "s",
        "nonnegative",
        "compute of the slowest pipeline stage for a step's microbatches",
    ),
    (
        "ideal_time",
        "t_op",
        "s",
        "nonnegative",
        "op-level time of kernels at the device's measured ceilings",
    ),
    ("mfu", "eta", "", "fraction", "model FLOPs utilisation"),
    ("t_f", "T_F", "s", "nonnegative", "forward time of one microbatch chunk on one stage"),
    ("t_b", "T_B", "s", "nonnegative", "input-gradient backward time of one chunk (Qi et al.'s B)"),
    (
        "t_w",
        "T_W",
        "s",
        "nonnegative",
        "weight-gradient backward time of one chunk (Qi et al.'s W)",
    ),
    (
        "t_fb",
        "T_FB",
        "s",
        "nonnegative",
        "time of one overlapped forward-and-backward chunk pair (DualPipe's F&B)",
    ),
    # reliability
    ("checkpoint_time", "delta", "s", "nonnegative", "time to write one checkpoint"),
    ("checkpoint_interval", "tau", "s", "positive", "compute time between two checkpoints"),
    ("mtbf", "M_tbf", "s", "positive", "mean time between interruptions of the whole job"),
    ("interruption_rate", "lambda", "1/s", "positive", "interruptions per second per accelerator"),
    ("restart_time", "R", "s", "nonnegative", "time to restart after an interruption"),
    (
        "checkpoint_write_time",
        "delta_w",
        "s",
        "nonnegative",
        "time an asynchronous checkpoint takes to become durable after its stall (0: synchronous)",
    ),
    ("run_time", "T_run", "s", "nonnegative", "wall-clock time of a run"),
    (
        "sigma",
        "sigma",
        "",
        "nonnegative",
        "standard deviation of one accelerator's step time, relative to its mean",
    ),
]

REGISTRY: dict[str, SymbolInfo] = {
    _kw: SymbolInfo(
        _kw,
        _disp,
        as_unit(_unit),
        _meaning,
        ("choice", CHOICES[_kw]) if _kw in CHOICES else _domain,
    )
    for _kw, _disp, _unit, _domain, _meaning in _TABLE
}
_BY_DISPLAY = {info.display: info for info in REGISTRY.values()}


#: keywords that are indices or step counts: integers from 0
INDICES = ("stage", "chunk", "forwards", "backwards")


@functools.cache
def _symbols() -> tuple[dict, dict]:
    """(keyword → sympy symbol, symbol → declaration), made once."""
    import sympy

    by_keyword = {
        kw: (
            sympy.Symbol(i.display, integer=True, nonnegative=True)
            if kw in CHOICES or kw in INDICES
            else sympy.Symbol(i.display, positive=True)
        )
        for kw, i in REGISTRY.items()
    }
    return by_keyword, {s: REGISTRY[kw] for kw, s in by_keyword.items()}


def sym(keyword: str):
    """The sympy symbol of a keyword, e.g. ``sym("dp")`` (displayed N_d). Use it as a free input."""
    return info(keyword).symbol


def info(keyword_or_symbol) -> SymbolInfo:
    """The declaration of a keyword, display name or symbol."""
    if is_sympy(keyword_or_symbol) and keyword_or_symbol.is_Symbol:
        found = _symbols()[1].get(keyword_or_symbol)
        if found is None:
            name = keyword_or_symbol.name
            found = REGISTRY.get(name) or _BY_DISPLAY.get(name)
        if found is None:
            raise UnknownNameError("symbol", keyword_or_symbol.name, REGISTRY)
        return found
    if keyword_or_symbol in REGISTRY:
        return REGISTRY[keyword_or_symbol]
    if keyword_or_symbol in _BY_DISPLAY:
        return _BY_DISPLAY[keyword_or_symbol]
    raise UnknownNameError("keyword", keyword_or_symbol, REGISTRY)


def keyword_of(symbol) -> str:
    return info(symbol).keyword


def canonical(expr):
    """Replace user-made sympy symbols named like a keyword (``Symbol("dp")``) by the declared
    ones."""
    if not is_sympy(expr):
        return expr
    declared = _symbols()[1]
    if _declared_only(expr, declared):
        return expr
    repl = {s: info(s).symbol for s in expr.free_symbols if s not in declared}
    return expr.xreplace(repl) if repl else expr


_DECLARED_ONLY: dict = {}  # expression → whether every symbol in it is a declared one
_DECLARED_ONLY_MAX = 1 << 19


def _declared_only(expr, declared) -> bool:
    """Whether every symbol reached through ``expr``'s arguments is declared, remembered per
    expression: a composed expression is then checked through its new nodes only, not walked whole
    at every composition (False, the careful answer, sends :func:`canonical` to the expression's
    free symbols)."""
    hit = _DECLARED_ONLY.get(expr)
    if hit is not None:
        return hit
    if expr.is_Symbol:
        ok = expr in declared
    else:
        ok = all(
            getattr(a, "is_Symbol", None) is not None and _declared_only(a, declared)
            for a in expr.args
        )
    if len(_DECLARED_ONLY) >= _DECLARED_ONLY_MAX:
        _DECLARED_ONLY.clear()
    _DECLARED_ONLY[expr] = ok
    return ok


def wanted(unit: Unit) -> str:
    """What a value in ``unit`` must be, as text."""
    return (
        "a plain number (dimensionless)"
        if unit.dimensionless
        else f"a quantity in {unit:~P} ({unit.dimensionality})"
    )


def read_magnitude(keyword: str, value, unit: Unit | None = None):
    """``value`` (a pint Quantity of any compatible unit, a string of one number and one unit such
    as ``"50 GB/s"``, or a bare number for dimensionless symbols, pure counts and FLOPs) as an exact
    int or Fraction in ``keyword``'s declared unit (or in ``unit``), inside the symbol's domain.
    Sympy values and Formulas are read by :func:`analytic.core.formula.magnitude`."""
    declared = info(keyword) if unit is None else None
    unit = declared.unit if declared is not None else as_unit(unit)
    shown = value
    value = quantity(keyword, value)
    if isinstance(value, Quantity) and is_count(unit) and value.dimensionless:
        value = value.to("").magnitude  # "40 %"
    if isinstance(value, Quantity):
        if value.dimensionality != unit.dimensionality:
            raise UnitError(
                f"{keyword}: expected {wanted(unit)}, got {value:~P} ({value.dimensionality})"
            )
        if getattr(value.magnitude, "ndim", 0):
            raise InputError(
                f"{keyword}: expected a scalar, got an array (use lambdify() for arrays)"
            )
        try:
            out = exact_number(value.magnitude)
        except InputError as exc:
            raise InputError(f"{keyword}: {exc}") from None
        if value.units != unit:
            out = exact_number(out * value.units.exact_factor(unit))
    else:
        if not takes_bare_number(unit):
            raise UnitError(
                f"{keyword}: a bare number is ambiguous for a quantity in {unit:~P}; "
                f"pass a Quantity or a string such as '{value} {unit:~P}'"
            )
        try:
            out = exact_number(value)
        except InputError as exc:
            raise InputError(f"{keyword}: {exc}") from None
    if declared is not None:
        return declared.check(out, shown)
    if out < 0:
        raise InputError(f"{keyword}: expected a non-negative value, got {shown!r}")
    return in_range(keyword, out, shown)


def table() -> list[SymbolInfo]:
    """Every declared symbol, in declaration order (the notation table)."""
    return list(REGISTRY.values())
