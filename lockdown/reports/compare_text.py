"""`lockdown compare`'s result as the lines a terminal shows."""
from __future__ import annotations

from statistics import fmean

from ..remediation.base import describe
from .numbers import latency_resolution_note, paired_clause, resolution_clause, server_cpu_clause
from .verify_text import effect_line
from .writeup import pages_line


def _settings(ini: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in ini.items()) or "the target's own settings"


def _second(result: dict) -> str:
    """The second configuration: its php.ini settings and the diffs applied to its code."""
    parts = [_settings(result["php_ini"]["with"])] if result["php_ini"]["with"] else []
    parts += [f"patch {p['path']} ({', '.join(p['files'])})" for p in result.get("patches") or []]
    return "; ".join(parts)


def _latency(runs: list[dict], key: str) -> float:
    return fmean(r["latency_ms"][key] for r in runs)


def format_compare(result: dict) -> str:
    ab = result["bench"]
    before, after = ab["before"]["runs"], ab["after"]["runs"]
    lines = [f"compare {result['target']}: baseline ({_settings(result['php_ini']['both'])}) "
             f"against with {_second(result)}",
             *([f"  both on top of {describe(b.get('source'), b.get('remediations') or [])}"]
               if isinstance(b := result.get("base"), dict) else []),
             f"  throughput: {effect_line(result)}"]
    if (paired := paired_clause(ab)) is not None:
        lines.append(f"  ({paired})")
    if (res := resolution_clause(ab)) is not None:
        lines.append(f"  resolution: {res}")
    if (cpu := server_cpu_clause(ab)) is not None:
        lines.append(f"  servers' CPU per request: {cpu}")
    lines.append(f"  latency (mean of runs): p50 {_latency(before, 'p50'):.1f} -> {_latency(after, 'p50'):.1f} ms, "
                 f"p99 {_latency(before, 'p99'):.1f} -> {_latency(after, 'p99'):.1f} ms"
                 + (f" ({coarse})" if (coarse := latency_resolution_note(before + after)) else ""))
    if result.get("responses"):
        lines.append(f"  pages: {pages_line(result['responses'], 'the change', 'compare.json')}")
    return "\n".join(lines)
