"""The user's cache: where programs built from the library's expressions, and TOML files as parsed,
are kept as data.

Entries are read and written as :mod:`analytic.core.files` reads and writes every file (regular
files of bounded size, never through a link; written through a temporary file created exclusively,
then renamed). Everything read back is validated by its reader; an entry that is not what it should
be is rebuilt.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tomllib
from pathlib import Path

from .files import MAX_BYTES, read_text, write_text


def cache_dir() -> Path | None:
    """``$ANALYTIC_CACHE``, else ``$XDG_CACHE_HOME/analytic``, else ``~/.cache/analytic``. An empty
    or relative path is ignored, as the XDG Base Directory specification says of ``XDG_CACHE_HOME``;
    None when no absolute folder results."""
    for var, leaf in (("ANALYTIC_CACHE", ""), ("XDG_CACHE_HOME", "analytic")):
        value = os.environ.get(var, "")
        if value and Path(value).is_absolute():
            return Path(value) / leaf
    try:
        return Path.home() / ".cache" / "analytic"
    except RuntimeError:  # no home directory
        return None


@functools.cache
def library_digest() -> str:
    """A digest of the library's own code and data: what is built from its expressions is valid for
    exactly it."""
    root = Path(__file__).parent.parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.suffix in (".py", ".toml", ".txt") and "__pycache__" not in path.parts:
            h.update(path.relative_to(root).as_posix().encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def read_json(path: Path, limit: int = MAX_BYTES):
    """The JSON value in ``path``, or None: missing, a link, not a regular file, over ``limit``
    bytes, not UTF-8 or not JSON."""
    try:
        return json.loads(read_text(path, limit, follow=False))
    except (OSError, ValueError, RecursionError):
        # FileError is an OSError; JSONDecodeError a ValueError
        return None


def write_json(path: Path, data) -> bool:
    """Write ``data`` as JSON to ``path`` (:func:`analytic.core.files.write_text`); False, and
    nothing left behind, where the folder cannot be written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_text(path, json.dumps(data, allow_nan=True, separators=(",", ":")))
        return True
    except (OSError, ValueError):
        return False


def entry(kind: str, *key: str) -> Path | None:
    """The cache file of ``kind`` for ``key`` (with the library's digest), or None without a
    folder."""
    folder = cache_dir()
    if folder is None:
        return None
    digest = hashlib.sha256("\0".join((library_digest(), *key)).encode()).hexdigest()[:32]
    return folder / f"{kind}-{digest}.json"


def parsed_toml(text: str) -> dict:
    """``tomllib.loads(text)``, kept as JSON in the user's cache under the text's digest: a TOML
    file read again (the validation's cases, the presets) is parsed by the json module's decoder,
    to the same values. Parsed each time where the text holds a date or a time
    (JSON has none) or the cache cannot be written; raises as tomllib does."""
    path = entry("toml", hashlib.sha256(text.encode()).hexdigest())
    found = read_json(path) if path is not None else None
    if isinstance(found, dict) and found.get("toml") == path.stem and isinstance(
        found.get("data"), dict
    ):
        return found["data"]
    data = tomllib.loads(text)
    if path is not None:
        try:
            json.dumps(data, allow_nan=True)
        except TypeError:  # a date or a time
            return data
        write_json(path, {"toml": path.stem, "data": data})
    return data


@functools.cache
def package_toml(path: Path) -> dict:
    """One of the package's own TOML files (presets, their tables), parsed once a process
    (:func:`parsed_toml`): every reader of it reads it here. A user's file is read with
    :func:`~analytic.core.files.read_text`, each time."""
    return parsed_toml(read_text(path))
