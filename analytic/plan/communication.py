"""Stage 4 of a plan: what each parallel axis sends per step and how long it takes on the link its
placement implies — one function per kind of traffic, each adding to its axis's bytes and time.

A group within a scale-up domain uses the scale-up link, one whose ranks are all in other domains
the scale-out link; one that spans both runs as NCCL runs large messages (collectives.multinode.*):
rings through every rank, pipelined over both links, the domain's traffic spread over all its NICs.
On a fully connected domain without a switch, a group reaches only its links to its own ranks
(collectives.mesh.scale_up_bandwidth)."""

from __future__ import annotations

from ..core import algebra
from ..core.algebra import Eq, Ge, Le, Min
from ..core.composition import cases
from ..core.formula import Formula
from ..core.terms import ratio
from ..core.units import Quantity
from ..core.values import is_number
from ..formulas import formula
from .inputs import Inputs
from .placement import replica_groups
from .ranks import axis_stride, link_kind


def _ranks_per_domain(size, fit):
    """Ranks of a group spanning scale-up domains counted per domain, when ``fit`` of its ranks fit
    in one: ``fit`` when it divides ``size``; otherwise the last domain holds fewer and its NICs
    carry more, and gcd(size, fit), a divisor of both, stands in (exact when the domains are filled
    evenly, slower otherwise: a 64-rank group at 9 per 72-GPU rack runs as 64 domains of 1); a
    ``fit`` that is not whole (ranks 64 apart on 72-GPU racks: 9/8) counts the whole ranks a domain
    holds, at least one."""
    return algebra.gcd(size, algebra.Max(1, algebra.floor(fit), decide=True))


def collective_time(inp: Inputs, kind: str, message: Formula, size, stride_) -> Formula:
    """α–β time of one collective of ``kind`` over a group of ``size`` ranks ``stride_`` apart
    in the rank order, on the link its placement implies."""
    g = inp.values["scale_up_domain"]

    def at(bw_key, ranks):
        """A link's bandwidth per rank for a group with ``ranks`` in a domain (on a fully connected
        domain, the group's own links only), at the share NCCL reaches of it."""
        bandwidth = inp.time_input(bw_key)
        if bw_key == "scale_up_bandwidth" and "scale_up_links" in inp.values:
            bandwidth = formula("collectives.mesh.scale_up_bandwidth").bind(
                {
                    "scale_up_bandwidth": bandwidth,
                    "ranks": ranks,
                    "scale_up_links": inp.values["scale_up_links"],
                }
            )
        return bandwidth * inp.time_input(bw_key.replace("bandwidth", "efficiency"))

    def flat(bw_key):
        alpha = inp.time_input(bw_key.replace("bandwidth", "latency"))
        return formula(f"collectives.{kind}.time").bind(
            {"message": message, "ranks": size, "bandwidth": at(bw_key, size), "latency": alpha}
        )

    def spanning():  # the group spans domains: NCCL's rings over both links
        if kind == "broadcast":  # a point-to-point transfer between domains
            return flat("scale_out_bandwidth")
        per_node = _ranks_per_domain(size, g / stride_)
        shape = {"gpus_per_node": per_node, "nodes": size / per_node}
        alpha = formula("collectives.multinode.step_latency").bind(
            {**shape, **{k: inp.time_input(k) for k in ("scale_up_latency", "scale_out_latency")}}
        )
        return formula(f"collectives.multinode.{kind}.time").bind(
            {
                "message": message,
                **shape,
                "latency": alpha,
                "scale_up_bandwidth": at("scale_up_bandwidth", per_node),
                "scale_out_bandwidth": at("scale_out_bandwidth", per_node),
            }
        )

    kind_of_link = link_kind(size, stride_, g)
    if kind_of_link == "scale-up":
        return flat("scale_up_bandwidth")
    if kind_of_link == "scale-out":
        return flat("scale_out_bandwidth")
    if kind_of_link == "two-level":
        return spanning()
    return cases(
        "t",
        "s",
        (flat("scale_up_bandwidth"), Le(size * stride_, g)),
        (flat("scale_out_bandwidth"), Ge(stride_, g)),
        (spanning(), True),
    )


def gemm_input_bytes(inp: Inputs, default):
    """Bytes per element of an activation sent to the GEMM that consumes it: the recipe's where it
    casts before communicating (FP8: presets/precisions.toml sent_bytes), otherwise ``default``."""
    sent = (inp.recipe or {}).get("sent_bytes")
    return default if sent is None else Quantity(sent, "byte")


