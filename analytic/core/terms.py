"""Term: an expression in the declared symbols kept as data, without sympy.

The catalogue declares its formulas on terms (``S("params") * 6``), so importing it and evaluating a
formula at numbers need no sympy. A term records each operation as Python performed it, operands in
order; :func:`to_sympy` performs them again on sympy objects, which gives the very expression that
declaring it on sympy symbols gives (sympy canonicalises as it builds). :func:`value` evaluates a
term at numbers: exact (int and Fraction) through sums, products, quotients, integer powers,
comparisons, maxima, minima, ceilings and remainders; a Decimal of 40 digits past a root, exponential,
logarithm or fractional power.
"""

from __future__ import annotations

import decimal
import math
from decimal import Decimal
from fractions import Fraction

from .errors import InputError


class NotReal(InputError):
    """A term whose value at the given numbers is not a finite real number."""


#: a term's binary operator → its Python operation (on numbers, and on sympy objects in a replay)
_BINARY = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b, "pow": lambda a, b: a ** b,
    "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
}


class Term:
    """One operation (``op``) on its ``args``: terms, numbers (int, Fraction) or booleans. ``op`` "sym"
    is a declared symbol, its one argument the keyword."""

    __slots__ = ("op", "args", "_hash", "_keywords")

    def __init__(self, op: str, args: tuple):
        self.op, self.args = op, args
        self._hash = hash((op, args))
        self._keywords = None

    # arithmetic and comparisons, recorded with the operands in the order Python passed them; what sympy
    # folds whatever the symbols (0·x, 0/x, x/x, x − x) is folded here too, so a term holds the symbols its
    # expression does
    def __add__(self, other):
        return Term("add", (self, other))

    def __radd__(self, other):
        return Term("add", (other, self))

    def __sub__(self, other):
        return 0 if other is self or other == self else Term("sub", (self, other))

    def __rsub__(self, other):
        return Term("sub", (other, self))

    def __mul__(self, other):
        return 0 if _zero(other) else Term("mul", (self, other))

    def __rmul__(self, other):
        return 0 if _zero(other) else Term("mul", (other, self))

    def __truediv__(self, other):
        return 1 if other is self or other == self else Term("div", (self, other))

    def __rtruediv__(self, other):
        return 0 if _zero(other) else Term("div", (other, self))

    def __pow__(self, other):
        return Term("pow", (self, other))

    def __rpow__(self, other):
        return Term("pow", (other, self))

    def __neg__(self):
        return Term("neg", (self,))

    def __lt__(self, other):
        return Term("lt", (self, other))

    def __le__(self, other):
        return Term("le", (self, other))

    def __gt__(self, other):
        return Term("gt", (self, other))

    def __ge__(self, other):
        return Term("ge", (self, other))

    def __eq__(self, other):  # structural: terms are keys of the replay's memo
        return isinstance(other, Term) and self._hash == other._hash and self.op == other.op and self.args == other.args

    def __hash__(self):
        return self._hash

    def __bool__(self):
        raise TypeError("a term in symbols has no truth value")

    def __repr__(self):
        return self.args[0] if self.op == "sym" else f"{self.op}{self.args!r}"

    @property
    def keywords(self) -> frozenset:
        """The keywords of the symbols it contains."""
        if self._keywords is None:
            if self.op == "sym":
                self._keywords = frozenset(self.args)
            elif self.op == "subs":
                a, old, new = self.args
                self._keywords = keywords(a) - old.keywords | keywords(new)
            else:
                self._keywords = frozenset().union(*(keywords(a) for a in self.args))
        return self._keywords


def _zero(x) -> bool:
    """Whether ``x`` is the exact number zero (sympy's 0·x and 0/x are 0)."""
    return type(x) in (int, Fraction) and x == 0


def symbol(keyword: str) -> Term:
    return Term("sym", (keyword,))


def keywords(x) -> frozenset:
    """The keywords of the symbols in a term (none in a number)."""
    if isinstance(x, Term):
        return x.keywords
    if isinstance(x, tuple):
        return frozenset().union(*(keywords(a) for a in x))
    return frozenset()


