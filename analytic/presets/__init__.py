"""Presets: models and hardware as data files, every number with a source."""

from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction
from functools import cache
from pathlib import Path

from ..core.cache import package_toml
from ..core.choices import FP8_RECIPES, PLATFORMS, TRAINING_DTYPES
from ..core.errors import InputError, PresetError, UnknownNameError
from ..core.units import Q
from ..core.values import as_quantity, choice
from .hardware import Calibration, Ceiling, Hardware
from .model import Model

HERE = Path(__file__).parent
CALIBRATION_FILE = HERE / "calibration.toml"


def _sourced(entry_name: str, field_name: str, item):
    if not isinstance(item, dict) or "value" not in item:
        raise PresetError(f"{entry_name}.{field_name}: expected {{ value = ..., source = ... }}")
    if not str(item.get("source", "")).strip():
        raise PresetError(f"{entry_name}.{field_name}: a preset number needs a source")
    return item["value"], item["source"]


def hardware_from_table(key: str, table: dict) -> Hardware:
    """Build a Hardware from one TOML table; every number must carry a source."""
    sources, peaks, kw = {}, {}, {}
    for dtype, item in table.get("peak", {}).items():
        value, sources[f"peak.{dtype}"] = _sourced(key, f"peak.{dtype}", item)
        peaks[dtype] = value
    for fld, attr in (
        ("hbm", "hbm"), ("hbm_bandwidth", "hbm_bandwidth"), ("scale_up_bandwidth", "scale_up"),
        ("scale_out_bandwidth", "scale_out"), ("gpus_per_node", "gpus_per_node"),
        ("scale_up_domain", "scale_up_domain"), ("scale_up_links", "scale_up_links"),
        ("sms", "sms"), ("host_memory", "host_memory")
    ):
        if fld in table:
            kw[attr], sources[fld] = _sourced(key, fld, table[fld])
    if not peaks:
        raise PresetError(f"{key}: no peak FLOP/s given")
    unknown = set(table) - {
        "name",
        "generation",
        "platform",
        "peak",
        "hbm",
        "hbm_bandwidth",
        "scale_up_bandwidth",
        "scale_out_bandwidth",
        "gpus_per_node",
        "scale_up_domain",
        "scale_up_links",
        "sms",
        "host_memory",
    }
    if unknown:
        raise PresetError(f"{key}: unknown fields {', '.join(sorted(unknown))}")
    if "platform" not in table:
        raise PresetError(f"{key}: no platform given (one of {', '.join(PLATFORMS)})")
    hw = Hardware(name=table.get("name", key), peaks=peaks, generation=table.get("generation", key),
                  platform=table["platform"], sources=sources, key=key, **kw)
    recipes = [d for d in TRAINING_DTYPES if d not in hw.peaks and peak_format(d) in hw.peaks]
    ceilings = {dtype: gemm_ceiling(key, dtype, hw) for dtype in (*hw.peaks, *recipes)}
    return replace(hw, ceilings={dtype: c for dtype, c in ceilings.items() if c is not None})


def _geometric_mean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


def table(name: str) -> dict:
    """presets/NAME.toml, parsed once a process (:func:`~analytic.core.cache.package_toml`)."""
    return package_toml(HERE / f"{name}.toml")


def peak_format(dtype: str) -> str:
    """The peak (presets/hardware.toml peak.*) ``dtype``'s GEMMs run at: a low-precision recipe's
    format's (mxfp8: fp8, nvfp4: fp4; presets/precisions.toml), else its own."""
    return (precision(dtype) or {}).get("peak", dtype)


def _ceiling_file() -> dict:
    return table("ceilings")


def _ceiling_tables() -> dict:
    return _ceiling_file()["gemm"]


def _hbm_measured(key: str) -> tuple[float, str] | None:
    """The measured HBM bandwidth of preset ``key`` over its datasheet's, and its source, or
    None."""
    entry = _ceiling_file()["hbm"].get(key, {}).get("bandwidth")
    if entry is None:
        return None
    value, source = _sourced(f"hbm.{key}", "bandwidth", entry)
    datasheet = _hardware_tables()[key]["hbm_bandwidth"]["value"]
    return (
        float(
            as_quantity("bandwidth", value).to("B/s").magnitude
            / as_quantity("hbm_bandwidth", datasheet).to("B/s").magnitude
        ),
        f"{source}: {value} ({entry['kernel']}), {entry['software']}",
    )


