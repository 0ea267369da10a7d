"""The README and docs/ run: every code block on its own, each number written in a ``# →`` comment
checked against what its line gives, to the digits shown, and the site builds with ``mkdocs build
--strict``.

A ``python`` block runs in a fresh namespace, statement by statement; a statement whose lines carry
``# → TEXT`` is an expression, and TEXT is its value as written: a number with its unit (``89.82
GB``), a tuple of them, an integer, or a Python literal (a string, a flag or a list of them). A
``bash`` block runs each ``analytic`` command in-process; its exit status must be 0, or the one
written as ``# → exit N``, and every number of its ``# →`` text must be printed by it as written.
Lines that install or run the test suite (``pip``, ``python -m pytest``) are the commands CI itself
runs and are not run twice. ``text`` blocks show output and are not code. A figure in prose is
marked: ``FIGURE<!-- → EXPR -->``, EXPR evaluated where the page's python block before it leaves off
and checked as a ``# →`` value, or ``FIGURE<!-- quoted: SOURCE -->``; on the worked-example pages
every figure with a unit carries one.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import io
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.M | re.S)
ARROW = "# →"
#: a number as written: thousands commas, decimals, an exponent
NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][+-]?\d+)?")
#: commands of a bash block that CI runs itself (the README's set-up commands)
CI_COMMANDS = ("pip ", "python -m pytest")


def _blocks():
    for page in PAGES:
        text = page.read_text()
        for m in FENCE.finditer(text):
            line = text[: m.start()].count("\n") + 1
            yield pytest.param(
                m.group(1), m.group(2), f"{page.relative_to(ROOT)}:{line}",
                id=f"{page.relative_to(ROOT)}:{line}",
            )


BLOCKS = list(_blocks())


def _written(text: str) -> list[tuple[float, int, str]]:
    """(value, decimals, unit) of each number in ``text``: decimals of the mantissa, the exponent
    folded in."""
    out = []
    for m in NUMBER.finditer(text):
        raw = m.group().replace(",", "")
        mantissa, _, exp = raw.lower().partition("e")
        decimals = len(mantissa.partition(".")[2]) - (int(exp) if exp else 0)
        rest = text[m.end() :]
        unit = re.match(r" ?([A-Za-zµ][A-Za-z/µ]*)", rest)
        out.append((float(raw), decimals, unit.group(1) if unit else ""))
    return out


def _flat(value) -> list:
    """The numbers of ``value`` in order: a Quantity, a number, or a tuple or list of them."""
    import pint

    if isinstance(value, pint.Quantity):
        return [value]
    if isinstance(value, (tuple, list)):
        return [x for v in value for x in _flat(v)]
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        and not hasattr(value, "__float__")
    ):
        raise AssertionError(
            f"a # → comment beside a {type(value).__name__}: write numbers, or a literal"
        )
    return [value]


def check_value(value, text: str, where: str) -> None:
    """``value`` is what ``text`` says, to the digits shown."""
    literal = (str, bool, np.bool_)
    if isinstance(value, literal) or (
        isinstance(value, (list, tuple)) and any(isinstance(v, literal) for v in value)
    ):
        assert value == ast.literal_eval(text), f"{where}: {value!r} is not {text}"
        return
    got, shown = _flat(value), _written(text)
    assert len(got) == len(shown), f"{where}: {len(got)} numbers, {len(shown)} written in '{text}'"
    for v, (number, decimals, unit) in zip(got, shown):
        if hasattr(v, "units"):
            assert unit or v.dimensionless, f"{where}: {v} is written without its unit in '{text}'"
            v = v.to(unit).magnitude if unit else v.to("").magnitude
        else:
            assert not unit, f"{where}: a bare number is written with the unit {unit!r}"
        assert abs(float(v) - number) <= 0.5 * 10.0**-decimals * (
            1 + 1e-9
        ), f"{where}: {v} is not {text}"


def run_python(code: str, where: str) -> int:
    """Run ``code`` statement by statement; returns how many ``# →`` values it checked."""
    lines = code.splitlines()
    arrows = {
        i + 1: line.split(ARROW, 1)[1].strip() for i, line in enumerate(lines) if ARROW in line
    }
    namespace = {"__name__": "__docs__"}
    checked = 0
    for stmt in ast.parse(code).body:
        found = [n for n in range(stmt.lineno, stmt.end_lineno + 1) if n in arrows]
        if not found:
            exec(compile(ast.Module([stmt], []), where, "exec"), namespace)
            continue
        assert len(found) == 1 and isinstance(
            stmt, ast.Expr
        ), f"{where}:{found[0]}: a # → comment beside an expression"
        value = eval(compile(ast.Expression(stmt.value), where, "eval"), namespace)
        check_value(value, arrows[found[0]], f"{where}:{found[0]}")
        checked += 1
    return checked


