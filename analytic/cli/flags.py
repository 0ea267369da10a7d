"""Reading the command line's flags into the library's objects: counts read exactly, the batch, the
search's and the plan's inputs. A mistake is a :class:`CLIError`: one line, exit status 2."""

from __future__ import annotations

import argparse


class CLIError(Exception):
    """A command-line mistake: one line, exit 2."""


class Parser(argparse.ArgumentParser):
    """An argument parser whose mistakes are a :class:`CLIError`, not argparse's usage text."""

    def error(self, message):
        raise CLIError(f"{self.prog}: {message}")

    def parse_known_args(self, args=None, namespace=None):
        """argparse's, with an empty value refused: ``--tp ''`` is a mistake, not the default."""
        ns, extra = super().parse_known_args(args, namespace)
        for key, value in vars(ns).items():
            if any(
                isinstance(v, str) and not v.strip()
                for v in (value if isinstance(value, list) else [value])
            ):
                raise CLIError(f"--{key.replace('_', '-')}: expected a value, got {value!r:.80}")
        return ns, extra


def _read(reader, name: str, text, **kw):
    """``reader(f"--{name}", text, **kw)`` (a reader of analytic.core.values); its mistake as a
    CLIError."""
    from ..core.errors import AnalyticError

    try:
        return reader(f"--{name}", text, **kw)
    except AnalyticError as exc:
        raise CLIError(str(exc)) from None


def count_flag(text: str, name: str, minimum: int = 1) -> int:
    """A count flag, read exactly (never through a float): '8', '16384', '16Ki', '2e3'."""
    from ..core.counts import parse_count

    return _read(parse_count, name, str(text), minimum=minimum)


def _global_batch(tokens, sequences, seq: int) -> tuple[int, str]:
    """Sequences per step from --batch-tokens or --global-batch (exactly one), and any note."""
    if tokens is not None and sequences is not None:
        raise CLIError("--batch-tokens and --global-batch: give one")
    if tokens is not None:
        from ..core.counts import step_tokens, suffixed_count

        parsed = suffixed_count(str(tokens))
        if parsed is not None:  # a count ('16M'), read without importing sympy and pint
            count, note = step_tokens(*parsed, seq, "--batch-tokens", str(tokens))
        else:  # a quantity of tokens ('16 Mitoken')
            from ..core.values import batch_tokens

            count, note = batch_tokens(str(tokens), seq, name="--batch-tokens")
        return count // seq, note
    if sequences is not None:
        return count_flag(str(sequences), "global-batch"), ""
    raise CLIError("--batch-tokens or --global-batch: give the batch")


#: the plan flags (dests) that search and the search-based plots read; any other is refused
SEARCH_FLAGS = {
    "model",
    "hardware",
    "gpus",
    "seq",
    "batch_tokens",
    "global_batch",
    "dtype",
    "async_tp",
    "comm_sms",
    "zero",
    "recompute",
    "schedule",
    "microbatch_size",
    "vpp",
    "scale_up_bandwidth",
    "scale_out_bandwidth",
    "scale_up_domain",
    "flash_attention",
    "zero3_gather",
    "tp",
    "pp",
    "dp",
    "cp",
    "ep",
    "outside_bytes",
    "stack",
    "hbm",
    "fp8_recipe",
    "optimizer",
    "dispatcher",
    "etp",
    "pipeline_layout",
    "bf16_layers",
    "grad_dtype",
    "moment_dtype",
    "recompute_modules",
    "offload_activations",
    "offload_optimizer",
    "fp8_activations",
    "quantized_params",
    "first_stage_layers",
    "last_stage_layers",
    "ends_as_layers",
    "ep_overlap",
    "expert_capacity",
    "routing_imbalance",
    "drop_beyond_capacity",
}
PLAN_FLAGS = SEARCH_FLAGS | {
    "sequence_parallel",
    "mfu",
    "tokens",
    "profile",
    "allow_cross_node_tp",
    "recompute_layers",
}
#: the plan flags that leave the source text's layout, batch and stack as they are, so that its
#: numbers still print beside the plan's; any other plan flag makes the configuration the user's
TEXT_KEPT_BY = {
    "model",
    "hardware",
    "scale_up_bandwidth",
    "scale_out_bandwidth",
    "scale_up_domain",
    "mfu",
    "tokens",
    "grad_dtype",
    "moment_dtype",
}


