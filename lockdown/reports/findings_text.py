"""Findings for the terminal: one block each, the patch in full."""
from __future__ import annotations

from ..analyzers.findings import Finding, origin_text, split_steps
from . import numbers


def format_findings(findings: list[Finding]) -> str:
    if not findings:
        return "no findings"
    lines = [f"{len(findings)} finding(s), most costly first:"]
    for i, f in enumerate(findings, 1):
        share = f" ~{numbers.share(f.share_pct)} of request time" if f.share_pct is not None else ""
        lines += ["", f"{i}. [{f.severity}] {f.key or f.id}: {f.title}{share}", f"   {f.summary}"]
        for e in f.evidence[:6]:
            lines.append(f"   - {e.what}: {numbers.value(e.value)}  ({e.source})")
        for r in f.remediations:
            made = f"; {origin_text(r.origin)}" if r.origin else ""
            lines.append(f"   fix ({r.kind}{', ' + r.file if r.file else ''}{made}; checked: {r.checked or 'no'}):")
            if r.description:
                lines.append(f"     ({r.description})")
            lines += [f"     {line}" for line in r.content.rstrip().splitlines()]
            tree, operator = split_steps(r.steps)
            lines += [f"     then, in the app tree: {c}" for c in tree] + [f"     then: {c}" for c in operator]
        if not f.remediations and f.details.get("no_patch"):
            lines.append(f"   no patch proposed: {f.details['no_patch']}")
    return "\n".join(lines)


def format_dismissed(dismissed: list[dict]) -> str:
    """Candidates a check ruled out (the argument probe), with why: a reader sees what was
    looked at, not only what was kept."""
    lines = [f"{len(dismissed)} candidate(s) dismissed:"]
    for d in dismissed:
        lines.append(f"- {d['id']}: {d['function']} ({d['defined_at']}): {d['reason']}")
    return "\n".join(lines)
