"""Reading expressions from data files without running them.

The validation cases write what to compute as short expressions (``f('compute.mfu', flops='147
TFLOP', ...)``, ``plan('essay').memory().weights``) and closed forms as arithmetic over the
notation's keywords (``4*params + 12*params/dp``). Neither is handed to ``eval`` or to sympy's
``sympify`` (which calls ``eval``): both are parsed with :mod:`ast` and walked over a whitelist of
node types, names and attributes, with bounded sizes and exponents. Anything else is an
:class:`~analytic.core.errors.InputError` naming the text.
"""

from __future__ import annotations

import ast
import math
import operator

import sympy

from .algebra import Max, Min
from .errors import FreeSymbolError, InputError
from .operations import OPERATIONS
from .symbols import REGISTRY, sym
from .values import exact

#: longest expression read
MAX_EXPRESSION = 2000
#: largest integer exponent of ``**``
MAX_EXPONENT = 64
#: most terms a symbolic product or power may expand to, most items a repeated list or string may
#: hold, most bits an integer power may have: bounds that keep ``expand``/``simplify`` and
#: ``'a'*10**9`` short
MAX_TERMS = 1000
MAX_ITEMS = 10_000
MAX_BITS = 4096
_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Pow: operator.pow,
}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}
#: the functions an expression's text may call, by their sympy names (operations.OPERATIONS)
_SYMPY_FUNCTIONS = {
    OPERATIONS[k].sympy: getattr(sympy, OPERATIONS[k].sympy)
    for k in ("max", "min", "sqrt", "log", "ceiling", "floor")
}


def _parse(text: str, what: str) -> ast.AST:
    if not isinstance(text, str):
        raise InputError(f"{what}: expected an expression as text, got {type(text).__name__}")
    if len(text) > MAX_EXPRESSION:
        raise InputError(
            f"{what}: an expression of {len(text):,} characters (at most {MAX_EXPRESSION:,})"
        )
    try:
        return ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise InputError(f"{what}: cannot parse {text!r:.80}") from None


def _terms(expr, cap: int = MAX_TERMS) -> int:
    """How many terms ``sympy.expand(expr)`` gives at most (a multinomial count), stopping past
    ``cap``."""
    if isinstance(expr, sympy.Add):
        return min(cap + 1, sum(_terms(a, cap) for a in expr.args))
    if isinstance(expr, sympy.Mul):
        n = 1
        for a in expr.args:
            n = min(cap + 1, n * _terms(a, cap))
        return n
    if isinstance(expr, sympy.Pow) and expr.exp.is_Integer and expr.exp > 1:
        k = _terms(expr.base, cap)
        return min(cap + 1, sympy.binomial(int(expr.exp) + k - 1, k - 1)) if k > 1 else 1
    return 1


def _bounded(value, what: str, terms: bool = True):
    """``value``, refused where it would make later work unbounded: a string or list of more than
    MAX_ITEMS items, and (``terms``: a product or a power, the only operations that multiply terms)
    a symbolic expression that expands to more than MAX_TERMS terms."""
    if terms and isinstance(value, sympy.Basic) and not value.is_Atom and _terms(value) > MAX_TERMS:
        raise InputError(f"{what}: an expression that expands to more than {MAX_TERMS:,} terms")
    if isinstance(value, (str, list, tuple)) and len(value) > MAX_ITEMS:
        raise InputError(f"{what}: a {type(value).__name__} of more than {MAX_ITEMS:,} items")
    return value


def _repeat(left, right, what: str):
    """``left * right``, refusing a repetition of a sequence past MAX_ITEMS before it is built."""
    for seq, n in ((left, right), (right, left)):
        if isinstance(seq, (str, list, tuple)) and isinstance(n, int) and len(seq) * n > MAX_ITEMS:
            raise InputError(f"{what}: a {type(seq).__name__} of more than {MAX_ITEMS:,} items")
    return _bounded(left * right, what)


def _power(base, exp, what: str):
    """``base ** exp`` for a numeric exponent of at most MAX_EXPONENT in size (no 9**9**9), an
    integer result of at most MAX_BITS bits and a symbolic one of at most MAX_TERMS terms expanded,
    in which no power (nested ones multiplied out) is past MAX_EXPONENT."""
    numeric = not isinstance(exp, sympy.Basic) or exp.is_number
    try:
        small = numeric and abs(exp) <= MAX_EXPONENT
    except TypeError:
        small = False
    if not small:
        raise InputError(
            f"{what}: an exponent must be a number of at most {MAX_EXPONENT} in size, got {exp}"
        )
    if (
        isinstance(base, (int, sympy.Integer))
        and isinstance(exp, (int, sympy.Integer))
        and exp > 0
        and int(base).bit_length() * int(exp) > MAX_BITS
    ):
        raise InputError(f"{what}: an integer power of more than {MAX_BITS:,} bits")
    power = base**exp
    if isinstance(power, sympy.Basic) and any(
        p.exp.is_number and abs(p.exp) > MAX_EXPONENT for p in power.atoms(sympy.Pow)
    ):
        raise InputError(
            f"{what}: a power of degree more than {MAX_EXPONENT} ((x**64)**64 is x**4096)"
        )
    return _bounded(power, what)


