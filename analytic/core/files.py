"""Reading and writing files: every file the library reads is a regular file of bounded size, read
as UTF-8; every file it writes is created exclusively beside its destination, then renamed over it.

Reading opens without blocking, so a FIFO never hangs, and refuses what is not a regular file (a
device such as ``/dev/zero`` reports a size of 0 and would be read without end). Writing never
follows a link planted at a predictable name: the temporary file has an unpredictable name and is
created with ``O_EXCL``; the rename replaces a link at the destination rather than writing through
it; a failed write leaves nothing behind.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

#: the most a file the library reads may hold, unless its reader says otherwise
MAX_BYTES = 1 << 24


class FileError(OSError):
    """A file that is not a regular file of bounded UTF-8 text, or cannot be read or written."""


def read_text(path, limit: int = MAX_BYTES, follow: bool = True) -> str:
    """The UTF-8 text of the regular file ``path``, at most ``limit`` bytes; FileError otherwise (a
    FIFO, a device, a folder, a larger file, bytes that are not UTF-8). ``follow=False``: a link is
    refused too."""
    flags = (
        os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | (0 if follow else getattr(os, "O_NOFOLLOW", 0))
    )
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise FileError(exc.errno, exc.strerror, str(path)) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise FileError(f"{path}: not a regular file")
        if info.st_size > limit:
            raise FileError(f"{path}: larger than {limit:,} bytes")
        with os.fdopen(fd, "rb", closefd=False) as f:
            raw = f.read(limit + 1)
        if len(raw) > limit:
            raise FileError(f"{path}: larger than {limit:,} bytes")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FileError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    finally:
        os.close(fd)


def write_text(path, text: str | bytes) -> None:
    """Write ``text`` (str as UTF-8, or bytes) to ``path`` through a temporary file created
    exclusively beside it, then renamed over it; OSError where the folder cannot be written (nothing
    is left behind)."""
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:  # said of the file the caller named, not of the temporary one
        raise FileError(exc.errno, exc.strerror, str(path)) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode("utf-8") if isinstance(text, str) else text)
        os.replace(tmp, path)
    except OSError as exc:
        _remove(tmp)
        raise FileError(exc.errno, exc.strerror, str(path)) from None
    except BaseException:
        _remove(tmp)
        raise


def _remove(tmp: str) -> None:
    try:
        os.unlink(tmp)
    except OSError:
        pass
