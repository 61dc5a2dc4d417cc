"""Findings as markdown, one lockdown-style issue each (templates/finding.md.j2), and the
lockdown's SUMMARY.md (templates/summary.md.j2); both open with the time accounting
(accounting.json: how much of the sampled request time the findings explain, and the top
unexplained hotspots) when the run has one. Everything from the target (URIs, SQL,
function names) is put in code spans, fences or escaped table cells, so it reads as text.
Numbers are printed as bench.json and verify.json hold them, in the formats of
reports/numbers.py; commands to reproduce are rebuilt by reports/reproduce.py."""
from __future__ import annotations

import shlex

import jinja2

from ..analyzers.findings import Finding, origin_text, predicted_ratio, split_steps
from . import numbers as n
from .bench_table import canonical_text, set_aside_lines
from .reproduce import run_command, suggest_verify, verify_command
from ..remediation.base import applied_words, own_patch_path
from .run_results import RunResults, base_text
from ..rundir.model import ABResult, Change, Responses, Verification


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


def pages_line(responses: Responses | dict, change: str = "the fix", source: str = "verify.json") -> str:
    """verify's (or compare's: `change`, `source`) page comparison in one line (terminal,
    write-up, HTML report); `responses` is verify.json's (or compare.json's) or its model."""
    r = responses if isinstance(responses, Responses) else Responses.from_json(responses)
    n, same, unstable = r.urls, r.same, 0 if r.unstable is None else r.unstable
    masked = (f" (volatile parts masked by {r.volatile_patterns} pattern(s) of the target)"
              if r.volatile_patterns else "")
    shaky = [p for p in r.pages if p.same is None]
    learned = [p for p in r.pages if p.learned_parts]
    note = (f"; {len(learned)} URL(s) change by themselves between two views, in "
            f"{sum(p.learned_parts for p in learned)} part(s) masked as learned from those views "
            f"(first: {learned[0].url}; declare them in the target's [verify] volatile to name "
            "them)" if learned else "")
    note += (f"; {unstable} URL(s) change from one view to the next by themselves too much to "
             f"compare (first: {shaky[0].url}; declare the changing part in the target's "
             "[verify] volatile)" if unstable else "")
    if same + unstable == n:
        what = f"all {same} compared URLs" if unstable else f"all {n} URLs"
        return f"{what} serve the same page before and after{masked}{note}"
    first = next((p for p in r.pages if p.same is False), None)
    if first is None:       # (a StopIteration would end a template's loop, or escape as RuntimeError)
        raise ValueError(f"responses: {n - same - unstable} of {n} URLs differ, but no page is marked different")
    where = (f"status {first.status_before} -> {first.status_after}"
             if first.status_before != first.status_after else
             f"first difference at character {first.first_difference['offset']}")
    return (f"{n - same - unstable} of {n} URLs serve a different page after {change}: {first.url} "
            f"({where}){masked}{note}; see responses in {source}")


def together_command(run_dir, v: Verification) -> str:
    """The short form of a verification of several findings at once (`--all`, or each
    `--finding`), to name it in a sentence; the full command is in the Reproduce block."""
    which = ["--all"] if v.key == "all" else [a for g in v.findings for a in ("--finding", g.key)]
    return shlex.join(["lockdown", "verify", str(run_dir), *which])


def _ratio_cell(c: Change) -> str:
    """The verdict's ratio in a table cell, marked when it is the paired one (no capacity)."""
    return n.ratio(c.ratio) + ("" if c.adjusted else " (paired ratios: no capacity recorded)")


def _own_patch(v: Verification) -> str | None:
    """The user's own diffs a verification applied (verify --patch), in words; None otherwise."""
    if not any(map(own_patch_path, v.remediations)):
        return None
    return applied_words(v.remediations)


def _paired_cell(bench: ABResult) -> str:
    """The paired estimate in a table cell: `+X% (lo .. hi)`, or "-" when it is the estimate."""
    p = bench.change_paired
    if bench.change is None or not bench.change.adjusted or p is None:
        return "-"
    return f"{n.change(p.change_pct)} ({n.change_interval(p)})"