ZERO_B, ZERO_T = Formula("0", 0, "byte", ""), Formula("0", 0, "s", "")


def _none() -> dict:
    return {"bytes": ZERO_B, "time": ZERO_T}


def _beyond_one(ranks, traffic) -> dict:
    """``traffic()`` (an axis's traffic dict) for a group of ``ranks`` > 1, none for one rank:
    decided for a number, a Piecewise for a symbol (so a symbolic plan's sources are conditioned as
    a numeric one's)."""
    if is_number(ranks):
        return _none() if ranks == 1 else traffic()
    return {k: cases(k, v.unit, (0, Eq(ranks, 1)), (v, True)) for k, v in traffic().items()}


def _plus(*parts: dict) -> dict:
    """The sum, key by key, of traffic dicts (bytes, time)."""
    out = _none()
    for part in parts:
        out = {k: out[k] + part[k] for k in ("bytes", "time")}
    return out


def _collectives(inp: Inputs, kind: str, message: Formula, calls, size, stride_) -> dict:
    """``calls`` collectives of ``kind`` on ``message`` over ``size`` ranks ``stride_`` apart: bytes
    sent per GPU and seconds."""
    sent = formula(f"collectives.{kind}.bytes_sent").bind({"message": message, "ranks": size})
    return {
        "bytes": sent * calls,
        "time": collective_time(inp, kind, message, size, stride_) * calls,
    }


def _layers_local(inp: Inputs):
    return ratio(inp.model.blocks, inp.deg.pp)


def _tp_layers_local(inp: Inputs):
    """A stage's layers by their TP collectives, in pairs of a layer's mixer (attention, Mamba-2)
    and FFN: an MoE FFN without shared experts has none (its routed tokens move in the dispatcher's
    expert tensor-parallel pair, :func:`expert_parallel`; a shared expert keeps the MLP's pair)."""
    m = inp.model
    halves = (
        m.attention_blocks
        + m.mamba_blocks
        + m.dense_blocks
        + (m.moe_blocks if m.shared_experts else 0)
    )
    return ratio(halves, 2 * inp.deg.pp)


def tensor_parallel(inp: Inputs) -> dict:
    """TP: 4 activation all-reduces per layer per microbatch (+2 with full recompute); with sequence
    parallelism each is a reduce-scatter + all-gather of the same size."""
    return _beyond_one(inp.deg.tp, lambda: _tensor_parallel(inp))


def _with_recomputed(inp: Inputs, name: str):
    """The collectives ``name``_per_layer of a layer, and under full recomputation those its
    recomputed forward runs again (``name``_recomputed_per_layer, for its recomputed share)."""
    again = formula(f"{name}_recomputed_per_layer") * inp.recomputed
    return formula(f"{name}_per_layer") + cases(
        "recomputed", "", (again, inp.deg.recompute_is("full")), (0, True)
    )


def _tensor_parallel(inp: Inputs) -> dict:
    lay = inp.deg
    s_local = inp.seq_len / lay.cp
    per_layer = _with_recomputed(inp, "parallelism.tp.allreduces")
    msg = inp.f("parallelism.tp.allreduce_bytes", seq_len=s_local)
    calls = per_layer * _tp_layers_local(inp) * inp.microbatches
    group = (lay.tp, axis_stride(inp.deg, "tp"))
    if not lay.sequence_parallel:
        out = _collectives(inp, "all_reduce", msg, calls, *group)
    else:
        # the all-gathers carry the GEMMs' inputs (cast to FP8 in FP8 training); the reduce-scatters
        # sum partial outputs in 16 bits
        gathered = inp.f(
            "parallelism.tp.allreduce_bytes",
            seq_len=s_local,
            element_bytes=gemm_input_bytes(inp, inp.values["element_bytes"]),
        )
        out = _plus(
            _collectives(inp, "reduce_scatter", msg, calls, *group),
            _collectives(inp, "all_gather", gathered, calls, *group),
        )
    # the normalised queries and keys gathered each forward, their gradients each backward
    if inp.qk_gathered:
        layers = _layers_local(inp) * inp.microbatches
        forwards = lay.full_recomputed(inp.recomputed) + 1
        out = _plus(
            out,
            _collectives(
                inp,
                "all_gather",
                inp.f("parallelism.tp.qk_gather_bytes", seq_len=s_local),
                forwards * layers,
                *group,
            ),
            _collectives(
                inp,
                "all_gather",
                inp.f("parallelism.tp.qk_gather_bytes_backward", seq_len=s_local),
                layers,
                *group,
            ),
        )
    return out


