"""Terms lowered to programs (analytic.core.term_lowering): each shape against a hand count of its
steps and an exact evaluation of the same term, and the same bits from any process."""

import json
import math
import os
import subprocess
import sys
from fractions import Fraction

import pytest

from analytic.core import algebra, terms
from analytic.core.errors import InputError
from analytic.core.term_lowering import program, programs
from analytic.core.terms import Term, input_

a, b, c, d = (input_(k) for k in "abcd")


def run(prog, **values) -> list:
    return prog.scalar([float(values[k]) for k in prog.inputs])


def test_a_sum_of_sums_and_differences_is_one_step_with_its_numbers_folded_exactly():
    """(a + 1/3) − (b − 2/3) + c: one add of the constant 1 (1/3 + 2/3, exact) and a, −b, c."""
    t = (a + Fraction(1, 3)) - (b - Fraction(2, 3)) + c
    prog = program([t])
    assert prog.inputs == ("a", "b", "c")
    assert [op for op, _ in prog.steps] == ["mul", "add"]  # −1·b, then one sum
    assert 1.0 in prog.constants and -1.0 in prog.constants
    assert run(prog, a=2, b=5, c=7) == [2 + 1 - 5 + 7]


def test_a_product_over_a_product_divides_once_so_a_whole_quotient_stays_whole():
    """⌈E·⌈h/t_n⌉·⌈h_e/(t_m·t)⌉/(ep·sms)⌉: 128 experts × 11 × 15 tiles over 132 SMs is exactly 160
    waves (a product by reciprocals gives 160.00000000000003, whose ceiling is 161)."""
    E, ep, sms, tm, tn, h, he, t = (
        input_(k) for k in ("E", "ep", "sms", "tm", "tn", "h", "he", "t")
    )
    waves = algebra.ceiling(
        E * algebra.ceiling(h / tn) * algebra.ceiling(he / (tm * t)) / (ep * sms)
    )
    prog = program([waves])
    values = dict(E=128, ep=1, sms=132, tm=128, tn=256, h=2688, he=1856, t=1)
    assert run(prog, **values) == [160.0]
    assert sum(op == "div" for op, _ in prog.steps) == 3  # one division per quotient
    assert prog(*(float(values[k]) for k in prog.inputs))[0] == 160.0  # numpy's kernels alike


def test_a_shared_subterm_is_lowered_once_and_not_flattened_into_its_readers():
    """s = a·b read by two sums: one step for s, one for each sum."""
    s = a * b
    prog = program([s + c, s + d])
    assert [op for op, _ in prog.steps] == ["mul", "add", "add"]
    assert run(prog, a=2, b=3, c=4, d=5) == [10.0, 11.0]


def test_a_case_analysis_takes_the_first_piece_that_holds_and_nan_where_none_does():
    t = algebra.Piecewise((a, algebra.Gt(b, 1)), (c, algebra.Eq(b, 0)))
    prog = program([t])
    assert run(prog, a=1, b=2, c=3) == [1.0] and run(prog, a=1, b=0, c=3) == [3.0]
    assert math.isnan(run(prog, a=1, b=0.5, c=3)[0])
    three = program([algebra.Piecewise((a, algebra.Gt(b, 1)), (c, algebra.Eq(b, 0)), (d, True))])
    assert [run(three, a=1, b=x, c=3, d=4) for x in (2, 0, 0.5)] == [[1.0], [3.0], [4.0]]
    # pieces of one value merge, as sympy's Piecewise does: no case analysis left
    assert algebra.Piecewise((a, algebra.Gt(b, 1)), (a, True)) is a


def test_the_value_at_the_largest_key_is_the_first_on_a_tie():
    t = algebra.value_at_max(a, 10, b, 20, c, 30)
    prog = program([t])
    assert run(prog, a=1, b=5, c=5) == [20.0] and run(prog, a=7, b=5, c=5) == [10.0]


def test_programs_lowered_together_keep_only_what_each_needs():
    """Three groups share a·b: each program reads only its own inputs, and gives what it gives
    alone."""
    s = a * b
    together = programs([[s + c], [s * d], [a - 1]])
    alone = [program([s + c]), program([s * d]), program([a - 1])]
    assert [p.inputs for p in together] == [("a", "b", "c"), ("a", "b", "d"), ("a",)]
    values = dict(a=3, b=4, c=5, d=6)
    assert (
        [run(p, **values) for p in together]
        == [run(p, **values) for p in alone]
        == [[17.0], [72.0], [2.0]]
    )


