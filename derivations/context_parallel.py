"""Context parallelism: Ring Attention's overlap condition and activation memory per device."""

import sympy

import analytic as an
from analytic.fit.derive import Derivation, S


def derive() -> Derivation:
    d = Derivation(
        "Context parallelism",
        "When does passing K/V blocks around a ring cost nothing, and what does it save?",
    )
    c, dm, F, Bw = (
        sympy.Symbol("c", positive=True),
        sympy.Symbol("d", positive=True),
        *S("peak_flops", "bandwidth"),
    )
    flops = d.step(
        "A device's block of c queries against a block of c keys and values: QKᵀ and attention over"
        " V, 2·c²·d FLOPs each",
        4 * dm * c**2,
    )
    bytes_ = d.step(
        "Meanwhile it passes its K and V blocks (16-bit) to the next device", 2 * 2 * c * dm
    )
    cond = sympy.solve(sympy.Eq(flops / F, bytes_ / Bw), c)
    c_min = d.step(
        "Compute hides the transfer when the block is at least", [r for r in cond if r != 0][0]
    )
    d.check(c_min, "parallelism.cp.min_block")
    hw = an.hardware("h100-sxm")
    for label, bw in (
        ("NVLink (450 GB/s)", hw.scale_up_bandwidth),
        ("a 400 Gbit/s NIC", hw.scale_out_bandwidth),
    ):
        d.number(
            f"H100 over {label}: tokens per device at least",
            an.formula("parallelism.cp.min_block").evaluate(
                peak_flops=hw.peak_flops("bf16"), bandwidth=bw
            ),
        )
    s, cp = S("seq_len", "cp")
    d.step("So a sequence s split c ways needs s/c ≥ F/B: s ≥ c·F/B.")
    layer = an.formula("memory.activations.layer_flash_swiglu_sp").expr
    per_dev = d.step(
        "Activations per layer per device fall as 1/c (flash attention keeps no s² term)",
        layer.subs(s, s / cp),
    )
    assert sympy.simplify(per_dev * cp - layer) == 0
    return d
