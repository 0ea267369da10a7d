"""The library's units and quantities as data (analytic.core.quantity) against pint's, read from the
same units.txt: the same names, the same containers, the same conversion factors to the last bit,
the same text in every format the library prints; pint's objects where a user reads a quantity, the
library's own within ``units.as_data``; and a command line that imports no pint."""

import itertools
import subprocess
import sys
from decimal import Decimal
from fractions import Fraction

import pint
import pytest
from hypothesis import given
from hypothesis import strategies as st

import analytic as an
from analytic.core import unit_table, units
from analytic.core.errors import UnitError
from analytic.core.quantity import DEFAULT_FORMAT, Quantity, Unit

#: names as a user or a preset writes them: prefixed, plural, symbols and aliases
NAMES = [
    "GB",
    "GiB",
    "byte",
    "bytes",
    "B",
    "bit",
    "b",
    "Gbit",
    "Gbps",
    "bps",
    "Bps",
    "s",
    "ms",
    "us",
    "µs",
    "μs",
    "ns",
    "min",
    "minute",
    "h",
    "hr",
    "hour",
    "hours",
    "d",
    "day",
    "days",
    "week",
    "year",
    "yr",
    "FLOP",
    "FLOPs",
    "flop",
    "TFLOP",
    "PFLOP",
    "FLOPS",
    "TFLOPS",
    "token",
    "tok",
    "Mitoken",
    "Mtok",
    "parameter",
    "param",
    "params",
    "dollar",
    "USD",
    "percent",
    "%",
    "kB",
    "KiB",
    "MB",
    "TB",
    "TiB",
    "PB",
    "seconds",
    "EB",
    "Zs",
]
EXPRESSIONS = [
    "GB/s",
    "byte/second",
    "FLOP/s",
    "1/hour",
    "byte**2/s",
    "byte/parameter/token",
    "dollar*bit",
    "FLOP*s",
    "s*GB",
    "byte/FLOP",
    "s**-1",
    "FLOP**0.53",
    "token/FLOP**0.5",
    "parameter / FLOP ** 0.46",
    "GiB/s",
    "TB/s",
    "Gbit/s",
    "USD/hour",
    "byte / (parameter * token)",
    "hour*GB/s",
    "",
    "dimensionless",
    "1",
    "TFLOP**0.5",
    "FLOP**0.5",
    "GiB**2/hour",
    "byte**2/s",
]


def declared_units() -> set[str]:
    """Every unit the library declares: its formulas' and coefficients', its symbols'."""
    out = {str(f.unit) for f in an.formulas().values()}
    out |= {
        str(f.coefficient_unit) for f in an.formulas().values() if f.coefficient_unit is not None
    }
    out |= {str(i.unit) for i in an.symbols.table()}
    return out


ALL = sorted(set(NAMES + EXPRESSIONS) | declared_units())
SPECS = ["", "~", "P", "~P", "C", "~C", "D", "~D"]

#: pint reading units.txt itself, its default number format the data layer's: the registry the data
#: layer is held to (a user's registry may differ: pint's own file makes ``bit`` a base unit of no
#: dimension)
FROM_FILE = pint.UnitRegistry(str(unit_table.FILE))
FROM_FILE.formatter.default_format = DEFAULT_FORMAT


@pytest.fixture(autouse=True)
def _from_file():
    """The library gives its pint objects in ``FROM_FILE`` for each test here."""
    an.use_registry(FROM_FILE)
    yield
    an.use_registry(None)


@pytest.mark.parametrize("text", ALL)
def test_a_unit_is_the_one_pint_reads(text):
    """Container (names and order), dimensions and every text a unit prints, against pint's unit of
    the same text."""
    ours, theirs = Unit.of(text), FROM_FILE.Unit(text)
    assert dict(ours.items) == dict(theirs._units) and [k for k, _ in ours.items] == list(
        theirs._units
    )
    assert dict(ours.dimensionality) == dict(theirs.dimensionality)
    assert str(ours.dimensionality) == str(theirs.dimensionality)
    assert [format(ours, s) for s in SPECS] == [format(theirs, s) for s in SPECS]
    assert (str(ours), repr(ours)) == (str(theirs), repr(theirs))
    # pint reads it as its own
    assert ours == theirs and ours.pint() == theirs and FROM_FILE.Unit(ours) == theirs


