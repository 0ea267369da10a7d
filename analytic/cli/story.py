"""The story of one training step as data: each line a number with its unit and the formula it
came from, in the order the source text tells it (batch, placement, memory, forward, backward and
DP reduction, optimizer, time, the whole run, failures)."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.errors import AnalyticError, PresetError
from ..core.units import Q, Quantity, is_quantity
from ..plan import Plan
from ..plan.layout import DP_REGIMES, GATHERED_REGIMES, regime
from ..presets import reliability_value, stack
from .essay import essay

#: per-tensor ZeRO-3's gather count under full recomputation (its third gather, in the recomputed
#: forward)
RECOMPUTED_GATHERS = "parallelism.dp.zero3_gathers_per_microbatch_recomputed_per_tensor"
#: the op classes of a step's compute as the story names them
OP_LABELS = {
    "gemm": "GEMMs (by shape, wave-quantised)",
    "attention": "fused attention",
    "memory_bound": "memory-bound kernels",
    "optimizer": "optimizer step",
}


@dataclass
class Line:
    section: str
    key: str
    label: str
    value: object  # Quantity, number or text
    formula: str = ""
    text: str = ""  # the source text's figure, where the configuration is the text's
    why: str = ""  # why the text's figure differs from ours, where it does

    def as_dict(self) -> dict:
        v = self.value
        if is_quantity(v):
            out = {
                "value": float(v.magnitude),
                "unit": f"{v.units:~P}" if not v.dimensionless else "",
            }
        else:
            out = {"value": v, "unit": ""}
        return {
            "section": self.section,
            "key": self.key,
            "label": self.label,
            **out,
            "formula": self.formula,
            "text": self.text,
            "text_differs_because": self.why,
        }


#: formula names a line of the story shows; --sources shows all
SHOWN_SOURCES = 3


def shown_sources(names: str, every: bool) -> str:
    """A line's formula names: at most :data:`SHOWN_SOURCES`, and how many more (``--sources`` shows
    all)."""
    listed = names.split(", ") if names else []
    if every or len(listed) <= SHOWN_SOURCES:
        return names
    return f"{', '.join(listed[:SHOWN_SOURCES])} +{len(listed) - SHOWN_SOURCES} more (--sources)"


def _tags(plan: Plan, quantity: str, *prefixes: str) -> str:
    """The catalogue formulas ``quantity`` came from, those under ``prefixes`` (the plan knows
    them)."""
    return ", ".join(s for s in plan.sources(quantity) if s.startswith(prefixes or ("",)))


def wasted_selective(plan: Plan):
    """The FLOPs Korthikanti's selective recomputation spends under FlashAttention, which keeps no
    attention scores for it to spare (so it saves no memory): None when the plan does not combine
    the two (a stack whose selective policy is op-level saves memory)."""
    lay = plan.layout
    if not (
        plan.flash_attention
        and lay.recompute == "selective"
        and stack(plan.stack).get("selective") == "attention"
        and (not lay.recompute_modules or "core_attn" in lay.recompute_modules)
    ):
        return None
    # the modules that do free memory
    rest = tuple(m for m in lay.recompute_modules if m != "core_attn")
    plain = plan.replace(
        layout=lay.replace(recompute="selective" if rest else "none", recompute_modules=rest)
    )
    return plan.hardware_flops() - plain.hardware_flops()


def node_host_memory(plan: Plan, host: Quantity) -> tuple[Quantity, Quantity | None, bool | None]:
    """(a node's offloaded activations, ``host`` per GPU times the GPUs of a node; the node's host
    memory, or None where the hardware gives none with a source; whether they fit, or None)."""
    node, dram = host * int(plan.inputs["gpus_per_node"]), plan.hardware.host_memory
    return node, dram, None if dram is None else bool(node <= dram)


def _run_step(plan: Plan) -> tuple:
    """The step time a run's days are counted at, and its name: the predicted one; None where the
    plan has none (no calibrated constants, a link without a bandwidth)."""
    try:
        return plan.step_time(), "predicted step time"
    except AnalyticError:
        return None, ""


def source_run() -> tuple[Plan, float]:
    """The plan of the run the source text describes, as it ran (essay.toml ``[ran]``: its
    validation case), and the run's published MFU (the case ``mfu_case``)."""
    from ..fit.cases import cases_by_id, find_folder, plan_of

    ran = essay()["ran"]
    cases = cases_by_id(find_folder(), (ran["case"], ran["mfu_case"]))
    return plan_of(cases[ran["case"]]["plan"]), float(cases[ran["mfu_case"]]["published"])


