"""Nothing read from disk runs; nothing is written where the user did not ask."""

import contextlib
import io
import json
import tomllib
from pathlib import Path

import pytest

import analytic as an
from analytic.cli.main import main
from analytic.core import expressions
from analytic.fit import validation
from analytic.presets import CALIBRATION_FILE

PROJECT = Path(__file__).resolve().parent.parent / "validation"


def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def one_line_error(code, err):
    return code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err


# --- cases are data
#   --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    [
        "__import__('os').system('true')",
        "().__class__.__bases__[0].__subclasses__()",
        "(lambda: 1)()",
        "[x for x in (1, 2)]",
        "f.__globals__",
        "open('/etc/passwd')",
        "model('llama3-8b')._part",
        "hw(**{'x': 1})",
        "exec('1')",
        "9**9**9",
    ],
)
def test_a_case_expression_is_not_python(text, tmp_path):
    names = {"f": lambda *a, **k: 1, "model": an.model, "hw": an.hardware}
    with pytest.raises(an.InputError):
        expressions.evaluate(text, names, validation.ATTRIBUTES)


@pytest.mark.parametrize(
    "text",
    [
        "__import__('os')",
        "params.__class__",
        "9**9**9",
        "dp**tp",
        "lambda: 1",
        "banana * 2",
        "x" * 3000,
    ],
)
def test_a_closed_form_is_parsed_over_the_notation_only(text):
    with pytest.raises(an.InputError):
        expressions.symbolic(text)


def test_a_closed_form_means_what_sympy_reads():
    import sympy

    p, dp = an.sym("params"), an.sym("dp")
    assert expressions.symbolic("4*params + 12*params/dp") - (4 * p + 12 * p / dp) == 0
    assert expressions.symbolic("(pp - 1)/(vpp*microbatches)") == (an.sym("pp") - 1) / (
        an.sym("vpp") * an.sym("microbatches")
    )
    assert expressions.symbolic("Max(hidden, 2**10)") == sympy.Max(an.sym("hidden"), 1024)


def planted(folder: Path, compute: str, marker: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "claims.toml").write_text(
        '[[case]]\nid = "X"\nkind = "claim"\npublished = "1"\ntolerance = 0.1\n'
        f'compute = "{compute.format(marker=marker)}"\n'
    )
    return folder


def test_a_planted_case_folder_runs_nothing(tmp_path):
    marker = tmp_path / "ran"
    folder = planted(tmp_path / "validation", "__import__('os').system('touch {marker}')", marker)
    code, _, err = run("validate", "--cases", str(folder))
    assert one_line_error(code, err) and not marker.exists()


def test_validate_and_calibrate_never_read_the_working_directory(tmp_path, monkeypatch):
    """A validation/ in the working directory (or a parent) is not the project's: it is never
    read."""
    planted(tmp_path / "validation", "1", tmp_path / "ran")
    (tmp_path / "validation" / "predicted.toml").write_text("garbage = [")
    work = tmp_path / "deep" / "er"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    assert validation.find_folder() == PROJECT
    code, out, _ = run("calibrate", "--published", "--json")
    # the project's cases, not the planted file
    assert code == 0 and len(json.loads(out)["cases"]) > 10


@pytest.mark.parametrize(
    "content, message",
    [("", "no cases"), ("[[case]]\nid = 1", "needs an id"), ("x = [", "not valid TOML")],
)
def test_an_empty_or_malformed_case_folder_is_an_error(tmp_path, content, message):
    (tmp_path / "claims.toml").write_text(content)
    code, _, err = run("validate", "--cases", str(tmp_path))
    assert one_line_error(code, err) and message in err


