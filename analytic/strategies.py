"""Hypothesis strategies for other projects' property-based tests.

In hypothesis's own style: plural names, keyword-only arguments, arguments validated when the
strategy is built (``InvalidArgument`` for impossible requests). ``st.from_type(an.Layout)``,
``st.from_type(an.Model)``, ``st.from_type(an.Hardware)`` and ``st.from_type(an.Plan)`` work
once hypothesis is imported (registered through hypothesis's entry point).

Example: a project that shards a model checks its own per-GPU memory against the library::

    @given(plans(model="llama3-8b", gpus=8, seq_lens=[2048]))
    def test_my_sharding(plan):
        assert my_bytes_per_gpu(plan) <= plan.memory().total
"""

from __future__ import annotations

from hypothesis import reject
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from .core.choices import default_stack
from .core.errors import UnknownNameError
from .core.units import Q
from .plan import (
    SCHEDULES,
    ZERO3_GATHERS,
    Layout,
    Plan,
    divisors,
    hybrid_pipeline_refusal,
    selective_refusal,
    sequence_unit,
    tiles,
)
from .presets import hardware as _hardware
from .presets import hardwares as _hardwares
from .presets import model as _model
from .presets import models as _models
from .presets import stack as _stack
from .presets.hardware import Hardware
from .presets.model import Model

__all__ = ["models", "hardwares", "layouts", "plans", "collective_calls"]


def _check_positive_int(name, value, allow_none=True):
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgument(f"{name}={value!r} must be a positive integer")


def _preset(kind: str, value, load):
    """A preset name loaded (an unknown one is an invalid argument, in hypothesis's terms)."""
    if not isinstance(value, str):
        return value
    try:
        return load(value)
    except UnknownNameError as exc:
        raise InvalidArgument(f"{kind}={value!r}: {exc}") from None


def models(*, names=None, moe: bool | None = None) -> st.SearchStrategy[Model]:
    """Preset models (all, the given ``names``, or only MoE / dense ones)."""
    known = _models()
    chosen = list(names) if names is not None else known
    unknown = [n for n in chosen if n not in known]
    if unknown:
        raise InvalidArgument(f"unknown model names {unknown}; known: {known}")
    if moe is not None:
        chosen = [n for n in chosen if _model(n).is_moe == moe]
    if not chosen:
        raise InvalidArgument("no preset model matches")
    return st.sampled_from(chosen).map(_model)


def hardwares(*, names=None, with_scale_out: bool = False) -> st.SearchStrategy[Hardware]:
    """Preset accelerators (optionally only those with a scale-out bandwidth)."""
    known = _hardwares()
    chosen = list(names) if names is not None else known
    unknown = [n for n in chosen if n not in known]
    if unknown:
        raise InvalidArgument(f"unknown hardware names {unknown}; known: {known}")
    if with_scale_out:
        chosen = [n for n in chosen if _hardware(n).scale_out is not None]
    if not chosen:
        raise InvalidArgument("no preset hardware matches")
    return st.sampled_from(chosen).map(_hardware)


@st.composite
def _layouts(draw, gpus, model, max_tp, schedules, scale_up_domain):
    gpus = gpus if gpus is not None else draw(st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128, 256]))
    heads = model.heads if model is not None else None
    tps = [
        d
        for d in divisors(gpus)
        if d <= max_tp
        and tiles(d, scale_up_domain or d)
        and (
            heads is None
            or (heads % d == 0 and (model.kv_heads % d == 0 or d % model.kv_heads == 0))
        )
    ]
    tp = draw(st.sampled_from(tps))
    rest = gpus // tp
    pps = [
        d
        for d in divisors(rest)
        if model is None or (d <= model.layers and not hybrid_pipeline_refusal(model, d, 1))
    ]
    pp = draw(st.sampled_from(pps))
    dp = rest // pp
    eps = [
        d for d in divisors(dp) if model is not None and model.is_moe and model.experts % d == 0
    ] or [1]
    ep = draw(st.sampled_from(eps))
    allowed = [
        s for s in schedules if (s != "dualpipe" or pp % 2 == 0) and (s != "interleaved" or pp > 1)
    ]
    if not allowed:
        reject()  # no schedule asked for runs on this many stages
    schedule = draw(st.sampled_from(allowed))
    vpp = 1
    # whole layers a model chunk, as Megatron's stacks (the default) split them
    if schedule == "interleaved":
        vpps = [
            v
            for v in range(2, 5)
            if model is None
            or (model.layers % (pp * v) == 0 and not hybrid_pipeline_refusal(model, pp, v))
        ]
        if vpps:
            vpp = draw(st.sampled_from(vpps))
        else:
            schedule = "1f1b"
    zero = draw(st.integers(0, 3))
    return Layout(
        tp=tp,
        pp=pp,
        dp=dp,
        ep=ep,
        vpp=vpp,
        zero=zero,
        sequence_parallel=tp > 1 and draw(st.booleans()),
        recompute=draw(st.sampled_from(["none", "selective", "full"])),
        schedule=schedule,
        zero3_gather=draw(st.sampled_from(ZERO3_GATHERS)) if zero == 3 else "per-block",
    )


