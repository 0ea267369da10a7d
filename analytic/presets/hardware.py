"""Hardware: one accelerator type, its peaks, links and measured GEMM ceilings; a stack's fitted
constants."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..core.choices import PLATFORMS
from ..core.errors import InputError, PresetError, UnitError, UnknownNameError
from ..core.units import Quantity, Shown, Unit
from ..core.values import choice, count, exact_number, in_range, quantity


def field_quantity(name: str, value, unit: str) -> Quantity:
    """A hardware field's quantity: a positive amount in ``unit``'s dimension (a string, a
    Quantity)."""
    shown, value = value, quantity(name, value)
    if not isinstance(value, Quantity):
        raise UnitError(
            f"{name}: expected a quantity in {unit} (e.g. '1 {unit}'), got the bare value {shown!r}"
        )
    if value.dimensionality != Unit.of(unit).dimensionality:
        raise UnitError(f"{name}: expected a quantity in {unit}, got {value:~P}")
    magnitude = in_range(name, exact_number(value.to(unit).magnitude), shown)
    if not magnitude > 0:
        raise InputError(f"{name}: expected a positive quantity, got {value:~P}")
    return value


_NAMES = {"scale_up": "scale_up_bandwidth", "scale_out": "scale_out_bandwidth"}


def check_full_mesh(argument: str, links: int, domain: int) -> None:
    """Raise unless ``links`` direct links per accelerator connect each of ``domain`` accelerators
    to every other (a fully connected scale-up domain)."""
    if links < domain - 1:
        raise InputError(
            f"{argument}: {links} direct links per accelerator cannot connect each of {domain} "
            f"accelerators to every other; a fully connected domain of {domain} needs {domain - 1}"
        )


def check_domain(domain: int, gpus_per_node: int) -> None:
    """Raise unless a scale-up domain of ``domain`` accelerators is a whole number of nodes."""
    if domain % gpus_per_node:
        raise InputError(
            f"scale_up_domain: {domain} is not a whole number of nodes of {gpus_per_node} GPUs"
        )


#: keyword → field of :class:`Hardware` for the links' bandwidths, as Plan and search name them
FIELD_ALIASES = {"scale_up_bandwidth": "scale_up", "scale_out_bandwidth": "scale_out"}


@dataclass(frozen=True)
class Ceiling:
    """A device's measured GEMM ceiling for one dtype as a fraction of its peak
    (presets/ceilings.toml): its source and, where the device has no measurement of its own, what
    was taken instead (``note``)."""

    fraction: float
    source: str
    note: str = ""


@dataclass(frozen=True)
class Calibration:
    """Constants of the predictive step-time model for one software stack: its efficiency (the share
    of the op-level ideal it realises) and the attention factor, fitted by ``analytic calibrate
    --published``."""

    stack_efficiency: float | None
    attention_factor: float | None = 1.0
    provenance: str = ""
    interval: tuple[float, float] | None = (
        None  # measured/predicted step time: (low, high) quantiles
    )
    coverage: float | None = None  # the probability [low, high] is meant to hold
    key: str = ""  # the fitted constant's name: the stack family whose sources pin it
    pooled: bool = False  # no source of this family: the value pooled over the fitted families
    standard_error: float | None = None


@dataclass(frozen=True)
class Hardware:
    """An accelerator. Peaks are dense; bandwidths are per device, one direction. Its quantities are
    held as the library's and read as pint's (:class:`~analytic.core.units.Shown`)."""

    name: str
    peaks: dict = Shown()  # dtype → dense peak FLOP/s
    hbm: Quantity | None = Shown()
    hbm_bandwidth: Quantity | None = Shown()
    scale_up: Quantity | None = Shown()
    scale_out: Quantity | None = Shown()
    gpus_per_node: int = 8
    scale_up_domain: int | None = None  # accelerators on one NVLink-class domain; None: the node
    scale_up_links: int | None = (
        None  # direct links per accelerator of a fully connected domain; None: switched
    )
    sms: int | None = None  # streaming multiprocessors (compute units)
    host_memory: Quantity | None = Shown()  # host DRAM of one node
    generation: str = ""
    platform: str = (
        ""  # choices.PLATFORMS: the software it runs ("": not said, no stack is refused on it)
    )
    sources: dict = field(default_factory=dict, compare=False)
    # dtype → Ceiling (presets/ceilings.toml)
    ceilings: dict = field(
        default_factory=dict, compare=False
    )
    key: str = ""

    def __post_init__(self):
        held = self.__dict__
        peaks = {
            k: field_quantity(f"peak_flops[{k}]", v, "FLOP/s")
            for k, v in dict(held["peaks"] or {}).items()
        }
        object.__setattr__(self, "peaks", peaks)
        for attr, unit in (("hbm", "byte"), ("hbm_bandwidth", "byte/s"), ("scale_up", "byte/s"),
                           ("scale_out", "byte/s"), ("host_memory", "byte")):
            v = held[attr]
            if v is not None:
                object.__setattr__(self, attr, field_quantity(_NAMES.get(attr, attr), v, unit))
        if self.platform != "":
            choice("platform", self.platform, PLATFORMS)
        object.__setattr__(
            self, "gpus_per_node", count("gpus_per_node", self.gpus_per_node, allow_symbol=False)
        )
        domain = self.gpus_per_node if self.scale_up_domain is None else self.scale_up_domain
        object.__setattr__(
            self, "scale_up_domain", count("scale_up_domain", domain, allow_symbol=False)
        )
        check_domain(self.scale_up_domain, self.gpus_per_node)
        if self.sms is not None:
            object.__setattr__(self, "sms", count("sms", self.sms, allow_symbol=False))
        if self.scale_up_links is not None:
            links = count("scale_up_links", self.scale_up_links, allow_symbol=False)
            check_full_mesh("scale_up_links", links, self.scale_up_domain)
            object.__setattr__(self, "scale_up_links", links)

    def _link(self, keyword: str):
        v = getattr(self, keyword.removesuffix("_bandwidth"))
        if v is None:
            raise PresetError(
                f"{self.key or self.name} has no {keyword.replace('_', ' ')} with a source; "
                f"give one with hw.replace({keyword}=...)"
            )
        return v

    def peak_flops(self, dtype: str = "bf16"):
        """Dense peak FLOP/s for ``dtype``: its own, else that of the format a low-precision
        recipe's GEMMs run in (mxfp8: fp8, nvfp4: fp4; presets/precisions.toml)."""
        if dtype not in self.peaks:
            from . import peak_format

            dtype = peak_format(dtype)
        if dtype not in self.peaks:
            raise UnknownNameError(f"dtype for {self.key or self.name}", dtype, self.peaks)
        return self.peaks[dtype]

    @property
    def scale_up_bandwidth(self):
        return self._link("scale_up_bandwidth")

    @property
    def scale_out_bandwidth(self):
        return self._link("scale_out_bandwidth")

    def matmul_ceiling(self, dtype: str = "bf16") -> Ceiling | None:
        """The measured GEMM ceiling for ``dtype`` as a fraction of peak, or None where the preset
        has none (a hardware defined by hand)."""
        return self.ceilings.get(dtype)

    def replace(self, **changes) -> "Hardware":
        """A copy with some numbers changed (``peak_flops``, ``hbm``, ``scale_up_bandwidth``,
        ...)."""
        changes = {FIELD_ALIASES.get(k, k): v for k, v in changes.items()}
        if "peak_flops" in changes:
            pf = changes.pop("peak_flops")
            changes["peaks"] = pf if isinstance(pf, dict) else {**self.peaks, "bf16": pf}
        unknown = set(changes) - {f for f in self.__dataclass_fields__}
        if unknown:
            raise UnknownNameError(
                "hardware field",
                sorted(unknown)[0],
                list(self.__dataclass_fields__) + list(FIELD_ALIASES),
            )
        return replace(self, **changes)

    def __str__(self) -> str:
        return self.name