# --- files written only where asked
#   ------------------------------------------------------------------
def test_calibrate_published_writes_only_where_told(tmp_path):
    """One fit: the calibration file goes where --write says, its numbers as JSON on standard
    output, the installed calibration untouched and equal to what the command writes."""
    before = CALIBRATION_FILE.read_bytes()
    target = tmp_path / "cal.toml"
    code, out, _ = run("calibrate", "--published", "--write", str(target), "--json")
    written, data = tomllib.loads(target.read_text()), json.loads(out)
    assert code == 0 and written["shared"]["attention_factor"] > 0
    assert data["shared"]["attention_factor"] == pytest.approx(
        written["shared"]["attention_factor"], abs=1e-6
    )
    memory = written["memory"]  # the JSON and the file name the allocator's reserve alike
    assert {
        k: data["memory"][k] for k in ("allocator", "reserve", "reserve_log_stderr", "low", "high")
    } == {
        k: memory[k] if isinstance(memory[k], str) else pytest.approx(memory[k], abs=1e-6)
        for k in ("allocator", "reserve", "reserve_log_stderr", "low", "high")
    }
    assert CALIBRATION_FILE.read_bytes() == before  # the installed calibration is never rewritten
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cal.toml"]
    # and the shipped calibration is what the command writes
    shipped = tomllib.loads(before.decode())
    for key, value in written["stack_efficiency"].items():
        assert shipped["stack_efficiency"][key] == pytest.approx(value, abs=2e-6)
    assert shipped["provenance"]["cases"] == written["provenance"]["cases"]
    routing = written["routing"]["dropless"]
    assert {
        name: {k: pytest.approx(v, abs=2e-6) for k, v in m.items()} for name, m in routing.items()
    } == shipped["routing"]["dropless"]
    assert {k: m["imbalance"] for k, m in data["routing"]["models"].items()} == pytest.approx(
        {k: m["imbalance"] for k, m in routing.items()}, abs=1e-6
    )
    assert {k: shipped["memory"][k] for k in memory} == {
        k: pytest.approx(v, abs=2e-6) if isinstance(v, float) else v for k, v in memory.items()
    }


@pytest.mark.parametrize("out", ["noext", "", ".", "plot.png.txt", "plot.banana"])
def test_plot_refuses_a_name_that_does_not_say_its_format(tmp_path, monkeypatch, out):
    monkeypatch.chdir(tmp_path)
    code, stdout, err = run("plot", "bubble", "--pp", "4", "--out", out)
    assert one_line_error(code, err) and "wrote" not in stdout
    assert list(tmp_path.iterdir()) == []


def test_plot_writes_exactly_the_path_given(tmp_path):
    pytest.importorskip("matplotlib")
    target = tmp_path / "bubble.svg"
    code, stdout, _ = run("plot", "bubble", "--pp", "4", "--out", str(target))
    assert code == 0 and stdout.strip() == f"wrote {target}"
    assert [p.name for p in tmp_path.iterdir()] == [
        "bubble.svg"
    ] and target.read_text().lstrip().startswith("<?xml")


def test_plot_into_a_missing_folder_fails_in_one_line(tmp_path):
    pytest.importorskip("matplotlib")
    code, stdout, err = run(
        "plot", "bubble", "--pp", "4", "--out", str(tmp_path / "missing" / "b.png")
    )
    assert one_line_error(code, err) and "wrote" not in stdout


def test_a_planted_derivations_folder_is_never_run(tmp_path, monkeypatch):
    """Derivations are Python: only this checkout's run, whatever the working directory holds."""
    marker = tmp_path / "ran"
    (tmp_path / "derivations").mkdir()
    (tmp_path / "derivations" / "zz_planted.py").write_text(
        f"open({str(marker)!r}, 'w').write('x')\n"
    )
    monkeypatch.chdir(tmp_path)
    code, _, err = run("derive", "zz_planted")
    assert one_line_error(code, err) and "zz_planted" in err and not marker.exists()


def test_a_profile_that_is_not_one_is_a_preset_error(tmp_path):
    from analytic.reference.calibrate import profile_overrides

    for text in ("x = [", "[all_reduce]\nalpha_us = 'fast'\n", "[other]\n"):
        (tmp_path / "p.toml").write_text(text)
        with pytest.raises(an.PresetError, match="not a profile"):
            profile_overrides(tmp_path / "p.toml")


def test_a_formula_given_as_text_is_parsed_not_evaluated(tmp_path):
    marker = tmp_path / "ran"
    with pytest.raises(an.InputError):
        an.Formula("x", f"__import__('os').system('touch {marker}')", "byte", "test")
    assert not marker.exists()
    f = an.Formula(
        "x", "4*params + 12*params/dp", "byte", "ZeRO §5.1", coefficient_unit="byte/parameter"
    )
    assert f.evaluate(params=1e9, dp=8) == an.formula("memory.model_states.zero1").evaluate(
        params=1e9, dp=8
    )


