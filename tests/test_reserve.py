"""The allocator's reserve fitted on measured peaks (analytic.reserve), against hand counts."""

import math

import pytest

from analytic import reserve
from analytic.errors import InputError


def test_each_source_weighs_one_and_its_errors_cluster():
    """Source A's peaks at 1.1 and 1.21 of their counts, B's one at 1.0: A's mean log is log 1.1537
    (√(1.1·1.21)), so the reserve is √1.1537 = 1.0741 whatever A's count of peaks; each source's mean
    deviation in log is ±0.0715, so the clustered standard error is √(2·0.0715²)/2 = 0.0505."""
    rows = [{"id": "a1", "group": "A", "ratio": 1.1}, {"id": "a2", "group": "A", "ratio": 1.21},
            {"id": "b1", "group": "B", "ratio": 1.0}]
    factor, stderr = reserve.fit(rows)
    assert factor == pytest.approx(math.sqrt(math.sqrt(1.1 * 1.21)), rel=1e-12) == pytest.approx(1.0741, abs=1e-4)
    assert stderr == pytest.approx(0.0505, abs=1e-4)
    assert reserve.fit(rows + [{"id": "a3", "group": "A", "ratio": math.sqrt(1.1 * 1.21)}])[0] == pytest.approx(factor)
    # each source left out: A's peaks predicted by B's 1.0, B's by A's 1.1537
    assert reserve.leave_one_source_out(rows) == pytest.approx({"a1": 1.0, "a2": 1.0, "b1": math.sqrt(1.1 * 1.21)})


def test_a_folder_without_peaks_has_no_reserve(tmp_path):
    """A folder without measured peaks has no reserve."""
    (tmp_path / "memory.toml").write_text("")
    assert reserve.summary(tmp_path / "memory.toml") is None


def test_a_peak_of_another_measure_is_refused(tmp_path):
    """A memory case's measure is the allocator's reserved or allocated memory; another is refused by name."""
    (tmp_path / "predicted.toml").write_text("")
    (tmp_path / "memory.toml").write_text(
        '[[case]]\nid = "X"\nkind = "memory"\npublished = "1 GiB"\ngroup = "g"\nmeasure = "nvidia-smi"\n'
        '[case.plan]\nmodel = "llama3-8b"\nhardware = "h100-sxm"\nseq_len = 2048\nglobal_batch = 8\n')
    with pytest.raises(InputError, match="X: measure 'nvidia-smi'; expected one of reserved, allocated"):
        reserve.peaks(tmp_path / "memory.toml")


def test_allocated_peaks_are_not_fitted():
    """Only peaks of reserved memory enter the reserve's fit."""
    rows = [{"id": "a", "group": "A", "ratio": 1.2, "measure": "reserved"},
            {"id": "b", "group": "B", "ratio": 1.0, "measure": "allocated"}]
    assert reserve.reserved(rows) == rows[:1]
