"""`lockdown analyze`: every view of one bundle, as plain data (a pure function of the bundle)."""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict

from ..bundle.store import Bundle
from . import budget, query_digest, subsystems
from .builtins import hot_builtins
from .php_functions import hot_functions


def analyze(bundle: Bundle, top: int = 20) -> dict:
    requests = bundle.requests()
    instrumented = {r.id for r in requests if r.instrumented}
    url_of = {r.id: (r.url or r.uri) for r in requests}
    samples = [s for s in bundle.perf_samples() if s.request and s.request not in instrumented]
    statements = bundle.statements()
    out: dict = {"bundle": str(bundle.root), "target": bundle.manifest["target"]["name"],
                 "requests": len(requests), "instrumented_left_out": len(instrumented)}
    if samples:
        overall = subsystems.breakdown(samples)
        per_url = subsystems.breakdown(samples, key=lambda s: url_of[s.request])
        out["subsystems"] = {"samples": sum(overall.values()), "overall": _shares(overall),
                             "by_url": {u: _shares(c) for u, c in sorted(per_url.items())}}
    budgets = budget.request_budgets(requests, statements, samples)
    out["budget_by_url"] = {u: asdict(b) for u, b in sorted(budget.by_url(requests, budgets).items())}
    out["budget_overall"] = asdict(budget.mean_budget(
        [b for rid, b in budgets.items() if rid not in instrumented]))
    profiles = bundle.excimer()
    if profiles:
        funcs, total = hot_functions(profiles, exclude=instrumented)
        out["php_functions"] = {"samples": total, "top": [asdict(f) for f in funcs[:top]]}
    php = bundle.manifest.get("php", {})
    ids = bundle.xhprof_ids()
    if ids and php.get("internal_functions"):
        rows = hot_builtins((bundle.xhprof(i) for i in ids), php["internal_functions"],
                            php.get("internal_classes") or [])
        out["builtins"] = {"profiles": len(ids), "top": [asdict(b) for b in rows[:top]]}
    if statements:
        classes = query_digest.digest(statements, requests)
        out["queries"] = {"statements": len(statements),
                          "attribution": dict(Counter(s.attribution for s in statements)),
                          "classes": [asdict(c) for c in classes[:top]],
                          "class_count": len(classes)}
    return out


def _shares(counts: Counter) -> dict:
    total = sum(counts.values())
    return {k: round(100.0 * v / total, 2) for k, v in counts.most_common()} if total else {}
