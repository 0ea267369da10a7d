"""Expressions as numeric programs: data that numpy evaluates, never code.

:func:`program` turns sympy expressions into a :class:`Program`: the inputs, the constants and a
list of steps, each a whitelisted numpy operation on earlier registers (a shared subexpression is
computed once). A Program is plain JSON (:meth:`Program.to_json`); :meth:`Program.from_json`
validates every field — operation names, arities, that each step reads only earlier registers,
finite constants, bounded sizes — so a program read from disk can at worst give wrong numbers of
the right shape, never run anything. ``lambdify`` and search's cache both use it.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import sympy

from .errors import InputError

_NARY = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum,
         "and": np.logical_and, "or": np.logical_or}
_UNARY = {"recip": lambda x: np.divide(1.0, x), "sqrt": np.sqrt, "log": np.log, "exp": np.exp, "abs": np.abs,
          "floor": np.floor, "ceiling": np.ceil, "not": np.logical_not}
_BINARY = {"pow": np.float_power, "mod": np.mod,
           "gcd": lambda a, b: np.gcd(np.rint(a).astype(np.int64), np.rint(b).astype(np.int64)).astype(np.float64), "lt": np.less, "le": np.less_equal, "gt": np.greater,
           "ge": np.greater_equal, "eq": np.equal, "ne": np.not_equal}
_TERNARY = {"where": np.where}
#: operation → (numpy function, arity; None for two or more)
OPS = {**{k: (f, None) for k, f in _NARY.items()}, **{k: (f, 1) for k, f in _UNARY.items()},
       **{k: (f, 2) for k, f in _BINARY.items()}, **{k: (f, 3) for k, f in _TERNARY.items()}}
#: largest program read back (steps, constants, inputs)
MAX_STEPS = 1 << 16

_RELATIONS = {sympy.StrictLessThan: "lt", sympy.LessThan: "le", sympy.StrictGreaterThan: "gt",
              sympy.GreaterThan: "ge", sympy.Equality: "eq", sympy.Unequality: "ne"}
_FUNCTIONS = {sympy.log: "log", sympy.exp: "exp", sympy.Abs: "abs", sympy.floor: "floor", sympy.ceiling: "ceiling"}


class value_at_max(sympy.Function):
    """``value_at_max(key0, value0, key1, value1, ...)``: the value paired with the largest key (the
    first such pair on a tie). A Piecewise on comparisons of large expressions is slow to build; this
    is not. It stays unevaluated; :meth:`picked` (and so ``doit``, ``evalf`` and numeric programs)
    choose once every key is a number."""

    def picked(self):
        """The chosen value, or None while a key is not a number."""
        keys, values = self.args[0::2], self.args[1::2]
        if len(self.args) % 2 or not self.args:
            raise ValueError("value_at_max: expected key, value pairs")
        if not all(k.is_number for k in keys):
            return None
        return values[max(range(len(keys)), key=lambda i: (float(keys[i]), -i))]

    def doit(self, **hints):
        new = self.func(*(a.doit(**hints) for a in self.args)) if hints.get("deep", True) else self
        chosen = new.picked()
        return new if chosen is None else chosen

    def _eval_evalf(self, prec):
        chosen = self.picked()
        return None if chosen is None else chosen.evalf(prec)


class common_divisor(sympy.Function):
    """``common_divisor(a, b)``: the greatest common divisor of two positive integers, left unevaluated
    while either is a symbol (sympy's ``gcd`` of symbols is a polynomial's); numbers substituted for
    them give the number."""

    def __new__(cls, a, b, **options):
        a, b = sympy.sympify(a), sympy.sympify(b)
        if a.is_Number and b.is_Number:
            return sympy.gcd(a, b)
        return super().__new__(cls, a, b, **options)


@dataclass(frozen=True)
class Program:
    """Registers are the inputs, then the constants, then one per step; ``outputs`` index them."""

    inputs: tuple[str, ...]
    constants: tuple[float, ...]
    steps: tuple[tuple[str, tuple[int, ...]], ...]
    outputs: tuple[int, ...]

    def __call__(self, *args):
        """The outputs for positional ``args`` (numbers or numpy arrays) in the order of :attr:`inputs`."""
        if len(args) != len(self.inputs):
            raise InputError(f"program of {', '.join(self.inputs)}: expected {len(self.inputs)} arguments, got {len(args)}")
        regs = [np.asarray(a, dtype=np.float64) for a in args] + list(self.constants)  # float64, as sympy's numbers
        last = self._last_use
        base = len(regs)
        for i, (op, refs) in enumerate(self.steps):
            fn, arity = OPS[op]
            vals = [regs[r] for r in refs]
            regs.append(functools.reduce(fn, vals) if arity is None else fn(*vals))
            for r in last.get(base + i, ()):  # free what no later step reads
                regs[r] = None
        return tuple(regs[o] for o in self.outputs)

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
        return {"inputs": list(self.inputs), "constants": [float(c) for c in self.constants],
                "steps": [[op, list(refs)] for op, refs in self.steps], "outputs": list(self.outputs)}

    @classmethod
    def from_json(cls, data) -> "Program":
        """A Program from :meth:`to_json`'s data, every field checked; ValueError on anything else."""
        if not isinstance(data, dict) or set(data) != {"inputs", "constants", "steps", "outputs"}:
            raise ValueError("not a program: expected inputs, constants, steps and outputs")
        inputs, constants, steps, outputs = (data[k] for k in ("inputs", "constants", "steps", "outputs"))
        if not all(isinstance(x, list) and len(x) <= MAX_STEPS for x in (inputs, constants, steps, outputs)):
            raise ValueError("not a program: fields must be lists of bounded length")
        if not all(isinstance(k, str) and k.isidentifier() for k in inputs):
            raise ValueError("program inputs must be names")
        if not all(type(c) in (int, float) and not math.isinf(c) for c in constants):  # NaN: a Piecewise's no-case
            raise ValueError("program constants must be finite numbers or NaN")
        n = len(inputs) + len(constants)
        checked = []
        for step in steps:
            if not (isinstance(step, list) and len(step) == 2 and step[0] in OPS and isinstance(step[1], list)):
                raise ValueError(f"bad program step {step!r:.80}")
            op, refs = step
            arity = OPS[op][1]
            if (arity is None and len(refs) < 2) or (arity is not None and len(refs) != arity):
                raise ValueError(f"program step {op} takes {arity or 'two or more'} arguments, got {len(refs)}")
            if not all(type(r) is int and 0 <= r < n for r in refs):
                raise ValueError(f"program step {op} reads a register that is not computed before it")
            checked.append((op, tuple(refs)))
            n += 1
        if not outputs or not all(type(o) is int and 0 <= o < n for o in outputs):
            raise ValueError("program outputs must name registers")
        return cls(tuple(inputs), tuple(float(c) for c in constants), tuple(checked), tuple(outputs))


