"""Progress of long computations: a tqdm bar on standard error, drawn only inside :func:`shown` (the
command line, unless ``--quiet`` or ``--json``; a search called with ``progress=True``) and only
when standard error is a terminal, so piped output and logs stay clean. An inner :func:`shown` never
draws where an outer one said not to."""

from __future__ import annotations

import contextlib
import contextvars
import sys

_SHOWN = contextvars.ContextVar("analytic_progress", default=None)  # None: no caller has said


@contextlib.contextmanager
def shown(enabled: bool = True):
    """Draw progress bars inside this block, where ``enabled``, no outer block said not to, and
    standard error is a terminal."""
    token = _SHOWN.set(bool(enabled) and _SHOWN.get() is not False and terminal(sys.stderr))
    try:
        yield
    finally:
        _SHOWN.reset(token)


def terminal(stream) -> bool:
    """Whether ``stream`` is an open terminal: False for a closed or missing one (``2>&-`` leaves
    Python's standard error None) and for one that cannot say."""
    try:
        return bool(stream is not None and not getattr(stream, "closed", False) and stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def is_shown() -> bool:
    """Whether a bar would be drawn here."""
    return bool(_SHOWN.get())


def steps(iterable, *, desc: str, total: int | None = None, unit: str = "it"):
    """``iterable``, drawn as a bar where :func:`shown` asks for one; else ``iterable`` itself."""
    if not _SHOWN.get():
        return iterable
    from tqdm import tqdm

    return tqdm(iterable, desc=desc, total=total, unit=unit, file=sys.stderr, leave=False,
                dynamic_ncols=True)


def bar(*, desc: str, total: int, unit: str = "it"):
    """A bar to ``update(n)`` by hand (a context manager), or one that draws nothing."""
    if not _SHOWN.get():
        return contextlib.nullcontext(_Silent())
    from tqdm import tqdm

    return tqdm(desc=desc, total=total, unit=unit, unit_scale=True, file=sys.stderr, leave=False,
                dynamic_ncols=True)


class _Silent:
    def update(self, n: int = 1) -> None:
        pass

    def set_description_str(self, text: str) -> None:
        pass


__all__ = ["bar", "is_shown", "shown", "steps"]
