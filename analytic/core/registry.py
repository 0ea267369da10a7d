"""The pint registry the library gives its quantities in: the one the user works with.

By default pint's application registry, the one ``pint.Quantity(3, "meter")`` and unpickling use; or
one handed to :func:`use_registry`. The units of ``units.txt`` that the registry lacks (FLOP, token,
parameter, dollar, ...) are defined into it; those it has are checked to mean what they mean here
(dimension and factor), so a quantity the library returns combines with the user's own. The library
never replaces the application registry, changes a registry's formats or installs a warnings filter.
"""

from __future__ import annotations

import math
import sys
import threading
import weakref

from . import unit_table as table
from .errors import InputError, UnitError

_LOCK = threading.RLock()
_CHOSEN: list = []  # the registry handed to use_registry, once one is
_DEFINED: weakref.WeakSet = weakref.WeakSet()  # registries the library's units were defined into
# registry → {units.txt name: its name}
_NAMES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_UNITS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # registry → {items: its Unit}
# registry → whether its Quantity is pint's own, whose constructor :func:`pint_quantity` follows
_PLAIN: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# (a weak reference to the registry last in use, its units): each quantity finds them at once
_LAST: tuple = (lambda: None, {})


def use_registry(ureg=None):
    """Give the library's quantities in ``ureg`` from now on, the library's units defined into it
    (None: pint's application registry again). Returns the registry in use."""
    import pint

    if ureg is not None and not isinstance(ureg, (pint.UnitRegistry, pint.ApplicationRegistry)):
        raise InputError(
            f"use_registry: expected a pint UnitRegistry or None, got {type(ureg).__name__}"
        )
    with _LOCK:
        _CHOSEN[:] = [] if ureg is None else [ureg]
    return registry()


def registry():
    """The registry in use (pint's application registry unless :func:`use_registry` chose another),
    the library's units defined into it."""
    return _in_use()[0]


def _in_use() -> tuple:
    """(the registry in use, the registry behind it, its units made so far: {items: its Unit})."""
    global _LAST
    import pint

    ureg = _CHOSEN[0] if _CHOSEN else pint.get_application_registry()
    real = _real(ureg)
    last, made = _LAST
    if last() is not real:
        if real not in _DEFINED:
            with _LOCK:
                if real not in _DEFINED:
                    # pint's operators leave the library's quantities to theirs (as they leave
                    # xarray's), so the two mix in either order
                    pint.compat.upcast_type_map.setdefault("analytic.core.quantity.Quantity", None)
                    _define(real)
                    _count_context(real)
                    _DEFINED.add(real)
                    _NAMES[real], _UNITS[real] = {}, {}
                    plain = pint.facets.plain.PlainQuantity.__new__
                    _PLAIN[real] = real.Quantity.__new__ is plain
        made = _UNITS[real]
        _LAST = weakref.ref(real), made
    return ureg, real, made


def pint_units(items: tuple):
    """A container of units.txt's canonical names as the registry in use's unit (its names: "bps" is
    pint's "baud")."""
    return _units_in(*_in_use()[1:], items)


def pint_quantity(magnitude, items: tuple):
    """pint's Quantity of ``magnitude`` in :func:`pint_units` ``items``, in the registry in use. A
    float is set on a new Quantity as pint's constructor sets it (tests/test_pint_session.py holds
    the two alike), without the checks a float in the registry's own unit does not need: a plan's
    memory gives a dozen quantities, 4 µs each through the constructor."""
    _, real, made = _in_use()
    unit = made.get(items) or _units_in(real, made, items)
    if (
        type(magnitude) is float
        and _PLAIN[real]
        and not (real.force_ndarray or real.force_ndarray_like)
    ):
        q = object.__new__(real.Quantity)
        q._magnitude, q._units = magnitude, unit._units
        return q
    return real.Quantity(magnitude, unit)


def _units_in(real, made: dict, items: tuple):
    unit = made.get(items)
    if unit is None:
        from pint.util import UnitsContainer

        names = _NAMES[real]
        for k, _ in items:
            if k not in names:
                names[k] = real.get_name(k)
        unit = made[items] = real.Unit(UnitsContainer({names[k]: v for k, v in items}))
    return unit


