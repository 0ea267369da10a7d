"""Catalogue-wide checks: dimensions, sources, notation, required names, identities."""

import math

import pytest
import sympy

import analytic as an
from analytic.core import symbols

REQUIRED = {
    "memory.model_states.zero0": ["params"],
    "memory.model_states.zero1": ["params", "dp"],
    "memory.model_states.zero2": ["params", "dp"],
    "memory.model_states.zero3": ["params", "dp"],
    "memory.activations.layer": ["seq_len", "microbatch_size", "hidden", "heads"],
    "memory.activations.layer_tp": ["seq_len", "microbatch_size", "hidden", "heads", "tp"],
    "memory.activations.layer_tp_sp": ["seq_len", "microbatch_size", "hidden", "heads", "tp"],
    "memory.activations.layer_tp_sp_selective": ["seq_len", "microbatch_size", "hidden", "tp"],
    "memory.activations.layer_full_recompute": ["seq_len", "microbatch_size", "hidden"],
    "memory.logits": ["seq_len", "microbatch_size", "vocab", "element_bytes"],
    "compute.training_flops": ["params", "tokens"],
    "compute.flops_per_token_palm": ["params", "layers", "heads", "head_dim", "seq_len"],
    "compute.megatron_flops": ["global_batch", "seq_len", "layers", "hidden", "vocab"],
    "compute.model_flops_korthikanti": ["global_batch", "seq_len", "layers", "hidden", "vocab"],
    "compute.mfu": ["flops", "step_time", "gpus", "peak_flops"],
    "compute.train_time": ["flops", "gpus", "peak_flops", "mfu"],
    "pipeline.bubble.gpipe": ["pp", "microbatches"],
    "pipeline.bubble.1f1b": ["pp", "microbatches"],
    "pipeline.bubble.interleaved": ["pp", "microbatches", "vpp"],
    "parallelism.dp.gradient_bytes": ["params", "element_bytes"],
    "parallelism.tp.allreduce_bytes": ["seq_len", "microbatch_size", "hidden", "element_bytes"],
    "parallelism.pp.p2p_bytes": ["seq_len", "microbatch_size", "hidden", "element_bytes"],
    "parallelism.cp.min_block": ["peak_flops", "bandwidth"],
    "parallelism.ep.dispatch_bytes": ["tokens", "topk", "hidden", "element_bytes"],
    "reliability.checkpoint_interval": ["checkpoint_time", "mtbf"],
    "scaling.chinchilla.optimal_params": ["flops"],
}
for _c in ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast"):
    REQUIRED[f"collectives.{_c}.time"] = ["message", "ranks", "bandwidth", "latency"]
    REQUIRED[f"collectives.{_c}.busbw_factor"] = ["ranks"]
for _c in ("all_reduce", "reduce_scatter", "all_gather", "all_to_all"):
    REQUIRED[f"collectives.{_c}.bytes_sent"] = ["message", "ranks"]
for _s in ("1f1b", "zb_h1", "zb_h2", "dualpipe"):
    REQUIRED[f"pipeline.bubble_time.{_s}"] = None  # subsets of pp, t_f, t_b, t_w, t_fb


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_required_names_exist_with_their_keywords(name):
    f = an.formula(name)
    if REQUIRED[name] is not None:
        assert set(f.symbols) == set(REQUIRED[name])
    else:
        assert set(f.symbols) <= {"pp", "t_f", "t_b", "t_w", "t_fb"}


@pytest.mark.parametrize("name", sorted(an.formulas()))
def test_every_formula_is_dimensionally_consistent_and_sourced(name):
    f = an.formula(name)
    f.check_dimensions()
    assert f.source.strip()
    for kw in f.symbols:
        assert kw in symbols.REGISTRY


def test_dimension_check_catches_a_wrong_term():
    bad = an.Formula("bad", an.sym("message") + an.sym("latency"), "s", "test")
    with pytest.raises(an.UnitError):
        bad.check_dimensions()
    wrong_unit = an.Formula("wrong", an.sym("message") / an.sym("bandwidth"), "byte", "test")
    with pytest.raises(an.UnitError):
        wrong_unit.check_dimensions()


@pytest.mark.parametrize("part", ["time", "bytes_sent"])
def test_all_reduce_is_reduce_scatter_plus_all_gather_symbolically(part):
    ar = an.formula(f"collectives.all_reduce.{part}").expr
    rs = an.formula(f"collectives.reduce_scatter.{part}").expr
    ag = an.formula(f"collectives.all_gather.{part}").expr
    assert sympy.simplify(ar - rs - ag) == 0


