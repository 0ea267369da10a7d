"""Hardware: one accelerator type, its peaks and links, and the predictive model's constants."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pint

from ..core.errors import InputError, PresetError, UnitError, UnknownNameError
from ..core.units import Q_
from ..core.values import count, exact_number, in_range, quantity


def _quantity(name: str, value, unit: str) -> pint.Quantity:
    shown, value = value, quantity(name, value)
    if not isinstance(value, pint.Quantity):
        raise UnitError(f"{name}: expected a quantity in {unit} (e.g. '1 {unit}'), got the bare value {shown!r}")
    if value.dimensionality != Q_(1, unit).dimensionality:
        raise UnitError(f"{name}: expected a quantity in {unit}, got {value:~P}")
    magnitude = in_range(name, exact_number(value.to(unit).magnitude), shown)
    if not magnitude > 0:
        raise InputError(f"{name}: expected a positive quantity, got {value:~P}")
    return value


_NAMES = {"scale_up": "scale_up_bandwidth", "scale_out": "scale_out_bandwidth"}


def check_full_mesh(argument: str, links: int, domain: int) -> None:
    """Raise unless ``links`` direct links per accelerator connect each of ``domain`` accelerators to
    every other (a fully connected scale-up domain)."""
    if links < domain - 1:
        raise InputError(f"{argument}: {links} direct links per accelerator cannot connect each of {domain} "
                         f"accelerators to every other; a fully connected domain of {domain} needs {domain - 1}")


def check_domain(domain: int, gpus_per_node: int) -> None:
    """Raise unless a scale-up domain of ``domain`` accelerators is a whole number of nodes."""
    if domain % gpus_per_node:
        raise InputError(f"scale_up_domain: {domain} is not a whole number of nodes of {gpus_per_node} GPUs")


@dataclass(frozen=True)
class Calibration:
    """Constants of the predictive step-time model: the matmul efficiency and attention factor fitted by
    ``analytic calibrate --published``, the overlap fixed from presets/collectives.toml."""

    matmul_efficiency: float
    overlap: float
    attention_factor: float = 1.0
    provenance: str = ""
    interval: tuple[float, float] | None = None  # measured/predicted step time: (low, high) quantiles
    coverage: float | None = None  # the probability [low, high] is meant to hold


@dataclass(frozen=True)
class Hardware:
    """An accelerator. Peaks are dense; bandwidths are per device, one direction."""

    name: str
    peaks: dict = field(default_factory=dict)
    hbm: pint.Quantity | None = None
    hbm_bandwidth: pint.Quantity | None = None
    scale_up: pint.Quantity | None = None
    scale_out: pint.Quantity | None = None
    gpus_per_node: int = 8
    scale_up_domain: int | None = None  # accelerators on one NVLink-class domain; None: the node
    scale_up_links: int | None = None  # direct links per accelerator of a fully connected domain; None: switched
    sms: int | None = None  # streaming multiprocessors (compute units)
    host_memory: pint.Quantity | None = None  # host DRAM of one node
    generation: str = ""
    sources: dict = field(default_factory=dict, compare=False)
    calibrations: dict = field(default_factory=dict, compare=False)
    key: str = ""

    def __post_init__(self):
        peaks = {k: _quantity(f"peak_flops[{k}]", v, "FLOP/s") for k, v in dict(self.peaks).items()}
        object.__setattr__(self, "peaks", peaks)
        for attr, unit in (("hbm", "byte"), ("hbm_bandwidth", "byte/s"), ("scale_up", "byte/s"), ("scale_out", "byte/s"),
                           ("host_memory", "byte")):
            v = getattr(self, attr)
            if v is not None:
                object.__setattr__(self, attr, _quantity(_NAMES.get(attr, attr), v, unit))
        object.__setattr__(self, "gpus_per_node", count("gpus_per_node", self.gpus_per_node, allow_symbol=False))
        domain = self.gpus_per_node if self.scale_up_domain is None else self.scale_up_domain
        object.__setattr__(self, "scale_up_domain", count("scale_up_domain", domain, allow_symbol=False))
        check_domain(self.scale_up_domain, self.gpus_per_node)
        if self.sms is not None:
            object.__setattr__(self, "sms", count("sms", self.sms, allow_symbol=False))
        if self.scale_up_links is not None:
            links = count("scale_up_links", self.scale_up_links, allow_symbol=False)
            check_full_mesh("scale_up_links", links, self.scale_up_domain)
            object.__setattr__(self, "scale_up_links", links)

    def _link(self, keyword: str) -> pint.Quantity:
        v = getattr(self, keyword.removesuffix("_bandwidth"))
        if v is None:
            raise PresetError(f"{self.key or self.name} has no {keyword.replace('_', ' ')} with a source; "
                              f"give one with hw.replace({keyword}=...)")
        return v

    def peak_flops(self, dtype: str = "bf16") -> pint.Quantity:
        """Dense peak FLOP/s for ``dtype``."""
        if dtype not in self.peaks:
            raise UnknownNameError(f"dtype for {self.key or self.name}", dtype, self.peaks)
        return self.peaks[dtype]

    @property
    def scale_up_bandwidth(self) -> pint.Quantity:
        return self._link("scale_up_bandwidth")

    @property
    def scale_out_bandwidth(self) -> pint.Quantity:
        return self._link("scale_out_bandwidth")

    def calibration_key(self, dtype: str) -> str:
        """generation.dtype under which fitted constants are stored (fp16 shares bf16's: same peak)."""
        return f"{self.generation}.{'bf16' if dtype == 'fp16' else dtype}"

    def calibration(self, dtype: str = "bf16") -> Calibration:
        key = self.calibration_key(dtype)
        if key in self.calibrations:
            return self.calibrations[key]
        for fallback in (f"default.{key.split('.')[-1]}", "default"):  # pooled over this dtype, then all
            if fallback in self.calibrations:
                return self.calibrations[fallback]
        if not self.calibrations:  # defined by hand, not loaded from the presets
            raise PresetError(f"{self.key or self.name}: no fitted constants for a hardware defined by hand; pass "
                              "Plan(..., matmul_efficiency=, overlap=, attention_factor=), or replace() a "
                              "preset's numbers to keep its constants")
        raise PresetError(f"{self.key or self.name}: no calibrated constants for {key}; run "
                          "'analytic calibrate --published' or pass Plan(..., matmul_efficiency=...)")

    def replace(self, **changes) -> "Hardware":
        """A copy with some numbers changed (``peak_flops``, ``hbm``, ``scale_up_bandwidth``, ...)."""
        aliases = {"scale_up_bandwidth": "scale_up", "scale_out_bandwidth": "scale_out"}
        changes = {aliases.get(k, k): v for k, v in changes.items()}
        if "peak_flops" in changes:
            pf = changes.pop("peak_flops")
            changes["peaks"] = pf if isinstance(pf, dict) else {**self.peaks, "bf16": pf}
        unknown = set(changes) - {f for f in self.__dataclass_fields__}
        if unknown:
            raise UnknownNameError("hardware field", sorted(unknown)[0], list(self.__dataclass_fields__) + list(aliases))
        return replace(self, **changes)

    def __str__(self) -> str:
        return self.name
