"""Calibrate the op-level model's kernel constants on the local device.

``torch.matmul`` is timed over a grid of shapes and a copy kernel over large buffers. The
catalogue's GEMM time, ``compute.gemm.math_time`` + ``compute.gemm.memory_time``, is linear in
1/(F·η) and 1/(B_hbm·η_hbm) for known shapes (wave quantisation from the device's SM count and
the generation's tile on CUDA; none on a CPU), so non-negative least squares fits the achieved
FLOP/s of a large GEMM and the bandwidth its operands stream at. Every fourth shape is held out and
predicted. The copy kernel gives the achievable HBM bandwidth (``compute.memory_bound.time``). Given
the device's peak and HBM bandwidth (``--hardware`` or ``--peak-flops`` and ``--hbm-bandwidth``) the
fit is a profile: ``matmul_efficiency`` and ``memory_efficiency`` that ``Plan(..., profile=FILE)``
reads.
"""

from __future__ import annotations

import json
import math
import statistics
import time

import numpy as np

#: GEMM shapes (M, N, K) of the grid, by device: a CPU's small enough to time in seconds
GRID = {
    "cpu": [(m, n, k) for m in (64, 256, 512) for n in (64, 256, 512) for k in (128, 512)],
    "cuda": [
        (m, n, k)
        for m in (512, 2048, 8192)
        for n in (768, 2304, 6144, 12288)
        for k in (1024, 4096, 8192)
    ],
}
#: elements of each copy buffer (bandwidth)
COPY = {"cpu": 1 << 23, "cuda": 1 << 28}
DTYPES = {"cpu": "float32", "cuda": "bfloat16"}
#: a fit is poor when the GEMM model explains less than this share of the variance of log time over
#: the fitted shapes, or misses the held-out shapes by more than MAX_HELD_OUT_ERROR on average: its
#: constants would then describe the fit's failure, not the device
MIN_R2, MAX_HELD_OUT_ERROR = 0.9, 0.25


def _sync(device):
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def _best(fn, device, reps: int) -> float:
    """The fastest of ``reps`` timed runs after one warm-up, in seconds."""
    fn()
    _sync(device)
    best = math.inf
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        _sync(device)
        best = min(best, time.perf_counter() - start)
    return best


def measure(device: str = "cpu", dtype: str | None = None, shapes=None, reps: int = 3) -> dict:
    """Seconds of each GEMM shape and of one copy, on ``device`` in ``dtype`` (torch's name)."""
    import torch

    dtype = dtype or DTYPES[device]
    dt = getattr(torch, dtype)
    gen = torch.Generator(device="cpu").manual_seed(0)
    out = {
        "device": device,
        "dtype": dtype,
        "element_bytes": torch.empty((), dtype=dt).element_size(),
        "gemms": [],
    }
    for m, n, k in shapes or GRID[device]:
        a = torch.randn(m, k, generator=gen).to(device=device, dtype=dt)
        b = torch.randn(k, n, generator=gen).to(device=device, dtype=dt)
        out["gemms"].append(
            {"m": m, "n": n, "k": k, "seconds": _best(lambda: torch.matmul(a, b), device, reps)}
        )
    x = torch.ones(COPY[device], device=device, dtype=dt)
    y = torch.empty_like(x)
    out["copy"] = {
        "bytes": 2 * x.numel() * x.element_size(),
        "seconds": _best(lambda: y.copy_(x), device, reps),
    }
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        out["name"], out["sms"] = props.name, props.multi_processor_count
    else:
        out["name"], out["sms"] = "cpu", None
    return out


def _wave(m, n, sms, tile):
    """compute.gemm.wave_efficiency for one GEMM (1 without an SM count or tile)."""
    if not sms or not tile:
        return 1.0
    tiles = math.ceil(m / tile[0]) * math.ceil(n / tile[1])
    return m * n / (math.ceil(tiles / sms) * sms * tile[0] * tile[1])


