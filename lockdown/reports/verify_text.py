"""`lockdown verify`'s result as the lines a terminal shows (and a write-up quotes)."""
from __future__ import annotations

from ..analyzers.findings import predicted_ratio
from ..remediation.base import applied_words, describe
from . import numbers as n
from .writeup import pages_line


def effect_line(result: dict) -> str:
    """One sentence: the two arms' mean RPS, then the change, named for what it is (not the
    ratio of those means: docs/verify.md), with its 95% CI and the number of pairs."""
    b, a = result["bench"]["before"]["summary"], result["bench"]["after"]["summary"]
    c = result["bench"]["change"]
    lo, hi = c["ci95_pct"]
    ci = f"95% CI {n.interval(lo, hi, n.change)}" if lo is not None else "no CI (one pair)"
    return (f"means {n.rps(b['rps_mean'])} -> {n.rps(a['rps_mean'])} req/s ({b['runs']} runs each); "
            f"change {n.change(c['change_pct'])} {n.estimate_name(c)} ({ci}), {c['pairs']} interleaved pairs"
            + ("" if c["significant"] else "; the interval includes zero"))


def paired_line(result: dict) -> str | None:
    """The plain paired estimate, when the verdict used the speed-adjusted one."""
    return n.paired_clause(result["bench"])


def expected_line(result: dict) -> str | None:
    """What the finding's estimated share predicts, to set the measurement against."""
    share = result["finding"].get("share_pct")
    ratio = predicted_ratio(share)
    if ratio is None:
        return None
    return (f"the finding's share, {share:.1f}% of request time, predicts about {ratio:.2f}x "
            f"({n.change(100 * (ratio - 1))}) if the fix removes all of it")


def verdict_line(result: dict) -> str:
    r = result["reprofile"]
    by_finding = r.get("gone_by_finding") or {}
    if len(by_finding) > 1:
        still = [k for k, gone in by_finding.items() if not gone]
        return (f"findings gone from the re-capture: {len(by_finding) - len(still)} of {len(by_finding)}"
                + (f" (still reported: {', '.join(still)})" if still else ""))
    gone = ("gone from the re-capture" if r["gone"]
            else f"still reported by the re-capture ({', '.join(r['remaining'])})")
    return f"finding {result['finding']['key']}: {gone}"


def new_findings(reprofile: dict) -> list[tuple[str, str]]:
    """The re-capture's findings the run did not have, as (key, title): keys are numbered per
    capture, so a new repeated-call can carry the key of the one the fix removed, and only its
    title says what it is about."""
    titles = {f.get("key"): f.get("title") for f in reprofile.get("findings") or [] if isinstance(f, dict)}
    return [(str(k), str(titles.get(k) or "")) for k in reprofile.get("new") or []]


def diff_graph_kind(key: str) -> tuple[str, bool]:
    """A verify.json diff_svg key as (stacks: php or native, drawn with BEFORE's widths):
    `php`, `php_before_widths` (pipeline/verify.py `diff_svgs`)."""
    kind, before, _ = key.partition("_before_widths")
    return kind, bool(before)


def base_words(result: dict) -> str | None:
    """What both arms started from, in words (verify.json base_source and base_remediations);
    None for none."""
    rems = [r for r in result.get("base_remediations") or [] if isinstance(r, dict)]
    return describe(result.get("base_source"), rems) if rems else None


def format_verify(result: dict) -> str:
    paired = paired_line(result)
    together = result.get("findings") or []
    lines = [f"verify {result['finding']['key']} on {result['target']}: "
             + ("CONFIRMED" if result["confirmed"] else "NOT CONFIRMED"),
             *([f"  fixed together: {', '.join(f['key'] for f in together)}"] if len(together) > 1 else []),
             f"  remediation: {applied_words(result['remediations'])}",
             *([f"  both arms on top of {on_top}"] if (on_top := base_words(result)) else []),
             f"  throughput: {effect_line(result)}",
             *([f"  ({paired})"] if paired else []),
             *([f"  servers' CPU per request: {cpu}"] if (cpu := n.server_cpu_clause(result["bench"])) else []),
             *([f"  expected: {expected}"] if (expected := expected_line(result)) else []),
             *([f"  resolution: {res}"] if (res := n.resolution_clause(result["bench"])) else []),
             f"  {verdict_line(result)}",
             *(["  new in the re-capture (not in the run), by the re-capture's keys:"]
               + [f"    {key}: {title}" for key, title in new] if (new := new_findings(result["reprofile"])) else []),
             *([f"  re-capture's candidates dismissed by the argument probe: "
                f"{', '.join(d.get('function', '?') for d in dismissed)}"]
               if (dismissed := result["reprofile"].get("dismissed")) else []),
             *([f"  pages: {pages_line(result['responses'])}"] if result.get("responses") else [])]
    if result.get("each"):
        lines.append("  what each fix adds to the others (all but it -> all):")
        for e in result["each"]:
            c = e["change"]
            lo, hi = c["ci95_pct"] or (None, None)
            ci = f"95% CI {n.interval(lo, hi, n.change)}" if lo is not None else "no CI"
            lines.append(f"    {', '.join(e['findings'])}: {n.rps(e['without_rps'])} -> {n.rps(e['all_rps'])} req/s, "
                         f"change {n.change(c['change_pct'])} {n.estimate_name(c)} ({ci})"
                         + ("" if c["significant"] else "; the interval includes zero"))
    for key, name in (result.get("diff_svg") or {}).items():
        if name:
            kind, before = diff_graph_kind(key)
            lines.append(f"  {'PHP' if kind == 'php' else kind} differential flame graph, widths from "
                         + ("before (what the fix removed): " if before else "after: ") + name)
    return "\n".join(lines)