def power(a, b) -> Term:
    """``a ** b`` kept as a term where both are numbers (replayed as sympy's exact power)."""
    return Term("pow", (a, b))


def subs(a, old: Term, new) -> Term:
    """``a`` with the symbol ``old`` replaced by ``new`` (sympy's ``subs``, which simplifies as it goes)."""
    return Term("subs", (a, old, new))


def evalf(a, digits: int) -> Term:
    """``a`` as a float of ``digits`` significant digits (sympy's ``evalf``). Sympy's arithmetic on such a
    float keeps its precision, not more: a term with one is evaluated by sympy (:func:`numeric`)."""
    return Term("evalf", (a, digits))


def numeric(x) -> bool:
    """Whether :func:`value` evaluates ``x`` (no float of limited precision, :func:`evalf`, in it)."""
    if isinstance(x, tuple):
        return all(numeric(a) for a in x)
    return not isinstance(x, Term) or (x.op != "evalf" and all(numeric(a) for a in x.args))


def ratio(a, b):
    """``a / b``, exact where both are exact numbers (a Fraction, an int where whole); NaN for numbers over
    zero (sympy's nan or zoo: a plan's quantity for a case it does not take, which raises only if asked)."""
    if type(a) in _EXACT and type(b) in _EXACT:
        return whole(Fraction(a, b)) if b != 0 else math.nan
    if type(a) in _NUMBER and type(b) in _NUMBER:
        return arithmetic("div", a, b)
    return a / b


_EXACT = (int, Fraction)
_NUMBER = (int, Fraction, float, Decimal)
#: where a number stops being exact (past a root, exponential, logarithm or fractional power) it is a Decimal of
#: 40 significant digits: sympy evaluated such an expression to 30 before it became a float, so both round alike
CONTEXT = decimal.Context(prec=40)


def inexact(x) -> Decimal:
    """A number as a Decimal (a Fraction to :data:`CONTEXT`'s precision; an int or float exactly)."""
    if type(x) is Decimal:
        return x
    if type(x) is Fraction:
        return CONTEXT.divide(Decimal(x.numerator), Decimal(x.denominator))
    return Decimal(x)


def arithmetic(op: str, a, b):
    """``a`` op ``b`` ("add", "sub", "mul", "div", "pow") on numbers: exact on ints and Fractions, to
    :data:`CONTEXT`'s precision where one is a Decimal, NaN where there is no finite real result."""
    if type(a) is float or type(b) is float:  # NaN, a case without a value
        try:
            return float(_BINARY[op](float(a), float(b)))
        except (ArithmeticError, ValueError):
            return math.nan
    if type(a) is Decimal or type(b) is Decimal:
        try:
            return getattr(CONTEXT, _DECIMAL[op])(inexact(a), inexact(b))
        except decimal.DecimalException:
            return math.nan
    if op == "div":
        return ratio(a, b)
    if op == "pow":
        return _power(a, b)
    return whole(_BINARY[op](a, b))


_DECIMAL = {"add": "add", "sub": "subtract", "mul": "multiply", "div": "divide", "pow": "power"}


def _decimal_op(name: str):
    """The Decimal operation ``name`` of a number, to :data:`CONTEXT`'s precision; NaN where there is no
    finite real value."""
    def op(a):
        if a != a:
            return math.nan
        try:
            return getattr(CONTEXT, name)(inexact(a))
        except decimal.DecimalException:
            return math.nan
    return op


#: a term's other operators → their operation on numbers
NUMBER_OPS = {
    "max": lambda *a: max(a), "min": lambda *a: min(a), "eq": lambda a, b: a == b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
    "le": lambda a, b: a <= b, "and": lambda *a: all(a), "or": lambda *a: any(a),
    "not": lambda a: not a, "mod": lambda a, b: whole(a % b) if b != 0 else math.nan,
    "ceiling": lambda a: math.ceil(a) if math.isfinite(a) else a,
    "sqrt": _decimal_op("sqrt"), "exp": _decimal_op("exp"), "log": _decimal_op("ln"),
}