def fitting_changes(plan: Plan) -> list[tuple[str, Plan]]:
    """For a plan that does not fit, the least one-setting changes on the same GPUs that make it
    fit: the lowest higher ZeRO stage that does, and the lightest recomputation that does
    (selective, then full); each (what changed, the plan)."""
    lay, out = plan.layout, []
    chains = (
        [(f"zero={z}", dict(zero=z)) for z in range(int(lay.zero) + 1, 4)],
        [
            (f"recompute={r!r}", dict(recompute=r))
            for r in ("selective", "full")
            if lay.recompute != r
        ],
    )
    for chain in chains:
        for label, change in chain:
            try:
                other = plan.replace(layout=lay.replace(**change))
                if other.memory().fits:
                    out.append((label, other))
                    break
            except AnalyticError:  # a change the model or the stack does not take
                continue
    return out


@dataclass(frozen=True)
class Figures:
    """What the story's sections share: the plan, the MFU asked for, the replicas that reduce
    gradients (DP × CP: CP ranks hold the same weights), the step the run's days are counted at and
    its name, and the run's steps (None without training tokens)."""

    plan: Plan
    mfu: object
    replicas: int
    step: Quantity | None
    at: str
    steps: Quantity | None


def lines(plan: Plan, *, mfu=None, text: bool = False) -> list[Line]:
    """The story of ``plan``'s step. ``text``: put the source text's figures beside ours."""
    quoted = essay()["text"] if text else {}
    out: list[Line] = []

    def add(section, key, label, value, formula_name="", text_key=None):
        figure = quoted.get(text_key or key, {})
        out.append(
            Line(
                section,
                key,
                label,
                value,
                formula_name,
                figure.get("value", ""),
                figure.get("why", ""),
            )
        )

    step, at = _run_step(plan)
    steps = plan.value("steps") if plan.training_tokens is not None else None
    figures = Figures(plan, mfu, plan.layout.dp * plan.layout.cp, step, at, steps)
    for section in (_batch, _placement, _memory, _forward, _backward, _optimizer, _time):
        section(figures, add)
    if text:
        _as_it_ran(add)
    for section in (_run, _failures):
        section(figures, add)
    return out


def _batch(f: Figures, add) -> None:
    """Tokens and microbatches of a step."""
    plan, lay = f.plan, f.plan.layout
    mb = plan.microbatches
    add(
        "batch",
        "tokens_per_step",
        f"{plan.global_batch} sequences × {plan.seq_len} tokens",
        plan.tokens_per_step,
        "plan.tokens_per_step",
    )
    add(
        "batch",
        "microbatches",
        f"{lay.dp} DP replicas × {int(plan.global_batch) // int(lay.dp)} sequences, "
        f"microbatches of {plan.microbatch_size} per replica",
        mb,
        "plan.microbatches",
    )