def test_hierarchical_all_reduce_is_hierarchical_rs_plus_ag():
    ar = an.formula("collectives.hierarchical_all_reduce.time").expr
    rs = an.formula("collectives.hierarchical_reduce_scatter.time").expr
    ag = an.formula("collectives.hierarchical_all_gather.time").expr
    assert sympy.simplify(ar - rs - ag) == 0


def test_multinode_all_reduce_runs_at_the_slower_of_the_nodes_nics_and_nvlink():
    """8 nodes of 8 H100s (450 GB/s NVLink, 8 × 50 GB/s NICs), no latency: the bus bandwidth
    2(N−1)/N·S/t is the node's NICs together, 400 GB/s, not one NIC's 50 or a sum of phases."""
    t = an.formula("collectives.multinode.all_reduce.time").evaluate(
        message="1 GiB", gpus_per_node=8, nodes=8, scale_up_bandwidth="450 GB/s",
        scale_out_bandwidth="50 GB/s", latency="0 s",
    )
    busbw = 2 * 63 / 64 * 2**30 / t.to("s").magnitude
    assert busbw == pytest.approx(min(450e9, 8 * 50e9), rel=0.10)
    assert busbw == pytest.approx(400e9, rel=1e-12)  # NIC-bound: 8·50 < 8·450/7
    # NVLink-bound when the NICs are fast: 8·450/7 GB/s
    t = an.formula("collectives.multinode.all_reduce.time").evaluate(
        message="1 GiB", gpus_per_node=8, nodes=8, scale_up_bandwidth="450 GB/s",
        scale_out_bandwidth="100 GB/s", latency="0 s",
    )
    assert 2 * 63 / 64 * 2**30 / t.to("s").magnitude == pytest.approx(8 * 450e9 / 7, rel=1e-12)


@pytest.mark.parametrize(
    "kind,per_rank",
    [
        ("all_reduce", 2 * 7 / 8),
        ("reduce_scatter", 7 / 8),
        ("all_gather", 7 / 8),
        ("all_to_all", 7 / 8),
    ],
)
def test_multinode_bytes_split_by_hand(kind, per_rank):
    """2 nodes of 4 ranks, S = 8 MiB. Ring: of the N − 1 = 7 chunks of S/8 a rank sends per pass,
    1/4 through its NIC. All-to-all: S/8 to each of 3 ranks in its node, 4 elsewhere."""
    S = 8 * 2**20
    kw = dict(message=f"{S} byte", gpus_per_node=4, nodes=2)
    up = (
        an.formula(f"collectives.multinode.{kind}.bytes_sent_scale_up")
        .evaluate(**kw)
        .to("byte")
        .magnitude
    )
    out = (
        an.formula(f"collectives.multinode.{kind}.bytes_sent_scale_out")
        .evaluate(**kw)
        .to("byte")
        .magnitude
    )
    if kind == "all_to_all":
        assert (up, out) == (3 * S / 8, 4 * S / 8)
    else:
        assert (up, out) == (pytest.approx(per_rank * S * 3 / 4), pytest.approx(per_rank * S / 4))
    # every byte the single-level ring sends over 8 ranks
    assert up + out == pytest.approx(per_rank * S)


def test_multinode_all_to_all_in_one_node_never_leaves_it():
    out = an.formula("collectives.multinode.all_to_all.bytes_sent_scale_out").evaluate(
        message="1 GB", gpus_per_node=8, nodes=1
    )
    assert out.to("byte").magnitude == 0


@pytest.mark.parametrize(
    "stage,shards", [(0, (0, 0, 0)), (1, (0, 0, 1)), (2, (0, 1, 1)), (3, (1, 1, 1))]
)
def test_zero_breakdown_sums_to_published_total(stage, shards):
    dp = an.sym("dp")
    parts = [
        an.formula(f"memory.model_states.{p}").expr / (dp if s else 1)
        for p, s in zip(("weights", "gradients", "optimizer"), shards)
    ]
    assert sympy.simplify(sum(parts) - an.formula(f"memory.model_states.zero{stage}").expr) == 0


