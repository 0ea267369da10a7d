"""Stage 3c of a plan: the time of one step's operations on one GPU. Every GEMM with its shape after
the TP, CP and EP splits (forward, input gradient, weight gradient) at a wave-quantised fraction of
peak plus its operand traffic; the fused attention kernel; the memory-bound kernels at HBM
bandwidth; the optimizer step over this GPU's shard. The op classes are those of the average stage
(layers and the output head spread evenly, as in the FLOP count); :func:`ends_time` is the output
layer's and loss's whole work, which the timing stage puts on the last stage for its critical
path."""

from __future__ import annotations

import functools
from fractions import Fraction

from ..core.algebra import Eq, Max, Min, Piecewise, is_false
from ..core.composition import cases, composed
from ..core.formula import Formula
from ..core.terms import ratio
from ..core.units import Quantity
from .inputs import Inputs
from .placement import optimizer_shard


class _Ops:
    """The inputs the op times share, worked out once: of the average stage, or of a hybrid
    model's stage holding ``kinds`` (pattern character → its layers there;
    :func:`~.stage_split.stage_kinds`) without the output layer and loss."""

    def __init__(self, inp: Inputs, kinds: dict | None = None):
        self.inp, lay, m = inp, inp.deg, inp.model
        inp.need("hbm_bandwidth")  # every op class moves bytes
        # M: a microbatch's tokens on one CP rank
        self.tokens = inp.microbatch_size * inp.seq_len / lay.cp
        self.full = lay.full_recomputed(inp.recomputed).term  # forwards run again
        # selective recomputation: the attention core again, or every second matmul and the
        # memory-bound ops
        op = inp.selective == "op"
        self.op = cases("op", "", (1, lay.recompute_is("selective")), (0, True)).term if op else 0
        selective = () if op else ((1, lay.core_recomputed),)
        self.again = cases(
            "again", "", (inp.recomputed, lay.recompute_is("full")), *selective, (0, True)
        ).term  # the attention core runs again
        # the dense MLPs' forward again: full recomputation's, or the "mlp" recompute module's; a
        # layer's norms and the routed experts' activation again: "layernorm"'s and "moe_act"'s
        # (None: not a recompute module of the layout)
        self.mlp_again = self.full + cases("mlp", "", (1, lay.mlp_recomputed), (0, True)).term
        self.norms_again, self.act_again = (
            None if is_false(cond) else cases(name, "", (1, cond), (0, True)).term
            for name, cond in (("norms", lay.norms_recomputed), ("moe_act", lay.moe_act_recomputed))
        )
        # mixers and FFNs of each kind per stage, and residual branches in blocks' worth (two a
        # block)
        self.attention, self.mamba = ratio(m.attention_blocks, lay.pp), ratio(
            m.mamba_blocks, lay.pp
        )
        self.dense, self.moe = ratio(m.dense_blocks, lay.pp), ratio(m.moe_blocks, lay.pp)
        self.branches = ratio(m.sublayers, 2 * lay.pp)
        self.ends_share = ratio(1, lay.pp)  # the output layer and loss spread over the stages
        if kinds is not None:
            self.attention, self.mamba, self.dense, self.moe = (kinds[c] for c in "*M-E")
            self.branches, self.ends_share = ratio(sum(kinds.values()), 2), 0
        self.share, self.share_formula, sms = 1, None, inp.values.get("sms")
        if lay.comm_sms != 0:  # SMs reserved for communication compute nothing
            self.share_formula = inp.f("compute.sm_share")
            self.share, sms = self.share_formula.term, sms - lay.comm_sms
        self.sms = sms
        self.quantised = sms is not None and "tile_m" in inp.values

    def peak(self, low: bool):
        """Peak FLOP/s of GEMMs in the plan's dtype (``low``: in a low-precision plan's format; else
        in 16 bits), on the share of SMs that compute."""
        sixteen = self.inp.low_precision and not low
        return self.inp.values["peak_flops_16" if sixteen else "peak_flops"] * self.share

    def gemm(self, g, m, n, k, low: bool, again=None, backward: bool = True) -> Formula:
        """Seconds of G GEMMs M×K by K×N with their input- and weight-gradient GEMMs (or the
        forward alone), in the low-precision recipe's format where ``low`` (and the plan has one),
        else in 16 bits; the forward again under full recomputation (or when ``again`` is 1). A
        layer's GEMM of a plan that keeps its first and last layers in BF16 runs in 16 bits on their
        share of the layers (the stages averaged, as the layers' kinds are)."""
        kept = self.inp.kept_16
        if low and self.inp.low_precision and kept != 0:
            low_time, sixteen = self._gemm(g, m, n, k, True, again, backward), self._gemm(
                g, m, n, k, False, again, backward
            )
            return low_time * (1 - kept) + sixteen * kept
        return self._gemm(g, m, n, k, low, again, backward)

    def _gemm(self, g, m, n, k, low: bool, again=None, backward: bool = True) -> Formula:
        inp = self.inp
        again = self.full if again is None else again
        low = low and inp.low_precision
        eb = inp.recipe["operand_bytes"] if low else 2
        peak = self.peak(low)
        name = "compute.gemm.math_time" if self.quantised else "compute.gemm.math_time.unquantised"
        ceiling = (
            {"matmul_efficiency": inp.values["matmul_efficiency_16"]}
            if inp.low_precision and not low
            else {}
        )
        total = None
        passes = (((m, n, k), 1 + again), ((m, k, n), 1), ((k, n, m), 1))
        for (mm, nn, kk), times in passes if backward else passes[:1]:
            shape = dict(gemm_count=g, gemm_m=mm, gemm_n=nn, gemm_k=kk, peak_flops=peak,
                         element_bytes=Quantity(eb, "byte"), **ceiling)
            if self.quantised:
                shape["sms"] = self.sms
            t = (inp.f(name, **shape) + inp.f("compute.gemm.memory_time", **shape)) * times
            total = t if total is None else total + t
        if low:  # the casts around the GEMM
            total = total + streamed(
                inp, inp.f(inp.recipe["cast"], gemm_count=g, gemm_m=m, gemm_n=n, gemm_k=k)
            )
        return self.on_share(total)

    @functools.cached_property
    def head(self) -> Formula:
        """Seconds of one microbatch's output-layer GEMMs, the MTP modules' heads and projections
        included."""
        m, t, M = self.inp.model, self.inp.deg.tp, self.tokens
        head = self.gemm(1, M, m.vocab / t, m.hidden, False) * (1 + m.mtp_modules)
        if m.mtp_modules:
            head = head + self.gemm(1, M, m.hidden, 2 * m.hidden, True) * m.mtp_modules
        return head

    @functools.cached_property
    def loss_elements(self) -> Formula:
        """Elements one microbatch's softmax cross-entropy moves (the MTP modules' losses
        included)."""
        m = self.inp.model
        return (
            self.inp.f("compute.memory_bound.cross_entropy")
            * (self.tokens / self.inp.deg.tp)
            * (1 + m.mtp_modules)
        )

    def on_share(self, f: Formula) -> Formula:
        """``f`` with the SM share's formula among its sources when SMs are reserved."""
        return (
            f
            if self.share_formula is None
            else composed(f.name, f.term, f.unit, f, self.share_formula)
        )