@pytest.mark.parametrize(
    "name",
    [
        "meter",
        "Gbyte_",
        "bytess",
        "GBs_",
        "x",
        "FLOPz",
        "kilo",
        "kilo%",
        "P%",
        "kilogigabyte",
        "kGB",
        "Mkbyte",
    ],
)
def test_a_name_pint_does_not_define_is_refused(name):
    """Refused whatever was read before: a prefixed unit read once ("gigabyte") is no base for a
    second prefix ("kilogigabyte", which a fresh pint refuses; pint accepts it once it has read
    "gigabyte")."""
    for before in ("GB", "gigabyte", "kbyte"):
        Unit.of(before)
    with pytest.raises(pint.UndefinedUnitError):
        pint.UnitRegistry(str(unit_table.FILE)).Unit(name)
    with pytest.raises(UnitError):  # UndefinedUnit, or a text not read as a unit
        Unit.of(name)


PAIRS = [
    (a, b)
    for a, b in itertools.product(ALL, ALL)
    if FROM_FILE.Unit(a).dimensionality == FROM_FILE.Unit(b).dimensionality
]


@given(
    pair=st.sampled_from(PAIRS),
    m=st.one_of(st.integers(-(10**12), 10**12), st.floats(-1e200, 1e200, allow_nan=False)),
)
def test_a_conversion_is_pints_to_the_last_bit(pair, m):
    a, b = pair
    theirs = FROM_FILE.Quantity(m, a).to(b).magnitude
    ours = Quantity(m, a).to(b).magnitude
    assert ours == theirs and type(ours) is type(theirs)


@pytest.mark.parametrize(
    "a,b",
    [
        ("byte", "FLOP"),
        ("GB/s", "GB"),
        ("token", ""),
        ("s", "1/hour"),
        ("byte**2/s", "FLOP"),
        ("", "s**-2"),
        ("TFLOP**0.5", "byte"),
        ("GiB**2/hour", ""),
    ],
)
def test_different_dimensions_do_not_convert(a, b):
    with pytest.raises(pint.DimensionalityError) as theirs:
        FROM_FILE.Quantity(1, a).to(b)
    with pytest.raises(units.DimensionalityError) as ours:
        Quantity(1, a).to(b)
    assert str(ours.value) == str(theirs.value)
    with pytest.raises(units.DimensionalityError):
        Quantity(1, a) + Quantity(1, b)


@given(
    a=st.sampled_from(ALL), b=st.sampled_from(ALL), x=st.floats(1e-6, 1e6), y=st.floats(1e-6, 1e6)
)
def test_products_quotients_and_sums_are_pints(a, b, x, y):
    for op in ("__mul__", "__truediv__"):
        ours, theirs = getattr(Quantity(x, a), op)(Quantity(y, b)), getattr(
            FROM_FILE.Quantity(x, a), op
        )(FROM_FILE.Quantity(y, b))
        assert ours.magnitude == theirs.magnitude and dict(ours.units.items) == dict(theirs._units)
    if FROM_FILE.Unit(a).dimensionality == FROM_FILE.Unit(b).dimensionality:
        for op in ("__add__", "__sub__", "__lt__", "__eq__"):
            ours, theirs = getattr(Quantity(x, a), op)(Quantity(y, b)), getattr(
                FROM_FILE.Quantity(x, a), op
            )(FROM_FILE.Quantity(y, b))
            assert (
                (ours == theirs)
                if isinstance(theirs, bool)
                else (ours.magnitude == theirs.magnitude)
            )


@pytest.mark.parametrize(
    "m", [1.56e13, 12.345, 1e-5, 123456789.0, 2, 0.3461, 7.875, 0, -3.5, 10**20]
)
@pytest.mark.parametrize(
    "unit", ["token", "s", "GB", "GB/s", "1/hour", "", "FLOP", "byte**2/s", "USD/hour"]
)
def test_a_quantity_prints_as_pints(m, unit):
    specs = SPECS + [".4g~P", ".3g~P", ".4g~", ".3g", ".2f~P", ".12g", ".4g"]
    assert [format(Quantity(m, unit), s) for s in specs] == [
        format(FROM_FILE.Quantity(m, unit), s) for s in specs
    ]
    assert (str(Quantity(m, unit)), repr(Quantity(m, unit))) == (
        str(FROM_FILE.Quantity(m, unit)),
        repr(FROM_FILE.Quantity(m, unit)),
    )


