"""Terms lowered to numeric programs (:class:`~analytic.core.numeric.Program`), without sympy.

A plan template composed on terms (:mod:`analytic.plan.template`) holds each quantity as a term in
the template's inputs (:func:`~analytic.core.terms.input_`); :func:`program` lowers a list of them
to one program, each distinct subterm once, its operations in the order the term records them. Every
numeric plan of the structure then runs that program: the same operations on the same floats, so the
same bits, whichever plan, process or cache it is.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

from .errors import InputError
from .numeric import ARITY, Program
from .terms import Term


def program(terms) -> Program:
    """The Program computing ``terms`` (terms, numbers or bools) from the template inputs they read
    (:func:`~analytic.core.terms.input_`), its arguments in the order of their keywords."""
    return programs([terms])[0]


def programs(groups) -> list[Program]:
    """A :func:`program` of each list of terms in ``groups``, lowered together (the subterms they
    share once) and each then keeping the steps its own outputs need."""
    b = _Builder()
    b.uses = _uses([t for terms in groups for t in terms])
    refs = [[b.walk(t) for t in terms] for terms in groups]
    return [b.pruned(r) for r in refs]


class _Builder:
    """The program's constants and steps as :func:`program` lowers terms into them; a reference is
    ("i", input), ("c", constant) or ("s", step)."""

    def __init__(self):
        self.constants: list[float] = []
        self.const_at: dict = {}
        self.steps: list[tuple[str, tuple]] = []
        self.memo: dict = {}
        # a sum or product → its flattened operands (see _operands, _factors)
        self.flat: dict = {}

    def pruned(self, refs) -> Program:
        """The Program of the outputs ``refs``: the steps, constants and inputs they need, in
        order."""
        needed, stack = set(), [i for kind, i in refs if kind == "s"]
        while stack:
            i = stack.pop()
            if i not in needed:
                needed.add(i)
                stack.extend(j for kind, j in self.steps[i][1] if kind == "s")
        steps = [i for i in range(len(self.steps)) if i in needed]
        read = [r for i in steps for r in self.steps[i][1]] + list(refs)
        order = sorted({i for kind, i in read if kind == "i"})
        consts = sorted({i for kind, i in read if kind == "c"})
        at = {("i", k): n for n, k in enumerate(order)}
        at.update({("c", c): len(order) + n for n, c in enumerate(consts)})
        at.update({("s", i): len(order) + len(consts) + n for n, i in enumerate(steps)})
        return Program(
            tuple(order),
            tuple(self.constants[c] for c in consts),
            tuple((self.steps[i][0], tuple(at[r] for r in self.steps[i][1])) for i in steps),
            tuple(at[r] for r in refs),
        )

    def const(self, x) -> tuple:
        key = float(x)
        slot = self.const_at.get(("nan",) if key != key else key)
        if slot is None:
            slot = self.const_at[("nan",) if key != key else key] = len(self.constants)
            self.constants.append(key)
        return ("c", slot)

    def step(self, op: str, *refs) -> tuple:
        self.steps.append((op, refs))
        return ("s", len(self.steps) - 1)

    def walk(self, root):
        """The reference of ``root``, its subterms lowered first (iteratively: terms nest
        deeply)."""
        memo, stack = self.memo, [(root, False)]
        while stack:
            t, ready = stack.pop()
            if type(t) is not Term or t in memo:
                continue
            if ready:
                memo[t] = self.visit(t)
                continue
            stack.append((t, True))
            stack.extend((a, False) for a in reversed(self.children(t)) if type(a) is Term)
        return self.ref(root)

    def children(self, t: Term) -> list:
        """The subterms ``t`` reads: a piecewise's values and conditions, a sum's or product's own
        operands flattened (kept in :attr:`flat` for :meth:`visit`)."""
        op = t.op
        if op == "in":
            return []
        if op in ("add", "sub"):
            out = self.flat[t] = _operands(t, self.uses)
            return out
        if op in ("mul", "neg", "div"):
            up, down = self.flat[t] = _factors(t, self.uses)
            return up + down
        if op == "piecewise":
            return [x for piece in t.args for x in piece]
        if op in ("sym", "subs", "evalf"):
            raise InputError(
                f"cannot lower the term operation {op!r} (a catalogue symbol left free) "
                "to a numeric program"
            )
        return list(t.args)

    def ref(self, x) -> tuple:
        if isinstance(x, Term):
            return self.memo[x]
        if type(x) is bool:
            return self.const(1.0 if x else 0.0)
        if type(x) in (int, Fraction, Decimal, float):
            return self.const(x)
        raise InputError(f"cannot lower {type(x).__name__} {x!r:.80} to a numeric program")

    def visit(self, t: Term) -> tuple:
        op, args = t.op, t.args
        if op == "in":
            return ("i", args[0])
        if op in ("add", "sub"):
            return self._sum(t)
        if op in ("mul", "neg", "div"):
            return self._product(t)
        if op == "piecewise":
            return self._piecewise(args)
        if op == "value_at_max":
            keys, values = [self.ref(k) for k in args[0::2]], [self.ref(v) for v in args[1::2]]
            top = self.step("max", *keys) if len(keys) > 1 else keys[0]
            out = values[-1]
            for key, value in zip(reversed(keys[:-1]), reversed(values[:-1])):
                out = self.step("where", self.step("eq", key, top), value, out)
            return out
        if op in ARITY:  # the program's operation of the same name and arguments
            refs = [self.ref(a) for a in args]
            if op in ("max", "min", "and", "or") and len(refs) == 1:
                return refs[0]
            return self.step(op, *refs)
        raise InputError(f"cannot lower the term operation {op!r} to a numeric program")

    def _sum(self, t: Term) -> tuple:
        """A sum as one step of its operands, its own nested sums and differences flattened into it
        as sympy's Add holds them, its numbers folded exactly into one constant, first."""
        numbers, refs = [], []
        for x in self.flat[t]:
            if type(x) in _NUMBERS:
                numbers.append(x)
            else:
                refs.append(self.ref(x))
        exact = sum((x for x in numbers if type(x) in (int, Fraction)), Fraction(0))
        inexact = [float(x) for x in numbers if type(x) not in (int, Fraction)]
        total = _inexact(exact, [(x, 0) for x in inexact]) if inexact else exact
        if total != 0 or not refs:
            refs.insert(0, self.const(total))
        return refs[0] if len(refs) == 1 else self.step("add", *refs)

    def _product(self, t: Term) -> tuple:
        """A product or quotient as the product of its numerator's factors over that of its
        denominator's, divided once (a whole quotient stays whole, as exact arithmetic has it: its
        ceiling is not one more), its numbers folded exactly into one constant, first."""
        up, down = self.flat[t]
        number = Fraction(1)
        inexact = []
        numbers = [(x, 1) for x in up if type(x) in _NUMBERS]
        numbers += [(x, -1) for x in down if type(x) in _NUMBERS and x != 0]
        for x, power in numbers:
            if type(x) in (int, Fraction, bool):
                number = number * x if power == 1 else number / x
            else:
                inexact.append((float(x), power))
        value = number if not inexact else _inexact(number, inexact)
        num = [self.ref(x) for x in up if type(x) not in _NUMBERS]
        # a zero (or NaN) divisor stays a division: the program divides by it as numpy does
        den = [self.ref(x) for x in down if type(x) not in _NUMBERS or not x != 0]
        if value != 1 or not num:
            num.insert(0, self.const(value))
        top = num[0] if len(num) == 1 else self.step("mul", *num)
        if not den:
            return top
        return self.step("div", top, den[0] if len(den) == 1 else self.step("mul", *den))

    def _piecewise(self, pieces) -> tuple:
        """Pieces as wheres: the first whose condition holds; NaN where none does."""
        pieces = list(pieces)
        last_true = pieces[-1][1] is True
        out = self.ref(pieces[-1][0]) if last_true else self.const(math.nan)
        for value, cond in reversed(pieces[:-1] if last_true else pieces):
            out = self.step("where", self.ref(cond), self.ref(value), out)
        return out


