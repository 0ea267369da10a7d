"""Reading a case folder: every TOML file's cases and [plans] tables, each case's structure checked
before any of it is used (its kind, the fields the kind needs, their types), so a malformed case is
one error naming it and the field, never a traceback from inside a fit."""

from __future__ import annotations

import datetime
import math
import tomllib
from pathlib import Path

from ..core.cache import parsed_toml
from ..core.errors import AnalyticError, InputError, ValidationError, shown
from ..core.files import read_text


def find_folder(folder: Path | str | None = None) -> Path:
    """The cases' folder: ``folder`` when given, else the ``validation/`` folder of the source
    checkout this package is installed from, else the copy a wheel carries (``analytic/cases``).
    Never the working directory or its parents: cases run code paths of the library, and a folder
    planted there would steer them."""
    if folder is not None:
        folder = Path(folder)
        if not folder.is_dir():
            raise AnalyticError(f"cases: {folder} is not a folder")
        return folder
    here = Path(__file__).resolve().parent.parent  # the package
    for own in (here.parent / "validation", here / "cases"):
        if (own / "claims.toml").exists():
            return own
    raise AnalyticError(
        "validation/ is neither beside this installation nor inside it; give the cases' folder "
        "(--cases DIR)"
    )


KINDS = ("identity", "derived", "predicted", "memory", "oom", "outside", "claim")
#: the tables of a plan table that are tables themselves
PLAN_TABLES = ("layout", "hardware_overrides", "model_overrides")


def _check_plan(where: str, plan) -> None:
    """A plan table's structure: a table with a model (a preset's name or a table), a hardware
    preset's name and, where given, tables for its layout and overrides."""
    if not isinstance(plan, dict):
        raise ValidationError(f"{where}: plan must be a table, got {type(plan).__name__}")
    if not isinstance(plan.get("model"), (str, dict)) or not isinstance(plan.get("hardware"), str):
        raise ValidationError(
            f"{where}: plan needs model (a preset's name or a table) and hardware (a preset's name)"
        )
    for key in PLAN_TABLES:
        if key in plan and not isinstance(plan[key], dict):
            raise ValidationError(
                f"{where}: plan.{key} must be a table, got {type(plan[key]).__name__}"
            )