def _commands(code: str):
    """(command, # → text) of a bash block, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", code)
    for line in joined.splitlines():
        command, _, arrow = line.partition(ARROW)
        command = command.split(" #", 1)[0].strip()
        if command and not command.startswith("#"):
            yield command, arrow.strip()


def run_bash(code: str, where: str) -> int:
    from analytic.cli.main import main

    ran = 0
    for command, arrow in _commands(code):
        if command.startswith(CI_COMMANDS):
            continue
        assert command.startswith("analytic "), f"{where}: a command other than analytic: {command}"
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code_ = main(shlex.split(command)[1:])
        want = int(arrow.split()[1]) if arrow.startswith("exit ") else 0
        assert code_ == want, f"{where}: `{command}` exited {code_}: {err.getvalue()}"
        written = NUMBER.findall(
            arrow.partition("exit ")[2] if arrow.startswith("exit ") else arrow
        )
        missing = first_not_printed_in_order(out.getvalue() + err.getvalue(), written)
        assert missing is None or want and arrow.startswith("exit "), (
            f"{where}: `{command}` does not print {missing} (after the numbers before it):"
            f" {out.getvalue()[-600:]}"
        )
        ran += 1
    return ran


def first_not_printed_in_order(output: str, numbers: list[str]) -> str | None:
    """The first of ``numbers`` that ``output`` does not print after the ones before it (each a
    number of its own, line by line, left to right); None when every one is printed in that
    order."""
    printed = [m.group() for line in output.splitlines() for m in NUMBER.finditer(line)]
    at = 0
    for number in numbers:
        try:
            at = printed.index(number, at) + 1
        except ValueError:
            return number
    return None


#: a figure in prose and its marker: ``FIGURE<!-- → EXPR -->`` (EXPR evaluated where the page's code
#: block before it leaves off) or ``FIGURE<!-- quoted: SOURCE -->``
MARKER = re.compile(
    r"(-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?: ?[A-Za-z%/µ]+)?)<!-- (→|quoted:) (.*?) -->"
)
#: pages whose prose figures with a unit each carry a marker (the worked examples)
MARKED_PAGES = ("docs/tour.md", "docs/plan-a-run.md")
#: a figure with a unit in prose: a number, then one of these (a time's after a space: "100s" is a
#: plural), then no letter or digit
PROSE_FIGURE = re.compile(
    r"\d[\d,]*(?:\.\d+)?(?: ?(?:GB|GiB|TB|%|K|TFLOP/s|GB/s)| (?:ms|s|µs|days|hours|GPU-hours))"
    r"(?![A-Za-z0-9])"
)


@functools.lru_cache(maxsize=8)
def _namespace(code: str) -> dict:
    """What a python block leaves defined, run on its own (once for the markers after it)."""
    namespace = {"__name__": "__docs__"}
    exec(compile(code, "<docs block>", "exec"), namespace)
    return namespace


def _prose_markers():
    for page in PAGES:
        text = page.read_text()
        blocks = [(m.start(), m.group(1), m.group(2)) for m in FENCE.finditer(text)]
        # blocks blanked, in place
        prose = FENCE.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), text)
        for m in MARKER.finditer(prose):
            before = [
                code for start, lang, code in blocks if start < m.start() and lang == "python"
            ]
            line = text[: m.start()].count("\n") + 1
            yield pytest.param(
                m.group(1),
                m.group(2),
                m.group(3),
                before[-1] if before else "",
                f"{page.relative_to(ROOT)}:{line}",
                id=f"{page.relative_to(ROOT)}:{line}",
            )


def check_figure(value, figure: str, where: str) -> None:
    """A figure in prose is ``value`` to the digits shown; after a bare number, letters are its
    typography (``%`` of a percentage, ``K`` of thousands), the expression giving the number as
    written."""
    if not hasattr(value, "units"):
        figure = NUMBER.match(figure).group()
    check_value(value, figure, where)


@pytest.mark.parametrize("figure, kind, text, code, where", list(_prose_markers()))
def test_every_marked_figure_in_prose_is_what_its_expression_gives(figure, kind, text, code, where):
    """``FIGURE<!-- → EXPR -->``: EXPR, evaluated where the page's code block before it leaves off,
    gives FIGURE to the digits shown; ``FIGURE<!-- quoted: SOURCE -->`` names where a quoted figure
    comes from."""
    if kind == "quoted:":
        assert len(text) > 10, f"{where}: a quoted figure names its source"
        return
    import analytic as an

    namespace = {"an": an, **(_namespace(code) if code else {})}
    check_figure(eval(compile(text, where, "eval"), namespace), figure, where)


def test_the_figures_in_the_worked_examples_prose_are_marked():
    """On the worked-example pages every figure with a unit in prose is computed by its marker or
    quoted from a source."""
    for name in MARKED_PAGES:
        text = (ROOT / name).read_text()
        prose = re.sub(
            r"<!--.*?-->", "<!---->", re.sub(r"`[^`\n]*`", "", FENCE.sub("", text)), flags=re.S
        )
        unmarked = [
            m.group()
            for m in PROSE_FIGURE.finditer(prose)
            if not prose[m.end() :].lstrip().startswith("<!--")
        ]
        assert unmarked == [], f"{name}: figures without a marker"


def test_the_prose_checker_fails_on_a_wrong_figure():
    from analytic.core.units import Q_

    check_figure(246.78, "247K", "ok")
    check_figure(Q_(989.4e12, "FLOP/s"), "989.4 TFLOP/s", "ok")
    for value, figure in (
        (246.78, "246K"),
        (Q_(989.4e12, "FLOP/s"), "989.5 TFLOP/s"),
        (24.77, "24.7%"),
    ):
        with pytest.raises(AssertionError):
            check_figure(value, figure, "bad")


@pytest.mark.parametrize("lang, code, where", BLOCKS)
def test_every_code_block_runs_on_its_own(lang, code, where):
    assert lang in (
        "python",
        "bash",
        "text",
    ), f"{where}: a ```{lang} block: write python, bash or text"
    if lang == "python":
        run_python(code, where)
    elif lang == "bash":
        run_bash(code, where)


def test_the_arrow_checker_fails_on_a_wrong_number():
    """The checker itself: a number off in its last digit, a missing unit, a wrong count all
    fail."""
    from analytic.core.units import Q_

    check_value(Q_(89.82e9, "byte"), "89.82 GB", "ok")
    check_value((Q_(1.0, "s"), 256), "(1.00 s, 256)", "ok")
    for value, text in (
        (Q_(89.82e9, "byte"), "89.83 GB"),
        (Q_(89.82e9, "byte"), "89.82"),
        (256, "257"),
        ((1, 2), "1"),
        ("a", "'b'"),
        (1.5e16, "1.4e16"),
    ):
        with pytest.raises(AssertionError):
            check_value(value, text, "bad")


def test_the_bash_checker_holds_the_numbers_to_their_order():
    """A bash block's ``# →`` numbers are printed in the order written: two swapped fail."""
    output = "memory  78.68 GB\nstep    12.3 s\nMFU     0.41\n"
    assert first_not_printed_in_order(output, ["78.68", "12.3", "0.41"]) is None
    assert first_not_printed_in_order(output, ["78.68", "0.41"]) is None
    assert first_not_printed_in_order(output, ["12.3", "78.68"]) == "78.68"
    assert first_not_printed_in_order(output, ["78.68", "78.68"]) == "78.68"
    assert first_not_printed_in_order(output, ["9.99"]) == "9.99"


