"""What a hostile or careless file gives each reader: a config.json with one field of the wrong
kind, and paths that are links, devices, FIFOs, folders or too large. Every outcome is a model, or
one typed error of at most a line that quotes at most ~80 characters of what it read."""

import contextlib
import io
import json
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import analytic as an
from analytic.cli.main import main
from analytic.core.files import MAX_BYTES
from analytic.presets.hf import NEUTRAL

HF = Path(__file__).resolve().parent / "data" / "hf"
CONFIGS = {
    name: json.loads((HF / f"{name}.json").read_text())
    for name in ("llama-3.1-8b", "qwen3-30b-a3b", "deepseek-v3")
}
#: JSON text of values of each hostile class: strings for booleans and numbers, zeros and negatives,
#: null, containers where a scalar is meant, huge integers past Python's digit limit, deep nesting,
#: long strings, terminal escapes and a lone surrogate
HOSTILE = st.sampled_from(
    [
        '"false"',
        '"true"',
        '"0"',
        '"1"',
        '""',
        "0",
        "-1",
        "0.0",
        "1.5",
        "1e400",
        "true",
        "false",
        "null",
        "[]",
        "{}",
        "[1, 2]",
        '{"a": 1}',
        "9" * 5000,
        "[" * 5000 + "]" * 5000,
        '{"a":' * 3000 + "1" + "}" * 3000,
        json.dumps("x" * 100_000),
        '"\\u001b[31mred"',
        '"\\udcff"',
    ]
)


def quoted_briefly(message: str) -> bool:
    """One line, no longer than a message that quotes ~80 characters of a value and names its
    field."""
    return "\n" not in message.strip() and len(message) < 400


@given(st.sampled_from(sorted(CONFIGS)), st.data(), HOSTILE)
def test_a_config_field_of_any_hostile_kind_is_a_model_or_one_short_error(name, data, value):
    config = CONFIGS[name]
    field = data.draw(st.sampled_from(sorted(config)))
    text = (
        "{"
        + ", ".join(
            f"{json.dumps(k)}: {value if k == field else json.dumps(v)}" for k, v in config.items()
        )
        + "}"
    )
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"analytic-fuzz-{os.getpid()}.json"
    path.write_text(text, encoding="utf-8")
    try:
        model = an.Model.from_hf(path)
    except an.AnalyticError as exc:
        assert quoted_briefly(str(exc)), str(exc)[:500]
        return
    finally:
        path.unlink()
    # taken: the field is one that changes no count (not read), or the mapping reads it in that
    # form, which is never a flag written as a string
    assert isinstance(model, an.Model)
    assert field in NEUTRAL or not (isinstance(config[field], bool) and value.startswith('"')), (
        field,
        value,
    )


def _plant(kind: str, path: Path) -> Path:
    """``path`` made into a file of ``kind``."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        os.symlink("/dev/zero", path)
    elif kind == "dangling link":
        os.symlink(path.parent / "nowhere", path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "large":
        path.write_bytes(b" " * (MAX_BYTES + 1))  # past every reader's bound
    elif kind == "binary":
        path.write_bytes(b"\xff\xfe\x00" * 100)
    return path


KINDS = ["fifo", "device", "dangling link", "folder", "large", "binary"]


def _cli(*argv):
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, err.getvalue()


@pytest.mark.parametrize("kind", KINDS)
def test_a_config_or_profile_that_is_not_a_bounded_regular_file_is_one_error(tmp_path, kind):
    """A FIFO (which would hang), a link to a device (which would read without end), a folder, a
    file too large or not UTF-8, named as a model's config or a profile: one error from the API, one
    line and exit status 2 from the command line."""
    config = _plant(kind, tmp_path / "config.json")
    with pytest.raises(an.AnalyticError) as caught:
        an.Model.from_hf(config)
    assert quoted_briefly(str(caught.value))
    profile = _plant(kind, tmp_path / "profile.toml")
    with pytest.raises(an.AnalyticError) as caught:
        an.Plan(
            "llama3-8b", "h100-sxm", an.Layout(dp=8), seq_len=4096, global_batch=8, profile=profile
        )
    assert quoted_briefly(str(caught.value))
    flags = ["--hardware", "h100-sxm", "--gpus", "8", "--seq", "4096", "--global-batch", "8"]
    for argv in (
        ["step", "--model", str(config), *flags],
        ["step", "--model", "llama3-8b", "--profile", str(profile), *flags],
    ):
        code, err = _cli(*argv)
        assert code == 2 and quoted_briefly(err) and "Traceback" not in err, err


@pytest.mark.parametrize("kind", KINDS)
def test_a_case_file_that_is_not_a_bounded_regular_file_is_one_error(tmp_path, kind):
    """A case folder's file that is a FIFO, a link to a device or to nothing, a folder, too large or
    not UTF-8: `validate` says so in one line and exits 2, without hanging or reading without
    end."""
    (tmp_path / "claims.toml").write_text(
        '[[case]]\nid = "A"\nkind = "claim"\npublished = "1 s"\n'
        "tolerance = 0.1\ncompute = \"Q('1 s')\"\n"
    )
    _plant(kind, tmp_path / "more.toml")
    code, err = _cli("validate", "--cases", str(tmp_path))
    assert code == 2 and quoted_briefly(err) and "Traceback" not in err, err
