"""An installed wheel, not only a checkout, validates and derives: the wheel carries validation/ as
analytic/cases and derivations/ as analytic/derivations. Built from a copy of the tree (nothing is
written into the checkout), installed into a fresh virtual environment of its own that sees this
environment's dependencies (a .pth file of their folder, whose own .pth files, this checkout's
editable install among them, it does not run), and run from an empty folder. The wheel is at most 2
MB and the installed package at most 10 MB. (Installing the dependencies themselves is what CI's two
fresh environments do.)"""

import json
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from analytic.fit import derive, validation

ROOT = Path(__file__).resolve().parent.parent


def _run(*argv, cwd=None):
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300)


def test_an_installed_wheel_validates_and_derives(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(
        ROOT,
        src,
        ignore=shutil.ignore_patterns(
            ".git", "build", "dist", "*.egg-info", "__pycache__", ".hypothesis", ".pytest_cache",
            ".ruff_cache",
        ),
    )
    built = _run(
        sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation", "-q",
        "-w", str(tmp_path / "dist"),
    )
    assert built.returncode == 0, built.stderr
    wheel = next((tmp_path / "dist").glob("analytic-*.whl"))
    assert wheel.stat().st_size <= 2 * 2**20, wheel.stat().st_size
    venv = tmp_path / "venv"
    assert _run(sys.executable, "-m", "venv", "--without-pip", str(venv)).returncode == 0
    bin_ = venv / ("Scripts" if sys.platform == "win32" else "bin")
    site = _run(
        str(bin_ / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    ).stdout.strip()
    (Path(site) / "dependencies.pth").write_text(
        "\n".join(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    )
    installed = _run(
        sys.executable, "-m", "pip", "--python", str(bin_ / "python"), "install", "-q", "--no-deps",
        "--no-compile", "--disable-pip-version-check", str(wheel),
    )
    assert installed.returncode == 0, installed.stderr
    empty = tmp_path / "elsewhere"
    empty.mkdir()
    where = _run(str(bin_ / "python"), "-c", "import analytic; print(analytic.__file__)", cwd=empty)
    package = Path(where.stdout.strip()).parent
    assert package.is_relative_to(venv), where.stdout  # the wheel's, not the checkout's
    assert sum(p.stat().st_size for p in package.rglob("*") if p.is_file()) <= 10 * 2**20
    out = _run(str(bin_ / "analytic"), "validate", "--json", cwd=empty)
    data = json.loads(out.stdout)
    ids = [c["id"] for c in validation.load(validation.find_folder())[0]]
    assert sorted(c["id"] for c in data["cases"]) == sorted(ids)
    assert "leave_one_source_out_mean" in data["summary"]["predicted"]["fitted"]
    listed = _run(str(bin_ / "analytic"), "derive", "--list", cwd=empty)
    assert listed.returncode == 0 and listed.stdout.split() == derive.names()
    rendered = _run(str(bin_ / "analytic"), "derive", "--markdown", cwd=empty)
    # never writes into site-packages
    assert rendered.returncode == 2 and "source checkout" in rendered.stderr