_NUMBERS = (int, Fraction, Decimal, float, bool)


def _uses(terms) -> dict:
    """term → how many times the terms read it (a shared one is lowered once, not flattened into
    each sum or product that reads it)."""
    uses: dict = {}
    stack = [t for t in terms if type(t) is Term]
    while stack:
        t = stack.pop()
        n = uses.get(t, 0)
        uses[t] = n + 1
        if n == 0 and t.op != "in":
            args = [x for piece in t.args for x in piece] if t.op == "piecewise" else t.args
            stack.extend(a for a in args if type(a) is Term)
    return uses


def _own(x, t: Term, uses: dict) -> bool:
    """Whether ``x``, read by ``t``, is ``t`` itself or read nowhere else (so flattened into it)."""
    return x is t or uses.get(x, 0) <= 1


def _operands(t: Term, uses: dict) -> list:
    """The operands of the sum ``t``, its own nested sums and differences flattened in order, a
    subtrahend's sign carried into its own operands: a number negated, a term as its product with
    -1."""
    out, stack = [], [(t, 1)]
    while stack:
        x, sign = stack.pop()
        if type(x) is Term and _own(x, t, uses) and x.op in ("add", "sub"):
            second = sign if x.op == "add" else -sign
            stack.extend(((x.args[1], second), (x.args[0], sign)))
        elif sign == 1:
            out.append(x)
        else:
            out.append(-x if type(x) in _NUMBERS else Term("neg", (x,)))
    return out


def _factors(t: Term, uses: dict) -> tuple[list, list]:
    """The factors of a product or quotient ``t`` in its numerator and its denominator, its own
    nested products, quotients and negations flattened in order."""
    up, down = [], []
    stack = [(t, False)]
    while stack:
        x, below = stack.pop()
        if type(x) is not Term or not _own(x, t, uses):
            (down if below else up).append(x)
        elif x.op == "mul":
            stack.extend((a, below) for a in reversed(x.args))
        elif x.op == "div":
            stack.extend(((x.args[1], not below), (x.args[0], below)))
        elif x.op == "neg":
            stack.extend(((x.args[0], below), (-1, False)))
        else:
            (down if below else up).append(x)
    return up, down


def _inexact(number: Fraction, operands: list) -> float:
    """``number`` as a float, then with each (float, power) operand: times it (power 1), over it
    (-1), plus it (0)."""
    value = float(number)
    for x, power in operands:
        value = value * x if power == 1 else value / x if power == -1 else value + x
    return value


__all__ = ["program", "programs"]
