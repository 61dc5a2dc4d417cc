"""Where each request's wall time went: on-CPU (split by engine subsystem), waiting on the
database, and other waiting, reconciled with the measured wall time.

    wall = cpu + db_wait + other_wait + residual

`cpu` is the worker's user+system time over the request (getrusage), split in the
proportions of the request's perf samples; `db_wait` is the sum of the request's statement
durations (server-side Query_time); `other_wait` is what is left (network, locks, sleeps, the
kernel scheduling another process) and is never negative; `residual` is negative when CPU and
statement time together exceed the wall time (time counted twice, or the server's clock).
"""
from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from ..bundle.model import RequestRecord, Statement
from .subsystems import categorise


@dataclass
class Budget:
    wall_us: float
    cpu_us: float
    db_wait_us: float
    other_wait_us: float
    residual_us: float
    cpu_by_subsystem_us: dict = field(default_factory=dict)
    requests: int = 1


def request_budgets(requests: list[RequestRecord], statements: list[Statement],
                    samples) -> dict[str, Budget]:
    db: Counter = Counter()
    for s in statements:
        if s.request:
            db[s.request] += s.duration_us
    per_request: dict = defaultdict(Counter)
    for s in samples:
        if s.request:
            per_request[s.request][categorise(s.frames)] += 1
    out = {}
    for r in requests:
        wall, cpu, d = float(r.wall_us), float(r.cpu_us), float(db[r.id])
        other = max(0.0, wall - cpu - d)
        cats = per_request.get(r.id)
        total = sum(cats.values()) if cats else 0
        split = {k: cpu * v / total for k, v in cats.items()} if total else {}
        out[r.id] = Budget(wall, cpu, d, other, wall - cpu - d - other, split)
    return out


def mean_budget(budgets: list[Budget]) -> Budget:
    n = len(budgets)
    if not n:
        return Budget(0, 0, 0, 0, 0, {}, 0)
    cats: Counter = Counter()
    for b in budgets:
        cats.update(b.cpu_by_subsystem_us)
    return Budget(sum(b.wall_us for b in budgets) / n, sum(b.cpu_us for b in budgets) / n,
                  sum(b.db_wait_us for b in budgets) / n, sum(b.other_wait_us for b in budgets) / n,
                  sum(b.residual_us for b in budgets) / n, {k: v / n for k, v in cats.items()}, n)


def by_url(requests: list[RequestRecord], budgets: dict[str, Budget]) -> dict[str, Budget]:
    """Mean budget per URL, leaving out xhprof-instrumented requests (they ran slower)."""
    groups: dict = defaultdict(list)
    for r in requests:
        if not r.instrumented and r.id in budgets:
            groups[r.url or r.uri].append(budgets[r.id])
    return {url: mean_budget(bs) for url, bs in groups.items()}
