"""MkDocs hooks: the site as a reader sees it.

- The rendered derivations (``derivations/*.md``, written by ``analytic derive --markdown``) become
  pages under ``derivations/``, listed on ``derivations.md`` and in the navigation under it.
- ``presets.md`` is made from the preset files: every hardware, model and stack with its sources.
- Math (``$…$``, ``$$…$$``, marked by pymdownx.arithmatex) is written as MathML, which browsers
  render themselves: the built site needs no script to show it.
- The docstrings' Sphinx roles (``:meth:`Plan.memory_verdict```) become code, linked to the object
  where the page documents it.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
MATH = re.compile(r'<(span|div) class="arithmatex">\\[(\[](.*?)\\[)\]]</\1>', re.S)
ROLE = re.compile(r":(?:meth|func|class|data|mod|attr|exc|obj):<code>~?\.?([^<]+)</code>")
ANCHOR = re.compile(r'\bid="(analytic\.[\w.]+)"')


def _derivations() -> list[str]:
    return sorted(p.stem for p in (ROOT / "derivations").glob("*.md"))


def on_config(config):
    """The derivations in the navigation, under their index page."""
    for i, item in enumerate(config["nav"]):
        if isinstance(item, dict) and item.get("Derivations") == "derivations.md":
            pages = [
                {n.replace("_", " ").capitalize(): f"derivations/{n}.md"} for n in _derivations()
            ]
            config["nav"][i] = {"Derivations": ["derivations.md", *pages]}
    return config


def on_files(files, config):
    for path in sorted((ROOT / "derivations").glob("*.md")):
        files.append(File.generated(config, f"derivations/{path.name}", abs_src_path=str(path)))
    files.append(File.generated(config, "presets.md", content=presets_page()))
    return files


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri == "derivations.md":
        markdown += (
            "\n"
            + "\n".join(f"- [{n.replace('_', ' ')}](derivations/{n}.md)" for n in _derivations())
            + "\n"
        )
    return markdown


def on_page_content(text, page, config, files):
    from latex2mathml.converter import convert

    def math(m):
        return convert(
            html.unescape(m.group(2)).strip(), display="block" if m.group(1) == "div" else "inline"
        )

    anchors = ANCHOR.findall(text)

    def role(m):
        target = m.group(1)
        found = [a for a in anchors if a == target or a.endswith("." + target)]
        code = (
            f"<code>{target.rsplit('.', 1)[-1] if '.' in target and not found else target}</code>"
        )
        return f'<a href="#{found[0]}">{code}</a>' if found else code

    return ROLE.sub(role, MATH.sub(math, text))


def presets_page() -> str:
    """The presets as tables, each number's source listed below its table."""
    from analytic.presets import table

    out = [
        "# Presets",
        "",
        (
            "Every preset the library ships, from `analytic/presets/*.toml`: each number has a unit"
            " and a source (`an.hardware(NAME)`, `an.model(NAME)`, `Plan(..., stack=NAME)`;"
            " `analytic --help` lists the names)."
        ),
        "",
    ]
    out += (
        _hardware(table("hardware"))
        + _models(table("models"))
        + _stacks(table("stacks"))
        + _precisions(table("precisions"), table("ceilings")["gemm"])
    )
    return "\n".join(out) + "\n"


def _value(item) -> str:
    value = item.get("value") if isinstance(item, dict) else item
    return ", ".join(map(str, value)) if isinstance(value, list) else str(value)


def _sources(name: str, entry: dict) -> list[str]:
    rows = [f"- **{name}**, {field}: {item['source']}" for field, item in _sourced(entry)]
    return rows


def _sourced(entry: dict):
    for field, item in entry.items():
        if isinstance(item, dict) and "source" in item:
            yield field, item
        elif isinstance(item, dict):  # peak.bf16 and the like
            for sub, inner in item.items():
                if isinstance(inner, dict) and "source" in inner:
                    yield f"{field}.{sub}", inner


HARDWARE = (
    "platform",
    "hbm",
    "hbm_bandwidth",
    "scale_up_bandwidth",
    "scale_out_bandwidth",
    "gpus_per_node",
    "scale_up_domain",
)


def _hardware(tables: dict) -> list[str]:
    out = [
        "## Hardware",
        "",
        "| name | " + " | ".join(HARDWARE) + " | dense peaks |",
        "|---" * (len(HARDWARE) + 2) + "|",
    ]
    for key, t in tables.items():
        peaks = "; ".join(f"{d} {_value(v)}" for d, v in t.get("peak", {}).items())
        out.append(
            f"| `{key}` | "
            + " | ".join(_value(t[f]) if f in t else "—" for f in HARDWARE)
            + f" | {peaks} |"
        )
    out += (
        ["", "Sources:", ""] + [row for key, t in tables.items() for row in _sources(key, t)] + [""]
    )
    return out


MODEL = (
    "layers",
    "hidden",
    "heads",
    "kv_heads",
    "ffn_hidden",
    "vocab",
    "experts",
    "topk",
    "attention",
)


def _models(tables: dict) -> list[str]:
    out = [
        "## Models",
        "",
        "| name | " + " | ".join(MODEL) + " | source |",
        "|---" * (len(MODEL) + 2) + "|",
    ]
    for key, t in tables.items():
        out.append(
            f"| `{key}` | "
            + " | ".join(_value(t[f]) if f in t else "—" for f in MODEL)
            + f" | {t.get('source', '')} |"
        )
    published = [row for key, t in tables.items() for row in _sources(key, t)]
    return (
        out
        + (
            ["", "Published counts the computed ones are checked against:", ""] + published
            if published
            else []
        )
        + [""]
    )


def _precisions(tables: dict, ceilings: dict) -> list[str]:
    """The formats, each with the devices whose GEMM ceiling in it is measured
    (presets/ceilings.toml; another device takes their pooled fraction of its peak)."""
    out = [
        "## Training precisions",
        "",
        "The formats a low-precision `dtype` runs the linear layers' GEMMs in.",
        "",
        "| dtype | peak | operand bytes | generations | GEMM ceiling measured on |",
        "|---|---|---|---|---|",
    ]
    rows = {}  # fp8 once per scaling recipe, as fp8 (recipe)
    for key, t in tables.items():
        recipes = t.get("recipes") or {None: {}}
        rows |= {
            key if r is None else f"{key} ({r})": (
                {k: v for k, v in t.items() if k != "recipes"} | own
            )
            for r, own in recipes.items()
        }
    for key, t in rows.items():
        dtype = key.split(" ")[0]
        measured = [d for d, entries in ceilings.items() if "value" in entries.get(dtype, {})]
        out.append(
            f"| `{key}` | {t['peak']} | {_value(t['operand_bytes'])} |"
            f" {_value(t.get('generations', 'any'))} | {', '.join(measured) or 'none'} |"
        )
    out += ["", "Each property with its source:", ""] + [
        row for key, t in rows.items() for row in _sources(key, t)
    ]
    return out + [""]


def _stacks(tables: dict) -> list[str]:
    out = ["## Stacks", "", "| name | what it is | platforms |", "|---|---|---|"]
    for key, t in tables.items():
        out.append(f"| `{key}` | {t.get('name', '')} | {_value(t.get('platforms', {}))} |")
    out += ["", "Each property with its source:", ""] + [
        row for key, t in tables.items() for row in _sources(key, t)
    ]
    return out + [""]
