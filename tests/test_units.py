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
    assert "TB" in an.Q_(6.48, "TB")._repr_latex_() or "terabyte" in an.Q_(6.48, "TB")._repr_latex_()
