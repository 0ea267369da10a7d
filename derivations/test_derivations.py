"""Every derivation runs (its asserts are the proof), its Markdown is current, and every catalogue
formula whose source names a derivation is checked by that derivation."""

import re
from pathlib import Path

import pytest

import analytic as an
from analytic.fit import derive

HERE = Path(__file__).parent
NAMES = derive.names(HERE)


@pytest.fixture(scope="module")
def derived():
    return {n: derive.load(n, HERE) for n in NAMES}


def test_there_are_derivations():
    assert len(NAMES) >= 10


@pytest.mark.parametrize("name", NAMES)
def test_derivation_runs_and_markdown_is_current(derived, name):
    d = derived[name]
    assert d.checks, f"{name} checks nothing against the catalogue"
    assert (HERE / f"{name}.md").read_text() == d.markdown(), "run: analytic derive --markdown"


def test_sources_naming_a_derivation_are_checked_by_it(derived):
    for fname, f in an.formulas().items():
        for m in re.finditer(r"derivations/(\w+)\.py", f.source):
            assert m.group(1) in derived, f"{fname}: {m.group(0)} does not exist"
            assert fname in {
                n for n, _ in derived[m.group(1)].checks
            }, f"{fname} is not checked by {m.group(0)}"
