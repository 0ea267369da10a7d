"""Term: an expression in the declared symbols kept as data, without sympy.

The catalogue declares its formulas on terms (``S("params") * 6``), so importing it and evaluating a
formula at numbers need no sympy. A term records each operation as Python performed it, operands in
order; :func:`analytic.core.replay.to_sympy` performs them again on sympy objects, which gives the
very expression that declaring it on sympy symbols gives (sympy canonicalises as it builds).
:func:`value` evaluates a term at numbers: exact (int and Fraction) through sums, products,
quotients, integer powers, comparisons, maxima, minima, ceilings and remainders; a Decimal of 40
digits past a root, exponential, logarithm or fractional power. A plan template's terms hold its
inputs (:func:`input_`), which :mod:`.term_lowering` lowers to programs.
"""

from __future__ import annotations

import decimal
import math
from decimal import Decimal
from fractions import Fraction

from .errors import InputError
from .operations import CONDITIONS


class NotReal(InputError):
    """A term whose value at the given numbers is not a finite real number."""


#: a term's binary operator → its Python operation (on numbers, and on sympy objects in a replay)
_BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "pow": lambda a, b: a**b,
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
}


_INTERNED: dict = {}  # (op, args, their types) → term
_MAX_INTERNED = 1 << 17  # terms kept at most: tens of structures' templates, some tens of MB



class Term:
    """One operation (``op``) on its ``args``: terms, numbers (int, Fraction) or booleans. ``op``
    "sym" is a declared symbol, its one argument the keyword."""

    __slots__ = ("op", "args", "_hash", "_keywords")

    def __new__(cls, op: str, args: tuple):
        # one object per term (its numbers' types told apart: 1, 1.0 and True make three), so that
        # comparing two terms meets the same subterms and stops there
        key = (op, args, *map(type, args))
        t = _INTERNED.get(key)
        if t is None:
            if len(_INTERNED) >= _MAX_INTERNED:  # structural equality holds without it, only slower
                _INTERNED.clear()
            t = object.__new__(cls)
            t.op, t.args = op, args
            t._hash = hash((op, args))
            t._keywords = None
            _INTERNED[key] = t
        return t

    def __reduce__(self):  # unpickled through __new__, so one object per term still
        return (Term, (self.op, self.args))

    # arithmetic and comparisons, recorded with the operands in the order Python passed them; what
    # sympy folds whatever the symbols (0·x, 0/x, x/x, x − x) is folded here too, so a term holds
    # the symbols its expression does
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
        return self is other or (
            isinstance(other, Term)
            and self._hash == other._hash
            and self.op == other.op
            and self.args == other.args
        )

    def __hash__(self):
        return self._hash

    def __bool__(self):
        """True for an expression (a sympy expression's truth, which plans of symbols read as
        "given"); a condition in symbols has none."""
        if self.op in CONDITIONS:
            raise TypeError("a condition in symbols has no truth value")
        return True

    def __repr__(self):
        return self.args[0] if self.op == "sym" else f"{self.op}{self.args!r}"

    @property
    def keywords(self) -> frozenset:
        """The keywords of the symbols it contains."""
        if self._keywords is None:
            if self.op == "sym":
                self._keywords = frozenset(self.args)
            elif self.op == "in":
                self._keywords = frozenset()
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


def input_(keyword: str) -> Term:
    """A plan template's input ``keyword``: data a term at numbers holds as it is (no catalogue
    symbol, :attr:`Term.keywords` does not count it); sympy's symbol of ``keyword`` in a replay."""
    return Term("in", (keyword,))


def is_symbol(x, keyword: str) -> bool:
    """Whether ``x`` is the term of the declared symbol or template input ``keyword``."""
    return type(x) is Term and x.op in ("sym", "in") and x.args[0] == keyword


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
    """``a`` with the symbol ``old`` replaced by ``new`` (sympy's ``subs``, which simplifies as it
    goes)."""
    return Term("subs", (a, old, new))


def evalf(a, digits: int) -> Term:
    """``a`` as a float of ``digits`` significant digits (sympy's ``evalf``). Sympy's arithmetic on
    such a float keeps its precision, not more: a term with one is evaluated by sympy
    (:func:`numeric`)."""
    return Term("evalf", (a, digits))


def numeric(x) -> bool:
    """Whether :func:`value` evaluates ``x`` (no float of limited precision, :func:`evalf`, in
    it)."""
    if isinstance(x, tuple):
        return all(numeric(a) for a in x)
    return not isinstance(x, Term) or (x.op != "evalf" and all(numeric(a) for a in x.args))


def ratio(a, b):
    """``a / b``, exact where both are exact numbers (a Fraction, an int where whole); NaN for
    numbers over zero (sympy's nan or zoo: a plan's quantity for a case it does not take, which
    raises only if asked)."""
    if type(a) in _EXACT and type(b) in _EXACT:
        return whole(Fraction(a, b)) if b != 0 else math.nan
    if type(a) in _NUMBER and type(b) in _NUMBER:
        return arithmetic("div", a, b)
    return a / b


_EXACT = (int, Fraction)
_NUMBER = (int, Fraction, float, Decimal)
#: where a number stops being exact (past a root, exponential, logarithm or fractional power) it is
#: a Decimal of 40 significant digits: sympy evaluated such an expression to 30 before it became a
#: float, so both round alike
CONTEXT = decimal.Context(prec=40)


def inexact(x) -> Decimal:
    """A number as a Decimal (a Fraction to :data:`CONTEXT`'s precision; an int or float
    exactly)."""
    if type(x) is Decimal:
        return x
    if type(x) is Fraction:
        return CONTEXT.divide(Decimal(x.numerator), Decimal(x.denominator))
    return Decimal(x)