CLAIM = (
    '[[case]]\nid = "{id}"\nkind = "claim"\npublished = "1 s"\ntolerance = {tol}\ncompute ='
    ' "{compute}"\n'
)
PREDICTED = (
    '[[case]]\nid = "P"\nkind = "predicted"\nmetric = "achieved_flops"\ngroup = "g"\npublished ='
    ' {published}\n[case.plan]\nmodel = "llama3-8b"\nhardware = "h100-sxm"\n{plan}\nseq_len ='
    " 4096\nglobal_batch = 64\n"
)

MEMORY = (
    '[[case]]\nid = "M"\nkind = "memory"\ngroup = "g"\npublished = "70 GB"\nplan_of = {plan_of}\n'
)


@pytest.mark.parametrize(
    "files, message",
    [
        (
            {"claims.toml": CLAIM.format(id="A", tol="inf", compute="Q('1 s')")},
            "tolerance must be a finite number of at least 0",
        ),
        (
            {"claims.toml": CLAIM.format(id="A", tol="nan", compute="Q('1 s')")},
            "tolerance must be a finite number of at least 0",
        ),
        (
            {"claims.toml": CLAIM.format(id="A", tol="-0.1", compute="Q('1 s')")},
            "tolerance must be a finite number of at least 0",
        ),
        (
            {"claims.toml": CLAIM.format(id="A", tol="0.1", compute="Q('1 s') / 0")},
            "case A: ZeroDivisionError",
        ),
        (
            {"claims.toml": CLAIM.format(id="A", tol="0.1", compute="Q('1 s') + Q('1 GB')")},
            "case A: ",
        ),
        (
            {
                "claims.toml": (
                    CLAIM.format(id="A", tol="0.1", compute="Q('1 s')")
                    + '[plans.p]\nmodel = "llama3-8b"\n'
                ),
                "more.toml": '[plans.p]\nmodel = "llama3-70b"\n',
            },
            "plan 'p' is defined in claims.toml too",
        ),
        (
            {
                "claims.toml": CLAIM.format(id="A", tol="0.1", compute="Q('1 s')"),
                "peaks.toml": CLAIM.format(id="A", tol="0.1", compute="Q('2 s')"),
            },
            "duplicate case ids: A",
        ),
        (
            {"predicted.toml": PREDICTED.format(published='"430 TFLOP/s"', plan="layout = 5")},
            "case P: plan.layout must be a table",
        ),
        (
            {"predicted.toml": PREDICTED.format(published="[430]", plan="layout = {}")},
            "case P: published must be a number or",
        ),
        (
            {"predicted.toml": PREDICTED.format(published="1979-05-27", plan="layout = {}")},
            "case P: published must be a number",
        ),
        (
            {"predicted.toml": PREDICTED.format(published="430", plan="layout = {}")},
            "case P: DimensionalityError",
        ),
        (
            {
                "predicted.toml": (
                    PREDICTED.format(published='"430 TFLOP/s"', plan="layout = {}").replace(
                        "[case.plan]\nmodel", "[case.plan]\nmodels"
                    )
                )
            },
            "case P: plan needs model",
        ),
        (
            {"claims.toml": CLAIM.format(id="A", tol="0.1", compute="'a'*10**9")},
            "case A: InputError: a str of more than",
        ),
        (
            {"claims.toml": CLAIM.format(id="A", tol="0.1", compute="[0]*10**8")},
            "case A: InputError: a list of more than",
        ),
        (
            {"claims.toml": CLAIM.format(id="A", tol="0.1", compute="(((10**64)**64)**64)**64")},
            "integer power of more than",
        ),
        (
            {
                "claims.toml": CLAIM.format(
                    id="A", tol="0.1", compute="sympy.expand(S('(tp+dp+pp+cp)**64'))"
                )
            },
            "expands to more than 1,000 terms",
        ),
        (
            {
                "claims.toml": CLAIM.format(
                    id="A", tol="0.1", compute="sympy.simplify(S('((tp+1)**64+dp)**64'))"
                )
            },
            "expands to more than 1,000 terms",
        ),
        (
            {
                "claims.toml": CLAIM.format(
                    id="A", tol="0.1", compute="sympy.expand(S('(tp+dp)**32')*S('(pp+cp)**32'))"
                )
            },
            "expands to more than 1,000 terms",
        ),
        (
            {
                "claims.toml": (
                    CLAIM.format(id="A", tol="0.1", compute="Q('1 s')").replace('"1 s"', "true")
                )
            },
            "case A: published must be a number or a string",
        ),
        (
            {"predicted.toml": PREDICTED.format(published="nan", plan="layout = {}")},
            "case P: published must be a finite",
        ),
        (
            {
                "predicted.toml": PREDICTED.format(published='"430 TFLOP/s"', plan="layout = {}"),
                "memory.toml": MEMORY.format(plan_of='"nope"'),
            },
            "case M: plan_of must be the id of a predicted case",
        ),
        (
            {"memory.toml": MEMORY.format(plan_of="[1]")},
            "case M: plan_of must be the id of a predicted case",
        ),
        (
            {
                "claims.toml": (
                    CLAIM.format(
                        id="A", tol="0.1", compute="expr('memory.model_states.zero1')"
                    ).replace('"1 s"', '"((params**64)**64)**64"')
                )
            },
            "a power of degree more than 64",
        ),
        (
            {"claims.toml": CLAIM.format(id="A", tol="0.1", compute="Q('1 GB').to('GB*9**9**9')")},
            "cannot read 'GB*9**9**9' as a unit",
        ),
    ],
    ids=[
        "inf",
        "nan",
        "negative",
        "zero-division",
        "units",
        "plan-twice",
        "id-twice",
        "layout-number",
        "published-list",
        "published-date",
        "published-bare",
        "no-model",
        "huge-string",
        "huge-list",
        "power-tower",
        "expand-power",
        "simplify-nested-power",
        "expand-product",
        "published-true",
        "published-nan",
        "plan-of-unknown",
        "plan-of-list",
        "closed-form-degree",
        "unit-power-tower",
    ],
)
def test_a_case_folder_is_validated_as_a_whole(tmp_path, files, message):
    """What was silently taken (a tolerance of inf, a plan table redefined, memory cases in a file
    that is never read, true as 1) or raised a foreign exception or hung is one line naming the file
    or the case, on the command line and through the API alike."""
    from analytic.fit import validation

    for name, text in files.items():
        (tmp_path / name).write_text(text)
    code, _, err = run("validate", "--cases", str(tmp_path))
    assert one_line_error(code, err) and message in err, err
    with pytest.raises(an.AnalyticError) as api:
        validation.run(tmp_path)
    assert str(api.value) == err.strip().removeprefix("analytic: ")
    # read before any case runs
    if any(name.startswith("predicted") for name in files) and "Error:" not in err:
        code, _, also = run("calibrate", "--published", "--cases", str(tmp_path))
        assert one_line_error(code, also) and also == err, also


