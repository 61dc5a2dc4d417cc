"""Why the slow requests of a URL are slow: its slowest tenth against its middle half.

A mean budget hides a tail. When a page is usually fast and sometimes slow (a cache rebuilt,
the cycle collector running, a statement waiting on a lock, the host busy), the question is
what the slow ones did that the usual ones did not. Per URL with enough timed requests, the
slowest tenth is compared with the middle half (the requests between the 25th and the 75th
percentile of wall time), part by part of the budget: cpu, db wait, waiting for a CPU, the
rest of other wait; with what each group did besides (statements, cycle-collector runs,
OPcache compiles, peak memory) and the statement class whose time grew most.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from ..bundle.model import RequestRecord, Statement
from .budget import Budget
from .query_digest import fingerprint

MIN_REQUESTS = 10         # timed requests of a URL before its tail is told from its middle
TAIL_SHARE = 0.10         # the slowest tenth
NOTE_RATIO = 1.25         # a tail this much slower than the middle is worth a line
STATEMENT_SHARE = 0.10    # a statement class named when its growth is this much of the tail's excess


@dataclass
class Group:
    """Means over one group of a URL's requests."""
    requests: int
    wall_us: float
    parts_us: dict            # cpu, db wait, waiting for a CPU, other wait: the budget's parts
    statements: float
    gc_runs: float | None     # the cycle collector's runs during the request
    compiles: float | None    # OPcache misses during the request
    peak_memory: float


@dataclass
class StatementGrowth:
    """The statement class whose time per request grew most from the middle to the tail."""
    fingerprint: str
    tail_us: float            # per request, summed over the class's executions
    middle_us: float
    tail_count: float         # executions per request
    middle_count: float


@dataclass
class UrlTail:
    url: str
    requests: int
    p50_wall_us: float
    p90_wall_us: float
    middle: Group
    tail: Group
    ratio: float              # tail mean wall / middle mean wall
    excess_us: dict           # tail minus middle, per budget part, largest first
    slowest: list[str] = field(default_factory=list)    # the tail's request ids, slowest first
    statement: StatementGrowth | None = None


def _percentile(sorted_values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks."""
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def _parts(b: Budget) -> dict:
    if b.cpu_queue_us is None:
        return {"cpu": b.cpu_us, "db wait": b.db_wait_us, "other wait": b.other_wait_us}
    return {"cpu": b.cpu_us, "db wait": b.db_wait_us, "waiting for a CPU": b.cpu_queue_us,
            "other wait": b.other_wait_us - b.cpu_queue_us}


def _engine_delta(r: RequestRecord, now: str, start: str) -> int | None:
    e = r.engine or {}
    return e[now] - e[start] if now in e and start in e else None


def _mean_or_none(values: list) -> float | None:
    return None if not values or any(v is None for v in values) else sum(values) / len(values)


def _group(rs: list[RequestRecord], budgets: dict[str, Budget], counts: dict[str, int]) -> Group:
    n = len(rs)
    parts: dict = defaultdict(float)
    for r in rs:
        for k, v in _parts(budgets[r.id]).items():
            parts[k] += v / n
    return Group(n, sum(budgets[r.id].wall_us for r in rs) / n, dict(parts),
                 sum(counts.get(r.id, 0) for r in rs) / n,
                 _mean_or_none([_engine_delta(r, "gc_runs", "gc_runs_at_start") for r in rs]),
                 _mean_or_none([_engine_delta(r, "opcache_misses", "opcache_misses_at_start") for r in rs]),
                 sum(r.peak_memory for r in rs) / n)


def _statement_growth(tail: list[RequestRecord], middle: list[RequestRecord],
                      by_request: dict[str, list[Statement]], excess_us: float) -> StatementGrowth | None:
    fingerprints: dict[str, str] = {}     # a page repeats its statements: fingerprint each text once

    def per_class(rs):
        time, count = defaultdict(int), defaultdict(int)
        for r in rs:
            for s in by_request.get(r.id, []):
                fp = fingerprints.get(s.sql) or fingerprints.setdefault(s.sql, fingerprint(s.sql))
                time[fp] += s.duration_us
                count[fp] += 1
        return {k: v / len(rs) for k, v in time.items()}, {k: v / len(rs) for k, v in count.items()}
    t_time, t_count = per_class(tail)
    m_time, m_count = per_class(middle)
    grown = max(t_time, key=lambda fp: t_time[fp] - m_time.get(fp, 0.0), default=None)
    if grown is None or t_time[grown] - m_time.get(grown, 0.0) < max(STATEMENT_SHARE * excess_us, 1.0):
        return None
    return StatementGrowth(grown, t_time[grown], m_time.get(grown, 0.0), t_count[grown], m_count.get(grown, 0.0))


def tails(requests: list[RequestRecord], budgets: dict[str, Budget],
          statements: list[Statement]) -> list[UrlTail]:
    """Each URL's tail against its middle, the URLs whose tail adds most first. Timed requests
    only (xhprof-instrumented ones ran slower for another reason)."""
    by_url: dict = defaultdict(list)
    for r in requests:
        if not r.instrumented and r.id in budgets:
            by_url[r.url or r.uri].append(r)
    by_request: dict = defaultdict(list)
    for s in statements:
        if s.request:
            by_request[s.request].append(s)
    counts = {rid: len(ss) for rid, ss in by_request.items()}
    out = []
    for url, rs in by_url.items():
        n = len(rs)
        if n < MIN_REQUESTS:
            continue
        rs = sorted(rs, key=lambda r: (budgets[r.id].wall_us, r.id))
        walls = [budgets[r.id].wall_us for r in rs]
        k = max(1, math.ceil(n * TAIL_SHARE))
        tail, middle = rs[n - k:], rs[n // 4:max(n // 4 + 1, (3 * n) // 4)]
        t, m = _group(tail, budgets, counts), _group(middle, budgets, counts)
        excess = {p: t.parts_us.get(p, 0.0) - m.parts_us.get(p, 0.0) for p in t.parts_us}
        out.append(UrlTail(url, n, _percentile(walls, 0.5), _percentile(walls, 0.9), m, t,
                           t.wall_us / m.wall_us if m.wall_us else 0.0,
                           dict(sorted(excess.items(), key=lambda kv: -kv[1])),
                           [r.id for r in reversed(tail)],
                           _statement_growth(tail, middle, by_request, t.wall_us - m.wall_us)))
    return sorted(out, key=lambda u: -(u.tail.wall_us - u.middle.wall_us))
