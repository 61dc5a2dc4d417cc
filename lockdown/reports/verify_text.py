"""`lockdown verify`'s result as the lines a terminal shows (and a write-up quotes)."""
from __future__ import annotations

from .writeup import fmt_pct as _pct


def effect_line(result: dict) -> str:
    """One sentence: RPS before -> after, change with its 95% CI, number of pairs."""
    b, a = result["bench"]["before"]["summary"], result["bench"]["after"]["summary"]
    c = result["bench"]["change"]
    lo, hi = c["ci95_pct"]
    ci = f"95% CI {_pct(lo)} .. {_pct(hi)}" if lo is not None else "no CI (one pair)"
    return (f"{b['rps_mean']:.1f} -> {a['rps_mean']:.1f} req/s (mean of {b['runs']} runs each): "
            f"{_pct(c['change_pct'])}, {ci}, {c['pairs']} interleaved pairs"
            + ("" if c["significant"] else "; the interval includes zero"))


def verdict_line(result: dict) -> str:
    r = result["reprofile"]
    gone = ("gone from the re-capture" if r["gone"]
            else f"still reported by the re-capture ({', '.join(r['remaining'])})")
    return f"finding {result['finding']['key']}: {gone}"


def format_verify(result: dict) -> str:
    lines = [f"verify {result['finding']['key']} on {result['target']}: "
             + ("CONFIRMED" if result["confirmed"] else "NOT CONFIRMED"),
             f"  remediation: {', '.join(r['kind'] + (' ' + r['file'] if r.get('file') else '') for r in result['remediations'])}",
             f"  throughput: {effect_line(result)}",
             f"  {verdict_line(result)}"]
    for kind, name in (result.get("diff_svg") or {}).items():
        if name:
            lines.append(f"  {kind} differential flame graph: {name}")
    return "\n".join(lines)
