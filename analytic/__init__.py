"""analytic: closed-form models of distributed LLM training.

Memory, FLOPs, collective bytes and seconds, pipeline bubbles, step time, MFU and days to train are
sympy expressions whose symbols carry pint units.
"""

from __future__ import annotations

from .errors import AnalyticError, FreeSymbolError, InputError, LayoutError, PresetError, UnitError, UnknownNameError
from .formula import Formula
from .formulas import formula, formulas
from .hardware import Hardware
from .model import Model
from .plan import Layout, Memory, Plan
from .presets import hardware, hardwares, model, models, stack, stacks
from .search import search
from .sweep import sweep
from .symbols import sym
from .units import Q_, ureg

__version__ = "0.1.0"

__all__ = ["AnalyticError", "Formula", "FreeSymbolError", "Hardware", "InputError", "Layout", "LayoutError",
           "Memory", "Model", "Plan", "PresetError", "Q_", "UnitError", "UnknownNameError", "formula", "formulas",
           "hardware", "hardwares", "model", "models", "search", "stack", "stacks", "sweep", "sym", "ureg"]
