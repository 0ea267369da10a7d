"""ZeRO-3 under a pipeline: keep the stage's parameters between microbatches, or gather them again
for every one?"""

import sympy

import analytic as an
from analytic.fit.derive import Derivation, S


def derive() -> Derivation:
    d = Derivation(
        "ZeRO-3 under a pipeline",
        "Should a pipelined ZeRO-3 stage keep its parameters unsharded from one microbatch to the"
        " next?",
    )
    extra, held, saved = _trade(d)
    _llama_405b(d, extra, held, saved)
    return d


def _trade(d: Derivation):
    """Memory that resharding saves against traffic it adds."""
    Psi, e, N = S("params", "element_bytes", "dp")
    Ls, m = sympy.symbols("L_s m", positive=True)
    d.step(
        "A GPU holds Ψ parameters of its pipeline stage, in L_s blocks; unsharded they take e bytes"
        " each, and the step runs m microbatches through the stage. The N_d ranks of its ZeRO group"
        " each keep 1/N_d of them"
    )
    held = d.check(
        Psi * e + Psi * e,
        "memory.zero3_held",
        "Keeping them (PyTorch's pipeline schedules with FSDP): the stage's parameters, gathered at"
        " the first microbatch, and their gradients, accumulated unsharded until the last"
        " backward:",
    )
    d.check(
        Psi * 2 + Psi * 4,
        "memory.zero3_held_fp32_gradients",
        "FSDP2 with reduce_dtype fp32 converts an unsharded gradient to fp32 whenever the sync is"
        " off, so a pipelined stage holds its 16-bit parameters and fp32 accumulated gradients, 2 +"
        " 4 bytes each:",
    )
    d.check(
        2 * Psi * e + Psi * e,
        "memory.zero3_gathered",
        "Resharding after every block instead, with Ψ one block's parameters: the block computing,"
        " the next one prefetched, and one block's gradients before their reduce-scatter:",
    )
    working = an.formula("memory.zero3_gathered").expr.subs(Psi, Psi / Ls)
    saved = d.step(
        "Memory that resharding saves, with Ψ/L_s parameters per block",
        sympy.factor(held - working),
    )

    def sent(kind, message):
        return an.formula(f"collectives.{kind}.bytes_sent").expr.subs(
            {S("message"): message, S("ranks"): N}
        )

    keep = d.step(
        "Traffic per step when the stage is kept: one all-gather and one reduce-scatter of Ψ·e",
        sent("all_gather", Psi * e) + sent("reduce_scatter", Psi * e),
    )
    reshard = d.step(
        "Traffic per step when it is resharded: every microbatch gathers the parameters for its"
        " forward and again for its backward, and reduce-scatters its gradients",
        m * (2 * sent("all_gather", Psi * e) + sent("reduce_scatter", Psi * e)),
    )
    extra = d.step("Traffic that resharding adds", sympy.factor(reshard - keep))
    d.step(
        "Bytes sent for each byte of memory saved; it grows with m, which a pipeline wants large"
        " for its bubble",
        sympy.simplify(extra / saved),
    )
    return extra, held, saved


def _llama_405b(d: Derivation, extra, held, saved):
    """The trade on TorchTitan's 405B 3D run."""
    Psi, e, N = S("params", "element_bytes", "dp")
    Ls, m = sympy.symbols("L_s m", positive=True)
    plan = an.Plan(
        an.model("llama3-405b"),
        an.hardware("h100-sxm"),
        an.Layout(tp=8, pp=8, dp=8, zero=3, sequence_parallel=True, recompute="full"),
        seq_len=8192,
        global_batch=256,
        microbatch_size=4,
    )
    at = {
        Psi: sympy.nsimplify(plan.expr("params_per_gpu").value().to("parameter").magnitude),
        e: 2,
        Ls: sympy.Rational(plan.model.layers, 8),
        m: plan.microbatches,
        N: 8,
    }
    gb = lambda expr: an.Q_(float(expr.subs(at)), "byte").to("GB")  # noqa: E731
    d.number(
        "Llama 3 405B, TP8 PP8 FSDP8 (TorchTitan's 3D run): memory held by keeping the stage",
        gb(held),
        "held_405b",
    )
    d.number("memory that resharding would save", gb(saved), "saved_405b")
    nic = an.hardware("h100-sxm").scale_out_bandwidth
    d.number(
        f"traffic that resharding would add over {plan.microbatches} microbatches",
        gb(extra),
        "extra_405b",
    )
    d.number(
        f"that traffic at one {nic.to('Gbit/s').magnitude:.0f} Gb/s NIC",
        (gb(extra) / nic).to("s"),
        "extra_405b_time",
    )