def test_korthikanti_tp_sp_reduces_to_no_parallelism_at_t1():
    layer = an.formula("memory.activations.layer").expr
    for name in ("layer_tp", "layer_tp_sp"):
        assert (
            sympy.simplify(
                an.formula(f"memory.activations.{name}").expr.subs(an.sym("tp"), 1) - layer
            )
            == 0
        )


def test_flash_gelu_is_korthikanti_without_dropout_and_scores():
    """GPT shape (MHA, 4h, a·d_h = h): 32sbh + fp32 softmax stats = 34sbh − 2sbh of dropout
    masks."""
    s, b, h, a = (an.sym(k) for k in ("seq_len", "microbatch_size", "hidden", "heads"))
    flash = an.formula("memory.activations.layer_flash_gelu_sp").expr.subs(
        {
            an.sym("kv_heads"): a,
            an.sym("head_dim"): h / a,
            an.sym("ffn_hidden"): 4 * h,
            an.sym("tp"): 1,
        }
    )
    assert sympy.simplify(flash - (32 * s * b * h + 4 * s * b * a)) == 0


def test_notation_is_unique():
    displays = [i.display for i in symbols.table()]
    assert len(displays) == len(set(displays))


def test_readme_notation_table_lists_every_symbol(docs):
    readme = docs
    for info in symbols.table():
        assert f"| `{info.keyword}` |" in readme, info.keyword


def test_dalys_optimum_is_the_mtbf_once_the_checkpoint_takes_two_of_them():
    """Daly 2006: τ_opt = √(2δM)·(1 + √(δ/2M)/3 + δ/18M) − δ for δ < 2M, and M beyond (hand
    arithmetic)."""
    f = an.formula("reliability.daly.optimal_interval")
    below = math.sqrt(2 * 1.9) * (1 + math.sqrt(1.9 / 2) / 3 + 1.9 / 18) - 1.9
    assert f.evaluate(checkpoint_time="1.9 hour", mtbf="1 hour").to(
        "hour"
    ).magnitude == pytest.approx(below, rel=1e-12)
    for delta in ("2 hour", "2.5 hour", "10 hour"):
        assert f.evaluate(checkpoint_time=delta, mtbf="1 hour").to(
            "hour"
        ).magnitude == pytest.approx(1.0, rel=1e-12)


def test_a_ring_spanning_nodes_pays_a_nics_latency_per_node_crossing():
    """16 ranks on 2 nodes of 8: of the ring's 15 hops, 14 stay in a node (3.4 µs each, NCCL's
    NVLink ring step) and 1 crosses to the other node (14 µs): 61.6 µs over 15 steps."""
    alpha = an.formula("collectives.multinode.step_latency").evaluate(
        gpus_per_node=8, nodes=2, scale_up_latency="3.4 us", scale_out_latency="14 us"
    )
    assert alpha.to("us").magnitude == pytest.approx((14 * 3.4 + 14) / 15, rel=1e-12)
    one_node = an.formula("collectives.multinode.step_latency").evaluate(
        gpus_per_node=8, nodes=1, scale_up_latency="3.4 us", scale_out_latency="14 us"
    )
    assert one_node.to("us").magnitude == pytest.approx(3.4, rel=1e-12)


def test_first_order_failure_formulas_warn_outside_their_range():
    """Young's first-order goodput answers silently while its waste is under 10%, warns beyond (with
    Daly's exact model named), and its failure-optimal cluster size always warns: there the
    first-order waste is 2/3 by construction."""
    import warnings

    from analytic.core.errors import ApproximationWarning

    f = an.formula("reliability.goodput")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        small = f.evaluate(checkpoint_time="1 min", mtbf="30 h", restart_time="5 min")
    assert 1 - small.magnitude < 0.1
    with pytest.warns(ApproximationWarning, match="reliability.daly.goodput"):
        f.evaluate(checkpoint_time="5 min", mtbf="30.4 min", restart_time="10 min")
    with pytest.warns(ApproximationWarning, match="10%"):
        f.subs(checkpoint_time="5 min", mtbf="1 h").subs(restart_time="10 min").value()
    with pytest.warns(ApproximationWarning, match="2/3"):
        an.formula("reliability.optimal_gpus").evaluate(
            checkpoint_time="5 min", interruption_rate="1e-6 / s"
        )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        an.formula("reliability.daly.goodput").evaluate(
            checkpoint_time="5 min", mtbf="30.4 min", restart_time="10 min",
            checkpoint_interval="14 min",
        )