def _check_published(where: str, value) -> None:
    """A published figure: a number, or a string of a number and its unit (not a list, a date or a
    flag)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (str, int, float))
        or isinstance(value, datetime.date)
    ):
        raise ValidationError(
            f"{where}: published must be a number or a string such as '430 TFLOP/s', "
            f"got {type(value).__name__}"
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise ValidationError(f"{where}: published must be a finite number, got {value}")


def load(folder: Path) -> tuple[list[dict], dict]:
    """Every case of the folder's TOML files, and their [plans] tables; a memory case's ``plan_of``
    names a predicted case of the folder that has a plan."""
    cases, plans = _load(folder, sorted(folder.glob("*.toml")))
    runs = {c["id"] for c in cases if c["kind"] == "predicted" and "plan" in c}
    for c in cases:
        if "plan_of" in c and not (isinstance(c["plan_of"], str) and c["plan_of"] in runs):
            raise ValidationError(
                f"{c['file']}: case {c['id'][:80]}: plan_of must be the id of a predicted case "
                f"with a plan, got {shown(c['plan_of'])}"
            )
    return cases, plans


def cases_by_id(folder: Path, ids) -> dict:
    """id → case, for ``ids`` only, read from the folder's files that name them (each case checked
    as :func:`load` checks it)."""
    wanted = set(ids)
    paths = [
        p for p in sorted(folder.glob("*.toml")) if any(f'"{i}"' in read_text(p) for i in wanted)
    ]
    out = {c["id"]: c for c in _load(folder, paths)[0] if c["id"] in wanted}
    missing = wanted - set(out)
    if missing:
        raise AnalyticError(f"{folder}: no case {', '.join(sorted(missing))}")
    return out


def _load(folder: Path, paths) -> tuple[list[dict], dict]:
    cases, plans, where = [], {}, {}
    for path in paths:
        try:
            data = parsed_toml(read_text(path))
        except OSError as exc:  # a FIFO, a device or a file over its bound among the cases
            raise AnalyticError(f"{path.name}: {exc.strerror or exc}") from None
        except (tomllib.TOMLDecodeError, RecursionError) as exc:
            raise AnalyticError(f"{path.name}: not valid TOML ({str(exc)[:80]})") from None
        tables, listed = data.get("plans", {}), data.get("case", [])
        if not isinstance(tables, dict) or not isinstance(listed, list):
            raise ValidationError(
                f"{path.name}: [plans] must be tables of plans and [[case]] a list of cases"
            )
        for name in tables:
            if name in plans:
                raise ValidationError(
                    f"{path.name}: plan {name[:80]!r} is defined in {where[name]} too"
                )
            plans[name], where[name] = tables[name], path.name
        for i, c in enumerate(listed):
            _check_case(path.name, i, c)
            cases.append(dict(c, file=path.name))
    if not cases:
        raise AnalyticError(f"{folder}: no cases (a case is a [[case]] table of a *.toml file)")
    ids = [c["id"] for c in cases]
    dupes = {i for i in ids if ids.count(i) > 1}
    if dupes:
        raise AnalyticError(f"duplicate case ids: {', '.join(sorted(dupes))}")
    return cases, plans


def _check_case(name: str, i: int, c) -> None:
    """The ``i``-th case of the file ``name``: its kind, the keys its kind needs and their types."""
    if not isinstance(c, dict) or not isinstance(c.get("id"), str) or c.get("kind") not in KINDS:
        raise AnalyticError(f"{name}: case {i + 1} needs an id and a kind ({', '.join(KINDS)})")
    if c["kind"] == "predicted" and not all(
        k in c for k in ("plan", "metric", "published", "group")
    ):
        raise AnalyticError(
            f"{name}: predicted case {c['id']} needs plan, metric, published and group"
            " (its source: cases of one group are left out of the fit together)"
        )
    tol = c.get("tolerance")
    if tol is not None and not (type(tol) in (int, float) and math.isfinite(tol) and tol >= 0):
        raise ValidationError(
            f"{name}: case {c['id'][:80]}: tolerance must be a finite number of at "
            f"least 0 (0: exact), got {tol!r:.80}"
        )
    if c["kind"] == "memory" and not (
        all(k in c for k in ("published", "group")) and ("plan" in c) != ("plan_of" in c)
    ):
        raise AnalyticError(
            f"{name}: memory case {c['id']} needs published, group and a plan (or "
            "plan_of, the id of the predicted case whose run it measured)"
        )
    if c["kind"] == "outside" and not all(
        k in c for k in ("hardware", "reserved", "free", "group", "source")
    ):
        raise AnalyticError(
            f"{name}: outside case {c['id']} needs hardware, reserved, free (the"
            " figures the source prints), group and source"
        )
    if c["kind"] == "oom" and not all(k in c for k in ("plan", "published", "group", "source")):
        raise AnalyticError(
            f"{name}: oom case {c['id']} needs plan, published (what the source says),"
            " group and source"
        )
    at = f"{name}: case {c['id'][:80]}"
    if "published" in c:
        _check_published(at, c["published"])
    if "plan" in c and c["kind"] in ("predicted", "memory", "oom"):
        _check_plan(at, c["plan"])
    if "reading" in c and not (
        isinstance(c["reading"], list)
        and all(
            isinstance(r, dict)
            and isinstance(r.get("name"), str)
            and isinstance(r.get("plan", {}), dict)
            for r in c["reading"]
        )
    ):
        raise ValidationError(
            f"{at}: a reading is a table with a name and, where given, a plan table"
        )


def plan_of(spec: dict, **keywords):
    """A Plan from a case's ``plan`` table (model, hardware, layout, seq_len, global_batch, ...;
    ``model`` a preset's name or a table of :class:`~analytic.Model` fields with its ``source``),
    with ``keywords``."""
    from ..core.values import quantity
    from ..plan import Layout, Plan
    from ..presets import hardware, model
    from ..presets.model import Model

    spec = dict(spec)
    try:
        m, hw = spec.pop("model"), hardware(spec.pop("hardware"))
    except KeyError as exc:
        raise InputError(f"plan spec: missing {exc}") from None
    if isinstance(m, dict):
        if not m.get("source"):
            raise InputError("plan spec: a model given as a table needs its source")
        m = Model(**{k: v for k, v in m.items() if k != "source"})
    else:
        m = model(m)
    if "model_overrides" in spec:
        m = m.replace(**spec.pop("model_overrides"))
    if "hardware_overrides" in spec:
        # the one reader of quantities: no pint eval
        hw = hw.replace(
            **{
                k: quantity(f"hardware_overrides.{k}", v)
                for k, v in spec.pop("hardware_overrides").items()
            }
        )
    return Plan(m, hw, Layout(**spec.pop("layout", {})), **spec, **keywords)
