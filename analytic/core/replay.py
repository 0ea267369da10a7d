"""Terms replayed on sympy objects: the expression a term stands for (:mod:`.terms` keeps terms as
data, without sympy; a formula's, a plan's or a template's sympy view is made here when asked)."""

from __future__ import annotations

from .operations import OPERATIONS
from .terms import _BINARY, Term


def sympy_op(op: str, decide: bool = False):
    """A term's operator on sympy objects: a maximum or minimum left unevaluated while symbols
    remain, unless ``decide``."""
    import sympy

    def lazy(f):
        if decide:
            return f
        return lambda *a: f(*a, evaluate=all(x.is_number for x in map(sympy.sympify, a)))
    if op == "gcd":
        from .functions import common_divisor
        return common_divisor
    if op == "value_at_max":
        from .functions import value_at_max
        return lambda *a: value_at_max(*a).doit(deep=False)
    if op in ("max", "min"):
        return lazy(getattr(sympy, OPERATIONS[op].sympy))
    return getattr(sympy, OPERATIONS[op].sympy)


def to_sympy(x, memo: dict | None = None):
    """The sympy object of a term (numbers and booleans as they are: sympy takes them in its
    operations)."""
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
    if op in ("sym", "in"):
        return sym(args[0])
    if op == "piecewise":
        return sympy.Piecewise(*((to_sympy(v, memo), to_sympy(c, memo)) for v, c in args))
    if op == "evalf":
        return sympy.sympify(to_sympy(args[0], memo)).evalf(args[1])
    if op == "subs":
        old, new = to_sympy(args[1], memo), to_sympy(args[2], memo)
        return sympy.sympify(to_sympy(args[0], memo)).subs(old, new)
    conv = [to_sympy(a, memo) for a in args]
    if op in _BINARY:
        if not any(isinstance(a, Term) for a in args):  # numbers alone: sympy's exact operation
            conv = [sympy.sympify(c) for c in conv]
        return _BINARY[op](*conv)
    if op == "neg":
        return -conv[0]
    return sympy_op(op)(*conv)


__all__ = ["sympy_op", "to_sympy"]
