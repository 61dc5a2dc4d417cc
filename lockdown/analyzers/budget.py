"""Where each request's wall time went: on-CPU (split by engine subsystem), waiting on the
database, and other waiting, reconciled with the measured wall time.

    wall = cpu + db_wait + other_wait + residual

`cpu` is the worker's user+system time over the request (getrusage), split in the
proportions of the request's perf samples; `db_wait` is the sum of the request's statement
durations (server-side Query_time); `other_wait` is what is left (network, locks, sleeps, the
kernel scheduling another process) and is never negative; `residual` is negative when CPU and
statement time together exceed the wall time (time counted twice, or the server's clock).

`cpu_queue` is the part of `other_wait` the worker was certainly runnable but waiting for a
CPU: its run-queue delay over the request (/proc/thread-self/schedstat, read by the prepend)
beyond the request's db wait, at most `other_wait`; None when the bundle did not record it.
Beyond db wait, because the two overlap: a worker that sends a statement wakes the database
server, which often takes its CPU at once, so the worker waits in the run queue while its
statement runs (WordPress at concurrency 1: 87% of its run-queue delay was the server's
preemption, perf sched). What is left is time the worker lost to other workers, perf or other
processes: a lower bound of the queueing, exact when the request sends no SQL.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from ..bundle.model import RequestRecord, Statement
from .subsystems import categorise

QUEUE_NOTE_PCT = 10.0   # run-queue share of the wall time from which the reports say the timings include it


@dataclass
class Budget:
    wall_us: float
    cpu_us: float
    db_wait_us: float
    other_wait_us: float
    residual_us: float
    cpu_by_subsystem_us: dict = field(default_factory=dict)
    requests: int = 1
    cpu_queue_us: float | None = None


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
        delay = (r.sched or {}).get("run_delay_us")
        queue = None if delay is None else min(max(float(delay) - d, 0.0), other)
        out[r.id] = Budget(wall, cpu, d, other, wall - cpu - d - other, split, cpu_queue_us=queue)
    return out


def mean_budget(budgets: list[Budget]) -> Budget:
    n = len(budgets)
    if not n:
        return Budget(0, 0, 0, 0, 0, {}, 0)
    cats: Counter = Counter()
    for b in budgets:
        cats.update(b.cpu_by_subsystem_us)
    queues = [b.cpu_queue_us for b in budgets if b.cpu_queue_us is not None]
    return Budget(sum(b.wall_us for b in budgets) / n, sum(b.cpu_us for b in budgets) / n,
                  sum(b.db_wait_us for b in budgets) / n, sum(b.other_wait_us for b in budgets) / n,
                  sum(b.residual_us for b in budgets) / n, {k: v / n for k, v in cats.items()}, n,
                  sum(queues) / n if len(queues) == n else None)


def by_url(requests: list[RequestRecord], budgets: dict[str, Budget]) -> dict[str, Budget]:
    """Mean budget per URL, leaving out xhprof-instrumented requests (they ran slower)."""
    groups: dict = defaultdict(list)
    for r in requests:
        if not r.instrumented and r.id in budgets:
            groups[r.url or r.uri].append(budgets[r.id])
    return {url: mean_budget(bs) for url, bs in groups.items()}


def scheduling(requests: list[RequestRecord], budgets: dict[str, Budget]) -> dict | None:
    """What the scheduler did to the timed requests, means per request: the whole run-queue
    delay (`run_delay_us`), the part of it beyond db wait (the budget's `cpu_queue`) with its
    share of the wall time, and the worker thread's context switches, voluntary (it blocked)
    and involuntary (preempted), and the CPU time of the worker's other threads
    (`other_threads_cpu_us`: Excimer's timer thread, lockdown's cost, kept out of the budget's
    cpu). None when the bundle did not record them."""
    timed = [r for r in requests if not r.instrumented and r.sched and r.id in budgets]
    if not timed:
        return None
    n = len(timed)
    queues = [budgets[r.id].cpu_queue_us for r in timed if budgets[r.id].cpu_queue_us is not None]
    wall = sum(budgets[r.id].wall_us for r in timed)
    out = {"requests": n,
           "voluntary_switches": sum(r.sched.get("voluntary_switches", 0) for r in timed) / n,
           "involuntary_switches": sum(r.sched.get("involuntary_switches", 0) for r in timed) / n,
           "cpu_queue_us": None, "cpu_queue_pct": None, "run_delay_us": None}
    others = [r.sched["process_cpu_us"] - r.cpu_us for r in timed if "process_cpu_us" in r.sched]
    out["other_threads_cpu_us"] = max(0.0, sum(others) / n) if len(others) == n else None
    delays = [r.sched["run_delay_us"] for r in timed if "run_delay_us" in r.sched]
    if len(delays) == n:
        out["run_delay_us"] = sum(delays) / n
    if len(queues) == n:
        out["cpu_queue_us"] = sum(queues) / n
        out["cpu_queue_pct"] = round(100.0 * sum(queues) / wall, 2) if wall else 0.0
    return out