def fit(samples: dict, tile=None) -> dict:
    """Achieved FLOP/s of a large GEMM and its operands' bandwidth (non-negative least squares on
    seconds), R² on the fitted shapes, the error on every fourth shape held out, the copy
    bandwidth."""
    from scipy.optimize import nnls

    e = samples["element_bytes"]
    rows, t = [], []
    for g in samples["gemms"]:
        m, n, k = g["m"], g["n"], g["k"]
        rows.append(
            [2 * m * n * k / _wave(m, n, samples["sms"], tile), e * (m * k + k * n + m * n)]
        )
        t.append(g["seconds"])
    X, t = np.array(rows, dtype=float), np.array(t)
    held = np.arange(len(t)) % 4 == 3
    w = 1 / t  # relative errors: small and large shapes weigh alike
    coef, _ = nnls(X[~held] * w[~held, None], np.ones((~held).sum()))
    pred = X @ coef
    fit_t, fit_p = np.log(t[~held]), np.log(pred[~held])
    r2 = 1 - np.sum((fit_t - fit_p) ** 2) / np.sum((fit_t - fit_t.mean()) ** 2)
    out = {
        "achieved_flops": 1 / coef[0] if coef[0] > 0 else None,  # None: the fit gives it no time
        "operand_bandwidth": 1 / coef[1] if coef[1] > 0 else None,
        "r2_log": float(r2),
        "fitted_shapes": int((~held).sum()),
        "held_out_shapes": int(held.sum()),
        "held_out_mean_abs_error": float(statistics.mean(np.abs(pred[held] / t[held] - 1))),
        "copy_bandwidth": samples["copy"]["bytes"] / samples["copy"]["seconds"],
    }
    return out


def poor(result: dict) -> str | None:
    """Why :func:`fit`'s result does not describe the device (a negative or small R², a large
    held-out error, no achieved FLOP/s), or None where it does."""
    if result["achieved_flops"] is None:
        return "the fit gives the GEMMs' multiply-adds no time"
    if result["r2_log"] < MIN_R2:
        return f"R² of log time {result['r2_log']:.3g} (below {MIN_R2:g})"
    if result["held_out_mean_abs_error"] > MAX_HELD_OUT_ERROR:
        return (
            f"the held-out shapes missed by {result['held_out_mean_abs_error']:.0%} on average"
            f" (over {MAX_HELD_OUT_ERROR:.0%})"
        )
    return None


def profile(
    samples: dict, result: dict, peak_flops=None, hbm_bandwidth=None, hardware: str | None = None
) -> dict:
    """The profile table: what was measured, the fit, and (given the peaks) the constants a Plan
    reads."""
    constants = {}
    if peak_flops is not None and result["achieved_flops"] is not None:
        constants["matmul_efficiency"] = min(1.0, result["achieved_flops"] / peak_flops)
    if hbm_bandwidth is not None:
        constants["memory_efficiency"] = min(1.0, result["copy_bandwidth"] / hbm_bandwidth)
    return {
        "profile": {
            "device": samples["name"],
            "torch_device": samples["device"],
            "dtype": samples["dtype"],
            **({"hardware": hardware} if hardware else {}),
            **({"peak_flops": peak_flops} if peak_flops else {}),
            **({"hbm_bandwidth": hbm_bandwidth} if hbm_bandwidth else {}),
        },
        "fit": {k: v for k, v in result.items() if v is not None},
        "constants": constants,
    }


def to_toml(table: dict) -> str:
    """The profile as TOML (its values are strings and numbers)."""
    lines = [
        (
            "# A device profile: `analytic calibrate --gemm` on this device. Plan(...,"
            " profile=FILE) reads"
        ),
        "# [constants]; the rest says what was measured and how well the GEMM model fits it.",
    ]
    for section, values in table.items():
        lines += ["", f"[{section}]"]
        for k, v in values.items():
            lines.append(f"{k} = {json.dumps(v) if isinstance(v, (str, int)) else repr(float(v))}")
    return "\n".join(lines) + "\n"