def hardware_overrides(get) -> dict:
    """The hardware flags given (``get(dest)`` reads one): link bandwidths as written (read with
    their units by Hardware and Plan), the scale-up domain as a count."""
    out = {
        k: get(k)
        for k in ("hbm", "scale_up_bandwidth", "scale_out_bandwidth")
        if get(k) is not None
    }
    if get("scale_up_domain") is not None:
        out["scale_up_domain"] = count_flag(get("scale_up_domain"), "scale-up-domain")
    return out


def outside_override(get) -> dict:
    """``--outside-bytes`` as Plan's and search's ``outside_bytes=`` (read with its unit there),
    where given."""
    return {} if get("outside_bytes") is None else {"outside_bytes": get("outside_bytes")}


def refuse_unread(args, read: set, what: str, why: str) -> None:
    """A flag the command would ignore is an error, not a silent no-op."""
    unread = [k for k in sorted(PLAN_FLAGS - read) if getattr(args, k, None) is not None]
    if unread:
        flags = ", ".join(
            "--sp/--no-sp" if k == "sequence_parallel" else "--" + k.replace("_", "-")
            for k in unread
        )
        raise CLIError(f"{what}: {flags} not read here ({why})")


def _zero3_gather(flag, zero: int) -> dict:
    """``{"zero3_gather": flag}`` where ``--zero3-gather`` was given (refused with another stage
    than 3); the default is Layout's and search's."""
    if flag is not None and zero != 3:
        raise CLIError(
            f"--zero3-gather: says how ZeRO-3 gathers parameters; not read with --zero {zero}"
        )
    return {} if flag is None else {"zero3_gather": flag}


def search_inputs(args, what: str, read: frozenset = frozenset()):
    """Model, hardware (with any link overrides), GPUs (a count, or a list for '--gpus
    256,512,1024'), sequence length, global batch, the search's keyword arguments and a note, for
    search and the plots built on it (``read``: the other plan flags the command reads itself)."""
    import analytic as an

    refuse_unread(
        args,
        SEARCH_FLAGS | read,
        what,
        "search counts every layout alike: the stack's gradient and moment "
        "dtypes, sequence parallelism wherever tp > 1; 'analytic step' evaluates one layout",
    )
    if not (args.model and args.hardware and args.gpus and args.seq):
        raise CLIError(
            f"{what}: give --model, --hardware, --gpus and --seq (and --batch-tokens or"
            " --global-batch)"
        )
    seq = count_flag(args.seq, "seq")
    gb, note = _global_batch(args.batch_tokens, args.global_batch, seq)
    hw = an.hardware(args.hardware)
    overrides = hardware_overrides(lambda k: getattr(args, k))
    if overrides:
        hw = hw.replace(**overrides)
    counts = [count_flag(g, "gpus") for g in str(args.gpus).split(",")]
    return (
        model_flag(args.model),
        hw,
        counts[0] if len(counts) == 1 else counts,
        seq,
        gb,
        search_keywords(args),
        note,
    )


def layout_option_flags(get) -> dict:
    """The Layout fields ``step`` and ``search`` read alike from their flags: activations offloaded
    or cached in FP8, parameters kept quantized, the all-to-alls overlapped, the ends counted as
    layers, the recompute modules, the end stages' layers and the optimizer's offloaded share, where
    given."""
    from ..core.values import share

    out = {
        k: True
        for k in (
            "offload_activations", "fp8_activations", "quantized_params", "ep_overlap",
            "ends_as_layers",
        )
        if get(k)
    }
    if get("recompute_modules"):
        out["recompute_modules"] = tuple(get("recompute_modules"))
    out |= {
        k: count_flag(str(get(k)), k.replace("_", "-"), minimum=0)
        for k in ("first_stage_layers", "last_stage_layers")
        if get(k) is not None
    }
    if get("offload_optimizer") is not None:
        out["offload_optimizer"] = _read(share, "offload-optimizer", get("offload_optimizer"))
    return out


def bf16_layers_flag(text) -> dict:
    """``--bf16-layers FIRST,LAST`` as Plan's and search's ``bf16_layers=(first, last)``, where
    given."""
    if text is None:
        return {}
    parts = str(text).split(",")
    if len(parts) != 2:
        raise CLIError(
            "--bf16-layers: expected FIRST,LAST (the layers kept in BF16 at each end), got"
            f" {text!r:.80}"
        )
    return {"bf16_layers": tuple(count_flag(p.strip(), "bf16-layers", minimum=0) for p in parts)}


