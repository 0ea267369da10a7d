"""Search's cache holds data, never code; its key covers every input; a bad file is rebuilt; the XDG
rules."""

import importlib
import json
from pathlib import Path

import numpy as np
import pytest

import analytic as an
from analytic.core.lowering import free_symbols, input_names, program
from analytic.core.numeric import ARITY, Program

PROGRAMS = importlib.import_module("analytic.search.programs")
MODEL, HW = an.model("llama3-8b"), an.hardware("h100-sxm")
# tp > 1: one program, with SP
KW = dict(gpus=16, seq_len=2048, global_batch=64, progress=False, tp=2)


def fresh_search(hw=HW, **kw):
    PROGRAMS._COMPILED.clear()
    return an.search(MODEL, hw, **KW, **kw)


def cache_files(folder):
    return sorted(folder.glob("search-*.json"))


@pytest.fixture(autouse=True)
def not_shipped(monkeypatch):
    """Search as for a configuration whose structure has no programs: through its own cache
    entry."""
    monkeypatch.setattr(PROGRAMS, "_of_structure", lambda plan: None)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ANALYTIC_CACHE", str(tmp_path))
    return tmp_path


def test_the_cache_file_is_a_program_of_numbers(cache):
    fresh_search()
    (path,) = cache_files(cache)
    data = json.loads(path.read_text())
    assert set(data) == {"inputs", "constants", "steps", "outputs"}
    assert tuple(data["inputs"]) == PROGRAMS.INPUTS
    assert all(isinstance(c, float) for c in data["constants"])
    assert {op for op, _ in data["steps"]} <= set(ARITY)


def test_python_in_the_cache_is_never_run(cache, tmp_path_factory):
    """What used to be exec'd: a list of Python sources. Read now, it is not a program, and is
    rebuilt."""
    reference = fresh_search()
    (path,) = cache_files(cache)
    marker = tmp_path_factory.mktemp("marker") / "ran"
    payload = f"def f(*a):\n    open({str(marker)!r}, 'w').write('x')\n    return 0.5\nf()"
    path.write_text(json.dumps([payload, payload, payload]))
    again = fresh_search()
    assert not marker.exists()
    assert again.compiled  # rebuilt from the expressions
    assert np.array_equal(again.arrays["step_time"], reference.arrays["step_time"])
    assert isinstance(json.loads(path.read_text()), dict)  # and rewritten as data


@pytest.mark.parametrize(
    "content",
    [
        "[1, 2, 3]",
        "{}",
        '"a string"',
        "def f(): pass",
        "\x00\x00\x00",
        "[" * 100_000 + "]" * 100_000,
        json.dumps(
            {
                "inputs": list(PROGRAMS.INPUTS),
                "constants": [],
                "steps": [["system", [0]]],
                "outputs": [10],
            }
        ),
        json.dumps(
            {
                "inputs": list(PROGRAMS.INPUTS),
                "constants": [],
                "steps": [["add", [0, 99]]],
                "outputs": [10],
            }
        ),
        json.dumps(
            {"inputs": ["x"], "constants": [1.0], "steps": [["add", [0, 1]]], "outputs": [2]}
        ),
        json.dumps(
            {
                "inputs": list(PROGRAMS.INPUTS),
                "constants": ["__import__('os')"],
                "steps": [],
                "outputs": [0],
            }
        ),
    ],
    ids=[
        "list",
        "empty-dict",
        "string",
        "python",
        "nul",
        "deep",
        "unknown-op",
        "later-register",
        "other-inputs",
        "string-constant",
    ],
)
def test_a_corrupt_cache_is_rebuilt(cache, content):
    reference = fresh_search()
    (path,) = cache_files(cache)
    path.write_text(content)
    again = fresh_search()
    assert again.compiled
    assert np.array_equal(again.arrays["memory"], reference.arrays["memory"])


def test_the_key_covers_every_hardware_field(cache):
    """Changing the generation changes the fitted matmul efficiency: the cached hopper program must
    not answer."""
    hopper = fresh_search()
    ampere_hw = HW.replace(generation="ampere")
    PROGRAMS._COMPILED.clear()
    ampere = an.search(MODEL, ampere_hw, **KW)
    assert ampere.compiled and len(cache_files(cache)) == 2
    plan = ampere.best.plan(MODEL, ampere_hw, seq_len=2048, global_batch=64)
    assert ampere.best.step_time == pytest.approx(plan.step_time().to("s").magnitude, rel=1e-9)
    assert ampere.best.step_time != pytest.approx(hopper.arrays["step_time"][0], rel=1e-6)