def test_readme_states_what_the_catalogue_mutation_run_covered(docs):
    """The README's count of the catalogue its mutation run ran on and of the formulas it reached
    and did not, and of the formulas added since, each mutated on its own."""
    readme = docs
    added = (
        "compute.memory_bound.sp_relayout",
        "compute.stack_time",
        "pipeline.imbalance_time",
        "parallelism.tp.qk_gather_bytes",
        "parallelism.tp.qk_gather_bytes_backward",
        "compute.optimizer.bytes_per_param_foreach",
        "compute.optimizer.bytes_per_param_decoupled_adamw",
        "compute.optimizer.weight_decay_bytes_per_param",
        "compute.memory_bound.mxfp8_cast",
        "compute.memory_bound.nvfp4_cast",
        "memory.mxfp8_weight_cache",
        "memory.nvfp4_weight_cache",
        "memory.model_states.optimizer_muon",
        "compute.optimizer.bytes_per_param_muon",
        "compute.optimizer.newton_schulz_flops",
        "compute.optimizer.newton_schulz_time",
        "compute.memory_bound.fp8_current_cast",
        "compute.memory_bound.fp8_blockwise_cast",
        "memory.fp8_blockwise_weight_cache",
        "parallelism.ep.etp_gather_bytes",
        "compute.mamba2.scan_time",
        "compute.mamba2_scan_flops_per_token",
        "compute.memory_bound.mamba2_backward",
        "compute.memory_bound.mamba2_forward",
        "memory.activations.mamba2",
        "memory.activations.mamba2_sp",
        "memory.activations.mlp_gelu",
        "memory.activations.mlp_gelu_sp",
        "memory.activations.mlp_moe_gelu",
        "memory.activations.mlp_moe_gelu_sp",
        "model.params.mamba2",
        "model.params.moe_active_gelu",
        "model.params.moe_gelu",
        "model.params.moe_latent",
        "model.params.routed_experts_gelu",
        "parallelism.ep.allgather_dispatch_bytes",
        "parallelism.ep.nodes_reached",
        "compute.flops_per_token_megatron_core",
        "compute.flops_per_token_megatron_core.mla",
        "compute.megatron_core_mamba_flops_per_token",
        "model.params.router",
        "parallelism.overlap",
        "parallelism.overlapped_exposed_time",
        "pipeline.unpaired_share.combined_1f1b",
        "memory.activations.freed.mlp_swiglu",
        "memory.activations.freed.mlp_gelu",
        "compute.memory_bound.norms_forward",
        "memory.activations.fp8_freed.norm_output",
        "memory.activations.fp8_freed.norm_output_sp",
        "memory.activations.quantized_copy.norm_output",
        "memory.activations.quantized_copy.norm_output_sp",
        "memory.activations.quantized_copy.attention_output",
        "memory.activations.fp8_freed.mamba2_out_proj_input",
        "pipeline.in_flight.interleaved_chunk",
    )
    names = sorted(an.formulas())
    then = [n for n in names if n not in added]
    reached = then[: then.index("model.params.moe_bias")]
    assert (
        "all 801 non-equivalent mutants of the 118 catalogue formulas killed" in readme
        and f"On the catalogue of {len(then)} formulas" in readme
        and f"it reached the first {len(reached)} formulas in sorted order"
        f" (`collectives.*` to `{reached[-1]}`)" in readme
        and f"The {len(then) - len(reached)} formulas from `model.params.moe_bias` on" in readme
        and f"The {len(added)} formulas added since ({', '.join(f'`{n}`' for n in added)})"
        in readme
        and len(names) == len(then) + len(added)
    )


def test_an_approximation_warning_points_at_the_callers_line():
    """On numbers (the formula's terms) and on a sympy expression alike, the warning names the line
    that asked for the value, not the library's."""
    import warnings

    import sympy

    f = an.formula("reliability.goodput")
    for ask in (
        lambda: f.evaluate(checkpoint_time="5 min", mtbf="30.4 min", restart_time="10 min"),
        lambda: f.subs(checkpoint_time=sympy.Integer(300)).evaluate(
            mtbf="30.4 min", restart_time="10 min"
        ),
        lambda: f.subs(checkpoint_time="5 min", mtbf="30.4 min")
        .subs(restart_time="10 min")
        .value(),
    ):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ask()
        assert caught and all(w.filename == __file__ for w in caught), [
            (w.filename, w.lineno) for w in caught
        ]
