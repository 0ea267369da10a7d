"""A user's pint session around the library: the application registry, a registry of the user's own,
pickling and mixing, before and after each public entry point. The library defines its units into
the registry the user works with and changes nothing else of pint."""

import pickle
import subprocess
import sys
import warnings

import pint
import pytest

import analytic as an
from analytic.core.errors import InputError, UnitError


def _plan():
    return an.Plan("llama3-8b", "h100-sxm", an.Layout(tp=2, dp=4), seq_len=2048, global_batch=64)


#: each public entry point that gives quantities, and one quantity of what it gives
ENTRY_POINTS = {
    "Formula.evaluate": (
        lambda: an.formula("memory.model_states.zero1").evaluate(params=405e9, dp=64)
    ),
    "Plan.memory": lambda: _plan().memory().total,
    "Plan.step_time": lambda: _plan().step_time(),
    "Plan.time_breakdown": lambda: next(iter(_plan().time_breakdown().values())),
    "Hardware.hbm": lambda: an.hardware("h100-sxm").hbm,
    "Hardware.peak_flops": lambda: an.hardware("h100-sxm").peak_flops("bf16"),
    "an.Q_": lambda: an.Q_(3, "GFLOP"),
}


def _users_pint_state():
    app = pint.get_application_registry()
    return (
        app,
        app.get(),
        app.get().formatter.default_format,
        list(warnings.filters),
        str(pint.Quantity(3, "meter").to("cm")),
    )


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_the_users_pint_is_as_it_was_after_each_entry_point(entry):
    """The application registry, its formats, the warnings filters and a metre are what they
    were."""
    before = _users_pint_state()
    got = ENTRY_POINTS[entry]()
    after = _users_pint_state()
    assert before[0] is after[0] and before[1] is after[1] and before[2:] == after[2:]
    assert after[4] == "300.0 centimeter"
    assert isinstance(got, pint.Quantity) and got._REGISTRY is pint.get_application_registry().get()


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_what_the_library_returns_mixes_with_the_users_quantities(entry):
    got = ENTRY_POINTS[entry]()
    mine = pint.Quantity(10, "s")
    assert (got * mine / mine).to(got.units).magnitude == pytest.approx(got.magnitude, rel=1e-15)
    assert an.ureg is pint.get_application_registry()


def test_the_library_adds_its_units_to_the_application_registry_and_reads_them_back():
    step = _plan().step_time()
    rate = (pint.Quantity(2, "GFLOP") / step).to("FLOP/s")
    assert rate.magnitude == pytest.approx(2e9 / step.to("s").magnitude, rel=1e-15)
    assert pint.Quantity(1, "token").dimensionality == {"[token]": 1}
    with pytest.raises(pint.DimensionalityError):
        pint.Quantity(1, "byte") + pint.Quantity(1, "FLOP")


def test_a_registry_of_the_users_own():
    """Handed a registry, the library gives its quantities there, and pint's application registry is
    untouched; None hands the application registry back."""
    mine = pint.UnitRegistry()
    try:
        assert an.use_registry(mine) is mine and an.ureg is mine
        step = _plan().step_time()
        assert step._REGISTRY is mine and (step + mine.Quantity(1, "s")).to("s").magnitude > 1
        assert an.formula("memory.model_states.zero1").evaluate(params=8e9, dp=8)._REGISTRY is mine
        assert "FLOP" in mine and pint.get_application_registry().get() is not mine
    finally:
        an.use_registry(None)
    assert an.ureg is pint.get_application_registry() and _plan().step_time()._REGISTRY is not mine


def test_within_the_counts_context_a_token_rate_is_a_frequency_and_outside_it_is_not():
    """Tokens a second from a plan convert to 1/s in the context "counts" the library adds: the
    tokens a step over the seconds a step; outside it they are a dimension of their own."""
    plan = _plan()
    rate = plan.tokens_per_step / plan.step_time()
    expected = 2048 * 64 / plan.step_time().to("s").magnitude  # sequences × their length
    assert rate.to("1/s", "counts").magnitude == pytest.approx(expected, rel=1e-12)
    cost = pint.Quantity(3, "USD/Mtoken").to("USD", "counts")
    assert cost.magnitude == pytest.approx(3e-6, rel=1e-12)
    assert pint.Quantity(2, "Gparam").to("", "counts").magnitude == pytest.approx(2e9, rel=1e-12)
    with pytest.raises(pint.DimensionalityError):
        rate.to("1/s")
    with pytest.raises(pint.DimensionalityError):
        pint.Quantity(1, "token/s").to("FLOP/s", "counts")


