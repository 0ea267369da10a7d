"""The imbalance of dropless MoE routing, from published pairs of runs that differ only in routing.

Megatron-Core's benchmarks force the router to balance the experts
(``--moe-router-force-load-balancing``); the same run with its learned, dropless routing is slower,
because the busiest expert-parallel rank's experts take more than their share of the tokens and
every other rank waits for it. For each published pair (``validation/routing.toml``) the imbalance
is the ``routing_imbalance`` at which the plan of the run is slower than its balanced plan by the
measured ratio of the two throughputs (the same FLOPs, so the ratio of step times). The imbalance
belongs to a model's routing (how its router was trained to balance, and on what batch), so the
preset is by model: the mean of its pairs, with its standard error (their spread over the root of
their number) and the least and largest pair.
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

from ..core.errors import InputError
from ..core.files import read_text
from ..core.values import as_quantity
from .cases import plan_of

#: the file of a case folder that holds the pairs
PAIRS_FILE = "routing.toml"
#: the imbalance a pair is solved within (relative), and the largest sought
TOLERANCE, MAX_IMBALANCE = 1e-9, 64.0


def pairs(folder: Path) -> list[dict]:
    """The pairs of ``folder``'s routing file: id, source, model (the preset's name, or the name its
    table gives), plan (a case's plan table) and ratio (the balanced throughput over the dropless
    one); none where the folder has no such file."""
    path = folder / PAIRS_FILE
    if not path.is_file():
        return []
    out = []
    for p in tomllib.loads(read_text(path)).get("pair", []):
        keys = ("id", "source", "plan", "forced", "dropless")
        if not (isinstance(p, dict) and all(k in p for k in keys) and isinstance(p["plan"], dict)):
            raise InputError(f"{PAIRS_FILE}: a pair needs id, source, plan (a table), forced and "
                             "dropless")
        model = p["plan"].get("model")
        name = model.get("name") if isinstance(model, dict) else model
        if not isinstance(name, str):
            raise InputError(f"{PAIRS_FILE}: {p['id']}: the model needs a name (a preset's, or its "
                             "table's name): the imbalance is the model's routing's")
        forced, dropless = (as_quantity(f"{p['id']}: {k}", p[k]) for k in ("forced", "dropless"))
        ratio = float((forced / dropless).to("").magnitude)
        if not ratio >= 1:
            raise InputError(f"{PAIRS_FILE}: {p['id']}: dropless routing faster than balanced; "
                             f"expected forced ≥ dropless, got {p['forced']} and {p['dropless']}")
        out.append({"id": p["id"], "source": p["source"], "model": name, "plan": p["plan"],
                    "ratio": ratio})
    return out


def solved(pair: dict) -> float:
    """The routing imbalance at which the plan of ``pair`` steps ``pair["ratio"]`` times as long as
    its balanced plan: bracketed, then the Illinois method (the step time grows with the imbalance,
    in pieces where a maximum changes hands)."""
    balanced = plan_of(pair["plan"]).step_time().to("s").magnitude

    def excess(rho):
        step = plan_of(pair["plan"], routing_imbalance=rho).step_time().to("s").magnitude
        return step / balanced - pair["ratio"]

    lo, f_lo, hi = 1.0, 1.0 - pair["ratio"], 2.0
    f_hi = excess(hi)
    while f_hi < 0:
        if hi > MAX_IMBALANCE:
            raise InputError(f"{pair['id']}: no routing imbalance up to {MAX_IMBALANCE} gives the "
                             f"measured ratio {pair['ratio']:.4f}")
        lo, f_lo, hi = hi, f_hi, 2 * hi
        f_hi = excess(hi)
    side = 0
    while hi - lo > TOLERANCE * hi:
        mid = hi - f_hi * (hi - lo) / (f_hi - f_lo) if f_hi != f_lo else (lo + hi) / 2
        f_mid = excess(mid)
        if f_mid == 0:
            return mid
        if f_mid > 0:
            hi, f_hi = mid, f_mid
            f_lo, side = (f_lo / 2, 1) if side == 1 else (f_lo, 1)
        else:
            lo, f_lo = mid, f_mid
            f_hi, side = (f_hi / 2, -1) if side == -1 else (f_hi, -1)
    return (lo + hi) / 2


def summary(folder: Path) -> dict | None:
    """The imbalance of dropless routing fitted on ``folder``'s pairs, by model (each model's
    routing its own), or None without pairs: ``models`` (name → the mean of its pairs, its
    standard error where it has several, the least and largest pair and how many) and ``pairs`` (id
    → its own)."""
    found = pairs(folder)
    if not found:
        return None
    each = {p["id"]: solved(p) for p in found}
    models = {}
    for p in found:
        models.setdefault(p["model"], []).append(each[p["id"]])
    out = {}
    for name, values in models.items():
        mean = sum(values) / len(values)
        spread = (math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
                  if len(values) > 1 else None)
        stderr = None if spread is None else spread / math.sqrt(len(values))
        out[name] = {"imbalance": mean, "stderr": stderr, "low": min(values), "high": max(values),
                     "count": len(values)}
    return {"models": out, "pairs": each}


def leave_one_out(folder: Path, across: bool = False) -> dict[str, float]:
    """id → the error of each pair's dropless throughput, (predicted − measured)/measured,
    predicted with the mean imbalance of the other pairs of its model (models of one pair left out),
    or with ``across``, with the mean of the other models' imbalances."""
    found = pairs(folder)
    each = {p["id"]: solved(p) for p in found}
    out = {}
    for p in found:
        others = [each[o["id"]] for o in found if o["id"] != p["id"]
                  and (o["model"] != p["model"] if across else o["model"] == p["model"])]
        if not others:
            continue
        dropless = plan_of(p["plan"], routing_imbalance=sum(others) / len(others)).step_time()
        out[p["id"]] = p["ratio"] / (dropless / plan_of(p["plan"]).step_time()).to("").magnitude - 1
    return out