def _binary(node, left, right, what: str):
    if isinstance(node.op, ast.Pow):
        return _power(left, right, what)
    if isinstance(node.op, ast.Mult):
        return _repeat(left, right, what)
    return _bounded(_BINARY[type(node.op)](left, right), what, terms=False)


def symbolic(text: str, what: str = "expression") -> sympy.Expr:
    """Arithmetic (``+ - * / **``, parentheses, numbers, Max/Min/sqrt/log/ceiling/floor) over the
    notation's keywords, as a sympy expression in the declared symbols."""

    def walk(node):
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return exact(node.value)
        if isinstance(node, ast.Name):
            if node.id not in REGISTRY:
                raise InputError(f"{what}: {node.id!r} is not a keyword of the notation")
            return sym(node.id)
        if (
            isinstance(node, ast.BinOp)
            and type(node.op) in _BINARY
            and not isinstance(node.op, ast.FloorDiv)
        ):
            return _binary(node, walk(node.left), walk(node.right), what)
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](walk(node.operand))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _SYMPY_FUNCTIONS
            and not node.keywords
        ):
            return _SYMPY_FUNCTIONS[node.func.id](*map(walk, node.args))
        raise InputError(
            f"{what}: {type(node).__name__} is not allowed in a closed form ({text!r:.80})"
        )

    return walk(_parse(text, what))


def evaluate(text: str, names: dict, attributes: frozenset, what: str = "expression"):
    """The value of a small Python expression over ``names``: literals, ``+ - * / // **``, calls of
    the callables in ``names`` (and of whitelisted methods), ``obj.attr`` for ``attr`` in
    ``attributes`` (never a name starting with ``_``), ``obj[constant]``, lists, tuples and dicts.
    Nothing else parses: no comprehensions, lambdas, imports or other names."""

    def walk(node):
        if isinstance(node, ast.Constant) and type(node.value) in (int, float, str):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in names:
                raise InputError(
                    f"{what}: unknown name {node.id!r} (known: {', '.join(sorted(names))})"
                )
            return names[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            return _binary(node, walk(node.left), walk(node.right), what)
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](walk(node.operand))
        if isinstance(node, ast.Attribute):
            if node.attr.startswith("_") or node.attr not in attributes:
                raise InputError(f"{what}: the attribute {node.attr!r} is not readable here")
            return getattr(walk(node.value), node.attr)
        if isinstance(node, ast.Subscript):
            key = node.slice
            if not (isinstance(key, ast.Constant) and type(key.value) in (int, str)):
                raise InputError(f"{what}: only a constant index is allowed")
            return walk(node.value)[key.value]
        if isinstance(node, ast.Call):
            if any(isinstance(a, ast.Starred) for a in node.args) or any(
                k.arg is None for k in node.keywords
            ):
                raise InputError(f"{what}: * and ** arguments are not allowed")
            func = walk(node.func)
            return _bounded(
                func(*map(walk, node.args), **{k.arg: walk(k.value) for k in node.keywords}),
                what,
                terms=False,
            )
        if isinstance(node, (ast.List, ast.Tuple)):
            items = [walk(e) for e in node.elts]
            return items if isinstance(node, ast.List) else tuple(items)
        if isinstance(node, ast.Dict):
            if any(k is None for k in node.keys):
                raise InputError(f"{what}: ** in a dict is not allowed")
            return {walk(k): walk(v) for k, v in zip(node.keys, node.values)}
        raise InputError(f"{what}: {type(node).__name__} is not allowed ({text!r:.80})")

    return walk(_parse(text, what))


def substituted(expr, repl: dict):
    """``expr.xreplace(repl)``, except that a Max or Min whose new arguments are not all numbers is
    left unevaluated: deciding which of two large expressions in symbols is larger (sympy's local
    zeros) is slow and rarely possible, and substituting numbers later evaluates it."""
    if expr in repl:
        return repl[expr]
    if not expr.args:
        return expr
    args = [substituted(a, repl) for a in expr.args]
    if all(a is b for a, b in zip(args, expr.args)):
        return expr
    if expr.func is sympy.Max:
        return Max(*args)
    if expr.func is sympy.Min:
        return Min(*args)
    return expr.func(*args)


def to_float(expr: sympy.Expr, name: str = "expression") -> float:
    """An exact sympy number as a float (the edge where exactness ends)."""
    if isinstance(expr, sympy.Rational):  # one correctly rounded division
        try:
            return expr.p / expr.q
        except OverflowError:
            pass  # past the float range: said below
    try:
        val = complex(sympy.N(expr, 30))
    except TypeError:
        raise FreeSymbolError(f"{name}: cannot evaluate {expr}") from None
    if val.imag != 0 or not math.isfinite(val.real):
        raise InputError(f"{name}: the result is not a finite real number ({expr})")
    return val.real
