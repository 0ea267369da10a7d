"""Why tensor parallelism stays inside a node: TP communication over compute per layer, in closed
form."""

import sympy

import analytic as an
from analytic.fit.derive import Derivation, S


def derive() -> Derivation:
    d = Derivation(
        "Why TP stays inside a node",
        "How does one layer's TP communication time compare with its compute as t grows?",
    )
    s, b, h, e, t, F, Bw = S(
        "seq_len", "microbatch_size", "hidden", "element_bytes", "tp", "peak_flops", "bandwidth"
    )
    d.step(
        "Megatron's f and g operators: g all-reduces the row-parallel output after attention and"
        " after the MLP in the forward pass; f does the same for the input gradients in the"
        " backward pass"
    )
    d.check(
        sympy.Integer(2 + 2),
        "parallelism.tp.allreduces_per_layer",
        "All-reduces per layer per microbatch:",
    )
    msg = d.check(
        s * b * h * e,
        "parallelism.tp.allreduce_bytes",
        "Each carries the layer's activation [s, b, h]:",
    )
    comm = d.step(
        "Ring time of the four all-reduces on a link of bandwidth B (latency neglected)",
        4
        * an.formula("collectives.all_reduce.time").expr.subs(
            {S("message"): msg, S("ranks"): t, S("latency"): 0}
        ),
    )
    c = sympy.Symbol("c_l", positive=True)  # training FLOPs per token of one layer
    compute = d.step(
        "Compute of the layer, split t ways: c_l training FLOPs per token (3 × forward) on s·b"
        " tokens",
        c * s * b / (t * F),
    )
    ratio = sympy.simplify(comm / compute)
    d.step("Communication over compute", ratio, "ratio")
    m = an.model("llama3-405b")
    per_token = 3 * (
        an.formula("compute.attention_forward_flops_per_token")
        .bind({**m.inputs(), "seq_len": 8192})
        .expr
        + an.formula("compute.mlp_forward_flops_per_token.swiglu").bind(m.inputs()).expr
    )
    hw = an.hardware("h100-sxm")
    vals = {
        h: m.hidden,
        e: 2,
        c: per_token,
        F: sympy.nsimplify(hw.peak_flops("bf16").to("FLOP/s").magnitude),
    }
    for label, bw in (
        ("NVLink, 450 GB/s per direction", hw.scale_up_bandwidth),
        ("a 400 Gbit/s NIC", hw.scale_out_bandwidth),
    ):
        r = ratio.subs(vals).subs(Bw, sympy.nsimplify(bw.to("byte/s").magnitude))
        d.number(
            f"Llama 3 405B layer, s = 8,192, on H100 over {label}: ratio at t = 8",
            float(r.subs(t, 8)),
        )
        for frac in (sympy.Rational(1, 10), 1):
            tmax = sympy.solve(sympy.Eq(r, frac), t)[0]
            d.number(f"  largest t keeping it under {frac}", float(tmax))
    return d
