"""A bundle in a few lines: what was captured, and the validation checks."""
from __future__ import annotations

from ..bundle.store import Bundle


def format_summary(bundle: Bundle) -> str:
    m = bundle.manifest
    r = m.get("requests", {})
    d = m.get("driver", {})
    lines = [f"bundle {bundle.root} (format {m['format']} v{m['version']}), target {m['target']['name']}",
             f"  requests: {r.get('logged')} logged of {r.get('sent')} sent at concurrency "
             f"{d.get('concurrency')}, {d.get('rps')} req/s, statuses {r.get('status_counts')}"
             + (f", {r.get('instrumented')} instrumented with xhprof" if r.get("instrumented") else "")]
    changed = m["target"].get("applied") if isinstance(m.get("target"), dict) else None
    if changed:
        lines.append("  served patched: " + "; ".join(
            f"{a.get('kind')} {a.get('file') or ''}".strip()
            + (f" ({a['description']})" if a.get("description") else "")
            for a in changed if isinstance(a, dict)))
    o = m.get("overhead")
    if o:
        lines.append(f"  overhead: {o['capture_rps']:.1f} req/s captured vs {o['baseline_rps']:.1f} "
                     f"uncollected before and after (ratio {o['ratio']:.3f})")
    c = m.get("collected", {})
    if "perf" in c:
        p = c["perf"]
        lines.append(f"  perf: {p['samples']} samples, {p['in_requests']} inside requests, "
                     f"{p['outside_requests']} outside")
    if "excimer" in c:
        e = c["excimer"]
        lines.append(f"  excimer: {e['samples']} samples, {e['requests_with_samples']} requests with stacks")
    if "xhprof" in c:
        lines.append(f"  xhprof: {c['xhprof']['profiles']} profiles")
    if "queries" in c:
        q = c["queries"]
        attribution = ", ".join(f"{k} {v}" for k, v in sorted(q["attribution"].items()))
        lines.append(f"  statements: {q['statements']} ({attribution})")
    for note in m.get("capture", {}).get("notes", []):
        lines.append(f"  note: {note}")
    return "\n".join(lines)


def format_checks(checks) -> str:
    return "\n".join(f"  {'ok  ' if c.ok else 'FAIL'} {c.name}: {c.detail}" for c in checks)