def program(exprs, inputs) -> Program:
    """The Program computing ``exprs`` (sympy expressions) from the symbols ``inputs`` (a mapping
    symbol → name, in argument order)."""
    names = dict(inputs)
    order = list(names.values())
    constants: list[float] = []
    const_at: dict[float, int] = {}
    steps: list[tuple[str, tuple[int, ...]]] = []
    memo: dict = {}
    index = {s: i for i, s in enumerate(names)}

    def const(x: float) -> int:
        key = float(x)
        if key not in const_at:
            const_at[key] = len(constants)
            constants.append(key)
        return ("c", const_at[key])

    def step(op, *refs):
        steps.append((op, refs))
        return ("s", len(steps) - 1)

    def walk(e):
        if e in memo:
            return memo[e]
        memo[e] = out = visit(e)
        return out

    def visit(e):
        if isinstance(e, sympy.Symbol):
            if e not in index:
                raise InputError(f"free symbol {e} is not an input of the program ({', '.join(order)})")
            return ("i", index[e])
        if e is sympy.true or e is sympy.false:
            return const(1.0 if e is sympy.true else 0.0)
        if e.is_Number or e.is_NumberSymbol:
            return const(float(e))
        if isinstance(e, sympy.Add):
            return step("add", *map(walk, e.args))
        if isinstance(e, sympy.Mul):
            return step("mul", *map(walk, e.args))
        if isinstance(e, sympy.Pow):
            base, exp = e.args
            if exp == -1:
                return step("recip", walk(base))
            if exp == sympy.Rational(1, 2):
                return step("sqrt", walk(base))
            if exp == sympy.Rational(-1, 2):
                return step("recip", step("sqrt", walk(base)))
            return step("pow", walk(base), walk(exp))
        if isinstance(e, (sympy.Max, sympy.Min)):
            kind = "max" if isinstance(e, sympy.Max) else "min"
            return step(kind, *map(walk, e.args)) if len(e.args) > 1 else walk(e.args[0])
        if isinstance(e, (sympy.And, sympy.Or)):
            return step("and" if isinstance(e, sympy.And) else "or", *map(walk, e.args))
        if isinstance(e, sympy.Not):
            return step("not", walk(e.args[0]))
        if type(e) in _RELATIONS:
            return step(_RELATIONS[type(e)], walk(e.lhs), walk(e.rhs))
        if type(e) in _FUNCTIONS:
            return step(_FUNCTIONS[type(e)], walk(e.args[0]))
        if isinstance(e, sympy.Mod):
            return step("mod", walk(e.args[0]), walk(e.args[1]))
        if isinstance(e, common_divisor):
            return step("gcd", walk(e.args[0]), walk(e.args[1]))
        if isinstance(e, value_at_max):  # the first value whose key equals the largest key
            keys, values = [walk(k) for k in e.args[0::2]], [walk(v) for v in e.args[1::2]]
            top = step("max", *keys) if len(keys) > 1 else keys[0]
            out = values[-1]
            for key, value in zip(reversed(keys[:-1]), reversed(values[:-1])):
                out = step("where", step("eq", key, top), value, out)
            return out
        if isinstance(e, sympy.Piecewise):
            pieces = list(e.args)
            out = walk(pieces[-1].expr) if pieces[-1].cond == sympy.true else const(math.nan)
            if pieces[-1].cond == sympy.true:
                pieces = pieces[:-1]
            for piece in reversed(pieces):
                out = step("where", walk(piece.cond), walk(piece.expr), out)
            return out
        raise InputError(f"cannot compile {type(e).__name__} to a numeric program")

    refs = [walk(sympy.sympify(x)) for x in exprs]
    n_in, n_const = len(order), len(constants)

    def reg(ref) -> int:
        kind, i = ref
        return i if kind == "i" else n_in + i if kind == "c" else n_in + n_const + i

    return Program(tuple(order), tuple(constants), tuple((op, tuple(reg(r) for r in rs)) for op, rs in steps),
                   tuple(reg(r) for r in refs))


