"""What changed between two captures of a site: a baseline's analysis against another's.

After a change of their own (a patch, a plugin removed, a setting), a lockdown team captures
again and asks what moved: per URL, the time budget and the statements; the engine's
subsystems in ms per request; the query classes that appeared, vanished or changed; the PHP
functions whose share moved. A pure function of two `analyze()` results (the flame graphs'
own difference is `lockdown flamegraph --diff`). Means per request, so captures of different
sizes compare; numbers from different moments of a shared host also differ by the host's
speed, which only `lockdown compare` and `verify` take out.
"""
from __future__ import annotations

from collections import defaultdict

TOP = 8               # rows per table
SAME_COUNT = 0.05     # executions a request: a class run this much more or less often "changed"
PARTS = ("wall_us", "cpu_us", "db_wait_us", "other_wait_us")


def _change(before: float | None, after: float | None) -> dict:
    pct = None if not before or after is None else round(100.0 * (after - before) / before, 1)
    return {"before": before, "after": after, "change_pct": pct}


def _statements_by_url(a: dict) -> dict[str, float]:
    groups: dict = defaultdict(list)
    for r in a.get("by_request") or []:
        if not r.get("instrumented"):
            groups[r["url"]].append(r["statements"])
    return {u: sum(v) / len(v) for u, v in groups.items()}


def _urls(base: dict, new: dict) -> list[dict]:
    b_st, n_st = _statements_by_url(base), _statements_by_url(new)
    rows = []
    for url in sorted(set(base["budget_by_url"]) & set(new["budget_by_url"])):
        b, n = base["budget_by_url"][url], new["budget_by_url"][url]
        rows.append({"url": url, "requests": [b["requests"], n["requests"]],
                     **{k: _change(b[k], n[k]) for k in PARTS},
                     "statements": _change(b_st.get(url), n_st.get(url))})
    return sorted(rows, key=lambda r: r["wall_us"]["after"] - r["wall_us"]["before"])


def _subsystems(base: dict, new: dict) -> list[dict]:
    """Each subsystem's CPU in ms per request (its share of the samples x the mean CPU time)."""
    def ms(a):
        sub, cpu = a.get("subsystems") or {}, a["budget_overall"]["cpu_us"]
        return {k: v / 100 * cpu / 1000 for k, v in (sub.get("overall") or {}).items()}
    b, n = ms(base), ms(new)
    rows = [{"subsystem": k, **_change(b.get(k, 0.0), n.get(k, 0.0))} for k in set(b) | set(n)]
    return sorted(rows, key=lambda r: -abs(r["after"] - r["before"]))[:TOP]


def query_rates(classes: list, requests: int) -> dict[str, tuple[float, float]]:
    """Each query class's executions and ms per captured request, by fingerprint: from every
    class of a capture (query_digest.digest), not an analysis' top rows, or a class outside
    the top would read as gone."""
    n = requests or 1
    return {c.fingerprint: (c.count / n, c.time_total / n / 1000) for c in classes}


def _queries(b: dict, n: dict) -> list[dict]:
    """Query classes by fingerprint: executions and ms per captured request; `state` new,
    gone, changed (run more or less often) or same count; the largest change of time first."""
    rows = []
    for fp in set(b) | set(n):
        state = "new" if fp not in b else "gone" if fp not in n else \
            "changed" if abs(n[fp][0] - b[fp][0]) >= SAME_COUNT else "same count"
        (bc, bt), (nc, nt) = b.get(fp, (0.0, 0.0)), n.get(fp, (0.0, 0.0))
        rows.append({"fingerprint": fp, "state": state, "count": _change(bc, nc), "ms": _change(bt, nt)})
    return sorted(rows, key=lambda r: -abs(r["ms"]["after"] - r["ms"]["before"]))[:TOP]


def _functions(base: dict, new: dict, block: str = "php_functions") -> list[dict]:
    """Functions' self share of the samples, in percentage points, of the functions in both
    analyses' top rows (a function outside one side's top has no known share there): PHP
    functions of Excimer's samples, or native ones (`native_functions`, named `name [file]`)
    of perf's."""
    def shares(a):
        f = a.get(block) or {}
        total = f.get("samples") or 0
        return {(f"{h['name']} [{h['dso']}]" if "dso" in h else h["name"]): 100.0 * h["self_samples"] / total
                for h in f.get("top") or []} if total else {}
    b, n = shares(base), shares(new)
    rows = [{"function": k, "before": b[k], "after": n[k]} for k in set(b) & set(n)]
    return sorted(rows, key=lambda r: (-abs(r["after"] - r["before"]), r["function"]))[:TOP]


def versus(base: dict, new: dict, base_queries: dict, new_queries: dict) -> dict:
    """`new`'s analysis against `base`'s: the `baseline` block of `lockdown analyze
    --baseline`. `*_queries`: each capture's `query_rates`."""
    return {"bundle": base["bundle"], "target": base["target"],
            "overall": {k: _change(base["budget_overall"][k], new["budget_overall"][k]) for k in PARTS},
            "urls": _urls(base, new),
            "urls_only_in_baseline": sorted(set(base["budget_by_url"]) - set(new["budget_by_url"])),
            "urls_only_here": sorted(set(new["budget_by_url"]) - set(base["budget_by_url"])),
            "subsystems_ms": _subsystems(base, new), "queries": _queries(base_queries, new_queries),
            "functions_self_pct": _functions(base, new),
            "native_self_pct": _functions(base, new, "native_functions")}
