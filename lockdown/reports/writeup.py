"""Findings as markdown, one lockdown-style issue each (templates/finding.md.j2), and the
lockdown's SUMMARY.md (templates/summary.md.j2). Everything from the target (URIs, SQL,
function names) is put in code spans, fences or escaped table cells, so it reads as text.
Numbers are printed as bench.json and verify.json hold them, with the formats below."""
from __future__ import annotations

import jinja2

from ..analyzers.findings import Finding, predicted_ratio
from .run_results import RunResults


def _cell(v) -> str:
    text = " ".join(str(v).split())
    text = text.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
    for ch in "`[]*":
        text = text.replace(ch, "\\" + ch)
    return text[:300] + ("..." if len(text) > 300 else "")


def _code(v) -> str:
    return str(v).replace("`", "'")


def _fence(content: str, kind: str) -> str:
    lang = {"diff": "diff", "sql": "sql", "ini": "ini"}.get(kind, "")
    ticks = "```"
    while ticks in content:
        ticks += "`"
    return f"{ticks}{lang}\n{content.rstrip()}\n{ticks}"


def _inline(v) -> str:
    """Target text in running prose: markup characters escaped, markdown specials defused."""
    text = " ".join(str(v).split()).replace("<", "&lt;").replace(">", "&gt;")
    for ch in "\\`*[]|":
        text = text.replace(ch, "\\" + ch)
    return text


def fmt_rps(v) -> str:
    return "-" if v is None else f"{v:.1f}"


def fmt_pct(v) -> str:
    return "-" if v is None else f"{v:+.1f}%"


def fmt_ratio(v) -> str:
    return "-" if v is None else f"{v:.2f}x"


def pages_line(responses: dict, change: str = "the fix", source: str = "verify.json") -> str:
    """verify's (or compare's: `change`, `source`) page comparison in one line (terminal,
    write-up, HTML report)."""
    n, same, unstable = responses["urls"], responses["same"], responses.get("unstable", 0)
    masked = (f" (volatile parts masked by {responses['volatile_patterns']} pattern(s) of the target)"
              if responses["volatile_patterns"] else "")
    shaky = [r for r in responses["pages"] if r.get("same") is None]
    learned = [r for r in responses["pages"] if r.get("learned_parts")]
    note = (f"; {len(learned)} URL(s) change by themselves between two views, in "
            f"{sum(r['learned_parts'] for r in learned)} part(s) masked as learned from those views "
            f"(first: {learned[0]['url']}; declare them in the target's [verify] volatile to name "
            "them)" if learned else "")
    note += (f"; {unstable} URL(s) change from one view to the next by themselves too much to "
             f"compare (first: {shaky[0]['url']}; declare the changing part in the target's "
             "[verify] volatile)" if unstable else "")
    if same + unstable == n:
        what = f"all {same} compared URLs" if unstable else f"all {n} URLs"
        return f"{what} serve the same page before and after{masked}{note}"
    first = next(r for r in responses["pages"] if r.get("same") is False)
    where = (f"status {first['status_before']} -> {first['status_after']}"
             if first["status_before"] != first["status_after"] else
             f"first difference at character {first['first_difference']['offset']}")
    return (f"{n - same - unstable} of {n} URLs serve a different page after {change}: {first['url']} "
            f"({where}){masked}{note}; see responses in {source}")


_ENV = jinja2.Environment(loader=jinja2.PackageLoader("lockdown.reports", "templates"),
                          undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
_ENV.filters.update(cell=_cell, code=_code, fence=_fence, inline=_inline, rps=fmt_rps, pct=fmt_pct,
                    ratio=fmt_ratio, predicted=predicted_ratio, pages=pages_line)


def finding_markdown(f: Finding, target: str, run_dir: str, bundle: str, verification: dict | None = None,
                     together: list[dict] = ()) -> str:
    """One finding as a lockdown issue; `verification` is its verify.json when measured alone,
    `together` the verify.json of each verification that fixed it with others (verify --all)."""
    return _ENV.get_template("finding.md.j2").render(f=f, target=target, run_dir=run_dir, bundle=bundle,
                                                     v=verification, together=together)


def _together(r: RunResults) -> list[dict]:
    """The verifications of several findings at once, by key."""
    return [v for _, v in sorted(r.verified.items()) if len(v.get("findings") or []) > 1]


def summary_markdown(r: RunResults) -> str:
    """SUMMARY.md: headline, methodology, baseline, results per fix, what did not pan out."""
    verified = [r.verified[f.key] for f in r.findings if f.key in r.verified]
    together = _together(r)        # several findings fixed at once (verify --all, or --finding repeated)
    return _ENV.get_template("summary.md.j2").render(
        r=r, b=r.bench, m=r.manifest, verified=verified, together=together,
        confirmed=sorted((v for v in verified if v["confirmed"]), key=lambda v: -v["bench"]["change"]["change_pct"]),
        failed=[v for v in verified if not v["confirmed"]],
        defects=[f for f in r.findings if f.is_defect],
        unverified=[f for f in r.findings if f.is_defect and f.key not in r.verified])


def writeups(r: RunResults) -> dict[str, str]:
    """File name -> markdown: one issue per finding, and SUMMARY.md."""
    together = _together(r)
    out = {f"{f.key}.md": finding_markdown(f, r.target, str(r.directory), str(r.bundle), r.verification(f.key),
                                           [v for v in together if f.key in v["reprofile"].get("gone_by_finding", {})])
           for f in r.findings}
    out["SUMMARY.md"] = summary_markdown(r)
    return out