def streamed(inp: Inputs, moved: Formula) -> Formula:
    """Seconds of memory-bound kernels that move ``moved`` bytes, with its formulas among the
    sources."""
    t = inp.f("compute.memory_bound.time", kernel_bytes=moved.term)
    return composed(t.name, t.term, "s", t, moved)


def _sum(parts: list) -> Formula:
    return sum(parts[1:], parts[0])


def _moe_gemms(o: _Ops, fc1: int) -> Formula:
    """Seconds of one MoE FFN's GEMMs: the router (replicated over TP), LatentMoE's projections, the
    routed experts as one grouped GEMM of tokens·k·E_p·etp/(t·E) rows per local expert, each
    split over the etp ranks, in the experts' width, and the shared experts."""
    m, lay, M, fp8 = o.inp.model, o.inp.deg, o.tokens, o.inp.low_precision
    h, h_e, E, etp, t = m.hidden, m.expert_ffn_hidden, m.experts, lay.etp, lay.tp
    w = m.moe_latent or h
    local = E / lay.ep
    rows = M * o.inp.busiest_topk * lay.ep * etp / (t * E)  # etp ranks' tokens, busiest experts
    moe = [
        o.gemm(1, M, E, h, False),
        o.gemm(local, rows, fc1 * h_e / etp, w, fp8),
        o.gemm(local, rows, w, h_e / etp, fp8),
    ]
    if m.moe_latent:
        moe += [o.gemm(1, M, w, h, fp8), o.gemm(1, M, h, w, fp8)]
    if m.shared_experts:
        moe += [
            o.gemm(1, M, fc1 * h_e * m.shared_experts / t, h, fp8),
            o.gemm(1, M, h, h_e * m.shared_experts / t, fp8),
        ]
    return _sum(moe)