def memory_efficiency(hw: Hardware) -> tuple[float, str]:
    """``hw``'s measured HBM bandwidth over its datasheet's (presets/ceilings.toml [hbm]), else the
    fraction pooled over the measured devices; and a note where it is not the device's own
    measurement."""
    measured = _hbm_measured(hw.key) if hw.key in _hardware_tables() else None
    if measured is not None:
        return measured[0], ""
    return (
        _geometric_mean([_hbm_measured(k)[0] for k in _ceiling_file()["hbm"]]),
        (
            f"{hw.key or hw.name}: no measured HBM bandwidth, so the memory efficiency is the one"
            " pooled over the measured devices (presets/ceilings.toml [hbm]); pass"
            " memory_efficiency= or a profile"
        ),
    )


def _measured(key: str, dtype: str) -> tuple[float, str, str] | None:
    """The measured GEMM ceiling of preset ``key`` for ``dtype`` over the peak it runs at (a
    block-scaled recipe's: its format's, presets/precisions.toml), its source and what the
    measurement stands in for (``note``), from ceilings.toml (following ``same_as``), or None where
    it has none."""
    entry = _ceiling_tables().get(key, {}).get(dtype)
    if entry is None:
        return None
    if "same_as" in entry:
        _sourced(f"gemm.{key}", dtype, {"value": entry["same_as"], **entry})
        taken = _measured(entry["same_as"], dtype)
        if taken is None:
            raise PresetError(
                f"gemm.{key}.{dtype}: same_as {entry['same_as']!r} has no measured {dtype} ceiling"
            )
        taken_for = f"taken for {key}: {entry['source']} ({entry.get('note', '')})"
        return taken[0], f"{taken[1]}; {taken_for}", taken[2]
    value, source = _sourced(f"gemm.{key}", dtype, entry)
    peak = _hardware_tables()[key]["peak"][peak_format(dtype)]["value"]
    flops = [as_quantity(k, v).to("FLOP/s").magnitude for k, v in ((dtype, value), ("peak", peak))]
    where = f"{source}: {value} at {entry['shape']}, {entry['software']}"
    return float(flops[0] / flops[1]), where, entry.get("note", "")


def pooled_ceiling(dtype: str) -> float | None:
    """Geometric mean of the measured GEMM ceilings (fractions of peak) of ``dtype`` (fp16's:
    bf16's, the rate of the same tensor cores) over the presets that have one of their own, or None
    where none has."""
    dtype = "bf16" if dtype == "fp16" else dtype
    fractions = [
        m[0]
        for key, table in _ceiling_tables().items()
        for d, entry in table.items()
        if d == dtype and "same_as" not in entry and (m := _measured(key, d))
    ]
    return _geometric_mean(fractions) if fractions else None


def gemm_ceiling(key: str, dtype: str, hw: Hardware) -> Ceiling | None:
    """The measured GEMM ceiling of preset ``key`` for ``dtype``: its own measurement (or a named
    preset's), else for fp16 its bf16 one, the tensor cores' rate being the same; None where it has
    neither (the pooled fraction is :func:`matmul_efficiency`'s)."""
    measured = _measured(key, dtype)
    if measured is not None:
        fraction, source, note = measured
        return Ceiling(fraction, source, note and f"{dtype} on {key}: {note}")
    if (
        dtype == "fp16"
        and (bf16 := _measured(key, "bf16")) is not None
        and hw.peaks.get("bf16") == hw.peaks.get("fp16")
    ):
        return Ceiling(
            bf16[0],
            bf16[1],
            f"no fp16 measurement of {key}: its bf16 fraction (fp16 runs at the bf16 rate)",
        )
    return None


@cache
def _memory_table() -> dict | None:
    return _calibration_file().get("memory")


def memory_reserve(allocator: str) -> dict:
    """The reserve of ``allocator`` fitted on measured peaks (calibration.toml's [memory]): reserve
    (measured peak / count), reserve_log_stderr, low and high (the smallest and largest
    measured/predicted peak, each source left out of the fit), basis."""
    fitted = _memory_table()
    if fitted is None:
        raise PresetError("memory: the allocator's reserve comes with the shipped calibration file")
    if fitted["allocator"] != allocator:
        raise PresetError(
            f"memory: the reserve is fitted on measured peaks of {fitted['allocator']}'s allocator,"
            f" not {allocator}'s"
        )
    return fitted


def memory_outside(allocator: str) -> dict:
    """The device memory a process of ``allocator`` holds outside it, fitted on snapshots
    (calibration.toml's [memory]): outside (the mean), stderr, low and high (the smallest and
    largest snapshot), in bytes as quantities, and basis."""
    fitted = memory_reserve(allocator)
    if "outside_bytes" not in fitted:
        raise PresetError(
            f"memory: no memory outside {allocator}'s allocator is fitted (calibration.toml"
            " [memory])"
        )
    return {
        "outside": Q(fitted["outside_bytes"], "byte"),
        "stderr": Q(fitted["outside_stderr_bytes"], "byte"),
        "low": Q(fitted["outside_low_bytes"], "byte"),
        "high": Q(fitted["outside_high_bytes"], "byte"),
        "basis": fitted["outside_basis"],
    }


