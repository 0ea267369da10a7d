"""analytic: closed-form models of distributed LLM training.

Memory, FLOPs, collective bytes and seconds, pipeline bubbles, step time, MFU and days to train are
sympy expressions whose symbols carry pint units.

``import analytic`` imports neither sympy, pint nor numpy: each public name is imported from its
module when it is first used. The subpackages, each importing only those listed before it: ``core``
(units, symbols, values, Formula, numeric programs, the cache), ``formulas`` (the catalogue),
``presets`` (models, hardware, stacks and their data), ``plan`` (Plan in stages), ``search`` (layout
search and sweeps), ``fit`` (validation, calibration, derivations), ``cli`` (the command line) and
``reference`` (the numeric torch reference).
"""

from __future__ import annotations

import importlib
import sys
import types

from .core.errors import (
    AnalyticError,
    FreeSymbolError,
    InputError,
    LayoutError,
    PresetError,
    UnitError,
    UnknownNameError,
)

__version__ = "0.1.0"

#: public name → the module that defines it, imported when the name is first used
_LAZY = {
    "Formula": "core.formula",
    "formula": "formulas",
    "formulas": "formulas",
    "Hardware": "presets.hardware",
    "Model": "presets.model",
    "Layout": "plan",
    "Memory": "plan",
    "Plan": "plan",
    "hardware": "presets",
    "hardwares": "presets",
    "model": "presets",
    "models": "presets",
    "stack": "presets",
    "stacks": "presets",
    "search": "search.layouts",
    "sweep": "search.sweeps",
    "codesign": "search.codesign",
    "sym": "core.symbols",
    "Q_": "core.units",
    "ureg": "core.units",
    "use_registry": "core.registry",
}

#: public names read anew at each use (the registry in use can change: ``an.use_registry``)
_CURRENT = {"ureg", "Q_"}

#: modules of the notation, by the names they had at the package's top: ``an.errors``,
#: ``an.symbols``
_MODULES = {"errors": "core.errors", "symbols": "core.symbols"}

__all__ = [
    "AnalyticError",
    "Formula",
    "FreeSymbolError",
    "Hardware",
    "InputError",
    "Layout",
    "LayoutError",
    "Memory",
    "Model",
    "Plan",
    "PresetError",
    "Q_",
    "UnitError",
    "UnknownNameError",
    "codesign",
    "formula",
    "formulas",
    "hardware",
    "hardwares",
    "model",
    "models",
    "search",
    "stack",
    "stacks",
    "sweep",
    "sym",
    "ureg",
    "use_registry",
]


class _Package(types.ModuleType):
    """The package, whose public names resolve to the API even where a submodule of the same name
    (analytic.search, once imported), was bound to it."""

    def __getattribute__(self, name):
        if name in _LAZY:
            found = super().__getattribute__("__dict__").get(name)
            if found is None or isinstance(found, types.ModuleType):
                found = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
                if name not in _CURRENT:
                    setattr(self, name, found)
            return found
        if name in _MODULES:
            return importlib.import_module(f"{__name__}.{_MODULES[name]}")
        return super().__getattribute__(name)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(_LAZY) | set(_MODULES))


sys.modules[__name__].__class__ = _Package

# the library's units in pint's application registry as soon as pint is loaded, so that quantities
# pickled by another process unpickle here (pint itself is not imported for it)
from .core.registry import define_if_loaded  # noqa: E402

define_if_loaded()