def test_a_users_own_counts_context_is_left_as_it_is():
    mine = pint.UnitRegistry()
    theirs = pint.Context("counts")
    mine.add_context(theirs)
    try:
        an.use_registry(mine)
        assert mine._contexts["counts"] is theirs
        with pytest.raises(pint.DimensionalityError):
            mine.Quantity(1, "token/s").to("1/s", "counts")
    finally:
        an.use_registry(None)


def test_a_registry_that_means_otherwise_is_refused_naming_the_unit():
    other = pint.UnitRegistry()
    other.define("FLOP = 2 * second")
    with pytest.raises(UnitError, match="'FLOP'"):
        an.use_registry(other)
    an.use_registry(None)
    with pytest.raises(InputError, match="use_registry: expected a pint UnitRegistry"):
        an.use_registry("pint")


_WRITE = """
import pickle, sys
import analytic as an
plan = an.Plan("llama3-8b", "h100-sxm", an.Layout(tp=2, dp=4), seq_len=2048, global_batch=64)
f = an.formula("memory.model_states.zero1").evaluate(params=405e9, dp=64)
qs = [plan.step_time(), plan.memory().total, f, an.Q_(3, "Gtoken/s"), an.Q_(2, "PFLOP")]
sys.stdout.buffer.write(pickle.dumps(qs))
"""

_READ = {
    "analytic first": "import pickle, sys\nimport analytic\n",
    "pint first": "import pickle, sys\nimport pint\nimport analytic\n",
}


@pytest.mark.parametrize("order", _READ)
def test_quantities_pickled_in_one_process_unpickle_in_another(order):
    """In a new process, after ``import analytic`` (pint imported before it or not), as pint
    unpickles them: into the application registry."""
    blob = subprocess.run([sys.executable, "-c", _WRITE], capture_output=True, check=True).stdout
    read = (
        _READ[order]
        + "qs = pickle.loads(sys.stdin.buffer.read())\n"
        "print([f'{q.to_base_units().magnitude:.17g} {q.units}' for q in qs])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", read], input=blob, capture_output=True, check=True
    ).stdout
    want = [f"{q.to_base_units().magnitude:.17g} {q.units}" for q in pickle.loads(blob)]
    assert out.decode().strip() == str(want)
    assert "gigatoken / second" in out.decode() and "petaFLOP" in out.decode()


def test_an_application_registry_that_means_otherwise_fails_no_import_and_is_refused_at_first_use():
    """A user whose application registry defines FLOP as something else can still import the library
    (and pint after it); the first quantity asked of the library is refused naming the unit."""
    code = (
        "import pint\npint.get_application_registry().define('FLOP = 2 * second')\nimport analytic"
        " as an\ntry:\n    an.Q_(1, 'GB')\nexcept an.UnitError as exc:\n    print('refused', 'FLOP'"
        " in str(exc))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "refused True"


@pytest.mark.parametrize("flags", [{}, {"force_ndarray_like": True}, {"force_ndarray": True}])
def test_a_plans_quantities_are_what_pints_constructor_makes(flags):
    """pint_quantity sets a float on a new Quantity: the same type, registry, magnitude bits and
    units as pint's constructor gives, converting, combining and pickling alike; where the registry
    forces arrays, the constructor's arrays."""
    from analytic.core.registry import pint_quantity, pint_units
    from analytic.core.units import Unit

    mine = pint.UnitRegistry(**flags)
    try:
        an.use_registry(mine)
        for text in ("GB", "TFLOP/s", "s", "GB/s"):
            items = Unit.of(text).items
            for v in (0.1, 1.0e200, -0.0, 3):
                ours, theirs = pint_quantity(v, items), mine.Quantity(v, pint_units(items))
                assert type(ours) is type(theirs) and ours._REGISTRY is mine
                assert type(ours.magnitude) is type(theirs.magnitude)
                assert repr(ours.magnitude) == repr(theirs.magnitude)
                assert ours.units == theirs.units and ours.to_base_units() == theirs.to_base_units()
                assert ours + theirs == 2 * theirs and pickle.loads(pickle.dumps(ours)) == theirs
            nan = pint_quantity(float("nan"), items)
            assert nan.units == theirs.units and str(nan.magnitude) == "nan"
    finally:
        an.use_registry(None)