def pipeline_parallel(inp: Inputs) -> dict:
    """PP: per microbatch, each of the p·v − 1 chunk boundaries carries one activation forward
    and one gradient backward, split over the TP ranks (scatter/gather, Narayanan et al. §4.1); per
    GPU parallelism.pp.transfers_per_gpu of them, each a two-rank broadcast."""
    return _beyond_one(inp.deg.pp, lambda: _pipeline_parallel(inp))


def _pipeline_parallel(inp: Inputs) -> dict:
    lay = inp.deg
    msg = inp.f("parallelism.pp.p2p_bytes", seq_len=inp.seq_len / lay.cp) / lay.tp
    calls = inp.f("parallelism.pp.transfers_per_gpu", microbatches=inp.microbatches)
    return {
        "bytes": msg * calls,
        "time": collective_time(inp, "broadcast", msg, 2, axis_stride(inp.deg, "pp")) * calls,
    }


def data_parallel(inp: Inputs, params: dict) -> dict:
    """DP: gradients reduced once per step, one bucket per layer; ZeRO ≥ 1 as reduce-scatter +
    all-gather of parameters. Without a pipeline, sharded gradients are reduce-scattered after every
    microbatch's backward (a rank keeps only its partition: DeepSpeed issue #2252), and ZeRO-3 also
    gathers the parameters per microbatch (parallelism.dp.zero3_gathers_per_microbatch*). Under a
    pipeline schedule ZeRO-3 gathers its stage once and holds it (memory.zero3_held), and ZeRO-2 is
    counted as the ZeRO paper does: 2Ψ per step. Over the replica groups: dp·cp ranks for dense
    parameters, dp·cp/ep for experts. Per-tensor ZeRO-3 gathers each parameter tensor on its own,
    blocking: that part of the time is also given apart, as ``blocking``."""
    m, lay = inp.model, inp.deg
    routed = m.routed_expert_tensors
    tensors = (ratio(m.block_tensors - routed, lay.pp), ratio(routed, lay.pp * lay.ep))
    out = {**_none(), "blocking": ZERO_T, "edge": ZERO_T}
    groups = replica_groups(inp, params)
    for (local, size, stride_), local_tensors, quantized in zip(
        groups, tensors, _quantized(inp, groups), strict=True
    ):
        if local.term == 0:  # no experts to reduce (dense models)
            continue
        part = _beyond_one(
            size, lambda: _replica_traffic(inp, local, size, stride_, local_tensors, quantized)
        )
        out = {k: out[k] + part.get(k, ZERO_T) for k in out}
    return out


def _quantized(inp: Inputs, groups: list) -> tuple:
    """Of each replica group's parameters per GPU, those kept quantized (Layout quantized_params:
    the linears, all but the embedding and the output layer, on average over the stages, and the
    layers kept in BF16); None for each without them."""
    if not inp.layout.quantized_params:
        return (None, None)
    lay = inp.deg
    ends = inp.model.stage_ends_formula(True, True) / (lay.tp * lay.pp)
    dense, experts = (local for local, _, _ in groups)
    return ((dense - ends) * (1 - inp.kept_16), experts * (1 - inp.kept_16))


