"""`lockdown verify`'s result as the lines a terminal shows (and a write-up quotes)."""
from __future__ import annotations

from ..analyzers.findings import predicted_ratio
from ..remediation.base import applied_words, describe
from . import numbers as n
from ..rundir.model import EachRow, Verification
from .writeup import pages_line


def effect_line(result: Verification | dict) -> str:
    """One sentence: the two arms' mean RPS, then the change, named for what it is (not the
    ratio of those means: docs/verify.md), with its 95% CI and the number of pairs. `result`:
    a verification, or verify.json's or compare.json's JSON."""
    bench = result.bench if isinstance(result, Verification) else n.ab_result(result["bench"])
    b, a, c = bench.before.stats, bench.after.stats, bench.change
    lo, hi = c.ci95
    ci = f"95% CI {n.interval(lo, hi, n.change)}" if lo is not None else "no CI (one pair)"
    return (f"means {n.rps(b.rps_mean)} -> {n.rps(a.rps_mean)} req/s ({b.runs} runs each); "
            f"change {n.change(c.change_pct)} {n.estimate_name(c)} ({ci}), {c.pairs} interleaved pairs"
            + ("" if c.significant else "; the interval includes zero"))


def expected_line(v: Verification) -> str | None:
    """What the finding's estimated share predicts, to set the measurement against."""
    share = v.finding.share_pct
    ratio = predicted_ratio(share)
    if ratio is None:
        return None
    return (f"the finding's share, {share:.1f}% of request time, predicts about {ratio:.2f}x "
            f"({n.change(100 * (ratio - 1))}) if the fix removes all of it")


def verdict_line(v: Verification) -> str:
    r = v.reprofile
    by_finding = r.gone_by_finding or {}
    if len(by_finding) > 1:
        still = [k for k, gone in by_finding.items() if not gone]
        return (f"findings gone from the re-capture: {len(by_finding) - len(still)} of {len(by_finding)}"
                + (f" (still reported: {', '.join(still)})" if still else ""))
    gone = ("gone from the re-capture" if r.gone
            else f"still reported by the re-capture ({', '.join(r.remaining)})")
    return f"finding {v.finding.key}: {gone}"


def new_findings(reprofile: dict) -> list[tuple[str, str]]:
    """The re-capture's findings the run did not have, as (key, title): keys are numbered per
    capture, so a new repeated-call can carry the key of the one the fix removed, and only its
    title says what it is about."""
    return recaptured_new(reprofile.get("new"), reprofile.get("findings"))


def recaptured_new(new: list | None, findings: list | None) -> list[tuple[str, str]]:
    """`new_findings` of a re-capture's `new` keys and `findings` (rundir/model.py Recapture)."""
    titles = {f.get("key"): f.get("title") for f in findings or [] if isinstance(f, dict)}
    return [(str(k), str(titles.get(k) or "")) for k in new or []]


def diff_graph_kind(key: str) -> tuple[str, bool]:
    """A verify.json diff_svg key as (stacks: php or native, drawn with BEFORE's widths):
    `php`, `php_before_widths` (pipeline/verify.py `diff_svgs`)."""
    kind, before, _ = key.partition("_before_widths")
    return kind, bool(before)


def base_words(v: Verification) -> str | None:
    """What both arms started from, in words (verify.json base_source and base_remediations);
    None for none."""
    return describe(v.base_source, v.base_remediations) if v.base_remediations else None


def format_verify(result: Verification | dict) -> str:
    """The lines of a verification: verify.json, or its model."""
    v = result if isinstance(result, Verification) else Verification.from_json(result)
    paired, together = n.paired_clause(v.bench), v.findings
    lines = [f"verify {v.finding.key} on {v.target}: " + ("CONFIRMED" if v.confirmed else "NOT CONFIRMED"),
             *([f"  fixed together: {', '.join(f.key for f in together)}"] if len(together) > 1 else []),
             f"  remediation: {applied_words(v.remediations)}",
             *([f"  both arms on top of {on_top}"] if (on_top := base_words(v)) else []),
             f"  throughput: {effect_line(v)}",
             *([f"  ({paired})"] if paired else []),
             *([f"  servers' CPU per request: {cpu}"] if (cpu := n.server_cpu_clause(v.bench)) else []),
             *([f"  expected: {expected}"] if (expected := expected_line(v)) else []),
             *([f"  resolution: {res}"] if (res := n.resolution_clause(v.bench)) else []),
             f"  {verdict_line(v)}",
             *(["  new in the re-capture (not in the run), by the re-capture's keys:"]
               + [f"    {key}: {title}" for key, title in new]
               if (new := recaptured_new(v.reprofile.new, v.reprofile.findings)) else []),
             *([f"  re-capture's candidates dismissed by the argument probe: "
                f"{', '.join(d.get('function', '?') for d in dismissed)}"]
               if (dismissed := v.reprofile.dismissed) else []),
             *([f"  pages: {pages_line(v.responses)}"] if v.responses else [])]
    return "\n".join(lines + _each_lines(v.each) + _diff_lines(v.diff_svg))


def _each_lines(each: list[EachRow] | None) -> list[str]:
    """verify --each: what each fix adds to the others."""
    if not each:
        return []
    lines = ["  what each fix adds to the others (all but it -> all):"]
    for e in each:
        c = e.change
        lo, hi = c.ci95
        ci = f"95% CI {n.interval(lo, hi, n.change)}" if lo is not None else "no CI"
        lines.append(f"    {', '.join(e.findings)}: {n.rps(e.without_rps)} -> {n.rps(e.all_rps)} req/s, "
                     f"change {n.change(c.change_pct)} {n.estimate_name(c)} ({ci})"
                     + ("" if c.significant else "; the interval includes zero"))
    return lines


def _diff_lines(diff_svg: dict | None) -> list[str]:
    """The differential flame graphs verify drew."""
    lines = []
    for key, name in (diff_svg or {}).items():
        if name:
            kind, before = diff_graph_kind(key)
            lines.append(f"  {'PHP' if kind == 'php' else kind} differential flame graph, widths from "
                         + ("before (what the fix removed): " if before else "after: ") + name)
    return lines