def outside_floor(allocator: str):
    """The least memory measured outside ``allocator`` (:func:`memory_outside`'s low): what the
    count must leave free on the device; 0 bytes where none is fitted."""
    try:
        return memory_outside(allocator)["low"]
    except PresetError:
        return Q(0, "byte")


def matmul_efficiency(hw: Hardware, dtype: str) -> tuple[float | None, str]:
    """``hw``'s measured GEMM ceiling for ``dtype`` over its peak, else (no measurement of the
    preset's, or a hardware defined by hand) the one pooled over the measured devices; and a note
    where it is not the device's own measurement."""
    ceiling = hw.matmul_ceiling(dtype)
    if ceiling is not None:
        return ceiling.fraction, ceiling.note and f"matmul efficiency: {ceiling.note}"
    pooled = pooled_ceiling(dtype)
    return pooled, pooled and (
        f"{hw.key or hw.name}: no measured {dtype} GEMM ceiling, so the matmul efficiency is "
        "the one pooled over the measured devices; pass matmul_efficiency= or a profile"
    )


@cache
def _calibration_file() -> dict:
    return package_toml(CALIBRATION_FILE) if CALIBRATION_FILE.exists() else {}


def calibration(stack_name: str) -> Calibration:
    """The fitted constants of ``stack_name``'s family (its ``efficiency`` property), or the pooled
    ones where no source of that family is fitted; without a calibration file, they are None."""
    data = _calibration_file()
    family = stack(stack_name)["efficiency"]
    if "stack_efficiency" not in data:
        return Calibration(stack_efficiency=None, attention_factor=None, key=family)
    fitted, errors = data["stack_efficiency"], data.get("stack_efficiency_stderr", {})
    spread = data.get("interval", {})
    pooled = family not in fitted
    return Calibration(
        stack_efficiency=fitted["default" if pooled else family],
        attention_factor=data["shared"]["attention_factor"],
        provenance=data.get("provenance", {}).get("summary", ""),
        interval=(spread["low"], spread["high"]) if spread else None,
        coverage=spread.get("coverage"),
        key=family,
        pooled=pooled,
        standard_error=errors.get(family),
    )


def dropless_imbalance() -> dict:
    """The imbalance of dropless MoE routing fitted on published pairs of runs, by model's name
    (calibration.toml [routing.dropless]: ``imbalance``, ``stderr`` where several pairs give it,
    ``low``, ``high``, ``pairs``); empty where none is fitted."""
    return dict(_calibration_file().get("routing", {}).get("dropless", {}))


def _hardware_tables() -> dict:
    return table("hardware")


def _model_tables() -> dict:
    return table("models")


_MODEL_META = ("source", "published_params", "published_active_params")


def model(name: str) -> Model:
    """A preset model by name (see :func:`models`); read once (a Model is immutable)."""
    if not isinstance(name, str):
        raise UnknownNameError("model", repr(name)[:80], _model_tables())
    return _model(name)


@cache
def _model(name: str) -> Model:
    tables = _model_tables()
    if name not in tables:
        raise UnknownNameError("model", name, tables)
    table = {k: v for k, v in tables[name].items() if k not in _MODEL_META}
    if not tables[name].get("source"):
        raise PresetError(f"{name}: a preset model needs a source")
    return Model(name=name, **table)


def model_source(name: str) -> dict:
    """The source and published counts of a preset model."""
    model(name)
    return {k: v for k, v in _model_tables()[name].items() if k in _MODEL_META}


def models() -> list[str]:
    return list(_model_tables())


def hardware(name: str) -> Hardware:
    """A preset accelerator by name (see :func:`hardwares`); read once (a Hardware is immutable)."""
    if not isinstance(name, str):
        raise UnknownNameError("hardware", repr(name)[:80], _hardware_tables())
    return _hardware(name)


@cache
def _hardware(name: str) -> Hardware:
    tables = _hardware_tables()
    if name not in tables:
        raise UnknownNameError("hardware", name, tables)
    return hardware_from_table(name, tables[name])


def as_model(value) -> Model:
    """A model argument as a Model: a Model as given, a path to a Hugging Face ``config.json`` (a
    Path, or a string ending in ``.json``), or a preset's name."""
    if isinstance(value, Model):
        return value
    if isinstance(value, Path) or (isinstance(value, str) and value.endswith(".json")):
        return Model.from_hf(value)
    if isinstance(value, str):
        return model(value)
    raise InputError(
        "model: expected a Model, a preset's name or a config.json path, got"
        f" {type(value).__name__}"
    )