def _replica_traffic(inp: Inputs, local: Formula, size, stride_, local_tensors, quantized) -> dict:
    """DP traffic of one replica group: ``size`` ranks ``stride_`` apart, each holding ``local``
    parameters in ``local_tensors`` tensors, ``quantized`` of them (or None) gathered at the
    recipe's width (presets/precisions.toml param_gather_bytes)."""
    lay, mb = inp.deg, inp.microbatches
    buckets = _layers_local(inp)
    out = {}
    # 16-bit: what the all-gathers carry
    weights = inp.f(
        "parallelism.dp.gradient_bytes", params=local
    )
    gathered = weights
    if quantized is not None:
        narrow = Quantity(inp.recipe["param_gather_bytes"], "byte")
        gathered = inp.f("parallelism.dp.gradient_bytes", params=local - quantized) + inp.f(
            "parallelism.dp.gradient_bytes", params=quantized, element_bytes=narrow
        )
    fp32 = inp.f("parallelism.dp.gradient_bytes", params=local, element_bytes=Quantity(4, "byte"))
    # fp32 buffers reduce in fp32
    grad = cases(
        "gradients", "byte", (fp32, inp.fp32_grads), (weights, True)
    )
    ar, rs = (
        _collectives(inp, kind, grad / buckets, buckets, size, stride_)
        for kind in ("all_reduce", "reduce_scatter")
    )
    ag = _collectives(inp, "all_gather", gathered / buckets, buckets, size, stride_)
    # ZeRO-3's parameter gathers, and how many
    ag3, gathers = ag, lay.zero3_gathers_per_microbatch(
        inp.recomputed
    )
    if lay.per_tensor_gathers:
        ag3 = _collectives(inp, "all_gather", weights / local_tensors, local_tensors, size, stride_)
    stage3 = lay.zero_at_least(3)
    for k, unit in (("bytes", "byte"), ("time", "s")):
        # under a pipeline, as lay.dp_regimes
        held = cases(
            k, unit, (ag3[k], stage3), (ag[k], True)
        )
        values = ((rs[k] + ag3[k] * gathers) * mb, rs[k] * mb + ag[k], rs[k] + held, ar[k])
        out[k] = cases(k, unit, *zip(values, (c for _, c in lay.dp_regimes), strict=True))
    # one bucket of the last reduction and of the first gather has no compute beside it: each
    # microbatch's where ZeRO-3 gathers per microbatch (its first block waits for its gather, queued
    # behind the last block's reduce-scatter), else the step's
    first = ZERO_T if lay.per_tensor_gathers else ag["time"]  # (per-tensor gathers: blocking)
    values = ((rs["time"] + first) * mb, rs["time"] + ag["time"], rs["time"] + ag["time"],
              ar["time"])
    regimes = (c for _, c in lay.dp_regimes)
    out["edge"] = cases("edge", "s", *zip((v / buckets for v in values), regimes, strict=True))
    if lay.per_tensor_gathers:
        values = (
            ag3["time"] * gathers * mb,
            0,
            cases("t", "s", (ag3["time"], stage3), (0, True)),
            0,
        )
        out["blocking"] = cases(
            "blocking", "s", *zip(values, (c for _, c in lay.dp_regimes), strict=True)
        )
    return out


def context_parallel(inp: Inputs) -> dict:
    """CP: all-gather K and V forward (again in the recomputed forward of full recomputation),
    reduce-scatter their gradients backward (Llama 3 §3.3.2)."""
    return _beyond_one(inp.deg.cp, lambda: _context_parallel(inp))


def _context_parallel(inp: Inputs) -> dict:
    lay, m = inp.deg, inp.model
    kv = inp.f("parallelism.cp.kv_bytes") / (lay.tp if m.kv_heads != 1 else 1)
    calls = _layers_local(inp) * inp.microbatches
    group = (lay.cp, axis_stride(inp.deg, "cp"))
    gathers = _with_recomputed(inp, "parallelism.cp.kv_gathers")
    return _plus(
        _collectives(inp, "all_gather", kv, gathers * calls, *group),
        _collectives(inp, "reduce_scatter", kv, calls, *group),
    )


def expert_parallel(inp: Inputs) -> dict:
    """EP: dispatch and combine forward, and again backward, per MoE layer per microbatch; dispatch
    in the compute dtype (FP8 for FP8 training), combine in 16 bits. With node-limited routing one
    copy per destination node crosses the scale-out link and NVLink forwards it to the experts
    inside the node (DeepSeek-V3 §3.2.2). With expert tensor parallelism (etp > 1) the routed
    tokens are gathered over the etp ranks after the dispatch and reduce-scattered before the
    combine, forward and backward. The all-gather dispatcher instead gathers every token of the
    etp·ep ranks at once and reduce-scatters the outputs back (:func:`_allgather_dispatch`)."""
    if not inp.model.is_moe:
        return _none()
    lay = inp.deg
    if inp.dispatcher == "allgather":
        return _beyond_one(lay.etp * lay.ep, lambda: _allgather_dispatch(inp))
    return _plus(
        _beyond_one(lay.ep, lambda: _expert_parallel(inp)),
        _beyond_one(lay.etp, lambda: _expert_tensor_parallel(inp)),
    )


def _allgather_dispatch(inp: Inputs) -> dict:
    """Megatron-Core's all-gather dispatcher: the hidden states of the etp·ep consecutive ranks of
    the expert layers' group gathered on each (in the dispatch's dtype), the outputs
    reduce-scattered back (in 16 bits)."""
    tokens, dispatch_e, calls = _routed(inp, busiest=False)  # every rank gathers every token
    ranks = inp.deg.etp * inp.deg.ep
    return _plus(
        *(
            _collectives(
                inp,
                kind,
                inp.f(
                    "parallelism.ep.allgather_dispatch_bytes",
                    tokens=tokens,
                    ep=ranks,
                    hidden=_width(inp),
                    element_bytes=e,
                ),
                calls,
                ranks,
                1,
            )
            for kind, e in zip(
                ("all_gather", "reduce_scatter"), (dispatch_e, inp.values["element_bytes"])
            )
        )
    )