def layouts(*, gpus: int | None = None, model: Model | str | None = None, max_tp: int = 8,
            schedules=SCHEDULES, scale_up_domain: int | None = None) -> st.SearchStrategy[Layout]:
    """Valid layouts whose degrees multiply to ``gpus``; with ``model``, TP divides the heads, PP
    does not exceed the layers and EP divides the experts; with ``scale_up_domain``, TP groups tile
    the domain (``analytic.plan.tiles``). (Microbatch divisibility depends on the batch:
    :func:`plans` takes care of it.)"""
    _check_positive_int("gpus", gpus)
    _check_positive_int("max_tp", max_tp, allow_none=False)
    _check_positive_int("scale_up_domain", scale_up_domain)
    model = _preset("model", model, _model)
    if model is not None and not isinstance(model, Model):
        raise InvalidArgument(f"model={model!r} must be a Model or a preset name")
    bad = [s for s in schedules if s not in SCHEDULES]
    if bad or not schedules:
        raise InvalidArgument(
            f"schedules={schedules!r}: expected a non-empty subset of {SCHEDULES}"
        )
    return _layouts(gpus, model, max_tp, tuple(schedules), scale_up_domain)


@st.composite
def _plans(draw, model, hardware, gpus, seq_lens, microbatches):
    m = draw(models()) if model is None else model
    hw = draw(hardwares(with_scale_out=True)) if hardware is None else hardware
    # what the platform's stack runs (Plan's rules): its schedules, selective recomputation where
    # modelled, its highest ZeRO stage
    name = default_stack(hw.platform)
    props = _stack(name)
    lay = draw(
        layouts(
            gpus=gpus,
            model=m,
            max_tp=hw.scale_up_domain,
            schedules=props.get("schedules", SCHEDULES),
            scale_up_domain=hw.scale_up_domain,
        )
    )
    if lay.recompute == "selective" and selective_refusal(
        name, props.get("selective"), m, bool(props["attention"])
    ):
        lay = lay.replace(recompute=draw(st.sampled_from(["none", "full"])))
    if lay.zero > props.get("max_zero", 3):
        lay = lay.replace(zero=draw(st.integers(0, props["max_zero"])), zero3_gather="per-block")
    # each length made a multiple of what the layout splits it into (sequence_unit); none past a
    # learned position table (check_sequence)
    unit = sequence_unit(lay.cp, lay.tp, lay.sequence_parallel)
    fitting = [s if s % unit == 0 else unit * s for s in seq_lens]
    fitting = [s for s in fitting if m.position != "learned" or s <= m.max_seq_len]
    if not fitting:
        reject()  # no length asked for fits this model's position table
    seq = draw(st.sampled_from(fitting))
    mult = lay.pp if lay.schedule == "interleaved" else 2 if lay.schedule == "dualpipe" else 1
    per_replica = mult * draw(st.integers(1, microbatches))
    mb_size = draw(st.sampled_from([1, 2]))
    dtype = "bf16" if "bf16" in hw.peaks else next(iter(hw.peaks))
    return Plan(
        m,
        hw,
        lay,
        seq_len=seq,
        global_batch=lay.dp * per_replica * mb_size,
        microbatch_size=mb_size,
        dtype=dtype,
    )


def plans(*, model: Model | str | None = None, hardware: Hardware | str | None = None,
          gpus: int | None = None, seq_lens=(1024, 2048, 4096, 8192),
          microbatches: int = 16) -> st.SearchStrategy[Plan]:
    """Valid plans: a layout of ``gpus`` for ``model`` on ``hardware`` with a batch that splits into
    the microbatches the schedule needs."""
    _check_positive_int("gpus", gpus)
    _check_positive_int("microbatches", microbatches, allow_none=False)
    if not seq_lens or any(
        isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in seq_lens
    ):
        raise InvalidArgument(f"seq_lens={seq_lens!r} must be positive integers")
    model, hardware = _preset("model", model, _model), _preset("hardware", hardware, _hardware)
    return _plans(model, hardware, gpus, tuple(seq_lens), microbatches)


def collective_calls(
    *, min_ranks: int = 2, max_ranks: int = 1024, min_bytes: float = 1.0, max_bytes: float = 1e12
) -> st.SearchStrategy[dict]:
    """Keyword arguments for a collective formula: message, ranks, bandwidth, latency
    (Quantities)."""
    _check_positive_int("min_ranks", min_ranks, allow_none=False)
    _check_positive_int("max_ranks", max_ranks, allow_none=False)
    if min_ranks > max_ranks:
        raise InvalidArgument(f"min_ranks={min_ranks} exceeds max_ranks={max_ranks}")
    if not 0 < min_bytes <= max_bytes:
        raise InvalidArgument(f"need 0 < min_bytes <= max_bytes, got {min_bytes}, {max_bytes}")
    return st.fixed_dictionaries(
        {
            "message": st.floats(min_bytes, max_bytes).map(lambda x: Q(x, "byte")),
            "ranks": st.integers(min_ranks, max_ranks),
            "bandwidth": st.floats(1e8, 1e13).map(lambda x: Q(x, "byte/s")),
            # no sub-femtosecond ones
            "latency": (
                st.floats(0, 1e-3).map(lambda x: Q(x if x >= 1e-15 else 0.0, "s"))
            ),
        }
    )
