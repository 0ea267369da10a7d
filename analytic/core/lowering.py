"""sympy expressions lowered to numeric programs (:class:`~analytic.core.numeric.Program`).

:func:`program` walks the expressions once (a shared subexpression is computed once); ``lambdify``,
the plan structures' programs and search all use it.
"""

from __future__ import annotations

import math

import sympy

from .errors import InputError
from .functions import common_divisor, value_at_max
from .numeric import Program
from .operations import OPERATIONS

#: sympy's relations and one-argument functions → the program's operation (operations.OPERATIONS)
_RELATIONS, _FUNCTIONS = (
    {getattr(sympy, OPERATIONS[name].sympy): name for name in names}
    for names in (("lt", "le", "gt", "ge", "eq", "ne"), ("log", "exp", "abs", "floor", "ceiling"))
)


def program(exprs, inputs) -> Program:
    """The Program computing ``exprs`` (sympy expressions) from the symbols ``inputs`` (a mapping
    symbol → name, in argument order)."""
    return _Builder(inputs).program(exprs)


class _Builder:
    """A program's constants and steps as :func:`program` lowers expressions into them, each
    distinct subexpression once; a reference is ("i", input), ("c", constant) or ("s", step)."""

    def __init__(self, inputs):
        names = dict(inputs)
        self.order = list(names.values())
        self.index = {s: i for i, s in enumerate(names)}
        self.constants: list[float] = []
        self.const_at: dict[float, int] = {}
        self.steps: list[tuple[str, tuple]] = []
        self.memo: dict = {}

    def program(self, exprs) -> Program:
        refs = [self.walk(sympy.sympify(x)) for x in exprs]
        n_in, n_const = len(self.order), len(self.constants)

        def reg(ref) -> int:
            kind, i = ref
            return i if kind == "i" else n_in + i if kind == "c" else n_in + n_const + i

        return Program(
            tuple(self.order),
            tuple(self.constants),
            tuple((op, tuple(reg(r) for r in rs)) for op, rs in self.steps),
            tuple(reg(r) for r in refs),
        )

    def const(self, x: float):
        key = float(x)
        if key not in self.const_at:
            self.const_at[key] = len(self.constants)
            self.constants.append(key)
        return ("c", self.const_at[key])

    def step(self, op, *refs):
        self.steps.append((op, refs))
        return ("s", len(self.steps) - 1)

    def walk(self, e):
        if e in self.memo:
            return self.memo[e]
        self.memo[e] = out = self.visit(e)
        return out

    def visit(self, e):
        """The reference of ``e``: an input, a constant, or the steps of its operation."""
        if isinstance(e, sympy.Symbol):
            if e not in self.index:
                raise InputError(
                    f"free symbol {e} is not an input of the program ({', '.join(self.order)})"
                )
            return ("i", self.index[e])
        if e is sympy.true or e is sympy.false:
            return self.const(1.0 if e is sympy.true else 0.0)
        if e.is_Number or e.is_NumberSymbol:
            return self.const(float(e))
        for lower in (self._arithmetic, self._logic, self._choice):
            out = lower(e)
            if out is not None:
                return out
        raise InputError(f"cannot compile {type(e).__name__} to a numeric program")

    def _arithmetic(self, e):
        """Sums, products, powers, maxima and minima, functions, remainders and common divisors."""
        walk, step = self.walk, self.step
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
        # a quotient one division: an integer one stays exact
        if isinstance(e, (sympy.floor, sympy.ceiling)):
            num, den = sympy.fraction(e.args[0])
            if den != 1:
                return step(_FUNCTIONS[type(e)], step("div", walk(num), walk(den)))
        if type(e) in _FUNCTIONS:
            return step(_FUNCTIONS[type(e)], walk(e.args[0]))
        if isinstance(e, sympy.Mod):
            return step("mod", walk(e.args[0]), walk(e.args[1]))
        if isinstance(e, common_divisor):
            return step("gcd", walk(e.args[0]), walk(e.args[1]))
        return None

    def _logic(self, e):
        """Conjunctions, disjunctions, negations and relations."""
        if isinstance(e, (sympy.And, sympy.Or)):
            return self.step("and" if isinstance(e, sympy.And) else "or", *map(self.walk, e.args))
        if isinstance(e, sympy.Not):
            return self.step("not", self.walk(e.args[0]))
        if type(e) in _RELATIONS:
            return self.step(_RELATIONS[type(e)], self.walk(e.lhs), self.walk(e.rhs))
        return None

    def _choice(self, e):
        """value_at_max (the first value whose key equals the largest key) and Piecewise, as
        wheres."""
        walk, step = self.walk, self.step
        if isinstance(e, value_at_max):
            keys, values = [walk(k) for k in e.args[0::2]], [walk(v) for v in e.args[1::2]]
            top = step("max", *keys) if len(keys) > 1 else keys[0]
            out = values[-1]
            for key, value in zip(reversed(keys[:-1]), reversed(values[:-1])):
                out = step("where", step("eq", key, top), value, out)
            return out
        if isinstance(e, sympy.Piecewise):
            pieces = list(e.args)
            out = walk(pieces[-1].expr) if pieces[-1].cond == sympy.true else self.const(math.nan)
            if pieces[-1].cond == sympy.true:
                pieces = pieces[:-1]
            for piece in reversed(pieces):
                out = step("where", walk(piece.cond), walk(piece.expr), out)
            return out
        return None


def input_names(exprs) -> dict:
    """symbol → keyword for the free symbols of ``exprs``, sorted by keyword: a program's
    inputs."""
    from .symbols import keyword_of

    return dict(sorted(((s, keyword_of(s)) for s in free_symbols(exprs)), key=lambda kv: kv[1]))


def free_symbols(exprs) -> set:
    """The symbols of ``exprs``, each shared subexpression visited once (sympy's ``free_symbols``
    walks a subexpression again wherever it recurs, and a plan's expressions share theirs many times
    over)."""
    found, seen = set(), set()
    stack = [sympy.sympify(e) for e in exprs]
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, sympy.Symbol):
            found.add(e)
        else:
            stack.extend(e.args)
    return found


def keyword_function(f):
    """A Formula as a numpy function of keyword arguments (magnitudes in its symbols' units):
    ``Formula.lambdify``."""
    from . import symbols as _symbols

    keywords = list(f.symbols)
    fn = program([f.expr], {_symbols.sym(k): k for k in keywords})
    name = f.name

    def compiled(**values):
        missing = [k for k in keywords if k not in values]
        extra = [k for k in values if k not in keywords]
        if missing or extra:
            raise InputError(
                f"{name}: lambdified function takes {', '.join(keywords)}"
                + (f"; missing {', '.join(missing)}" if missing else "")
                + (f"; unknown {', '.join(extra)}" if extra else "")
            )
        args = [values[k] for k in keywords]
        if all(isinstance(a, (int, float)) and not isinstance(a, bool) for a in args):
            # numbers: Python floats, no array per step
            return fn.scalar([float(a) for a in args])[
                0
            ]
        return fn(*args)[0]

    compiled.keywords = tuple(keywords)
    compiled.__doc__ = f"{name} [{f.unit:~P}] of {', '.join(keywords)}"
    return compiled