def test_the_readme_is_a_quick_start():
    """The README is short: set-up, what the library answers, a tour and links (the rest is
    docs/)."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 300
    for page in re.findall(r"\]\((docs/[^)#]+)", "\n".join(lines)):
        assert (ROOT / page).is_file(), page


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """``mkdocs build --strict`` into a folder of the test: every link, page and API reference
    resolves."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return out


def _pages(site: Path) -> dict[str, str]:
    """Each built page's HTML, code blocks and inline code removed (what a reader sees as prose)."""
    code = re.compile(r"<(pre|code)\b.*?</\1>", re.S)
    return {
        str(p.relative_to(site)): code.sub("", p.read_text())
        for p in site.rglob("*.html")
        if p.name != "404.html"
    }


def test_the_site_renders_math_and_cross_references(site):
    """No page shows LaTeX or a docstring's Sphinx role as raw text: math is MathML, roles are code
    or links."""
    pages = _pages(site)
    raw_math = {k: m.group() for k, v in pages.items() if (m := re.search(r"\\[(\[]|\$\$|\$\\", v))}
    assert raw_math == {}
    roles = {
        k: m.group()
        for k, v in pages.items()
        if (m := re.search(r":(meth|func|class|data|mod|attr|exc):", v))
    }
    assert roles == {}
    assert (
        "<math" in pages["notation/index.html"]
        and "<math" in pages["derivations/zero3_pipeline/index.html"]
    )
    api = (site / "api" / "index.html").read_text()
    assert re.search(r'<a href="#analytic\.plan\.core\.Plan\.memory_verdict"><code>', api)


def test_every_page_is_in_the_navigation(site):
    """Every page, the generated ones (derivations, presets) included, is reachable from the
    navigation."""
    index = (site / "index.html").read_text()
    linked = {
        re.sub(r"^(\.\./)+|^\./", "", h)
        for h in re.findall(r'class="md-nav__link[^"]*"[^>]*href="([^"]+)"', index) + re.findall(
            r'href="([^"#]+)"[^>]*class="md-nav__link', index
        )
    }
    pages = {
        str(p.relative_to(site).parent) + "/" for p in site.rglob("index.html") if p.parent != site
    }
    assert pages - linked == set() and "presets/" in pages and "plan-a-run/" in pages


def test_the_presets_page_lists_every_preset_with_its_sources(site):
    import analytic as an

    page = (site / "presets" / "index.html").read_text()
    assert all(
        f"<code>{n}</code>" in page
        for n in (*an.hardwares(), *an.models(), *an.stacks(), "mxfp8", "nvfp4")
    )
    assert "OCP Microscaling Formats (MX) Specification v1.0" in page
    assert "NVIDIA H100 Tensor Core GPU Architecture whitepaper v1.04, Table 3" in page
    # its GEMM ceiling measured on B200
    mxfp8 = page[page.index("<code>mxfp8</code>") :].split("</tr>")[0]
    assert "b200" in mxfp8 and "h100-sxm" not in mxfp8
