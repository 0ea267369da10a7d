"""analytic: closed-form models of distributed LLM training.

Memory, FLOPs, collective bytes and seconds, pipeline bubbles, step time, MFU and days to train are
sympy expressions whose symbols carry pint units.

``import analytic`` imports neither sympy, pint nor numpy: each public name is imported from its
module when it is first used.
"""

from __future__ import annotations

import importlib
import sys
import types

from .errors import AnalyticError, FreeSymbolError, InputError, LayoutError, PresetError, UnitError, UnknownNameError

__version__ = "0.1.0"

#: public name → the module that defines it, imported when the name is first used
_LAZY = {"Formula": "formula", "formula": "formulas", "formulas": "formulas", "Hardware": "hardware", "Model": "model",
         "Layout": "plan", "Memory": "plan", "Plan": "plan", "hardware": "presets", "hardwares": "presets",
         "model": "presets", "models": "presets", "stack": "presets", "stacks": "presets", "search": "search",
         "sweep": "sweep", "sym": "symbols", "Q_": "units", "ureg": "units"}

__all__ = ["AnalyticError", "Formula", "FreeSymbolError", "Hardware", "InputError", "Layout", "LayoutError",
           "Memory", "Model", "Plan", "PresetError", "Q_", "UnitError", "UnknownNameError", "formula", "formulas",
           "hardware", "hardwares", "model", "models", "search", "stack", "stacks", "sweep", "sym", "ureg"]


class _Package(types.ModuleType):
    """The package, whose public names resolve to the API even where a submodule of the same name
    (analytic.formula, .hardware, .model, .search, .sweep), once imported, was bound to it."""

    def __getattribute__(self, name):
        if name in _LAZY:
            found = super().__getattribute__("__dict__").get(name)
            if found is None or isinstance(found, types.ModuleType):
                found = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
                setattr(self, name, found)
            return found
        return super().__getattribute__(name)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(_LAZY))


sys.modules[__name__].__class__ = _Package