def _mamba_gemms(o: _Ops) -> Formula:
    """Seconds of one Mamba-2 layer's projections, split over TP by heads and groups: in to z, x, B,
    C and dt, and out."""
    m, t = o.inp.model, o.inp.deg.tp
    inner = m.ssm_heads * m.ssm_head_dim
    width = 2 * inner + 2 * m.ssm_groups * m.ssm_state + m.ssm_heads
    return o.gemm(1, o.tokens, width / t, m.hidden, o.inp.low_precision) + o.gemm(
        1, o.tokens, m.hidden, inner / t, o.inp.low_precision
    )


def gemm_time(o: _Ops) -> Formula:
    """Seconds per step of every GEMM of one GPU's stage: the mixers' and FFNs' linear layers (the
    router and MLA's down-projections are replicated over TP; :func:`_moe_gemms`,
    :func:`_mamba_gemms`), the output head and the MTP projections."""
    inp, m, lay = o.inp, o.inp.model, o.inp.deg
    t, M, fp8 = lay.tp, o.tokens, inp.low_precision
    h, a, d_h = m.hidden, m.heads, m.head_dim
    if m.attention == "mla":
        r_q, r_kv, d_r = m.q_lora_rank, m.kv_lora_rank, m.rope_dim
        q = [(r_q, h), (a * (d_h + d_r) / t, r_q)] if r_q else [(a * (d_h + d_r) / t, h)]
        shapes = q + [(r_kv + d_r, h), (2 * a * d_h / t, r_kv), (h, a * d_h / t)]
        up = {q[-1], (2 * a * d_h / t, r_kv)}  # the query and key/value up-projections
    else:
        shapes, up = [((a + 2 * m.kv_heads) * d_h / t, h), (h, a * d_h / t)], set()
    # mla_up_proj runs them again
    again = o.full + cases("up", "", (1, lay.up_proj_recomputed), (0, True)).term
    attention = _sum(
        [o.gemm(1, M, n, k, fp8, again=again if (n, k) in up else None) for n, k in shapes]
    )
    fc1 = 2 if m.mlp_formulas == "swiglu" else 1
    dense = _sum(
        [
            o.gemm(1, M, fc1 * m.ffn_hidden / t, h, fp8, again=o.mlp_again),
            o.gemm(1, M, h, m.ffn_hidden / t, fp8, again=o.mlp_again),
        ]
    )
    if o.op != 0:  # the op-level policy runs wk, wo and w3 forward again
        again = [(m.kv_heads * d_h / t, h), (h, a * d_h / t), (m.ffn_hidden / t, h)]
        dense = dense + _sum([o.gemm(1, M, n, k, fp8, backward=False) for n, k in again]) * o.op
    total = attention * o.attention + o.head * o.ends_share
    if m.dense_blocks:
        total = total + dense * o.dense
    if m.is_moe:
        total = total + _moe_gemms(o, fc1) * o.moe
    if m.mamba_blocks:
        total = total + _mamba_gemms(o) * o.mamba
    return total * inp.microbatches


def ends_time(o: _Ops) -> Formula:
    """Seconds per step of the output layer's GEMMs and the loss on the stage that holds them."""
    inp = o.inp
    return (
        o.head + streamed(inp, o.loss_elements * inp.values["element_bytes"])
    ) * inp.microbatches


def _score_share(inp):
    """Share of the full score matrix a fused kernel computes, over the blocks: causal, and within
    the window on the model's sliding-window layers (a window as long as the sequence is causal)."""
    m = inp.model
    causal = inp.f("compute.attention.causal_share")
    if not m.windowed_layers:
        return causal.term
    window = inp.f(
        "compute.attention.window_share",
        sliding_window=Min(m.sliding_window, inp.seq_len, decide=True),
    )
    return (
        window * m.windowed_layers + causal * (m.attention_blocks - m.windowed_layers)
    ) / m.attention_blocks


