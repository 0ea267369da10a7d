"""The allocator's reserve fitted on measured peaks (analytic.fit.reserve), against hand counts."""

import math

import pytest

from analytic.core.errors import InputError
from analytic.fit import reserve


def test_each_source_weighs_one_and_its_errors_cluster():
    """Source A's peaks at 1.1 and 1.21 of their counts, B's one at 1.0: A's mean log is log 1.1537
    (√(1.1·1.21)), so the reserve is √1.1537 = 1.0741 whatever A's count of peaks; each source's
    mean deviation in log is ±0.0715, so the clustered standard error is √(2·0.0715²)/2 = 0.0505."""
    rows = [
        {"id": "a1", "group": "A", "ratio": 1.1},
        {"id": "a2", "group": "A", "ratio": 1.21},
        {"id": "b1", "group": "B", "ratio": 1.0},
    ]
    factor, stderr = reserve.fit(rows)
    assert (
        factor
        == pytest.approx(math.sqrt(math.sqrt(1.1 * 1.21)), rel=1e-12)
        == pytest.approx(1.0741, abs=1e-4)
    )
    assert stderr == pytest.approx(0.0505, abs=1e-4)
    assert reserve.fit(rows + [{"id": "a3", "group": "A", "ratio": math.sqrt(1.1 * 1.21)}])[
        0
    ] == pytest.approx(factor)
    # each source left out: A's peaks predicted by B's 1.0, B's by A's 1.1537
    assert reserve.leave_one_source_out(rows) == pytest.approx(
        {"a1": 1.0, "a2": 1.0, "b1": math.sqrt(1.1 * 1.21)}
    )


def test_a_folder_without_peaks_has_no_reserve(tmp_path):
    """A folder without measured peaks has no reserve."""
    (tmp_path / "memory.toml").write_text(
        '[[case]]\nid = "A"\nkind = "claim"\npublished = "1 s"\ncompute = "Q(\'1 s\')"\n'
    )
    assert reserve.summary(tmp_path) is None


def test_a_peak_of_another_measure_is_refused(tmp_path):
    """A memory case's measure is the allocator's reserved or allocated memory; another is refused
    by name."""
    (tmp_path / "predicted.toml").write_text("")
    (tmp_path / "memory.toml").write_text(
        '[[case]]\nid = "X"\nkind = "memory"\npublished = "1 GiB"\ngroup = "g"\nmeasure ='
        ' "nvidia-smi"\n[case.plan]\nmodel = "llama3-8b"\nhardware = "h100-sxm"\nseq_len ='
        " 2048\nglobal_batch = 8\n"
    )
    with pytest.raises(
        InputError, match="X: measure 'nvidia-smi'; expected one of reserved, allocated"
    ):
        reserve.peaks(tmp_path)


def test_allocated_peaks_are_not_fitted():
    """Only peaks of reserved memory enter the reserve's fit."""
    rows = [
        {"id": "a", "group": "A", "ratio": 1.2, "measure": "reserved"},
        {"id": "b", "group": "B", "ratio": 1.0, "measure": "allocated"},
    ]
    assert reserve.reserved(rows) == rows[:1]


PLAN = '[case.plan]\nmodel = "llama3-8b"\nhardware = "h100-sxm"\nseq_len = 2048\nglobal_batch = 8\n'


def _folder(tmp_path, peaks):
    """A validation folder whose memory cases measure the same plan at ``peaks``: (id, source,
    stack, measured/counted); their published peaks are written from the library's count of that
    plan."""
    from analytic.fit.calibration import build_plan

    (tmp_path / "predicted.toml").write_text("")
    text = ""
    for case_id, group, stack, ratio in peaks:
        spec = {
            "model": "llama3-8b",
            "hardware": "h100-sxm",
            "seq_len": 2048,
            "global_batch": 8,
            "stack": stack,
        }
        counted = build_plan(spec).memory().total.to("byte").magnitude
        text += (
            f'[[case]]\nid = "{case_id}"\nkind = "memory"\npublished = "{counted * ratio!r} byte"\n'
            f'group = "{group}"\n{PLAN}stack = "{stack}"\n'
        )
    (tmp_path / "memory.toml").write_text(text)
    return tmp_path


def test_the_summary_of_two_sources_by_hand(tmp_path):
    """Source A's peak at 1.1 of its count, B's at 1.2: the reserve is √(1.1·1.2) = 1.1489; left out
    of the fit, A's peak is predicted at B's 1.2 (measured/predicted 1.1/1.2 = 0.9167) and B's at
    A's 1.1 (1.2/1.1 = 1.0909), the smallest and largest; each source's log deviates by
    ±log(1.2/1.1)/2 = ±0.0435, so the clustered standard error is √(2·0.0435²)/2 = 0.0308."""
    got = reserve.summary(
        _folder(tmp_path, [("a", "A", "megatron-core", 1.1), ("b", "B", "megatron-core", 1.2)])
    )
    assert got == {
        "allocator": "pytorch",
        "reserve": pytest.approx(1.1489, abs=1e-4),
        "reserve_log_stderr": pytest.approx(0.0308, abs=1e-4),
        "low": pytest.approx(0.9167, abs=1e-4),
        "high": pytest.approx(1.0909, abs=1e-4),
        "count": 2,
        "sources": 2,
        "stacks": ["megatron-core"],
    }


def test_no_summary_from_one_source_or_across_allocators(tmp_path):
    """One factor per allocator, checked with its source left out: the peaks of one source, or of
    two allocators (PyTorch's and XLA's), give none."""
    assert (
        reserve.summary(
            _folder(tmp_path, [("a", "A", "megatron-core", 1.1), ("a2", "A", "megatron-core", 1.2)])
        )
        is None
    )
    assert (
        reserve.summary(
            _folder(tmp_path, [("a", "A", "megatron-core", 1.1), ("b", "B", "maxtext", 1.2)])
        )
        is None
    )


def test_a_case_is_of_its_kind_in_whichever_file(tmp_path):
    """Memory and outside cases are read by their kind, not by the file they are in: a peak in
    peaks.toml and a snapshot in snapshots.toml are fitted as those in memory.toml and outside.toml
    are."""
    from analytic.fit import outside

    (_folder(tmp_path, [("a", "A", "megatron-core", 1.1)]) / "memory.toml").rename(
        tmp_path / "peaks.toml"
    )
    assert [r["id"] for r in reserve.peaks(tmp_path)] == ["a"]
    (tmp_path / "snapshots.toml").write_text(
        '[[case]]\nid = "o"\nkind = "outside"\nhardware = "a100-80g"\n'
        'reserved = "70 GiB"\nfree = "1 GiB"\ngroup = "g"\nsource = "s"\n'
    )
    assert [r["outside"].to("GiB").magnitude for r in outside.snapshots(tmp_path)] == [9]
