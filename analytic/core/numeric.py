"""Numeric programs: data that Python or numpy evaluates, never code.

A :class:`Program` is the inputs, the constants and a list of steps, each a whitelisted operation on
earlier registers (:mod:`analytic.core.lowering` builds one from sympy expressions). It is plain
JSON (:meth:`Program.to_json`); :meth:`Program.from_json` validates every field — operation names,
arities, that each step reads only earlier registers, finite constants, bounded sizes — so a
program read from disk can at worst give wrong numbers of the right shape, never run anything.

:meth:`Program.scalar` runs it on Python floats (one plan), calling :data:`SCALAR`'s kernels;
calling the Program runs it on numpy arrays (many layouts). This module imports no sympy.
"""

from __future__ import annotations

import builtins
import functools
import math
import operator
from dataclasses import dataclass
from types import SimpleNamespace

from .errors import InputError

#: operation → arity (None for two or more)
ARITY = {
    **dict.fromkeys(("add", "mul", "max", "min", "and", "or")),
    **dict.fromkeys(("recip", "sqrt", "log", "exp", "abs", "floor", "ceiling", "not"), 1),
    **dict.fromkeys(("pow", "div", "mod", "gcd", "lt", "le", "gt", "ge", "eq", "ne"), 2),
    "where": 3,
}


@functools.cache
def numpy_ops() -> dict:
    """operation → (numpy function, arity): numpy imported when a program first runs on arrays (a
    plan's numbers run on Python floats, :meth:`Program.scalar`, and import none)."""
    import numpy as np

    fns = {
        "add": np.add,
        "mul": np.multiply,
        "max": np.maximum,
        "min": np.minimum,
        "and": np.logical_and,
        "or": np.logical_or,
        "recip": lambda x: np.divide(1.0, x),
        "sqrt": np.sqrt,
        "log": np.log,
        "exp": np.exp,
        "abs": np.abs,
        "floor": np.floor,
        "ceiling": np.ceil,
        "not": np.logical_not,
        "pow": np.float_power,
        "div": np.divide,
        "mod": np.mod,
        "gcd": (
            lambda a, b: np.gcd(np.rint(a).astype(np.int64), np.rint(b).astype(np.int64)).astype(
                np.float64
            )
        ),
        "lt": np.less,
        "le": np.less_equal,
        "gt": np.greater,
        "ge": np.greater_equal,
        "eq": np.equal,
        "ne": np.not_equal,
        "where": np.where,
    }
    return {k: (fns[k], arity) for k, arity in ARITY.items()}


#: largest program read back (steps, constants, inputs)
MAX_STEPS = 1 << 16


# --- kernels on Python floats: numpy's semantics at the edges (inf, nan, division by zero) ---


def _recip(x):
    if x:
        return 1.0 / x
    return math.copysign(math.inf, x)


def _sqrt(x):
    return math.sqrt(x) if x >= 0 else math.nan


def _log(x):
    return math.log(x) if x > 0 else -math.inf if x == 0 else math.nan


def _exp(x):
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def _rounded(fn):
    def apply(x):
        return float(fn(x)) if math.isfinite(x) else x

    return apply


def _div(a, b):
    """a / b as numpy divides (±inf or NaN by zero)."""
    if b:
        return a / b
    return math.nan if a == 0 or a != a else math.copysign(math.inf, a) * math.copysign(1.0, b)


def _pow(a, b):
    try:
        r = a**b
    except (ZeroDivisionError, OverflowError):
        # ±inf: negative only for a negative base to an odd power
        odd = math.isfinite(b) and b == int(b) and int(b) % 2 == 1
        return math.copysign(math.inf, a) if odd else math.inf
    return math.nan if isinstance(r, complex) else r


def _mod(a, b):
    try:
        return a % b
    except ZeroDivisionError:
        return math.nan


def _gcd(a, b):
    if not (math.isfinite(a) and math.isfinite(b)):
        return math.nan
    return float(math.gcd(round(a), round(b)))


def _extreme(pick):
    def apply(args):
        for v in args:
            if v != v:
                return math.nan  # NaN propagates, as numpy's maximum and minimum do
        return pick(args)

    return apply


def _spread(fn):
    def apply(*args):
        return fn(args)

    return apply


#: the n-ary operations on a tuple of Python floats (add and mul left to right, as a + b + c)
_ON_TUPLE = {
    "add": functools.partial(functools.reduce, operator.add),
    "mul": functools.partial(functools.reduce, operator.mul),
    "max": _extreme(builtins.max),
    "min": _extreme(builtins.min),
    "and": all,
    "or": any,
}


#: operation → its kernel on Python floats
SCALAR = SimpleNamespace(
    **{
        **{op: _spread(fn) for op, fn in _ON_TUPLE.items()},
        "not": operator.not_,
        "recip": _recip,
        "sqrt": _sqrt,
        "log": _log,
        "exp": _exp,
        "abs": abs,
        "floor": _rounded(math.floor),
        "ceiling": _rounded(math.ceil),
        "pow": _pow,
        "div": _div,
        "mod": _mod,
        "gcd": _gcd,
        "lt": operator.lt,
        "le": operator.le,
        "gt": operator.gt,
        "ge": operator.ge,
        "eq": operator.eq,
        "ne": operator.ne,
        "where": lambda c, a, b: a if c else b,
    }
)
#: two-argument forms of the n-ary operations: a step of two arguments calls one directly
_SCALAR_PAIRS = {"add": operator.add, "mul": operator.mul}