def attention_time(o: _Ops) -> Formula:
    """Seconds per step of the sequence mixers' cores: every attention layer's (a fused kernel,
    causal, at the stack's kernel efficiency: forward, the backward's 2.5 forwards, and the forward
    again under recomputation; or without one QKᵀ and attention over V as batched GEMMs and the
    softmax over the scores at HBM bandwidth) and every Mamba-2 layer's chunked scan
    (:func:`scan_time`)."""
    core = _attention_core_time(o)
    return core + scan_time(o) if o.inp.model.mamba_blocks else core


def scan_time(o: _Ops) -> Formula:
    """Seconds per step of the Mamba-2 layers' chunked scans: forward, a backward of two forwards
    and the forward again under full recomputation, at the 16-bit GEMM ceiling
    (compute.mamba2.scan_time)."""
    inp, lay = o.inp, o.inp.deg
    per_token = inp.f("compute.mamba2_scan_flops_per_token") * (3 + o.full)
    flops = composed("C", ratio(per_token.term * o.tokens, lay.tp), "FLOP", per_token)
    sixteen = "_16" if inp.low_precision else ""
    one = inp.f(
        "compute.mamba2.scan_time",
        flops=flops.term,
        peak_flops=o.peak(False),
        matmul_efficiency=inp.need(f"matmul_efficiency{sixteen}"),
    )
    return o.on_share(composed("scan", one.term * o.mamba * inp.microbatches, "s", one, flops))


def _attention_core_time(o: _Ops) -> Formula:
    inp, m, lay = o.inp, o.inp.model, o.inp.deg
    t, M = lay.tp, o.tokens
    suffix = m.attention_suffix
    blocks = o.attention
    if inp.flash_attention:
        core = inp.f(f"compute.attention_core_forward_flops_per_token{suffix}")
        recompute = inp.f(f"compute.flash_backward_recompute_flops_per_token{suffix}")
        per_token = (core * (3 + o.again) + recompute) * _score_share(inp)
        flops = composed("C", ratio(per_token.term * M, t), "FLOP", per_token)
        # attention runs in 16 bits
        sixteen = "matmul_efficiency_16" if inp.low_precision else "matmul_efficiency"
        eff = inp.values.get("attention_efficiency", inp.need(sixteen))  # see Inputs.notes
        one = inp.f(
            "compute.attention.time",
            flops=flops.term,
            attention_efficiency=eff,
            attention_factor=inp.need("attention_factor"),
            peak_flops=o.peak(False),
        )
        return o.on_share(
            composed("attention", one.term * blocks * inp.microbatches, "s", one, flops)
        )
    # MLA's queries and keys carry the decoupled RoPE part too (0 otherwise)
    d_qk = m.head_dim + m.rope_dim
    g, s = inp.microbatch_size * m.heads / t, inp.seq_len
    core = o.gemm(g, s / lay.cp, s, d_qk, False, again=o.again) + o.gemm(
        g, s / lay.cp, m.head_dim, s, False, again=o.again
    )
    scores = inp.f("compute.memory_bound.scores") * (M / t) * inp.values["element_bytes"]
    # the recomputed forward reads and writes the scores again: 2 of the 5 elements
    softmax = streamed(inp, scores * (1 + Fraction(2, 5) * o.again))
    return (core + softmax) * blocks * inp.microbatches


