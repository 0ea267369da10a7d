"""The user's cache: where programs built from the library's expressions are kept as data.

Files are read only when they are regular files of bounded size (never through a link, never a
device or a FIFO) and written exclusively: a temporary file of an unpredictable name created in the
cache folder (``O_EXCL``), then renamed over the entry, and removed if anything fails. Everything
read back is validated by its reader; a file that is not what it should be is rebuilt.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import stat
import tempfile
from pathlib import Path

#: a cache file larger than this is not read
MAX_BYTES = 1 << 24
_EAGER = [False]


@contextlib.contextmanager
def eager():
    """Inside it, what is built on a later use (a plan structure's programs, :mod:`analytic.plan.programs`)
    is built at the first, and written: for a process whose successors ask the same (the command line)."""
    before, _EAGER[0] = _EAGER[0], True
    try:
        yield
    finally:
        _EAGER[0] = before


def is_eager() -> bool:
    """Whether :func:`eager` is in force."""
    return _EAGER[0]


def cache_dir() -> Path | None:
    """``$ANALYTIC_CACHE``, else ``$XDG_CACHE_HOME/analytic``, else ``~/.cache/analytic``. An empty or
    relative path is ignored, as the XDG Base Directory specification says of ``XDG_CACHE_HOME``;
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
    """The JSON value in ``path``, or None: missing, a link, not a regular file, over ``limit`` bytes,
    not UTF-8 or not JSON."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            raw = f.read(limit + 1)
        if len(raw) > limit:
            return None
        return json.loads(raw.decode("utf-8"))
    except (OSError, ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return None
    finally:
        os.close(fd)


def write_json(path: Path, data) -> bool:
    """Write ``data`` as JSON to ``path`` through a temporary file created exclusively beside it, then
    renamed over it; False (and nothing left behind) where the folder cannot be written."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, allow_nan=True, separators=(",", ":"))
        os.replace(tmp, path)
        return True
    except (OSError, ValueError):
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        return False


def entry(kind: str, *key: str) -> Path | None:
    """The cache file of ``kind`` for ``key`` (with the library's digest), or None without a folder."""
    folder = cache_dir()
    if folder is None:
        return None
    digest = hashlib.sha256("\0".join((library_digest(), *key)).encode()).hexdigest()[:32]
    return folder / f"{kind}-{digest}.json"