#: how each operation of a program reads as Python on a kernel namespace ``k`` (analytic.compiled)
_PYTHON = {"add": " + ", "mul": " * ", "lt": " < ", "le": " <= ", "gt": " > ", "ge": " >= ", "eq": " == ",
           "ne": " != "}
#: operations whose name is a Python keyword, as a kernel namespace spells them
KERNEL_NAMES = {"and": "and_", "or": "or_", "not": "not_"}


def python_source(prog: Program, name: str) -> str:
    """``prog`` as the source of a Python function ``name(x, k)``: ``x`` the inputs in the order of
    ``prog.inputs``, ``k`` a kernel namespace (:mod:`analytic.compiled`'s scalar or array kernels),
    the outputs returned as a tuple. Straight-line code, one assignment per step; a step's value
    takes the name of one no later step reads, so arrays are freed as soon as they are done with."""
    n_in, n_const = len(prog.inputs), len(prog.constants)
    base = n_in + n_const
    last = {r: base + i for i, (_, refs) in enumerate(prog.steps) for r in refs}  # register → its last reader
    kept = set(prog.outputs)
    names: dict[int, str] = {}
    free: list[str] = []

    def ref(r: int) -> str:
        if r < n_in:
            return f"x{r}"
        if r < base:
            c = prog.constants[r - n_in]
            return "k.nan" if math.isnan(c) else repr(c)
        return names[r]

    lines = [f"def {name}(x, k):", f"    {', '.join(f'x{i}' for i in range(n_in))}{',' if n_in == 1 else ''} = x"
             if n_in else "    pass"]
    for i, (op, refs) in enumerate(prog.steps):
        args = [ref(r) for r in refs]
        body = (_PYTHON[op].join(args) if op in _PYTHON
                else f"k.{KERNEL_NAMES.get(op, op)}({', '.join(args)})")
        for r in dict.fromkeys(refs):  # names whose last reader this step is are free again
            if r >= base and last[r] == base + i and r not in kept:
                free.append(names[r])
        names[base + i] = free.pop() if free else f"r{len(names)}"
        lines.append(f"    {names[base + i]} = {body}")
    outs = ", ".join(ref(o) for o in prog.outputs)
    lines.append(f"    return ({outs}{',' if len(prog.outputs) == 1 else ''})")
    return "\n".join(lines) + "\n"