def memory_bound_time(o: _Ops) -> Formula:
    """Seconds per step of the memory-bound kernels of one GPU's stage: the residual stream's norms
    and adds (on s/t tokens under sequence parallelism), the MLP activation, rotary embeddings, MoE
    token permutation, the copies around a stack's sequence-dim collectives and the cross-entropy,
    each forward, backward and recomputed forward."""
    inp, m, lay = o.inp, o.inp.model, o.inp.deg
    t, M = lay.tp, o.tokens
    f = inp.f
    stream = M / t if lay.sequence_parallel else M
    forwards = 1 + o.full + o.op  # the op-level policy recomputes every memory-bound op of a block
    elements = (
        f("compute.memory_bound.residual_forward") * forwards
        + f("compute.memory_bound.residual_backward")
    )
    if o.norms_again is not None:
        elements = elements + f("compute.memory_bound.norms_forward") * o.norms_again
    elements = elements * stream

    def activation(width, runs=forwards):
        return (
            f(f"compute.memory_bound.mlp_forward.{m.mlp_formulas}", ffn_hidden=width) * runs
            + f(f"compute.memory_bound.mlp_backward.{m.mlp_formulas}", ffn_hidden=width)
        ) * (M / t)

    total = elements * o.branches + o.loss_elements * o.ends_share
    if m.dense_blocks:
        total = total + activation(m.ffn_hidden, 1 + o.mlp_again + o.op) * o.dense
    if m.is_moe:
        width, topk = m.expert_ffn_hidden, inp.busiest_topk
        if o.act_again is None:
            moe = activation(width) * (topk + m.shared_experts)
        else:  # the routed experts' activation forward again
            moe = activation(width, forwards + o.act_again) * topk + activation(width) * (
                m.shared_experts
            )
        permute = f("compute.memory_bound.moe_permute", hidden=m.moe_latent or m.hidden,
                    topk=inp.busiest_topk)
        total = total + (moe + permute * stream) * o.moe
    if m.mamba_blocks:
        total = (
            total
            + (
                f("compute.memory_bound.mamba2_forward") * forwards
                + f("compute.memory_bound.mamba2_backward")
            )
            * (M / t)
            * o.mamba
        )
    blocks = o.attention  # of this stage
    if m.position == "rope":
        # MLA rotates only the decoupled parts: a query part of d_r per head and one shared key part
        rope = dict(heads=m.heads, kv_heads=1, head_dim=m.rope_dim) if m.attention == "mla" else {}
        # a replicated query and key: every head on every TP rank
        rotated = M if inp.qk_gathered else M / t
        total = total + f("compute.memory_bound.rope", **rope) * (1 + forwards) * rotated * blocks
    # the whole gathered tensor, every token, async TP or not
    if inp.sp_relayout and lay.sequence_parallel:
        total = total + f("compute.memory_bound.sp_relayout") * (2 + o.full) * M * o.branches
    return streamed(inp, total * inp.values["element_bytes"]) * inp.microbatches


#: the catalogue's bytes per parameter of each unfused Adam kernel (choices.OPTIMIZER_KERNELS)
UNFUSED_ADAM = {
    "foreach": "compute.optimizer.bytes_per_param_foreach",
    "decoupled-adamw": "compute.optimizer.bytes_per_param_decoupled_adamw",
}


def muon_matrices(m) -> list[tuple]:
    """(rows, columns, count) of every matrix Muon orthogonalises in ``m``'s transformer layers:
    each projection its own matrix (Q, K and V apart, the SwiGLU's gate and up apart), each routed
    and shared expert's, the router's; the MTP modules' not counted."""
    h, a, d = m.hidden, m.heads, m.head_dim
    if m.attention == "mla":
        r_q, r_kv, d_r = m.q_lora_rank, m.kv_lora_rank, m.rope_dim
        attention = [
            (h, r_q, 1),
            (r_q, a * (d + d_r), 1),
            (h, r_kv + d_r, 1),
            (r_kv, 2 * a * d, 1),
            (a * d, h, 1),
        ]
    else:
        attention = [(h, a * d, 1), (h, m.kv_heads * d, 2), (a * d, h, 1)]
    ffn = lambda f, w=h: (
        [(w, f, 2), (f, w, 1)] if m.mlp_formulas == "swiglu" else [(w, f, 1), (f, w, 1)]
    )  # noqa: E731
    routed = ffn(m.expert_ffn_hidden, m.moe_latent or h) if m.is_moe else []
    moe = [(h, m.experts, 1)] + [(r, c, n * m.experts) for r, c, n in routed]
    moe += ffn(m.expert_ffn_hidden * m.shared_experts) if m.shared_experts else []
    moe += [(h, m.moe_latent, 2)] if m.moe_latent else []
    if m.is_hybrid:  # each layer its one part
        inner = m.ssm_heads * m.ssm_head_dim
        mamba = [(h, 2 * inner + 2 * m.ssm_groups * m.ssm_state + m.ssm_heads, 1), (inner, h, 1)]
        kinds = ((attention, m.layer_pattern.count("*")), (ffn(m.ffn_hidden), m.dense_blocks),
                 (moe, m.moe_layers), (mamba, m.mamba_blocks))
        return [(r, c, n * count) for part, count in kinds if count for r, c, n in part]
    dense = [(r, c, n * (m.layers - m.moe_layers)) for r, c, n in attention + ffn(m.ffn_hidden)]
    if not m.is_moe:
        return dense
    return dense + [(r, c, n * m.moe_layers) for r, c, n in attention + moe]


