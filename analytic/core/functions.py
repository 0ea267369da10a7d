"""The two functions of the plan's sympy expressions that sympy lacks: :class:`value_at_max` and
:class:`common_divisor` (terms replay theirs as these; :mod:`.lowering` lowers them)."""

from __future__ import annotations

import sympy


class value_at_max(sympy.Function):
    """``value_at_max(key0, value0, key1, value1, ...)``: the value paired with the largest key (the
    first such pair on a tie). A Piecewise on comparisons of large expressions is slow to build;
    this is not. It stays unevaluated; :meth:`picked` (and so ``doit``, ``evalf`` and numeric
    programs) choose once every key is a number."""

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
    """``common_divisor(a, b)``: the greatest common divisor of two positive integers, left
    unevaluated while either is a symbol (sympy's ``gcd`` of symbols is a polynomial's); numbers
    substituted for them give the number."""

    def __new__(cls, a, b, **options):
        a, b = sympy.sympify(a), sympy.sympify(b)
        if a.is_Number and b.is_Number:
            return sympy.gcd(a, b)
        return super().__new__(cls, a, b, **options)


__all__ = ["common_divisor", "value_at_max"]