def test_a_latex_format_is_pints():
    """A format the library does not write itself (LaTeX) is asked of pint's object."""
    assert format(Quantity(3, "GB/s"), "~L") == format(FROM_FILE.Quantity(3, "GB/s"), "~L")
    assert format(Unit.of("GB/s"), "~L") == format(FROM_FILE.Unit("GB/s"), "~L")


def test_a_user_reads_pints_quantities_and_the_command_line_the_librarys():
    plan = an.Plan("llama3-8b", "h100-sxm", an.Layout(tp=8), seq_len=4096, global_batch=8)
    hw = an.hardware("h100-sxm")
    for q in (
        plan.step_time(),
        plan.memory().total,
        plan.memory().outside,
        hw.hbm,
        hw.peak_flops("bf16"),
        an.formula("compute.training_flops").evaluate(params=10**9, tokens=10**6),
    ):
        assert isinstance(q, pint.Quantity)
    with units.as_data():
        inside = (plan.step_time(), plan.memory().total, hw.hbm, hw.peaks["bf16"])
        assert all(type(q) is Quantity for q in inside)
    # the preset read once, as data, gives pint's again outside
    assert isinstance(hw.hbm, pint.Quantity)
    assert (
        "bf16" in hw.peaks
        and isinstance(hw.peaks["bf16"], pint.Quantity)
        and dict(hw.peaks) == {**hw.peaks}
    )
    assert inside[0].magnitude == plan.step_time().magnitude and inside[1].to(
        "GB"
    ) == plan.memory().total.to("GB")


def test_pints_and_the_librarys_quantities_mix():
    """Either order: pint's operators leave the library's quantities to theirs."""
    ours, theirs = Quantity(3, "GB"), FROM_FILE.Quantity(1, "GiB")
    assert (
        (theirs + ours).to("byte").magnitude
        == (ours + theirs).to("byte").magnitude
        == 2**30 + 3 * 10**9
    )
    assert (theirs / ours).to("").magnitude == pytest.approx(2**30 / 3e9)
    assert FROM_FILE.Quantity(2, "GB/s") * Quantity(3, "s") == FROM_FILE.Quantity(6, "GB")