def test_a_case_folder_without_predicted_cases_validates(tmp_path):
    (tmp_path / "claims.toml").write_text(CLAIM.format(id="A", tol="0.1", compute="Q('1 s')"))
    code, out, err = run("validate", "--cases", str(tmp_path), "--json")
    assert code == 0, err
    assert [c["id"] for c in json.loads(out)["cases"]] == ["A"]


def _sources(folder: Path, *groups: str) -> Path:
    """``folder`` with the predicted cases of ``groups`` only, copied from the project's
    predicted.toml."""
    head, *blocks = (PROJECT / "predicted.toml").read_text().split("[[case]]")
    kept = [b for b in blocks if any(f'group = "{g}"' in b for g in groups)]
    (folder / "predicted.toml").write_text(head + "".join("[[case]]" + b for b in kept))
    return folder


@pytest.mark.parametrize(
    "groups, message",
    [
        (
            ("megatron-2021", "torchtitan-a100-2024"),
            "with torchtitan-a100-2024 left out no fitted case determines attention_factor",
        ),
        (("bloom-2022",), "a second"),
    ],
)
def test_a_case_folder_of_some_sources_is_one_line_where_it_cannot_be_fitted(
    tmp_path, groups, message
):
    """A folder of a subset of the sources (KeyError and ZeroDivisionError before): where a source
    left out leaves a constant its cases read without a case to fit it, or no case at all, validate
    and calibrate say which in one line."""
    folder = _sources(tmp_path, *groups)
    for argv in (
        ("validate", "--cases", str(folder), "--quiet"),
        ("calibrate", "--published", "--cases", str(folder), "--quiet"),
    ):
        code, _, err = run(*argv)
        assert one_line_error(code, err) and message in err, err