def muon_time(inp: Inputs) -> Formula:
    """Seconds of this GPU's share of Muon's Newton-Schulz steps: every matrix of the model once a
    step, the matrices spread evenly over all GPUs (Megatron-Core's layer-wise distributed optimizer
    gives each data-parallel rank whole matrices of its stage), in 16 bits at the 16-bit GEMM
    ceiling."""
    flops = sum(
        (
            inp.f("compute.optimizer.newton_schulz_flops", gemm_m=Min(r, c, decide=True),
                  gemm_n=Max(r, c, decide=True))
            * n
            for r, c, n in muon_matrices(inp.model)
        ),
        Formula("0", 0, "FLOP", ""),
    )
    sixteen = "_16" if inp.low_precision else ""
    gpus = inp.deg.tp * inp.deg.pp * inp.deg.dp * inp.deg.cp
    t = inp.f(
        "compute.optimizer.newton_schulz_time",
        flops=ratio(flops.term, gpus),
        peak_flops=inp.values[f"peak_flops{sixteen}"],
        matmul_efficiency=inp.values[f"matmul_efficiency{sixteen}"],
    )
    return composed(t.name, t.term, "s", t, flops)


def optimizer_time(inp: Inputs, params: dict) -> Formula:
    """Seconds of one optimizer step over the parameters this GPU updates (its ZeRO shard), less the
    share the host updates: Adam's with the bytes of the stack's kernel (fused unless the stack says
    otherwise), an unfused one's weight decay a pass of its own; Muon's elementwise kernels and
    Newton-Schulz steps, AdamW on its share of the embedding and output layer."""
    grad_bytes = Piecewise((4, inp.fp32_grads), (2, True))
    if inp.optimizer_kernel in UNFUSED_ADAM:
        per_param = inp.f(
            UNFUSED_ADAM[inp.optimizer_kernel], grad_bytes=grad_bytes, moment_bytes=inp.moment_bytes
        )
        if inp.weight_decay:
            per_param = per_param + inp.f("compute.optimizer.weight_decay_bytes_per_param")
    else:  # fused, and a stack that does not say
        name = "compute.optimizer.bytes_per_param" + (
            "_bf16_moments" if inp.moment_dtype == "bf16" else ""
        )
        per_param = inp.f(name, grad_bytes=grad_bytes)
    shard = optimizer_shard(inp, params)
    if inp.layout.offload_optimizer:
        shard = inp.f(
            "compute.optimizer.device_params",
            params=shard,
            optimizer_offload=inp.layout.offload_optimizer,
        )
    if inp.optimizer != "muon":
        return streamed(inp, per_param * shard)
    m, lay = inp.model, inp.deg  # Muon: ZeRO-1, the ends' share of the shard on AdamW
    ends = cases(
        "ends",
        "parameter",
        (m.stage_ends_formula(True, True), Eq(lay.pp, 1)),  # a tied embedding once
        (m.stage_ends_formula(True, False) + m.stage_ends_formula(False, True), True),
    )
    ends = ends / (lay.tp * lay.pp * lay.dp * lay.cp)
    muon = inp.f(
        "compute.optimizer.bytes_per_param_muon",
        grad_bytes=grad_bytes,
        moment_bytes=inp.moment_bytes,
    )
    return streamed(inp, muon * (shard - ends) + per_param * ends) + muon_time(inp)


def as_run(inp: Inputs, ideal: Formula) -> Formula:
    """``ideal`` (kernels at the device's ceilings) as the stack runs it, at its efficiency."""
    t = inp.f("compute.stack_time", ideal_time=ideal.term)
    return composed(ideal.name, t.term, "s", t, ideal)


def stage_compute(inp: Inputs, kinds: dict) -> Formula:
    """Seconds per step of the GEMMs, sequence mixers and memory-bound kernels of a hybrid model's
    stage holding ``kinds`` (:func:`~.stage_split.stage_kinds`), as the stack runs them; the
    output layer and loss not counted."""
    o = _Ops(inp, kinds)
    return _sum([as_run(inp, f(o)) for f in (gemm_time, attention_time, memory_bound_time)])


def op_times(inp: Inputs, params: dict) -> dict:
    """Seconds per step on one GPU of each op class (:data:`OP_CLASSES`) and of the ends
    (``"ends"``: :func:`ends_time`), as the stack runs them."""
    o = _Ops(inp)
    ideal = {
        "gemm": gemm_time(o),
        "attention": attention_time(o),
        "memory_bound": memory_bound_time(o),
        "optimizer": optimizer_time(inp, params),
        "ends": ends_time(o),
    }
    return {k: as_run(inp, t) for k, t in ideal.items()}