@pytest.mark.parametrize("command", [["step"], ["memory"], ["step", "--json"]])
def test_the_command_line_imports_no_pint_numpy_or_sympy(command):
    code = (
        "import sys, io, contextlib\nfrom analytic.cli.main import main\nwith"
        f" contextlib.redirect_stdout(io.StringIO()) as out: code = main({command!r})\nprint(code,"
        " len(out.getvalue()), sorted({m.split('.')[0] for m in sys.modules} & {'pint',"
        " 'numpy', 'sympy'}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split(maxsplit=2)
    assert out[0] == "0" and int(out[1]) > 1000 and out[2].strip() == "[]"


@given(
    a=st.sampled_from(ALL), b=st.sampled_from(ALL), x=st.integers(1, 10**6),
    n=st.sampled_from([-3, -2, -1, 1, 2, 3]),
)
def test_unit_arithmetic_is_pints(a, b, x, n):
    """Products, quotients and powers of units, and of a unit with a number or a quantity."""
    ua, ub, pa, pb = Unit.of(a), Unit.of(b), FROM_FILE.Unit(a), FROM_FILE.Unit(b)
    pairs = [(ua * ub, pa * pb), (ua / ub, pa / pb), (ua**n, pa**n)]
    assert all(dict(o.items) == dict(t._units) for o, t in pairs)
    quantities = [
        (ua * x, pa * x),
        (x * ua, x * pa),
        (ua / x, pa / x),
        (x / ua, x / pa),
        (ua * Quantity(x, b), pa * FROM_FILE.Quantity(x, b)),
        (ua / Quantity(x, b), pa / FROM_FILE.Quantity(x, b)),
    ]
    for o, t in quantities:
        assert (
            type(o) is Quantity
            and o.magnitude == t.magnitude
            and dict(o.units.items) == dict(t._units)
        )


@pytest.mark.parametrize("m", [Fraction(3, 7), Decimal("2.5"), 7, 2.5])
@pytest.mark.parametrize(
    "a,b",
    [
        ("GB", "byte"),
        ("GiB", "GB"),
        ("hour", "s"),
        ("percent", ""),
        ("byte", "byte"),
        ("TFLOP**0.5", "FLOP**0.5"),
        ("GiB**2/hour", "byte**2/s"),
    ],
)
def test_exact_magnitudes_convert_as_pints(m, a, b):
    """Fractions and Decimals convert by pint's factor read as their own type; a unit to itself is
    the same number."""
    ours, theirs = Quantity(m, a).to(b).magnitude, FROM_FILE.Quantity(m, a).to(b).magnitude
    assert ours == theirs and type(ours) is type(theirs)


def test_a_quantity_times_a_unit_and_a_unit_of_text():
    assert (Quantity(3, "GB") * Unit.of("s")).magnitude == 3 and Quantity(3, "GB") * Unit.of(
        "s"
    ) == FROM_FILE.Quantity(3, "GB*s")
    assert (Quantity(3, "GB") / Unit.of("s")).units == Unit.of("GB/s")
    assert "GB" / Unit.of("s") == Unit.of("GB/s") and ("GB" / Unit.of("s")).items == (
        ("gigabyte", 1),
        ("second", -1),
    )


def test_zero_adds_to_any_quantity_and_equal_quantities_compare_equal():
    assert (Quantity(3, "GB") + 0).magnitude == (FROM_FILE.Quantity(3, "GB") + 0).magnitude == 3
    with pytest.raises(units.DimensionalityError):
        Quantity(3, "GB") + 1
    a, b = Quantity(1, "GiB"), Quantity(2**30, "byte")
    pa, pb = FROM_FILE.Quantity(1, "GiB"), FROM_FILE.Quantity(2**30, "byte")
    for op in ("__eq__", "__lt__", "__le__", "__gt__", "__ge__"):
        assert getattr(a, op)(b) == getattr(pa, op)(pb) and getattr(b, op)(
            Quantity(2, "GiB")
        ) == getattr(pb, op)(FROM_FILE.Quantity(2, "GiB"))


def test_units_quantities_and_presets_survive_pickling():
    """As a Dask worker receives them: equal after a round trip, and read as pint's quantities."""
    import pickle

    unit, q, hw = Unit.of("GB/s"), Quantity(3, "GB"), an.hardware("h100-sxm")
    assert (
        pickle.loads(pickle.dumps(unit)) == unit
        and pickle.loads(pickle.dumps(unit)).items == unit.items
    )
    assert pickle.loads(pickle.dumps(q)) == q
    again = pickle.loads(pickle.dumps(hw))
    assert again == hw and isinstance(again.hbm, pint.Quantity) and again.hbm == hw.hbm


def test_an_input_in_another_unit_converts_exactly():
    """1/day is 1/86400 per second and 400 Gbit/s 5·10¹⁰ B/s exactly, as the definitions state (the
    factor was rounded to 15 digits: 115740740740741·10⁻¹⁹)."""
    plan = an.Plan(
        "llama3-8b", "h100-sxm", an.Layout(dp=8), seq_len=4096, global_batch=64,
        interruption_rate="1/day", scale_out_bandwidth="400 Gbit/s", hbm="80 GiB",
    )
    assert plan.overrides == {
        "interruption_rate": Fraction(1, 86400),
        "scale_out_bandwidth": 5 * 10**10,
        "hbm": 80 * 2**30,
    }
    assert Unit.of("1/day").exact_factor("1/hour") == Fraction(1, 24)


def test_equal_units_hash_alike_and_a_units_text_is_not_a_unit():
    """Units are equal where their names and powers are, the library's and pint's alike, and equal
    units share a hash (a set or a dict holds one); a unit's text ("GB", "gigabyte": two texts of
    one unit, whose hashes differ) equals no unit, as ``Unit.of`` reads it into one."""
    gb, gigabyte = Unit.of("GB"), Unit.of("gigabyte")
    assert gb == gigabyte and hash(gb) == hash(gigabyte) and len({gb, gigabyte}) == 1
    for text in ("GB", "byte/s", "FLOP/s", "GiB", "token/s"):
        ours = Unit.of(text)
        assert ours == ours.pint() and hash(ours) == hash(ours.pint())
    assert gb != "GB" and gb != "gigabyte" and Unit.of("GB") != Unit.of("GiB")