def capacity_flag(text, drop=False) -> dict:
    """``--expert-capacity C`` (``--drop-beyond-capacity``) as Plan's and search's
    ``expert_capacity=C`` (``pad_to_capacity=False``), where given."""
    if text is None:
        if drop:
            raise CLIError(
                "--drop-beyond-capacity: drops the tokens beyond --expert-capacity, "
                "which is not given"
            )
        return {}
    try:
        value = float(text)
    except ValueError:
        raise CLIError(f"--expert-capacity: expected a number ≥ 1, got {text!r:.80}") from None
    return {"expert_capacity": value} | ({"pad_to_capacity": False} if drop else {})


def search_keywords(args) -> dict:
    """The search flags given (the stack, dtype, FP8 recipe, optimizer, async TP, attention kernel,
    SMs for communication, ZeRO-3's gathers, the memory outside the allocator, the expert layers'
    TP, a pipeline layout and the layout choices) as search's and co-design's keywords."""
    options = layout_option_flags(lambda k: getattr(args, k, None))
    kw = {
        **{
            k: getattr(args, k)
            for k in (
                "dtype",
                "stack",
                "fp8_recipe",
                "optimizer",
                "dispatcher",
                "pipeline_layout",
                "grad_dtype",
                "moment_dtype",
                "routing_imbalance",
            )
            if getattr(args, k) is not None
        },
        **({"layout_options": options} if options else {}),
        **({} if args.etp is None else {"etp": count_flag(str(args.etp), "etp")}),
        **bf16_layers_flag(args.bf16_layers),
        **capacity_flag(args.expert_capacity, args.drop_beyond_capacity),
        **({"async_tp": True} if args.async_tp else {}),
        **({"flash_attention": False} if args.flash_attention is False else {}),
        **(
            {}
            if args.comm_sms is None
            else {"comm_sms": count_flag(str(args.comm_sms), "comm-sms", minimum=0)}
        ),
        **_zero3_gather(args.zero3_gather, 3 if args.zero is None else int(args.zero)),
        **outside_override(lambda k: getattr(args, k)),
    }
    return kw | layout_choices(args)


#: the layout flags search and co-design read: a degree pinned, or one choice of a list searched
LAYOUT_CHOICE_FLAGS = (
    "tp",
    "pp",
    "dp",
    "cp",
    "ep",
    "zero",
    "recompute",
    "schedule",
    "microbatch_size",
    "vpp",
)


def layout_choices(args) -> dict:
    """The layout flags given, as search's keywords: each degree pinned (the others searched), the
    ZeRO stage, recomputation, schedule, microbatch size and virtual stages as one-choice lists."""
    kw = {}
    if args.zero is not None:
        kw["zero"] = (int(args.zero),)
    if args.recompute:
        kw["recompute"] = (args.recompute,)
    if args.schedule:
        kw["schedules"] = (args.schedule,)
    if args.microbatch_size:
        kw["microbatch_sizes"] = (count_flag(args.microbatch_size, "microbatch-size"),)
    if args.vpp:
        kw["vpps"] = (count_flag(args.vpp, "vpp", minimum=2),)
    kw.update(
        {
            axis: count_flag(getattr(args, axis), axis)
            for axis in ("tp", "pp", "dp", "cp", "ep")
            if getattr(args, axis) is not None
        }
    )  # pinned: search the other degrees
    return kw


def model_flag(value: str):
    """--model: a preset name, or a Hugging Face config.json (a path ending in .json)."""
    from ..presets import as_model

    return as_model(value)


def _presets(get) -> tuple:
    """The model and the hardware the flags name (a mistyped name is an error with close
    matches)."""
    import analytic as an

    return model_flag(get("model")), an.hardware(get("hardware"))


