import pint
import pytest

import analytic as an


def test_bytes_and_flops_are_different_dimensions():
    with pytest.raises(pint.DimensionalityError):
        an.Q_(1, "byte") + an.Q_(1, "FLOP")


def test_bits_convert_to_bytes():
    assert an.Q_(400, "Gbit/s").to("GB/s").magnitude == pytest.approx(50.0, rel=1e-15)
    assert an.Q_(400, "Gbps").to("GB/s").magnitude == pytest.approx(50.0, rel=1e-15)


def test_binary_and_decimal_prefixes_differ():
    assert an.Q_(1, "GiB") != an.Q_(1, "GB")
    assert an.Q_(1, "GiB").to("byte").magnitude == 2**30
    assert an.Q_(1, "GB").to("byte").magnitude == 10**9


def test_flops_print_with_prefix():
    assert format(an.Q_(989.4e12, "FLOP/s").to_compact(), "~P") == "989.4 TFLOP/s"


def test_time_units():
    assert an.Q_(1, "day").to("h").magnitude == 24
    assert an.Q_(1, "year").to("day").magnitude == 365.25
    assert an.Q_(1500, "µs").to("ms").magnitude == pytest.approx(1.5)
    assert an.Q_(2, "min").to("s").magnitude == 120


def test_tokens_and_parameters_are_dimensions():
    assert an.Q_(1, "token").dimensionality != an.Q_(1, "parameter").dimensionality
    with pytest.raises(pint.DimensionalityError):
        an.Q_(1, "token").to("parameter")


def test_quantity_renders_latex():
    assert (
        "TB" in an.Q_(6.48, "TB")._repr_latex_() or "terabyte" in an.Q_(6.48, "TB")._repr_latex_()
    )


def test_one_grammar_reads_a_units_text_from_a_user_and_from_the_cache():
    """A unit's text is read by one rule (``unit_table.plain``), whether a user writes it (a unit,
    a quantity) or the cache holds it (a program's units): names joined by * or /, powers of one
    digit, a leading / or 1/; and every unit a plan's programs hold is written in it."""
    from analytic.core import unit_table
    from analytic.core.errors import UnitError
    from analytic.core.values import parse_quantity, unit_of
    from analytic.plan.programs import Part

    program = {"inputs": ["a"], "constants": [], "steps": [], "outputs": [0]}
    part = lambda unit: {"program": program, "outputs": ["q"], "units": [unit]}  # noqa: E731
    for text in (
        "GB/s",
        "1/s",
        "/hour",
        "GB**9",
        "byte ** -9",
        "gigabyte / second",
        "µs",
        "%",
        "byte·second",
    ):
        assert unit_table.plain(text) and unit_of("u", text) is not None
        assert parse_quantity("q", f"3 {text}") == (3, text)
        assert Part.from_json(part(text), False).units == (text,)
    for text in (
        "GB2",
        "GB**10",
        "GB**-10",
        "GB**2.5",
        "GB**",
        "GB/",
        "*GB",
        "(GB)",
        "GB s",
        "GB/2",
        "1/1/s",
        "1//s",
    ):
        assert not unit_table.plain(text)
        with pytest.raises(UnitError):
            unit_of("u", text)
        with pytest.raises(UnitError):
            parse_quantity("q", f"3 {text}")
        with pytest.raises(ValueError):
            Part.from_json(part(text), False)
    plan = an.Plan(
        "llama3-8b", "h100-sxm", an.Layout(tp=2, pp=2, dp=2), seq_len=4096, global_batch=8
    )
    plan.step_time()
    held = plan._numbers.bundle.quantities.units
    assert held and all(unit_table.plain(u) for u in held)


def test_a_preset_dict_of_quantities_makes_one_only_where_a_value_is_read(monkeypatch):
    """``"bf16" in hw.peaks`` and listing its keys make no pint Quantity (Plan asks it every time);
    reading a value makes one, in the registry in use."""
    from analytic.core import units

    hw = an.hardware("h100-sxm")
    made = []
    monkeypatch.setattr(units, "shown", lambda x: made.append(x) or x)
    assert "bf16" in hw.peaks and "fp4" not in hw.peaks and "bf16" in list(hw.peaks)
    assert made == []
    assert hw.peaks["bf16"] is made[0] and len(made) == 1  # the value read, and only it
