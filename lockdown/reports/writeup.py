"""Findings as markdown, one lockdown-style issue each (templates/finding.md.j2). Everything
from the target (URIs, SQL, function names) is put in code spans, fences or escaped table
cells, so it reads as text."""
from __future__ import annotations

import jinja2

from ..analyzers.findings import Finding


def _cell(v) -> str:
    text = " ".join(str(v).split())
    text = text.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
    return text[:300] + ("..." if len(text) > 300 else "")


def _code(v) -> str:
    return str(v).replace("`", "'")


def _fence(content: str, kind: str) -> str:
    lang = {"diff": "diff", "sql": "sql", "ini": "ini"}.get(kind, "")
    ticks = "```"
    while ticks in content:
        ticks += "`"
    return f"{ticks}{lang}\n{content.rstrip()}\n{ticks}"


_ENV = jinja2.Environment(loader=jinja2.PackageLoader("lockdown.reports", "templates"),
                          undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
_ENV.filters.update(cell=_cell, code=_code, fence=_fence)


def finding_markdown(f: Finding, target: str, run_dir: str, bundle: str, verification: str = "") -> str:
    return _ENV.get_template("finding.md.j2").render(f=f, target=target, run_dir=run_dir, bundle=bundle,
                                                     verification=verification)