def _placement(f: Figures, add) -> None:
    """GPUs, nodes, the link each parallel axis uses, layers and parameters per GPU."""
    plan, lay, m = f.plan, f.plan.layout, f.plan.model
    add(
        "placement",
        "gpus",
        f"GPUs = tp {lay.tp} × cp {lay.cp} × pp {lay.pp} × dp {lay.dp}",
        plan.gpus,
        "plan.gpus",
    )
    add(
        "placement",
        "nodes",
        f"nodes of {plan.inputs['gpus_per_node']}",
        int(plan.value("nodes").magnitude),
        "plan.nodes",
    )
    for axis, p in plan.placement().items():
        if p["size"] != 1:
            add(
                "placement",
                f"link_{axis}",
                f"{axis.upper()} {p['size']} (stride {p['stride']})",
                p["link"],
                "plan.placement",
            )
    per_stage = plan.value("layers_per_stage").magnitude
    add(
        "placement",
        "layers_per_stage",
        f"{m.layers} layers over {lay.pp} stages (the fullest holds {max(plan.layers_by_stage())})",
        round(float(per_stage), 4),
        "plan.layers_per_stage",
    )
    states = f"(Ψ + {m.mtp_modules} MTP)" if m.mtp_modules else "Ψ"
    twice = ", × 2: each rank holds two stages" if lay.schedule == "dualpipe" else ""
    add(
        "placement",
        "params_per_gpu",
        f"parameters per GPU ({states}/(t·p), experts /ep{twice})",
        plan.value("params_per_gpu"),
        _tags(plan, "params_per_gpu"),
    )


def _weights_label(plan) -> str:
    """What a GPU's weights are: 16-bit; beside them, where the plan counts Transformer Engine's
    quantized copies (a ``memory.*weight_cache`` among the weights' sources), those of the plan's
    format; or, kept quantized, the linears in that format alone (the embedding and the output
    layer in 16 bits)."""
    if not any(s.endswith("weight_cache") for s in plan.sources("memory.weights")):
        return "16-bit weights"
    if plan.layout.quantized_params:
        return f"{plan.dtype.upper()} weights (the embedding and the output layer in 16 bits)"
    return f"16-bit weights and their {plan.dtype.upper()} copies"


def _saved_label(plan) -> str:
    """How the linears' saved inputs are held, where the plan counts them quantized (a
    ``memory.activations.fp8_freed.*`` among the activations' sources): in the plan's format."""
    sources = plan.sources("memory.activations")
    if not any(s.startswith("memory.activations.fp8_freed.") for s in sources):
        return ""
    return f"; linears' inputs saved in {plan.dtype.upper()}"


def _memory(f: Figures, add) -> None:
    """Memory per GPU on the fullest stage, the allocator's peak, and the changes that make it
    fit."""
    plan, lay = f.plan, f.plan.layout
    mem = plan.memory()
    where = "" if lay.pp == 1 else f" on stage {mem.stage}, the fullest"
    z = lay.zero
    over = "dp·cp" if lay.cp > 1 else "dp"  # ZeRO shards over the ranks holding the same weights
    add(
        "memory",
        "weights",
        f"{_weights_label(plan)}{where}" + (f" (sharded over {over})" if z >= 3 else ""),
        mem.weights.to("GB"),
        _tags(plan, "memory.weights", "memory."),
    )
    grads = "fp32 gradient buffers" if plan.grad_dtype == "fp32" else "16-bit gradients"
    add(
        "memory",
        "gradients",
        grads + (f" (sharded over {over})" if z >= 2 else ""),
        mem.gradients.to("GB"),
        _tags(plan, "memory.gradients", "memory."),
    )
    add(
        "memory",
        "optimizer",
        f"Adam state + fp32 master weights (ZeRO-{z})",
        mem.optimizer.to("GB"),
        _tags(plan, "memory.optimizer", "memory."),
    )
    gathered = regime(GATHERED_REGIMES, lay)
    if gathered:
        label = {
            "memory.zero3_held": (
                "ZeRO-3 under PP: the stage's parameters and gradients, held unsharded"
            ),
            "memory.zero3_gathered": (
                "ZeRO-3 working set: two blocks' parameters gathered, one block's gradients"
            ),
        }
        add(
            "memory",
            "gathered",
            label[gathered],
            mem.gathered.to("GB"),
            _tags(plan, "memory.gathered", "memory.zero3"),
        )
    add(
        "memory",
        "activations",
        f"activations held{where} ({lay.schedule}, recompute {lay.recompute}"
        f"{'; 2 layers on device' if lay.offload_activations else ''}{_saved_label(plan)})",
        mem.activations.to("GB"),
        _tags(plan, "memory.activations", "memory.activations.", "memory.offload."),
    )
    if mem.optimizer_step.magnitude:
        add(
            "memory",
            "optimizer_step",
            "the optimizer step's temporaries: its peak, activations freed",
            mem.optimizer_step.to("GB"),
            _tags(plan, "memory.optimizer_step", "memory.optimizer_step."),
        )
    _memory_total(f, add, mem, where)


