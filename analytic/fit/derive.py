"""Executable derivations: steps simple enough to check by eye, sympy does the algebra, and each
result is asserted identical to the catalogue formula it justifies.

A derivation module (``derivations/NAME.py``) defines ``derive() -> Derivation``. ``analytic derive
NAME`` prints one; ``analytic derive --markdown`` renders them all to ``derivations/NAME.md``.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

import sympy

from ..core.errors import AnalyticError, UnknownNameError
from ..core.files import write_text
from ..core.symbols import sym
from ..formulas import formula


@dataclass
class Step:
    text: str
    expr: object = None  # a sympy expression or Eq, or None for prose
    name: str = ""  # the name the step gives its result


@dataclass
class Derivation:
    title: str
    question: str
    steps: list[Step] = field(default_factory=list)
    checks: list[tuple[str, object]] = field(default_factory=list)
    results: dict = field(default_factory=dict)

    def step(self, text: str, expr=None, name: str = ""):
        """Record a step; returns ``expr`` so derivations read as algebra."""
        self.steps.append(Step(text, expr, name))
        if name:
            self.results[name] = expr
        return expr

    def check(self, expr, catalogue_name: str, text: str = ""):
        """Assert that ``expr`` is identical to the catalogue formula ``catalogue_name``."""
        target = formula(catalogue_name).expr
        diff = sympy.simplify(sympy.expand(expr - target))
        if diff != 0:
            raise AssertionError(
                f"{self.title}: derived {expr} differs from {catalogue_name} = {target} by {diff}"
            )
        self.checks.append((catalogue_name, expr))
        self.steps.append(
            Step((text + " " if text else "") + f"(the catalogue's `{catalogue_name}`)", expr)
        )
        return expr

    def check_numeric(
        self, expr, catalogue_name: str, at: dict, rel: float = 1e-12, text: str = ""
    ):
        """Assert agreement to ``rel`` at the point ``at`` (keyword → number), where the catalogue
        keeps a rounded constant (a fitted exponent's prefactor as a float)."""
        target = formula(catalogue_name).expr
        point = {sym(k): sympy.nsimplify(v) for k, v in at.items()}
        a, b = float(expr.xreplace(point)), float(target.xreplace(point))
        if abs(a - b) > rel * abs(b):
            raise AssertionError(f"{self.title}: derived {a} differs from {catalogue_name} = {b}")
        self.checks.append((catalogue_name, expr))
        self.steps.append(
            Step(
                text
                or f"This is the catalogue's `{catalogue_name}` (its constant rounded to 15"
                " digits):",
                expr,
            )
        )
        return expr

    def number(self, text: str, value, name: str = ""):
        """Record a worked number (a Quantity or a plain number)."""
        self.steps.append(Step(f"{text}: **{_fmt(value)}**", None, name))
        if name:
            self.results[name] = value
        return value

    def markdown(self) -> str:
        out = [f"# {self.title}", "", f"*{self.question}*", ""]
        for s in self.steps:
            out.append(s.text)
            if s.expr is not None:
                out += ["", f"$$ {sympy.latex(s.expr)} $$"]
            out.append("")
        out.append(
            "Checked against the catalogue: " + ", ".join(f"`{n}`" for n, _ in self.checks) + "."
            if self.checks
            else ""
        )
        return "\n".join(out).rstrip() + "\n"

    def text(self) -> str:
        out = [self.title, "=" * len(self.title), self.question, ""]
        for s in self.steps:
            out.append(s.text)
            if s.expr is not None:
                out.append("    " + sympy.pretty(s.expr, use_unicode=True).replace("\n", "\n    "))
        out.append("")
        out.append("checked: " + ", ".join(n for n, _ in self.checks))
        return "\n".join(out)


def _fmt(v) -> str:
    from ..core.units import is_quantity

    if is_quantity(v):
        return format(v, ".4g~P")
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def S(*keywords):
    """Declared symbols by keyword (a shorthand for derivations)."""
    out = tuple(sym(k) for k in keywords)
    return out if len(out) > 1 else out[0]


def folder() -> Path:
    """The ``derivations/`` folder of the source checkout this package is installed from, else the
    copy a wheel carries (``analytic/derivations``). Derivations are Python and run when loaded, so
    never one found in the working directory or its parents."""
    here = Path(__file__).resolve().parent.parent  # the package
    for own in (here.parent / "derivations", here / "derivations"):
        if own.is_dir() and any(own.glob("*.py")):
            return own
    raise AnalyticError("derivations/ is neither beside this installation nor inside it")


def names(where: Path | None = None) -> list[str]:
    where = where or folder()
    return sorted(p.stem for p in where.glob("*.py") if not p.stem.startswith(("_", "test")))


def load(name: str, where: Path | None = None) -> Derivation:
    where = where or folder()
    if name not in names(where):
        raise UnknownNameError("derivation", name, names(where))
    spec = importlib.util.spec_from_file_location(
        f"analytic_derivations.{name}", where / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.derive()


def render_all(where: Path | None = None) -> dict[str, str]:
    where = where or folder()
    return {n: load(n, where).markdown() for n in names(where)}


def main(args) -> int:
    where = folder()
    if args.list:
        print("\n".join(names(where)))
        return 0
    if args.markdown:
        if where.parent == Path(__file__).resolve().parent.parent:
            raise AnalyticError(
                "derive --markdown: renders into a source checkout's derivations/, not into an "
                "installed package"
            )
        for n, text in render_all(where).items():
            write_text(where / f"{n}.md", text)
            print(f"wrote derivations/{n}.md")
        return 0
    if not args.name:
        print("\n".join(names(where)))
        return 0
    print(load(args.name, where).text())
    return 0


__all__ = ["Derivation", "S", "load", "names", "render_all"]
