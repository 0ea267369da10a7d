"""MkDocs hook: the rendered derivations (``derivations/*.md``, written by ``analytic derive
--markdown``) become pages of the site under ``derivations/``, listed after ``derivations.md``."""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent


def on_files(files, config):
    for path in sorted((ROOT / "derivations").glob("*.md")):
        files.append(File.generated(config, f"derivations/{path.name}", abs_src_path=str(path)))
    return files


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri == "derivations.md":
        names = sorted(p.stem for p in (ROOT / "derivations").glob("*.md"))
        markdown += "\n" + "\n".join(f"- [{n.replace('_', ' ')}](derivations/{n}.md)" for n in names) + "\n"
    return markdown