_ENV = jinja2.Environment(loader=jinja2.PackageLoader("lockdown.reports", "templates"),
                          undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
_ENV.filters.update(cell=_cell, code=_code, fence=_fence, inline=_inline, rps=n.rps, pct=n.change, sd=n.sd,
                    ms=n.ms, ms_fine=n.ms_fine, ratio=n.ratio, share=n.share, value=n.value, predicted=predicted_ratio,
                    pages=pages_line, estimate=n.estimate_name)
_ENV.filters.update(quote=lambda v: shlex.quote(str(v)), ratio_cell=_ratio_cell, split_steps=split_steps)
_ENV.globals.update(origin_text=origin_text, paired=n.paired_clause, resolution=n.resolution_clause,
                    server_cpu=n.server_cpu_clause, server_cpu_cell=n.server_cpu_cell, own_patch=_own_patch,
                    ci_pct=n.change_interval, rps_ci=n.rps_ci_text,
                    paired_cell=_paired_cell, canonical_text=canonical_text)


LEAD_HOTSPOTS = 3        # the top unexplained hotspots SUMMARY.md leads with
PATH_FRAMES = 5          # a hotspot's call path: its last frames


def _span(v) -> str:
    """Target text for a code span: one line, no backtick."""
    return " ".join(str(v).split()).replace("`", "'")


def _path(path) -> str:
    frames = [_span(f) for f in path or []]
    return ("... > " if len(frames) > PATH_FRAMES else "") + " > ".join(frames[-PATH_FRAMES:])


def _ms(us) -> float | None:
    return None if us is None else us / 1000


def _accounting(r: RunResults) -> dict | None:
    """accounting.json as the write-ups quote it: the shares overall and per URL, the top
    unexplained hotspots (PHP functions, self: they partition the unexplained time), and each
    finding's own part; None for a run written before it."""
    t = r.accounting
    if t is None:
        return None
    top = []
    for h in t.hotspots.self[:LEAD_HOTSPOTS]:
        more = (h.request_count or 0) - len(h.requests)
        top.append({"name": _span(h.name), "share_pct": h.share_pct, "ms": _ms(h.us_per_request),
                    "path": _path(h.path), "path_pct": h.path_pct, "requests": h.requests,
                    "more": more if more > 0 else 0})
    return {"explained_pct": t.explained_pct, "unexplained_pct": t.unexplained_pct,
            "mean_ms": _ms(t.mean_us), "sampled_requests": t.sampled_requests,
            "basis": t.basis_text or t.basis, "period_ms": t.period_ms,
            "overlap_pct": t.overlap_pct, "top": top,
            "urls": [{"url": u.url, "requests": u.requests, "mean_ms": _ms(u.mean_us),
                      "explained_pct": u.explained_pct, "unexplained_pct": u.unexplained_pct,
                      "top": [(_span(h.name), h.share_pct) for h in u.top]}
                     for u in t.urls],
            "owned": {f.key: f.owned_pct for f in t.findings},
            "informational": set(t.informational), "notes": list(t.notes)}


def _commands(r: RunResults) -> dict:
    """What the templates quote to reproduce the run and its verifications (shell-quoted)."""
    by_key = {f.key: f for f in r.findings}
    return {"run": run_command(r.directory, r.target, r.run, r.bench),
            "analyze": shlex.join(["lockdown", "analyze", str(r.bundle)]),
            "writeup": shlex.join(["lockdown", "writeup", str(r.directory), "-o", "OUTDIR"]),
            "verified": {k: verify_command(r.directory, v.to_json(), by_key, r.run, r.bench)
                         for k, v in r.verified.items()},
            "together": {k: together_command(r.directory, v) for k, v in r.verified.items() if v.together},
            "suggest": {f.key: suggest_verify(r.directory, f.key) for f in r.findings if f.remediations}}


def finding_markdown(f: Finding, r: RunResults, cmd: dict | None = None) -> str:
    """One finding of the run `r` as a lockdown issue, with its verification when measured
    alone and each verification that fixed it together with others (verify --all)."""
    together = [v for v in _together(r) if f.key in (v.reprofile.gone_by_finding or {})]
    return _ENV.get_template("finding.md.j2").render(f=f, target=r.target, v=r.verification(f.key),
                                                     together=together, cmd=cmd or _commands(r),
                                                     acct=_accounting(r))


def _together(r: RunResults) -> list[Verification]:
    """The verifications of several findings at once, by key."""
    return [v for _, v in sorted(r.verified.items()) if v.together]


def summary_markdown(r: RunResults) -> str:
    """SUMMARY.md: headline, methodology, baseline, results per fix, what did not pan out."""
    verified = [r.verified[f.key] for f in r.findings if f.key in r.verified]
    together = _together(r)        # several findings fixed at once (verify --all, or --finding repeated)
    return _ENV.get_template("summary.md.j2").render(
        r=r, b=r.bench, m=r.manifest, verified=verified, together=together, cmd=_commands(r), acct=_accounting(r),
        aside=set_aside_lines(r.bench) if r.bench else [], started=base_text(r.run),
        confirmed=sorted((v for v in verified if v.confirmed), key=lambda v: -v.bench.change.change_pct),
        failed=[v for v in verified if not v.confirmed],
        defects=[f for f in r.findings if f.is_defect],
        unverified=[f for f in r.findings if f.is_defect and f.key not in r.verified])


def finding_writeups(r: RunResults) -> dict[str, str]:
    """File name -> markdown: one issue per finding (what `lockdown run` and `lockdown verify`
    keep in DIR/findings/, and `lockdown writeup` writes beside SUMMARY.md)."""
    cmd = _commands(r)
    return {f"{f.key}.md": finding_markdown(f, r, cmd) for f in r.findings}


def writeups(r: RunResults) -> dict[str, str]:
    """File name -> markdown: one issue per finding, and SUMMARY.md."""
    return {**finding_writeups(r), "SUMMARY.md": summary_markdown(r)}