def as_hardware(value) -> Hardware:
    """A hardware argument as a Hardware: a Hardware as given, or a preset's name."""
    if isinstance(value, Hardware):
        return value
    if isinstance(value, str):
        return hardware(value)
    raise InputError(
        f"hardware: expected a Hardware or a preset's name, got {type(value).__name__}"
    )


def hardwares() -> list[str]:
    return list(_hardware_tables())


def _reliability() -> dict:
    return table("reliability")


def reliability_value(group: str, name: str):
    """A sourced number of reliability.toml as a Quantity (or a plain number)."""
    value, _ = _sourced(group, name, _reliability()[group][name])
    return as_quantity(f"{group}.{name}", value) if isinstance(value, str) else value


def llama3_interruption_rate():
    """Unexpected interruptions per second per GPU in Llama 3's 54-day snapshot (419 on 16,384
    GPUs)."""
    r = reliability_value
    return (
        r("llama3", "unexpected_interruptions") / (r("llama3", "period") * r("llama3", "gpus"))
    ).to("1/s")


def synchronous_restart_time():
    """Seconds a failure stalls fully synchronous training while it restarts (Meta, O(100K)
    GPUs)."""
    return reliability_value("synchronous_restart", "time").to("s")


def _collective_tables() -> dict:
    return table("collectives")


def nccl_latency(link: str):
    """NCCL's per-step ring latency on ``link`` ("scale_up" or "scale_out"), from
    collectives.toml."""
    value, _ = _sourced("nccl", f"{link}_latency", _collective_tables()["nccl"][f"{link}_latency"])
    return as_quantity(f"nccl.{link}_latency", value)


def nccl_efficiency(link: str) -> float:
    """Share of ``link``'s bandwidth ("scale_up" or "scale_out") NCCL's rings reach, from
    collectives.toml."""
    value, _ = _sourced(
        "nccl", f"{link}_efficiency", _collective_tables()["nccl"][f"{link}_efficiency"]
    )
    return value


def nccl_ctas() -> int:
    """The SMs a collective's kernel holds while it runs (NCCL's CTAs), from collectives.toml."""
    value, _ = _sourced("nccl", "ctas", _collective_tables()["nccl"]["ctas"])
    return value


def llama3_storage_bandwidth():
    """Sustained checkpoint storage bandwidth of Llama 3's cluster."""
    return reliability_value("llama3", "storage_bandwidth")


def _kernel_tables() -> dict:
    return table("kernels")


def _stack_tables() -> dict:
    return table("stacks")


def stacks() -> list[str]:
    """The software stacks of stacks.toml (the first is the default)."""
    return list(_stack_tables())


def stack(name: str) -> dict:
    """A stack's properties (their sources checked, values returned): its own, over those of the
    stack its ``base`` names."""
    tables = _stack_tables()
    if name not in tables:
        raise UnknownNameError("stack", name, tables)
    return dict(_stack(name))


@cache
def _stack(name: str) -> dict:
    own = dict(_stack_tables()[name])
    inherited = stack(own.pop("base")) if "base" in own else {}
    return inherited | {k: v if k == "name" else _sourced(name, k, v)[0] for k, v in own.items()}


@cache
def precision(dtype: str, fp8_recipe: str | None = None) -> dict | None:
    """The low-precision recipe ``dtype`` names (presets/precisions.toml: its peak, operand bytes as
    an exact number, cast and weight-cache formulas, bytes sent, bytes of a quantized parameter's
    all-gather and generations), for fp8 those of its scaling recipe ``fp8_recipe``
    (choices.FP8_RECIPES; None: the first), sources checked; None for a 16-bit dtype."""
    entry = table("precisions").get(dtype)
    if entry is None:
        return None
    entry = dict(entry)
    recipes = entry.pop("recipes", None)
    if recipes is not None:
        entry |= recipes[
            FP8_RECIPES[0] if fp8_recipe is None else choice("fp8_recipe", fp8_recipe, FP8_RECIPES)
        ]
    out = {k: v if isinstance(v, str) else _sourced(dtype, k, v)[0] for k, v in entry.items()}
    for k in ("operand_bytes", "sent_bytes", "param_gather_bytes"):
        if k in out:
            out[k] = Fraction(out[k])
    return out


def gemm_tile(generation: str):
    """(T_m, T_n) of the generation's most efficient GEMM tile, or None when kernels.toml has
    none."""
    entry = _kernel_tables()["gemm"].get(generation)
    return (
        None if entry is None else tuple(_sourced(f"gemm.{generation}", "tile", entry["tile"])[0])
    )


def attention_efficiency(kernel: str, generation: str):
    """Fraction of peak of fused attention ``kernel`` on ``generation``, or None when unmeasured."""
    entry = _kernel_tables()["attention"].get(kernel, {}).get(generation)
    return None if entry is None else _sourced(f"attention.{kernel}", generation, entry)[0]