def test_the_same_terms_lower_to_the_same_program_in_another_process():
    """The lowering depends on the terms alone (not on hashes, which differ between processes)."""
    code = (
        "import json\nfrom analytic.core.term_lowering import program\n"
        "from analytic.core.terms import input_\nfrom analytic.core import algebra\n"
        "a, b, c = (input_(k) for k in 'abc')\n"
        "t = algebra.Max(a * b / c, (a + 2) * (b - 1))\n"
        "t = t + algebra.Piecewise((a, algebra.Gt(c, 1)), (b, True))\n"
        "print(json.dumps(program([t, t * c]).to_json()))"
    )
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(outs) == 1 and json.loads(outs.pop())["steps"]


def test_a_catalogue_symbol_left_free_is_one_clear_error():
    with pytest.raises(InputError, match="catalogue symbol left free"):
        program([terms.symbol("params") * a])


def test_one_object_per_term_with_its_numbers_types_told_apart():
    assert a * b is a * b and Term("add", (a, 1)) is not Term("add", (a, 1.0))
    assert Term("add", (a, 1)) == Term("add", (a, 1.0))  # structurally equal still


def test_sums_and_products_of_two_fold_and_keep_both_operands():
    """Two operands, a number among them or not, and numbers that are not exact (a Decimal past a
    root, a float) folded into the one constant."""
    from decimal import Decimal

    cases = [
        (a + b, 3 + 4),
        (a * b, 12),
        (a - b, -1),
        (a / b, 0.75),
        (a + 0, 3),
        (a * 1, 3),
        (2 * a / 4, 1.5),
        (a + Decimal("0.25") + Fraction(1, 4), 3.5),
        (a * Decimal("0.5") / 4.0, 0.375),
        (-(a - 5), 2),
        (Fraction(1, 3) + (b - Fraction(1, 3)), 4),
    ]
    for t, want in cases:
        prog = program([t])
        assert run(prog, a=3, b=4) == [want], t
    assert len(program([a + 0]).steps) == len(program([a * 1]).steps) == 0  # a itself
    assert program([a * Decimal("0.5") / 4.0]).constants == (0.125,)


def test_maxima_minima_and_logic_of_several_operands():
    prog = program(
        [
            algebra.Max(a, b, c),
            algebra.Min(c, b, a),
            algebra.And(algebra.Gt(a, 1), algebra.Gt(b, 1)),
            algebra.Or(algebra.Gt(a, 5), algebra.Gt(b, 5)),
            algebra.Max(a, b),
        ]
    )
    assert run(prog, a=3, b=7, c=5) == [7.0, 3.0, True, True, 7.0]
    assert run(prog, a=0, b=1, c=-1) == [1.0, -1.0, False, False, 1.0]


def test_decided_conditions_are_constants():
    prog = program(
        [
            True,
            False,
            Term("piecewise", ((a, False), (b, True))),
            Term("and", (algebra.Gt(a, 1), True)),
        ]
    )
    assert run(prog, a=3, b=4) == [1.0, 0.0, 4.0, True]
    assert run(prog, a=0, b=4)[3] is False


def test_the_value_at_the_largest_of_two_keys_and_of_one():
    assert run(program([algebra.value_at_max(a, 10, b, 20)]), a=1, b=5) == [20.0]
    assert run(program([algebra.value_at_max(a, 10, b, 20)]), a=6, b=5) == [10.0]
    assert run(program([Term("value_at_max", (a, b))]), a=1, b=5) == [5.0]


def test_a_shared_sum_is_computed_once_and_a_sum_read_once_is_flattened():
    s = a + b
    assert [op for op, _ in program([s + c, s + d]).steps] == ["add", "add", "add"]
    assert [op for op, _ in program([(a + b) + c]).steps] == ["add"]
    assert run(program([s + c, s + d]), a=1, b=2, c=3, d=4) == [6.0, 7.0]


def test_a_division_by_a_zero_number_divides_as_numpy_does_and_a_maximum_of_one_is_itself():
    """A term over the number 0 (a count a structure keeps at zero) is not folded: the program
    divides by it, ±inf or NaN as numpy gives; a maximum of one operand is that operand."""
    prog = program([a / 0, (a - b) / 0, Term("max", (a,)), 3 * a / Fraction(1, 2)])
    got = run(prog, a=2, b=2)
    assert got[0] == math.inf and got[2] == 2.0 and got[3] == 12.0 and not got[1] == got[1]
    assert 0.0 in prog.constants