@pytest.mark.parametrize("xdg", ["", "relative/cache"])
def test_an_empty_or_relative_xdg_cache_home_is_ignored(tmp_path, monkeypatch, xdg):
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir(), work.mkdir()
    monkeypatch.delenv("ANALYTIC_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", xdg)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    fresh_search()
    assert list(work.iterdir()) == []  # nothing written in the working directory
    assert len(cache_files(home / ".cache" / "analytic")) == 1


def test_an_absolute_xdg_cache_home_is_used(tmp_path, monkeypatch):
    monkeypatch.delenv("ANALYTIC_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    fresh_search()
    assert len(cache_files(tmp_path / "analytic")) == 1


def test_program_evaluates_what_sympy_does():
    import sympy

    x, y = an.sym("dp"), an.sym("tp")
    e = sympy.Piecewise(
        (sympy.Max(x, 3) / y, sympy.Eq(y, 2)), (sympy.sqrt(x) + sympy.log(y) * x**3, True)
    )
    prog = Program.from_json(json.loads(json.dumps(program([e], {x: "dp", y: "tp"}).to_json())))
    for xv, yv in ((1, 2), (5, 2), (7, 3), (2.5, 9)):
        assert prog(np.array([xv]), np.array([yv]))[0][0] == pytest.approx(
            float(e.subs({x: xv, y: yv})), rel=1e-14
        )


def test_a_programs_inputs_are_the_free_symbols_of_its_expressions():
    """Shared subexpressions (a plan's are shared many times over) are walked once, and the symbols
    found are sympy's own, under Piecewise conditions and inside functions too."""
    import sympy

    x, y, z = an.sym("dp"), an.sym("tp"), an.sym("pp")
    shared = sympy.Max(x * y, 3)
    e = sympy.Piecewise((shared / y + shared**2, sympy.Gt(z, 2)), (sympy.log(shared), True))
    assert free_symbols([e, 2 * x]) == e.free_symbols == {x, y, z}
    assert free_symbols([sympy.Integer(4)]) == set()
    assert list(input_names([e])) == sorted({x, y, z}, key=lambda s: {x: "dp", y: "tp", z: "pp"}[s])


@pytest.mark.parametrize(
    "data",
    [
        {"inputs": ["a"], "constants": [float("inf")], "steps": [], "outputs": [1]},
        {"inputs": ["a b"], "constants": [], "steps": [], "outputs": [0]},
        {"inputs": ["a"], "constants": [], "steps": [["where", [0, 0]]], "outputs": [1]},
        {"inputs": ["a"], "constants": [], "steps": [["add", [0]]], "outputs": [1]},
        {"inputs": ["a"], "constants": [], "steps": [["add", [0, True]]], "outputs": [1]},
        {"inputs": ["a"], "constants": [], "steps": [[["add"], [0, 0]]], "outputs": [1]},
        {"inputs": ["a"], "constants": [], "steps": [], "outputs": []},
        {"inputs": ["a"], "constants": [], "steps": [], "outputs": [0], "code": "x"},
    ],
)
def test_program_from_json_refuses_what_it_did_not_write(data):
    with pytest.raises(ValueError):
        Program.from_json(data)


@pytest.mark.parametrize("kind", ["link-to-device", "fifo", "link-to-file"])
def test_a_cache_entry_that_is_not_a_regular_file_is_rebuilt_without_reading_it(
    cache, tmp_path_factory, kind
):
    """A link to /dev/zero (size 0, endless), a FIFO (blocks its reader) or a link to someone's file
    at an entry's name: never read, never written through; the entry becomes a regular file."""
    import os

    reference = fresh_search()
    (path,) = cache_files(cache)
    path.unlink()
    victim = tmp_path_factory.mktemp("victim") / "file"
    victim.write_text("keep")
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero" if kind == "link-to-device" else victim)
    again = fresh_search()
    assert again.compiled and np.array_equal(again.arrays["memory"], reference.arrays["memory"])
    assert path.is_file() and not path.is_symlink() and victim.read_text() == "keep"


def test_a_failed_write_leaves_no_temporary_file(cache, monkeypatch):
    import os

    monkeypatch.setattr(
        os, "replace", lambda *a: (_ for _ in ()).throw(OSError(28, "No space left on device"))
    )
    fresh_search()
    assert list(cache.iterdir()) == []


def test_processes_sharing_an_empty_cache_agree_and_leave_only_whole_entries(tmp_path):
    """Processes that build the same entries at once (searches and the plan programs of `step`) each
    answer as one alone would, and the cache holds only whole, readable entries: no temporary file,
    no torn JSON (a writer renames a finished file over the entry; a reader keeps the file it
    opened)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "ANALYTIC_CACHE": str(tmp_path / "shared")}
    alone = {**env, "ANALYTIC_CACHE": str(tmp_path / "alone")}
    search = [
        sys.executable,
        *(
            "-m analytic.cli search --model llama3-8b --hardware h100-sxm --gpus 16 --seq 2048"
            " --global-batch 64 --json --quiet"
        ).split(),
    ]
    step = [
        sys.executable,
        *(
            "-m analytic.cli step --model llama3-8b --hardware h100-sxm --gpus 16 --tp 2 --seq"
            " 2048 --global-batch 64 --json"
        ).split(),
    ]
    runs = [
        subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for cmd in (search, step) * 3
    ]
    outs = [(p.communicate(timeout=120), p.returncode) for p in runs]
    assert all(code == 0 and not err for (_, err), code in outs), outs
    reference = {
        cmd[3]: json.loads(
            subprocess.run(cmd, env=alone, capture_output=True, text=True, check=True).stdout
        )
        for cmd in (search, step)
    }
    for ((out, _), _), cmd in zip(outs, (search, step) * 3):
        got, want = json.loads(out), reference[cmd[3]]
        if cmd[3] == "search":
            assert got["ranked"] == want["ranked"] and got["evaluated"] == want["evaluated"]
        else:
            assert [line["key"] for line in got["lines"]] == [line["key"] for line in want["lines"]]
            # numbers to 1e-12, text (a link's kind) exactly
            for a, b in zip(got["lines"], want["lines"]):
                expected = b["value"]
                if isinstance(expected, (int, float)):
                    expected = pytest.approx(expected, rel=1e-12)
                assert a["value"] == expected, a["key"]
    entries = list((tmp_path / "shared").iterdir())
    assert entries and all(p.suffix == ".json" and not p.name.startswith(".") for p in entries)
    assert all(json.loads(p.read_text()) is not None for p in entries)


def _typed(value):
    """``value`` with each number's type beside it: 1 and 1.0, and True and 1, differ."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    return type(value).__name__, value if value == value else "nan"


TOML_FILES = sorted(
    [*(Path(an.__file__).parent / "presets").glob("*.toml"),
     *(Path(__file__).parent.parent / "validation").glob("*.toml")]
)


@pytest.mark.parametrize("path", TOML_FILES, ids=lambda p: p.name)
def test_a_toml_file_read_again_has_tomllibs_values(cache, path, monkeypatch):
    """The presets' and the validation's TOML, parsed once (then kept as JSON) and read back from
    the cache, tomllib not called again: the values, types and key order tomllib gives."""
    import tomllib

    from analytic.core import cache as kept

    text = path.read_text(encoding="utf-8")
    expected = tomllib.loads(text)
    assert _typed(kept.parsed_toml(text)) == _typed(expected)
    assert len(list(cache.glob("toml-*.json"))) == 1
    monkeypatch.setattr(kept.tomllib, "loads", lambda text: pytest.fail("parsed again"))
    again = kept.parsed_toml(text)
    assert _typed(again) == _typed(expected) and list(again) == list(expected)


def test_toml_with_a_date_is_parsed_each_time_and_odd_numbers_survive(cache):
    import datetime

    from analytic.core.cache import parsed_toml

    assert parsed_toml("day = 2026-12-07") == {"day": datetime.date(2026, 12, 7)}
    assert not list(cache.glob("toml-*.json"))
    text = "a = nan\nb = -inf\nc = -0.0\nd = 123456789012345678901234567890\ne = 1e-310"
    for _ in range(2):  # parsed, then read back
        got = parsed_toml(text)
        assert got["a"] != got["a"] and got["b"] == float("-inf") and str(got["c"]) == "-0.0"
        assert got["d"] == 123456789012345678901234567890 and got["e"] == 1e-310


def test_a_toml_entry_that_is_not_what_it_should_be_is_parsed_again(cache):
    from analytic.core.cache import parsed_toml

    text = 'name = "x"'
    parsed_toml(text)
    (entry,) = cache.glob("toml-*.json")
    for bad in ('{"toml": "other", "data": {"name": "y"}}', '{"data": {"name": "y"}}', "[1]", "{"):
        entry.write_text(bad)
        assert parsed_toml(text) == {"name": "x"}
    assert json.loads(entry.read_text())["data"] == {"name": "x"}
