"""Fuzzing the classes of input the fourth hostile hunt found: configs with fields omitted,
co-design grids and schedulers, published figures of validation cases, unit text read after other
text, and objects shipped through pickle. Each outcome is the right answer or one typed library
error."""

import functools
import json
import pickle
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import analytic as an
from analytic.core.errors import AnalyticError
from analytic.presets import hf
from analytic.search import codesign as cd

HF = Path(__file__).resolve().parent / "data" / "hf"
RELEASED = {p.stem: json.loads(p.read_text()) for p in sorted(HF.glob("*.json"))}


def _outcome(cfg: dict):
    try:
        return an.Model.from_hf(cfg)
    except AnalyticError as exc:
        return str(exc)


@given(st.sampled_from(sorted(RELEASED)), st.data())
def test_a_released_config_with_fields_omitted_reads_as_with_transformers_defaults(name, data):
    """Omitting any set of the fields its config class fills is the same as writing them at their
    defaults: the same Model, or the same one-line refusal."""
    cfg = RELEASED[name]
    filled = hf.defaults(cfg["model_type"])
    dropped = data.draw(st.sets(st.sampled_from(sorted(filled))))
    omitted = {k: v for k, v in cfg.items() if k not in dropped}
    written = {
        **{k: v for k, v in omitted.items() if not any(hf.ALIASES.get(d) == k for d in dropped)},
        **{k: filled[k] for k in dropped},
    }
    assert _outcome(omitted) == _outcome(written)


GRID_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 10**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=16),
    st.sampled_from(
        [
            "80 GB",
            "1:2:3 GB",
            "1:2:10000000000 GB",
            "nan:1:2 GB",
            "1:2:٣ GB",
            "8:72:3",
            "1:2:0 GB",
            "80 GB/s",
            "inf GB",
            "2 USD/hour",
            "-1 GB",
        ]
    ),
    st.builds(lambda x: an.Q_(x, "GB"), st.floats(-1e3, 1e3)),
    st.lists(
        st.one_of(
            st.none(), st.sampled_from(["80 GB", "40 GB", "x", "1e400 GB"]), st.integers(-2, 300)
        ),
        max_size=4,
    ),
)


@settings(max_examples=300)
@given(
    st.dictionaries(
        st.sampled_from(sorted(cd.FIELDS) + ["host_memory", 5]), GRID_VALUES, max_size=3
    )
)
def test_a_grid_is_checked_from_its_description(vary):
    """Every grid: lists of at most a million points, or one AnalyticError, before a point is
    built."""
    try:
        grids = cd._grids(vary)
    except AnalyticError:
        return
    sizes = [len(g) for g in grids.values()]
    assert all(sizes) and __import__("math").prod(sizes) <= cd.MAX_POINTS


@given(
    st.one_of(
        st.none(),
        st.integers(),
        st.text(max_size=40),
        st.builds(
            lambda s, h, p: f"{s}{h}:{p}",
            st.sampled_from(["", "tcp://", "tls://", "ucx://", "inproc://", "http://", " "]),
            st.sampled_from(["node7", "10.0.0.1", "[::1]", "", "a b", "٣"]),
            st.integers(-1, 70000),
        ),
    )
)
def test_a_scheduler_is_none_synchronous_or_a_tcp_address(text):
    try:
        got = cd.scheduler_of(text)
    except AnalyticError:
        return
    assert (
        got is None
        or got == "synchronous"
        or got.startswith(("tcp://", "tls://"))
        and got.isascii()
    )


@given(
    st.one_of(
        st.booleans(),
        st.floats(allow_nan=True, allow_infinity=True),
        st.integers(),
        st.none(),
        st.text(max_size=12),
        st.lists(st.integers(), max_size=2),
    )
)
def test_a_published_figure_is_a_finite_number_or_text(value):
    from analytic.core.errors import ValidationError
    from analytic.fit.cases import _check_published

    try:
        _check_published("case X", value)
    except ValidationError:
        return
    assert type(value) in (int, float, str) and (
        not isinstance(value, float) or abs(value) < float("inf")
    )


PREFIXES = ["", "k", "M", "G", "kilo", "giga", "Ki", "Gi", "kibi"]
BASES = ["byte", "B", "FLOP", "token", "second", "s", "gigabyte", "GB", "kbyte", "hour", "bit"]


TEXTS = [p + b for p in PREFIXES for b in BASES]


@given(st.lists(st.sampled_from(TEXTS), min_size=1, max_size=4), st.sampled_from(TEXTS))
def test_a_unit_reads_the_same_whatever_was_read_before(before, text):
    """Reading other units first changes nothing: the same unit, or the same refusal, as a process
    that read nothing before."""
    from analytic.core.quantity import Unit

    def read(t):
        try:
            return str(Unit.of(t))
        except AnalyticError:
            return "REFUSED"

    for b in before:
        read(b)
    assert read(text) == _fresh_readings()[text]


@functools.cache
def _fresh_readings() -> dict:
    """Each text of TEXTS as a new process reads it first (one process a text, run once)."""
    import subprocess
    import sys

    code = (
        "import sys\nfrom analytic.core.quantity import Unit\ntry:\n   "
        " print(Unit.of(sys.argv[1]))\nexcept Exception:\n    print('REFUSED')\n"
    )
    return {
        t: (
            subprocess.run(
                [sys.executable, "-c", code, t], capture_output=True, text=True, check=True
            ).stdout.strip()
        )
        for t in TEXTS
    }


@settings(max_examples=8)  # a plan of a new structure composes its formulas: ~0.5 s
@given(an.strategies.plans(model="llama3-8b", hardware="h100-sxm"))
def test_a_plan_pickles_to_the_same_plan(plan):
    back = pickle.loads(pickle.dumps(plan))
    assert repr(back) == repr(plan) and back.memory().total == plan.memory().total
    try:
        want = plan.step_time()
    except AnalyticError:
        return
    assert back.step_time().to("s").magnitude == pytest.approx(want.to("s").magnitude, rel=1e-12)