def build_plan(args) -> tuple[object, dict]:
    """A Plan from the flags; no flags at all gives the source text's configuration. Every count and
    the batch are read before sympy and pint are imported, so a mistake in one is said at once."""
    from .essay import essay

    given = {k: v for k, v in vars(args).items() if v is not None and k not in _NOT_PLAN}
    defaults = essay()["config"] if not any(k in given for k in ("model", "hardware")) else {}
    text_config = bool(defaults) and not any(k in given for k in PLAN_FLAGS - TEXT_KEPT_BY)
    get = lambda k: given.get(k, defaults.get(k))  # noqa: E731
    if get("model") is None or get("hardware") is None:
        raise CLIError(
            "--model and --hardware: give both (or neither, for the source text's configuration)"
        )
    tp, pp, dp, cp, ep, vpp = _degrees(get)
    if get("seq") is None or get("batch_tokens") is None and get("global_batch") is None:
        _presets(get)  # a preset's name mistyped is said first
    if get("seq") is None:
        raise CLIError("--seq: give the sequence length")
    seq = count_flag(str(get("seq")), "seq")
    global_batch, note = _global_batch(get("batch_tokens"), get("global_batch"), seq)
    notes = {"batch_tokens": note} if note else {}
    layout = _layout_kwargs(get, tp, pp, dp, cp, ep, vpp)
    plan_kw = (
        {}
        if get("microbatch_size") is None
        else {"microbatch_size": count_flag(str(get("microbatch_size")), "microbatch-size")}
    )
    links = hardware_overrides(get) | outside_override(get)

    import analytic as an

    from ..core.values import fraction

    model, hw = _presets(get)
    layout = an.Layout(**layout)
    tokens = get("tokens")
    if tokens is not None and " " not in str(tokens):
        # a count of tokens as typed, e.g. --tokens 15.6e12 or 15.6T
        tokens = count_flag(str(tokens), "tokens")
    plan_kw |= _plan_options(get)
    plan = an.Plan(
        model, hw, layout, seq_len=seq, global_batch=global_batch,
        flash_attention=get("flash_attention"), grad_dtype=get("grad_dtype"),
        moment_dtype=get("moment_dtype"), profile=get("profile"), training_tokens=tokens, **plan_kw,
        **links,
    )
    extra = {
        "mfu": _read(fraction, "mfu", str(get("mfu"))) if get("mfu") is not None else None,
        "text": text_config,
        "notes": notes,
    }
    return plan, extra


# a command's own flags, and argparse's, that state nothing of the plan
_NOT_PLAN = (
    "json",
    "command",
    "func",
    "top",
    "text",
    "question",
    "free",
    "target",
    "threshold",
    "link",
)


def _degrees(get) -> tuple[int, ...]:
    """tp, pp, dp, cp, ep and vpp from the flags, dp inferred from --gpus where given."""
    tp, pp, cp, ep, vpp = (count_flag(str(get(k) or 1), k) for k in ("tp", "pp", "cp", "ep", "vpp"))
    dp = count_flag(str(get("dp")), "dp") if get("dp") is not None else None
    if get("gpus") is not None:
        gpus = count_flag(str(get("gpus")), "gpus")
        if gpus % (tp * cp * pp):
            raise CLIError(f"--gpus: {gpus} is not divisible by tp·cp·pp = {tp * cp * pp}")
        inferred = gpus // (tp * cp * pp)
        if dp is not None and dp != inferred:
            raise CLIError(
                f"--dp: {dp} disagrees with --gpus {gpus} / (tp·cp·pp = {tp * cp * pp}) ="
                f" {inferred}"
            )
        dp = inferred
    dp = dp or 1
    return tp, pp, dp, cp, ep, vpp


def _layout_kwargs(get, tp, pp, dp, cp, ep, vpp) -> dict:
    """The Layout's keywords: what was typed, read; Layout owns every default of what was not."""
    from ..core.choices import sequence_parallel_default

    sp = get("sequence_parallel")
    layout = dict(
        tp=tp,
        pp=pp,
        dp=dp,
        cp=cp,
        ep=ep,
        vpp=vpp,
        sequence_parallel=bool(sp) if sp is not None else sequence_parallel_default(tp),
    )
    layout |= {k: get(k) for k in ("recompute", "schedule") if get(k) is not None}
    layout |= ({"async_tp": True} if get("async_tp") else {}) | layout_option_flags(get)
    if get("zero") is not None:
        layout["zero"] = int(get("zero"))
    if get("comm_sms") is not None:
        layout["comm_sms"] = count_flag(str(get("comm_sms")), "comm-sms", minimum=0)
    if get("recompute_layers") is not None:
        layout["recompute_layers"] = count_flag(str(get("recompute_layers")), "recompute-layers")
    layout |= _zero3_gather(get("zero3_gather"), int(get("zero") or 0))
    layout |= {
        k: get(k) if k == "pipeline_layout" else count_flag(str(get(k)), k)
        for k in ("pipeline_layout", "etp")
        if get(k) is not None
    }
    return layout


def _plan_options(get) -> dict:
    """The Plan's keywords of precision, optimizer, MoE and TP placement that were typed."""
    chosen = ("dtype", "stack", "optimizer", "fp8_recipe", "dispatcher", "routing_imbalance")
    plan_kw = {k: get(k) for k in chosen if get(k) is not None}
    plan_kw |= bf16_layers_flag(get("bf16_layers")) | capacity_flag(
        get("expert_capacity"), get("drop_beyond_capacity")
    )
    if get("allow_cross_node_tp"):
        plan_kw["allow_cross_node_tp"] = True
    return plan_kw