def arithmetic(op: str, a, b):
    """``a`` op ``b`` ("add", "sub", "mul", "div", "pow") on numbers: exact on ints and Fractions,
    to :data:`CONTEXT`'s precision where one is a Decimal, NaN where there is no finite real result;
    a term where one is a term."""
    if type(a) is Term or type(b) is Term:
        return _BINARY[op](a, b)
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
    """The Decimal operation ``name`` of a number, to :data:`CONTEXT`'s precision; NaN where there
    is no finite real value."""

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
    "max": lambda *a: max(a),
    "min": lambda *a: min(a),
    "eq": lambda a, b: a == b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
    "le": lambda a, b: a <= b,
    "and": lambda *a: all(a),
    "or": lambda *a: any(a),
    "not": lambda a: not a,
    "mod": lambda a, b: whole(a % b) if b != 0 else math.nan,
    "ceiling": lambda a: math.ceil(a) if math.isfinite(a) else a,
    "floor": lambda a: math.floor(a) if math.isfinite(a) else a,
    "gcd": lambda a, b: _gcd(a, b),
    "value_at_max": lambda *a: _value_at_max(a),
    "sqrt": _decimal_op("sqrt"),
    "exp": _decimal_op("exp"),
    "log": _decimal_op("ln"),
}


def _value_at_max(pairs):
    """``(key0, value0, key1, value1, ...)``: the value paired with the largest key (the first on a
    tie)."""
    keys = pairs[0::2]
    return pairs[1 + 2 * max(range(len(keys)), key=lambda i: (keys[i], -i))]


def _gcd(a, b):
    """The greatest common divisor of two exact numbers (of rationals: gcd of the numerators over
    lcm of the denominators)."""
    a, b = Fraction(a), Fraction(b)
    return whole(
        Fraction(math.gcd(a.numerator, b.numerator), math.lcm(a.denominator, b.denominator))
    )


# --- numbers -----------------------------------------------------------------------------------
def value(x, env: dict, memo: dict | None = None):
    """A term at numbers: ``env`` maps keyword → int, Fraction or Decimal. An int or Fraction
    where the operations keep it exact, a Decimal (:data:`CONTEXT`) after a root, exponential,
    logarithm or fractional power, NaN where there is no finite real value; a bool for a
    condition."""
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
    if op == "in":  # a template's input: data, as it is
        return t
    if op == "subs":
        a, old, new = args
        return value(a, {**env, old.args[0]: value(new, env, memo)})
    if op == "piecewise":
        return _piecewise(t, env, memo)
    a = [value(x, env, memo) for x in args]
    if any(type(x) is Term for x in a):  # a template's inputs in it: the operation as a term
        return applied(op, a)
    if op in _DECIMAL:
        return arithmetic(op, *a)
    if op in _BINARY:
        return _BINARY[op](*a)
    if op == "neg":
        return CONTEXT.minus(a[0]) if type(a[0]) is Decimal else -a[0]
    if op == "evalf":
        raise TypeError("a float of limited precision takes sympy's arithmetic: see numeric()")
    return NUMBER_OPS[op](*a)


def piecewise(pieces):
    """The term of ``(value, condition)`` pieces, the first whose condition holds, as sympy's
    Piecewise builds it: pieces past a true condition and those under a false one dropped,
    neighbours with the same value merged; the value itself where the first condition is true."""
    out: list = []
    for v, c in pieces:
        if c is False:
            continue
        if out and (out[-1][0] is v or out[-1][0] == v) and type(v) is not float:
            prev = out[-1][1]
            out[-1] = (v, True if c is True or prev is True else Term("or", (prev, c)))
        else:
            out.append((v, c))
        if out[-1][1] is True:
            break
    if not out:
        raise NotReal("no piece of a case analysis holds")
    return out[0][0] if out[0][1] is True else Term("piecewise", tuple(out))


def _piecewise(t: Term, env: dict, memo: dict):
    """The first piece of ``t`` whose condition holds; where conditions are terms in a template's
    inputs, :func:`piecewise` of the pieces from the first of them to the first that holds (the
    values of pieces it cannot take are not evaluated)."""
    kept = []
    for v, c in t.args:
        c = c if c is True else value(c, env, memo)
        if c is True or type(c) is Term:
            kept.append((v, c))
            if c is True:
                break
    if not kept:
        raise NotReal(f"no piece of {t!r} holds")
    if kept[0][1] is True:
        return value(kept[0][0], env, memo)
    return piecewise([(value(v, env, memo), c) for v, c in kept])


def applied(op: str, args):
    """``op`` on ``args`` of which one is a term: a term (with the folds of Python's operators on
    terms)."""
    if op in _BINARY:
        return _BINARY[op](*args)
    if op == "neg":
        return -args[0]
    return Term(op, tuple(args))


def whole(x):
    """A Fraction that is whole as an int (sympy's Rational does the same)."""
    if isinstance(x, Fraction) and x.denominator == 1:
        return x.numerator
    return x


#: the largest whole exponent a power is taken to exactly: an exact rational power grows in digits
#: with its exponent (2/3 to the 10⁸ holds 10⁸ digits), so past it the power is a Decimal
#: (:data:`CONTEXT`)
EXACT_POWER = 1024


def _power(a, b):
    """``a ** b`` of exact numbers: exact for a whole exponent up to :data:`EXACT_POWER` (or a
    base of 0 or ±1), else a Decimal (NaN where not real)."""
    if type(b) is int or (type(b) is Fraction and b.denominator == 1):
        if a == 0 and b < 0:
            return math.nan
        if abs(b) <= EXACT_POWER or a in (0, 1, -1):
            return whole(Fraction(a) ** int(b))
        return arithmetic("pow", inexact(a), int(b))
    if a < 0:
        return math.nan
    return arithmetic("pow", inexact(a), b)