def _memory_total(f: Figures, add, mem, where: str) -> None:
    """What goes to the host, memory selective recomputation fails to save, the total, the
    allocator's peak and the changes that make the plan fit."""
    plan, lay = f.plan, f.plan.layout
    if lay.offloaded:
        _, dram, fits = node_host_memory(plan, mem.host)
        room = (
            ""
            if dram is None
            else f"; the node's {dram.to('TB'):.4g~P}: {'fits' if fits else 'DOES NOT FIT'}"
        )
        add(
            "memory",
            "host",
            f"{lay.offloaded} offloaded to host memory (per GPU; × {plan.inputs['gpus_per_node']} "
            f"a node{room})",
            mem.host.to("GB"),
            _tags(plan, "memory.host", "memory.offload."),
        )
    wasted = wasted_selective(plan)
    if wasted is not None:
        add(
            "memory",
            "selective_under_flash",
            "selective recomputation under FlashAttention: no memory saved (flash "
            "keeps no attention scores), FLOPs still spent",
            wasted,
            "compute.attention_core_forward_flops_per_token",
        )
    beside = (
        f" less {mem.outside.to('GB'):.4g~P} outside the allocator" if mem.outside.magnitude else ""
    )
    add(
        "memory",
        "total",
        f"total per GPU{where}, of {mem.hbm.to('GB'):.4g~P} HBM{beside}: "
        f"{'fits' if mem.fits else 'DOES NOT FIT'}",
        mem.total.to("GB"),
        "plan.memory.total",
    )
    # the reserve is fitted for one allocator's measured peaks, the memory outside it on snapshots
    try:
        peak, outside = plan.memory_peak().to("GB"), plan.memory_outside().to("GB")
        add(
            "memory",
            "peak",
            "predicted peak the allocator reserves (count ×"
            f" {(peak / mem.total).to('').magnitude:.3f})",
            peak,
            "memory.allocator_peak",
        )
        add(
            "memory",
            "device_peak",
            f"with the {outside:.4g~P} a process holds outside it on average: "
            f"{plan.memory_verdict()}",
            peak + outside,
            "memory.device_peak",
        )
    except PresetError:
        pass
    if not mem.fits:
        for label, other in fitting_changes(plan):
            key = "fits_with_" + "".join(ch if ch.isalnum() else "_" for ch in label).strip("_")
            add(
                "memory",
                key,
                f"fits on the same GPUs with {label}: {other.memory_verdict()}, step"
                f" {other.step_time().to('s'):.3g~P}, MFU {other.mfu():.3f}",
                other.memory().total.to("GB"),
                "plan.memory.total",
            )


def _forward(f: Figures, add) -> None:
    """A TP message, a stage's output and the logits of a microbatch."""
    plan, lay = f.plan, f.plan.layout
    # also a stage's output: [s/c, b, h] in 16 bits
    message = plan.value("communication.tp_message").to("MB")
    if lay.tp != 1:
        ops = " + ".join(
            k.replace("_", "-")
            for k in ("reduce_scatter", "all_gather", "all_reduce")
            if f"collectives.{k}.bytes_sent" in plan.sources("communication.tp")
        )
        add(
            "forward",
            "tp_message",
            f"each TP {ops} (2 per layer forward, 2 backward)",
            message,
            _tags(plan, "communication.tp_message"),
        )
    if lay.pp != 1:
        try:
            t = plan.value("communication_time.stage_output")
            add(
                "forward",
                "p2p_time",
                f"a stage's output ({message:.4g~P}) over one NIC",
                t.to("ms"),
                _tags(plan, "communication_time.stage_output"),
            )
        except AnalyticError:
            pass
    add(
        "forward",
        "logits",
        "logits of one microbatch (before vocabulary-parallel split)",
        plan.value("memory.logits.unsplit").to("GB"),
        _tags(plan, "memory.logits.unsplit"),
    )


