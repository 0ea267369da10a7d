"""Numeric programs: data that Python or numpy evaluates, never code.

A :class:`Program` is the inputs, the constants and a list of steps, each a whitelisted operation on
earlier registers (:mod:`analytic.core.lowering` builds one from sympy expressions). It is plain
JSON (:meth:`Program.to_json`); :meth:`Program.from_json` validates every field — operation names,
arities, that each step reads only earlier registers, finite constants, bounded sizes — so a
program read from disk can at worst give wrong numbers of the right shape, never run anything.

:meth:`Program.scalar` runs it on Python floats (one plan), calling :data:`SCALAR`'s kernels, and
:meth:`Program.lazily` the same kernels a step at a time as the outputs asked for need them;
calling the Program runs it on numpy arrays (many layouts); all read the operations' one table,
:data:`analytic.core.operations.OPERATIONS`. This module imports no sympy.
"""

from __future__ import annotations

import functools
import math
import operator
import threading
from dataclasses import dataclass
from types import SimpleNamespace

from .errors import InputError
from .operations import ARITY, OPERATIONS


@functools.cache
def numpy_ops() -> dict:
    """operation → (numpy function, arity): numpy imported when a program first runs on arrays (a
    plan's numbers run on Python floats, :meth:`Program.scalar`, and import none)."""
    import numpy as np

    return {name: (op.numpy(np), op.arity) for name, op in OPERATIONS.items()}


#: largest program read back (steps, constants, inputs)
MAX_STEPS = 1 << 16
#: states of its registers a program remembers the steps between (:meth:`Program.lazily`)
MAX_STATES = 256
_LOCK = threading.Lock()


def _spread(fn):
    def apply(*args):
        return fn(args)

    return apply


#: operation → its kernel on Python floats, each operand an argument
SCALAR = SimpleNamespace(
    **{
        name: _spread(op.scalar) if op.arity is None else op.scalar
        for name, op in OPERATIONS.items()
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
        regs = [np.asarray(a, dtype=np.float64) for a in args] + list(self.constants)
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

    def lazily(self, args) -> "Registers":
        """The registers for ``args`` (Python floats, in the order of :attr:`inputs`), each step
        computed when an output asked for first needs it (:meth:`Registers.ask`): the same kernels
        on the same operands as :meth:`scalar`, so the same bits."""
        return Registers(self, args)

    @functools.cached_property
    def _asked(self) -> dict:
        """(what is computed, outputs asked) → (what is computed after, the steps to run, in
        program order): the registers' states as numbers, the first (0) none computed; kept for
        the sequences of asks this program's registers have seen (a plan of a structure asks as the
        last one did), :data:`MAX_STATES` states at most."""
        return {"masks": [bytearray(len(self.steps))], "index": {}}

    def _transition(self, state: int, outputs: tuple) -> tuple[int, tuple]:
        """(the state after, the steps to run: (kernel, getter, spread, register) in program
        order) for the registers in ``state`` asked ``outputs``; a state of -1 after: none kept."""
        known = self._asked
        key = (state, outputs)
        found = known["index"].get(key)
        if found is not None:
            return found
        base, done = len(self.inputs) + len(self.constants), known["masks"][state]
        need, stack = set(), [self.outputs[o] for o in outputs]
        while stack:
            r = stack.pop() - base
            if r >= 0 and not done[r] and r not in need:
                need.add(r)
                stack.extend(self.steps[r][1])
        steps = self._scalar_steps
        run = tuple((*steps[i], base + i) for i in sorted(need))
        with _LOCK:  # plans of one structure may be evaluated on several threads
            after = state
            if run:
                if len(known["masks"]) >= MAX_STATES:
                    return -1, run  # run, but remember nothing more
                mask = bytearray(done)
                for i in need:
                    mask[i] = 1
                known["masks"].append(mask)
                after = len(known["masks"]) - 1
            known["index"][key] = after, run
        return after, run

    @functools.cached_property
    def _every_step(self) -> tuple:
        """Every step as :meth:`_transition` gives them."""
        base = len(self.inputs) + len(self.constants)
        return tuple((*step, base + i) for i, step in enumerate(self._scalar_steps))

    @functools.cached_property
    def _scalar_steps(self) -> tuple:
        """(kernel, register getter, whether the kernel takes the getter's tuple spread) per step:
        one C-level fetch of a step's arguments, and the n-ary operations folded in C."""
        steps = []
        for op, refs in self.steps:
            kernel = getattr(SCALAR, op)
            if len(refs) == 1:
                steps.append((kernel, operator.itemgetter(refs[0]), False))
            elif ARITY[op] is None and (len(refs) > 2 or op not in _SCALAR_PAIRS):
                steps.append((OPERATIONS[op].scalar, operator.itemgetter(*refs), False))
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
                and type(step[0]) is str  # a list is no key of ARITY: a TypeError, not False
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


class Registers:
    """A :class:`Program`'s registers on Python floats for one set of arguments, each step computed
    when an output asked for first needs it (:meth:`Program.lazily`)."""

    __slots__ = ("_program", "_regs", "_state")

    def __init__(self, program: Program, args):
        self._program, self._state = program, 0
        self._regs = [*args, *program.constants, *([None] * len(program.steps))]

    def ask(self, outputs: tuple) -> list:
        """The registers, with every step the ``outputs`` (indices into :attr:`Program.outputs`)
        read computed."""
        regs, p = self._regs, self._program
        if self._state < 0:  # past the states kept: the whole program, each step once
            for fn, get, spread, at in p._every_step:
                if regs[at] is None:
                    regs[at] = fn(*get(regs)) if spread else fn(get(regs))
            return regs
        self._state, run = p._transition(self._state, outputs)
        for fn, get, spread, at in run:
            regs[at] = fn(*get(regs)) if spread else fn(get(regs))
        return regs