def sympy_op(op: str, decide: bool = False):
    """A term's operator on sympy objects: a maximum or minimum left unevaluated while symbols remain,
    unless ``decide``."""
    import sympy

    def lazy(f):
        return f if decide else lambda *a: f(*a, evaluate=all(x.is_number for x in map(sympy.sympify, a)))
    return {"max": lazy(sympy.Max), "min": lazy(sympy.Min), "eq": sympy.Eq, "gt": sympy.Gt, "ge": sympy.Ge,
            "le": sympy.Le, "and": sympy.And, "or": sympy.Or, "not": sympy.Not, "mod": sympy.Mod,
            "ceiling": sympy.ceiling, "sqrt": sympy.sqrt, "exp": sympy.exp, "log": sympy.log}[op]


# --- sympy -------------------------------------------------------------------------------------
def to_sympy(x, memo: dict | None = None):
    """The sympy object of a term (numbers and booleans as they are: sympy takes them in its operations)."""
    if not isinstance(x, Term):
        return x
    memo = _MEMO if memo is None else memo
    out = memo.get(x)
    if out is None:
        out = memo[x] = _replay(x, memo)
    return out


_MEMO: dict = {}


def _replay(t: Term, memo: dict):
    import sympy

    from .symbols import sym
    op, args = t.op, t.args
    if op == "sym":
        return sym(args[0])
    if op == "piecewise":
        return sympy.Piecewise(*((to_sympy(v, memo), to_sympy(c, memo)) for v, c in args))
    if op == "evalf":
        return sympy.sympify(to_sympy(args[0], memo)).evalf(args[1])
    if op == "subs":
        return sympy.sympify(to_sympy(args[0], memo)).subs(to_sympy(args[1], memo), to_sympy(args[2], memo))
    conv = [to_sympy(a, memo) for a in args]
    if op in _BINARY:
        if not any(isinstance(a, Term) for a in args):  # numbers alone: sympy's exact operation
            conv = [sympy.sympify(c) for c in conv]
        return _BINARY[op](*conv)
    if op == "neg":
        return -conv[0]
    return sympy_op(op)(*conv)


# --- numbers -----------------------------------------------------------------------------------
def value(x, env: dict, memo: dict | None = None):
    """A term at numbers: ``env`` maps keyword → int, Fraction or Decimal. An int or Fraction where the
    operations keep it exact, a Decimal (:data:`CONTEXT`) after a root, exponential, logarithm or fractional
    power, NaN where there is no finite real value; a bool for a condition."""
    if not isinstance(x, Term):
        return x
    memo = {} if memo is None else memo
    out = memo.get(x)
    if out is None:
        try:
            out = memo[x] = _value(x, env, memo)
        except (ArithmeticError, ValueError) as exc:  # decimal's signals are ArithmeticErrors
            raise NotReal(f"the result is not a finite real number ({exc})") from None
    return out


def _value(t: Term, env: dict, memo: dict):
    op, args = t.op, t.args
    if op == "sym":
        return env[args[0]]
    if op == "subs":
        a, old, new = args
        return value(a, {**env, old.args[0]: value(new, env, memo)})
    if op == "piecewise":
        for v, c in args:
            if value(c, env, memo) is True or c is True:
                return value(v, env, memo)
        raise NotReal(f"no piece of {t!r} holds")
    a = [value(x, env, memo) for x in args]
    if op in _DECIMAL:
        return arithmetic(op, *a)
    if op in _BINARY:
        return _BINARY[op](*a)
    if op == "neg":
        return CONTEXT.minus(a[0]) if type(a[0]) is Decimal else -a[0]
    if op == "evalf":
        raise TypeError("a float of limited precision takes sympy's arithmetic: see numeric()")
    return NUMBER_OPS[op](*a)


def whole(x):
    """A Fraction that is whole as an int (sympy's Rational does the same)."""
    if isinstance(x, Fraction) and x.denominator == 1:
        return x.numerator
    return x


def _power(a, b):
    """``a ** b`` of exact numbers: exact for a whole exponent, else a Decimal (NaN where not real)."""
    if type(b) is int or (type(b) is Fraction and b.denominator == 1):
        if a == 0 and b < 0:
            return math.nan
        return whole(Fraction(a) ** int(b))
    if a < 0:
        return math.nan
    return arithmetic("pow", inexact(a), b)