def _backward(f: Figures, add) -> None:
    """Gradient traffic and each axis's bytes a step, with their times where links have them."""
    plan, lay, m = f.plan, f.plan.layout, f.plan.model
    replicas = f.replicas
    comm = plan.communication()
    try:  # times need every link's bandwidth; a preset without one still gets its bytes
        ctime = plan.communication_time()
    except AnalyticError as exc:
        ctime = None
        add("backward", "communication_time", f"communication times unavailable: {exc}", "—")
    if replicas != 1:
        kinds = regime(DP_REGIMES, lay)
        if lay.zero3_gather == "per-tensor" and lay.zero == 3:
            per_microbatch = kinds == DP_REGIMES[0][0]
            kinds += ", each tensor gathered alone, blocking" + (
                ", and again in the recomputed forward"
                if per_microbatch and RECOMPUTED_GATHERS in plan.sources("communication.dp")
                else ""
            )
        on_links = f", {ctime['dp'].to('s'):.3g~P} on its links" if ctime else ""
        add(
            "backward",
            "dp_bytes",
            f"DP gradient traffic per GPU per step ({kinds}{on_links})",
            comm["dp"].to("GB"),
            _tags(plan, "communication.dp", "collectives.", "parallelism."),
        )
        # all of it through the GPU's own NIC only when every DP peer is in another node
        if "scale_out_bandwidth" in plan.inputs and plan.placement()["dp"]["link"] == "scale-out":
            bw = Q(float(plan.inputs["scale_out_bandwidth"]), "byte/s")
            add(
                "backward",
                "dp_time",
                f"that traffic at {bw.to('GB/s'):.4g~P} (one NIC per GPU)",
                plan.value("communication_time.dp_one_nic").to("s"),
                _tags(plan, "communication_time.dp_one_nic", "collectives.transfer."),
            )
    for axis in ("tp", "pp", "cp", "ep"):
        if getattr(lay, axis) != 1:
            on_link = f" ({ctime[axis].to('s'):.3g~P} on its link)" if ctime else ""
            how = f", {plan.dispatcher} dispatcher" if axis == "ep" else ""
            add(
                "backward",
                f"{axis}_bytes",
                f"{axis.upper()} traffic per GPU per step{on_link}{how}",
                comm[axis].to("GB"),
                f"plan.communication.{axis}",
            )
    if m.is_moe and m.nodes_per_token and lay.ep != 1:
        add(
            "backward",
            "experts_per_node",
            "experts per node a token reaches at one scale-out copy's cost",
            round(float(plan.value("experts_per_node_at_same_cost").magnitude), 3),
            _tags(plan, "experts_per_node_at_same_cost"),
        )
        add(
            "backward",
            "experts_same_cost",
            f"experts reachable over {m.nodes_per_token} nodes at that cost",
            round(float(plan.value("experts_at_same_cost").magnitude), 3),
            _tags(plan, "experts_at_same_cost"),
        )


def _optimizer(f: Figures, add) -> None:
    """The parameters each rank updates."""
    plan, lay, m = f.plan, f.plan.layout, f.plan.model
    z = lay.zero
    shards = f"1/{f.replicas if z >= 1 else 1} of its stage's"
    if m.is_moe and lay.ep != 1:
        shards += f" dense parameters, 1/{f.replicas // lay.ep if z >= 1 else 1} of its experts"
    add(
        "optimizer",
        "optimizer_params",
        f"parameters each rank updates (ZeRO-{z}: {shards})",
        plan.value("optimizer_params"),
        _tags(plan, "optimizer_params"),
    )