#: the pint context in which tokens and parameters are plain counts: ``rate.to("1/s", "counts")``
#: takes tokens a second to a frequency; outside it they are dimensions of their own
COUNTS = "counts"
#: (count unit, dimensions with it, the same without it): each pair converts within :data:`COUNTS`
_COUNTED = (
    ("token", "[token]", ""),
    ("token", "[token] / [time]", "1 / [time]"),
    ("token", "[token] / [computation]", "1 / [computation]"),
    ("1 / token", "[time] / [token]", "[time]"),
    ("1 / token", "[computation] / [token]", "[computation]"),
    ("1 / token", "[currency] / [token]", "[currency]"),
    ("parameter", "[parameter]", ""),
)


def _count_context(ureg) -> None:
    """Add :data:`COUNTS` to ``ureg`` unless it has a context of that name (the user's: kept)."""
    import pint

    if COUNTS in getattr(ureg, "_contexts", {}):
        return
    context = pint.Context(COUNTS)
    for unit, counted, plain in _COUNTED:
        one = ureg.Quantity(1, unit)
        context.add_transformation(counted, plain or "[]", lambda ureg, x, one=one: x / one)
        context.add_transformation(plain or "[]", counted, lambda ureg, x, one=one: x * one)
    ureg.add_context(context)


def _real(ureg):
    """The registry behind pint's application registry (itself for any other)."""
    import pint

    return ureg.get() if isinstance(ureg, pint.ApplicationRegistry) else ureg


def define_quietly() -> None:
    """:func:`registry` where nothing asked for it (an import): a registry that defines a unit
    otherwise is refused when the library is first asked for a quantity, not here, and an import
    never fails for it."""
    try:
        registry()
    # a UnitError or pint's own, said at the first call that needs the registry
    except Exception:  # noqa: BLE001
        pass


def define_if_loaded() -> None:
    """Define the library's units into pint's application registry now if pint is imported (so a
    quantity pickled by another process unpickles after ``import analytic``), else when it is."""
    if "pint" in sys.modules:
        define_quietly()
    elif not any(isinstance(f, _WhenPintLoads) for f in sys.meta_path):
        sys.meta_path.insert(0, _WhenPintLoads())


class _WhenPintLoads:
    """An import hook that, once pint's package has run, defines the library's units into its
    application registry, then removes itself."""

    def find_spec(self, name, path=None, target=None):
        if name != "pint":
            return None
        sys.meta_path.remove(self)
        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                define_quietly()

            spec.loader.exec_module = exec_module
        return spec


def _known(ureg, name: str) -> bool:
    try:
        ureg.get_name(name)
    except Exception:  # pint's UndefinedUnitError, or a name its parser does not take
        return False
    return True


def _refuse(name: str, value: str, got) -> UnitError:
    return UnitError(
        f"the pint registry in use defines {name!r} as {got}, where analytic's {name} is {value}; "
        "hand analytic a registry of its own: an.use_registry(pint.UnitRegistry())"
    )


def _check(ureg, name: str, value: str, probe: str = "") -> None:
    """Refuse a unit (or a prefix, read on ``probe``) the registry defines otherwise than
    units.txt."""
    import pint

    one = ureg.Quantity(1, name + probe)
    if value.startswith("["):  # a base unit: of that dimension, or a base unit of none (pint's bit)
        root = one.to_root_units()
        if dict(one.dimensionality) not in ({value: 1}, {}) or dict(root.unit_items()) != {
            ureg.get_name(name): 1
        }:
            raise _refuse(name, value, root)
        return
    reference = table.parse(value)
    unit = probe or table.format_units(reference.items)
    try:
        got = one.m_as(ureg.Unit(unit))
    except pint.DimensionalityError:
        raise _refuse(name, value, one.to_base_units().units) from None
    if not math.isclose(got, reference.scale, rel_tol=1e-12):
        raise _refuse(name, value, f"{got} {unit}")


def _define(ureg) -> None:
    """Define into ``ureg`` the units and prefixes of units.txt it lacks; check those it has (a
    prefix is read on the second)."""
    lines = table.definitions()
    for name, value, aliases, prefix in [
        *(d for d in lines if not d[3]),
        *(d for d in lines if d[3]),
    ]:
        probe, dash = ("second", "-") if prefix else ("", "")
        if _known(ureg, name + probe):
            _check(ureg, name, value, probe)
            continue
        symbol, *others = aliases or [name]
        if symbol == name or _known(ureg, symbol + probe):
            symbol = "_"  # none of its own (pint writes the name)
        free = [a + dash for a in others if not _known(ureg, a + probe)]
        ureg.define(" = ".join([name + dash, value, symbol + dash, *free]))