def _routed(inp: Inputs, busiest: bool = True) -> tuple:
    """A rank's own tokens of an MoE layer per microbatch (with ``busiest``, times the busiest
    rank's share of the routed tokens: what its experts take), the bytes of a dispatched token's
    element, and the layer's collectives of each kind per step (forward and backward)."""
    lay, m = inp.deg, inp.model
    own = inp.seq_len / lay.cp * inp.microbatch_size / (lay.tp if lay.sequence_parallel else 1)
    tokens = Formula("tokens", own * inp.busiest_share if busiest else own, "token", "")
    return (
        tokens,
        gemm_input_bytes(inp, Quantity(2, "byte")),
        ratio(2 * m.moe_blocks, lay.pp) * inp.microbatches,
    )


def _width(inp: Inputs):
    """Elements of one dispatched token: the hidden size, or LatentMoE's latent size."""
    return inp.model.moe_latent or inp.model.hidden


def _expert_tensor_parallel(inp: Inputs) -> dict:
    """The dispatcher's all-gather of the routed tokens over the etp ranks (in the dispatch's dtype)
    and its reduce-scatter of their outputs (in 16 bits), etp consecutive ranks."""
    tokens, dispatch_e, calls = _routed(inp)
    etp = inp.deg.etp
    gathered = (
        inp.f("parallelism.ep.etp_gather_bytes", tokens=tokens, etp=etp, hidden=_width(inp),
              topk=inp.routed_topk, **e)
        for e in ({"element_bytes": dispatch_e}, {})
    )
    return _plus(
        *(
            _collectives(inp, kind, message, calls, etp, 1)
            for kind, message in zip(("all_gather", "reduce_scatter"), gathered)
        )
    )


def _expert_parallel(inp: Inputs) -> dict:
    """The all-to-alls of every MoE layer's dispatch and combine, forward and backward: each token
    to its k experts, across nodes once per node it reaches where routing is node-limited, or with
    DeepEP's flex dispatcher once per node its k experts reach on average
    (parallelism.ep.nodes_reached)."""
    lay, m = inp.deg, inp.model
    tokens, dispatch_e, calls = _routed(inp)
    g = inp.values["scale_up_domain"]
    stride_ = axis_stride(inp.deg, "ep")
    # the dispatch in its dtype, the combine in 16 bits
    pair = (
        dispatch_e,
        inp.values["element_bytes"],
    )
    plain = _plus(
        *(
            _collectives(
                inp,
                "all_to_all",
                inp.f("parallelism.ep.dispatch_bytes", tokens=tokens, element_bytes=e,
                      hidden=_width(inp), topk=inp.routed_topk),
                calls,
                lay.ep,
                stride_,
            )
            for e in pair
        )
    )
    link = link_kind(lay.ep, stride_, g)
    if link in ("scale-up", "-") or not (m.nodes_per_token or inp.dispatcher == "flex"):
        return plain
    nodes = Min(lay.ep, lay.ep * stride_ / g)
    reach = (
        Min(m.nodes_per_token, nodes)
        if m.nodes_per_token
        else inp.f("parallelism.ep.nodes_reached", nodes=nodes)
    )
    limited = _plus(
        *(
            _collectives(
                inp,
                "all_to_all",
                inp.f(
                    "parallelism.ep.node_limited_dispatch_bytes",
                    tokens=tokens,
                    hidden=_width(inp),
                    nodes_per_token=reach,
                    element_bytes=e,
                ),
                calls,
                nodes,
                g,
            )
            for e in (dispatch_e, Quantity(2, "byte"))
        )
    )
    if link != "symbolic":
        return limited
    # decided per layout: inside a node, or node-limited across nodes
    inside = Le(
        lay.ep * stride_, g
    )
    return {
        k: cases(k, plain[k].unit, (plain[k], inside), (limited[k], True))
        for k in ("bytes", "time")
    }


def communication(inp: Inputs, params: dict) -> dict:
    """axis → {"bytes": per GPU per step, "time": seconds on its links} (dp also "blocking")."""
    return {
        "tp": tensor_parallel(inp),
        "cp": context_parallel(inp),
        "dp": data_parallel(inp, params),
        "pp": pipeline_parallel(inp),
        "ep": expert_parallel(inp),
    }