def _time(f: Figures, add) -> None:
    """FLOPs, the step time by part, its interval and the stack's efficiency, MFU."""
    plan = f.plan
    add(
        "time",
        "flops",
        "model FLOPs per step (6·N_active·D)",
        plan.model_flops("6nd"),
        _tags(plan, "flops.6nd", "compute."),
    )
    recompute = {"none": "no"}.get(plan.layout.recompute, plan.layout.recompute)
    flash = ", FlashAttention backward" if plan.flash_attention else ""
    add(
        "time",
        "hardware_flops",
        f"FLOPs executed per step ({recompute} recomputation{flash})",
        plan.hardware_flops(),
        _tags(plan, "flops.hardware", "compute."),
    )
    if f.mfu is not None:
        add(
            "time",
            "step_time_mfu",
            f"step time at MFU {float(f.mfu):.0%}",
            plan.step_time(mfu=f.mfu),
            "compute.train_time",
        )
    try:
        st = plan.step_time()
        _time_parts(plan, st, add)
        _step_line(plan, st, add)
        add(
            "time",
            "mfu",
            "predicted MFU (6·N_active·D)",
            plan.mfu(),
            _tags(plan, "mfu", "compute.mfu", "compute.training_flops"),
        )
        add(
            "time",
            "mfu_palm",
            "predicted MFU (PaLM's 6N + 12LHQT: attention counted)",
            float(plan.value("mfu.palm").to("").magnitude),
            _tags(plan, "mfu.palm", "compute.mfu", "compute.flops_per_token_palm"),
        )
        per_gpu = (plan.model_flops("megatron-core") / st / plan.gpus).to("TFLOP/s").magnitude
        add(
            "time",
            "tflops_megatron_core",
            "predicted TFLOP/s per GPU (Megatron-Core's count, as its logs print them)",
            float(per_gpu),
            _tags(plan, "flops.megatron-core", "compute.flops_per_token"),
        )
    except AnalyticError as exc:
        add("time", "step_time", f"predicted step time unavailable: {exc}", "—")


def _time_parts(plan, st, add) -> None:
    """The step time by part, each exposed part with why it was not hidden."""
    exposure = plan.exposure()
    for k, v in plan.time_breakdown(ops=True).items():
        # smaller: a zero the structure's programs leave as rounding
        if abs(float(v / st)) > 1e-12:
            label = f"  {OP_LABELS.get(k, k)}"
            if k in exposure:
                e = exposure[k]
                window = f", window {e['window'].to('s'):.4g~P}" if k == "dp" else ""
                label += f" exposed ({e['why']}; traffic {e['traffic'].to('s'):.4g~P}{window})"
            if k == "imbalance":
                slow = plan.slowest_stage()
                label = (
                    f"  slowest stage's excess (stage {slow['stage']} of {plan.layout.pp}: "
                    f"{slow['compute'].to('s'):.4g~P} of compute against the average "
                    f"{slow['average'].to('s'):.4g~P})"
                )
            if k in ("gemm", "attention") and plan.layout.comm_sms:
                sms = plan.inputs["sms"]
                label += (
                    f" (on {sms - plan.layout.comm_sms} of {sms} SMs; {plan.layout.comm_sms}"
                    " run communication)"
                )
            add(
                "time",
                f"time_{k}",
                label,
                v,
                _tags(plan, f"time.{k}", "compute.", "collectives.", "pipeline."),
            )


def _step_line(plan, st, add) -> None:
    """The predicted step time, with the stack's efficiency, where it was fitted, and the
    interval."""
    try:
        low, high = plan.step_time_interval()
        coverage = plan.calibration.coverage
        spread = f"; {coverage:.0%} interval {low.to('s').magnitude:.3g}–{high.to('s'):.3g~P}"
    except AnalyticError:
        spread = ""
    host = "; the host's share of the Adam step not timed" if plan.layout.offload_optimizer else ""
    cal = plan.calibration
    efficiency = (
        ""
        if cal is None
        else (
            f"; stack efficiency {float(plan.inputs['stack_efficiency']):.3g}, "
            + (
                "pooled: no fitted source of its family"
                if cal.pooled
                else f"fitted on the {cal.key} family's sources"
            )
        )
    )
    add(
        "time",
        "step_time",
        f"predicted step time (calibrated model{efficiency}{spread}{host})",
        st,
        "plan.step_time",
    )


