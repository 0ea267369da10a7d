"""A device profile: kernel constants measured on one accelerator (``analytic calibrate --gemm
--write FILE``), read back as Plan keywords. A profile is data: TOML whose ``[constants]`` table may
set only the keywords of :data:`CONSTANTS`, each checked against its symbol's domain."""

from __future__ import annotations

import tomllib
from pathlib import Path

from ..core.errors import InputError
from ..core.files import read_text

#: the most a profile file may hold (one written by ``calibrate --gemm`` is under a kB)
MAX_BYTES = 1 << 16
#: the Plan keywords a profile may set
CONSTANTS = ("matmul_efficiency", "memory_efficiency", "attention_efficiency", "tile_m", "tile_n")


def read_profile(profile, hardware: str = "") -> dict:
    """Plan keyword → value from a profile file (a path) or its parsed table (a dict); refused
    where the profile names the preset it was measured on and that is not ``hardware`` (a preset's
    key)."""
    from ..core.formula import magnitude

    if isinstance(profile, (str, Path)):
        path = Path(profile)
        try:
            data = tomllib.loads(read_text(path, MAX_BYTES))
        except OSError as exc:
            raise InputError(
                f"profile: cannot read {str(path)[:80]}: {exc.strerror or exc}"
            ) from None
        except (tomllib.TOMLDecodeError, RecursionError) as exc:
            raise InputError(
                f"profile: {str(path)[:80]} is not a TOML profile ({str(exc)[:80]})"
            ) from None
    elif isinstance(profile, dict):
        data = profile
    else:
        raise InputError(
            "profile: expected a path to a profile TOML file or its table, got"
            f" {type(profile).__name__}"
        )
    named = (
        data.get("profile", {}).get("hardware") if isinstance(data.get("profile"), dict) else None
    )
    if named is not None and hardware and named != hardware:
        raise InputError(
            f"profile: measured on {str(named)[:80]}, not on {hardware}; measure this device with "
            "analytic calibrate --gemm --hardware NAME"
        )
    constants = data.get("constants")
    if not isinstance(constants, dict) or not constants:
        raise InputError(
            "profile: expected a [constants] table (written by analytic calibrate --gemm --write)"
        )
    unknown = sorted(set(constants) - set(CONSTANTS))
    if unknown:
        raise InputError(
            f"profile: unknown constant {unknown[0]!r}; a profile sets {', '.join(CONSTANTS)}"
        )
    for key, value in constants.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InputError(f"profile: {key} must be a number, got {value!r}")
    return {k: magnitude(k, v) for k, v in constants.items()}