@dataclass(frozen=True)
class Program:
    """Registers are the inputs, then the constants, then one per step; ``outputs`` index them."""

    inputs: tuple[str, ...]
    constants: tuple[float, ...]
    steps: tuple[tuple[str, tuple[int, ...]], ...]
    outputs: tuple[int, ...]

    def __call__(self, *args):
        """The outputs for positional ``args`` (numbers or numpy arrays) in the order of
        :attr:`inputs`."""
        if len(args) != len(self.inputs):
            raise InputError(
                f"program of {', '.join(self.inputs)}: expected {len(self.inputs)} arguments, got"
                f" {len(args)}"
            )
        import numpy as np

        ops = numpy_ops()
        # float64, as sympy's numbers
        regs = [np.asarray(a, dtype=np.float64) for a in args] + list(
            self.constants
        )
        last = self._last_use
        base = len(regs)
        for i, (op, refs) in enumerate(self.steps):
            fn, arity = ops[op]
            vals = [regs[r] for r in refs]
            regs.append(functools.reduce(fn, vals) if arity is None else fn(*vals))
            for r in last.get(base + i, ()):  # free what no later step reads
                regs[r] = None
        return tuple(regs[o] for o in self.outputs)

    def scalar(self, args) -> list:
        """The outputs for ``args`` (Python floats, in the order of :attr:`inputs`), computed in
        Python floats with :data:`SCALAR`'s kernels."""
        regs = [*args, *self.constants]
        push = regs.append
        for fn, get, spread in self._scalar_steps:
            push(fn(*get(regs)) if spread else fn(get(regs)))
        return [regs[o] for o in self.outputs]

    @functools.cached_property
    def _scalar_steps(self) -> tuple:
        """(kernel, register getter, whether the kernel takes the getter's tuple spread) per step:
        one C-level fetch of a step's arguments, and the n-ary operations folded in C."""
        steps = []
        for op, refs in self.steps:
            kernel = getattr(SCALAR, op)
            if len(refs) == 1:
                steps.append((kernel, operator.itemgetter(refs[0]), False))
            elif op in _ON_TUPLE and (len(refs) > 2 or op not in _SCALAR_PAIRS):
                steps.append((_ON_TUPLE[op], operator.itemgetter(*refs), False))
            else:
                steps.append((_SCALAR_PAIRS.get(op, kernel), operator.itemgetter(*refs), True))
        return tuple(steps)

    @functools.cached_property
    def _last_use(self) -> dict[int, list[int]]:
        """step register → the registers whose last reader it is (outputs and inputs are kept)."""
        keep = set(self.outputs) | set(range(len(self.inputs) + len(self.constants)))
        last = {}
        base = len(self.inputs) + len(self.constants)
        for i, (_, refs) in enumerate(self.steps):
            for r in refs:
                last[r] = base + i
        out: dict[int, list[int]] = {}
        for r, at in last.items():
            if r not in keep:
                out.setdefault(at, []).append(r)
        return out

    def to_json(self) -> dict:
        return {
            "inputs": list(self.inputs),
            "constants": [float(c) for c in self.constants],
            "steps": [[op, list(refs)] for op, refs in self.steps],
            "outputs": list(self.outputs),
        }

    @classmethod
    def from_json(cls, data) -> "Program":
        """A Program from :meth:`to_json`'s data, every field checked; ValueError on anything
        else."""
        if not isinstance(data, dict) or set(data) != {"inputs", "constants", "steps", "outputs"}:
            raise ValueError("not a program: expected inputs, constants, steps and outputs")
        inputs, constants, steps, outputs = (
            data[k] for k in ("inputs", "constants", "steps", "outputs")
        )
        if not all(
            isinstance(x, list) and len(x) <= MAX_STEPS for x in (inputs, constants, steps, outputs)
        ):
            raise ValueError("not a program: fields must be lists of bounded length")
        if not all(isinstance(k, str) and k.isidentifier() for k in inputs):
            raise ValueError("program inputs must be names")
        # NaN: a Piecewise's no-case
        if not all(type(c) in (int, float) and not math.isinf(c) for c in constants):
            raise ValueError("program constants must be finite numbers or NaN")
        n = len(inputs) + len(constants)
        checked = []
        for step in steps:
            if not (
                isinstance(step, list)
                and len(step) == 2
                and step[0] in ARITY
                and isinstance(step[1], list)
            ):
                raise ValueError(f"bad program step {step!r:.80}")
            op, refs = step
            arity = ARITY[op]
            if (arity is None and len(refs) < 2) or (arity is not None and len(refs) != arity):
                raise ValueError(
                    f"program step {op} takes {arity or 'two or more'} arguments, got {len(refs)}"
                )
            if not all(type(r) is int and 0 <= r < n for r in refs):
                raise ValueError(
                    f"program step {op} reads a register that is not computed before it"
                )
            checked.append((op, tuple(refs)))
            n += 1
        if not outputs or not all(type(o) is int and 0 <= o < n for o in outputs):
            raise ValueError("program outputs must name registers")
        return cls(
            tuple(inputs), tuple(float(c) for c in constants), tuple(checked), tuple(outputs)
        )