def _as_it_ran(add) -> None:
    """The run the source text describes, as it ran, and its published MFU."""
    ran, published = source_run()
    lay = ran.layout
    add(
        "time",
        "ran_mfu",
        f"as the run ran it (case {essay()['ran']['case']}, in the fit): {lay.schedule}, {lay.vpp}"
        f" chunks a stage, ZeRO-{lay.zero}, on {ran.stack}: {ran.memory().total.to('GB'):.4g~P},"
        f" {ran.memory_verdict()}, step {ran.step_time().to('s'):.3g~P}; its MFU (PaLM's count, as"
        f" published: {published:.2f})",
        float(ran.value("mfu.palm").to("").magnitude),
        "compute.mfu, compute.flops_per_token_palm",
    )


def _run(f: Figures, add) -> None:
    """Steps and days of compute."""
    plan = f.plan
    if f.steps is None:
        return
    add(
        "run",
        "steps",
        f"steps for {Q(float(plan.training_tokens), 'token'):.3g~P}",
        round(float(f.steps.magnitude)),
        _tags(plan, "steps"),
    )
    if f.step is not None:
        add(
            "run",
            "days",
            f"days of compute at the {f.at}",
            (f.step * f.steps.magnitude).to("day"),
            "compute.steps × plan.step_time",
        )
    if f.mfu is not None:  # the step at a given MFU, as its label says
        add(
            "run",
            "days_mfu",
            f"days of compute at MFU {float(f.mfu):.0%}",
            (plan.step_time(mfu=f.mfu) * f.steps.magnitude).to("day"),
            "compute.steps × compute.train_time",
        )


def _failures(f: Figures, add) -> None:
    """Interruptions, checkpoints and goodput."""
    plan = f.plan
    mtbf = plan.value("mtbf")
    r = reliability_value
    rate = (
        "the interruption rate given"
        if "interruption_rate" in plan.overrides
        else (
            f"Llama 3 rate: {r('llama3', 'unexpected_interruptions')} in"
            f" {r('llama3', 'period'):.4g~P} on {r('llama3', 'gpus'):,} GPUs"
        )
    )
    add(
        "failures",
        "mtbf",
        f"mean time between interruptions ({rate})",
        mtbf.to("hour"),
        _tags(plan, "mtbf"),
    )
    write = (
        "the checkpoint time given"
        if "checkpoint_time" in plan.overrides
        else f"16Ψ at {r('llama3', 'storage_bandwidth'):.4g~P}, Llama 3 storage"
    )
    add(
        "failures",
        "checkpoint_time",
        f"checkpoint write ({write})",
        plan.value("checkpoint_time"),
        _tags(plan, "checkpoint_time", "memory.")
        + ("" if "checkpoint_time" in plan.overrides else " / storage bandwidth"),
    )
    add(
        "failures",
        "checkpoint_interval",
        "Daly's optimal checkpoint interval",
        plan.value("checkpoint_interval").to("min"),
        _tags(plan, "checkpoint_interval", "reliability.daly"),
    )
    restart = (
        "the restart time given"
        if "restart_time" in plan.overrides
        else (
            f"a synchronous job's {r('synchronous_restart', 'time'):.4g~P} at O(100K) GPUs, Meta"
            " 2026"
        )
    )
    add(
        "failures",
        "goodput",
        f"goodput (Daly's exact expected time, restarts included: {restart})",
        float(plan.value("goodput").magnitude),
        _tags(plan, "goodput", "reliability."),
    )
    if f.steps is not None and f.step is not None:
        wall = (f.step * f.steps.magnitude / plan.value("goodput").magnitude).to("day")
        add(
            "failures",
            "wall_days",
            f"wall-clock days with failures, at the {f.at}",
            wall,
            _tags(plan, "train_time", "compute.steps", "reliability.daly.goodput"),
        )
        add(
            "failures",
            "interruptions",
            "expected interruptions over the run",
            round(float((wall / mtbf).to(""))),
            _tags(plan, "interruptions", "reliability.mtbf"),
        )
