"""Where PHP waited: Excimer's wall-clock samples less perf's on-CPU samples, by PHP function.

Excimer's timer fires every period; the sample is taken at the next interrupt check of the VM
(a user function call, a loop), in the function then running, and weighs the fires since the
last sample. A sample stands here for the time since the sample before it (the first one for
the time since the profiler started), so that a request's samples tile its time. perf samples
the worker's thread only while it runs on a CPU, one sample per perf period of CPU: the worker's
perf samples inside a sample's interval estimate the CPU time in it, and the rest of the
interval the worker was off the CPU: blocked (a statement's reply, a remote call, a sleep, a
lock, the disk) or runnable and waiting for a CPU.

Which waits are a function's own: a sample that weighs more than one fire was held up for more
than a whole period in one builtin call (the VM checks for the timer between PHP calls and
loops, not inside a builtin), made by the PHP code the sample names; its interval's off-CPU
time is that call's wait (`blocked`, less the run-queue wait the function's CPU explains). A
wait shorter than a period ends in an interval whose sample says nothing about what waited
(it may be the function called next), so it counts as off the CPU but as no function's blocked
time: blocked time is a lower bound, close for waits of several periods (a remote call, a
sleep, a lock, a large read) and nothing for short ones (one fast statement).

The error given with each row is taken as sqrt(n + 1) perf periods for n perf samples (n = 0
still leaves doubt: a function that used a whole perf period of CPU would show no sample one
time in e), grown by the queue taken out, which rests on the same samples.

xhprof's call graph names the functions that send SQL (`sql_senders`), so that waiting for the
database is told apart from other waits.
"""
from __future__ import annotations

import bisect
import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from ..bundle.model import ExcimerProfile, PerfSample, RequestRecord
from .builtins import entries

# builtins that send a statement, or connect, and wait for the server's reply
_DB_CALL = re.compile(
    r"^(?:mysqli_(?:query|real_query|multi_query|execute|execute_query|stmt_execute|real_connect|connect"
    r"|prepare|next_result|store_result|ping|commit|rollback|begin_transaction|select_db|set_charset)"
    r"|mysqli::(?:query|real_query|multi_query|execute_query|prepare|real_connect|__construct|connect"
    r"|next_result|store_result|ping|commit|rollback|begin_transaction|select_db|set_charset)"
    r"|mysqli_stmt::(?:execute|prepare|__construct)|PDO::(?:query|exec|prepare|__construct|beginTransaction"
    r"|commit|rollBack)|PDOStatement::execute)$")


@dataclass
class OffCpuFunction:
    """One PHP function's time, as the leaf of Excimer's samples, means per request."""
    name: str
    wall_us: float
    cpu_us: float           # estimated from perf's samples in its intervals
    off_cpu_us: float       # wall - cpu, never below 0
    queue_us: float         # the run-queue wait its CPU time explains (cpu x the capture's delay per CPU)
    blocked_us: float       # off-CPU time of its late samples' intervals beyond that queueing: what it waited for
    error_us: float         # the estimate's sampling error (about one standard error)
    sql: bool               # calls a builtin that waits for the database (xhprof)
    stack: str              # the stack that was blocked most under it (else its first), last frames only


@dataclass
class OffCpu:
    requests: int
    wall_us: float
    cpu_us: float
    off_cpu_us: float
    queue_per_cpu: float                # run-queue delay per unit of CPU over these requests (0 unknown)
    sql_known: bool                     # xhprof named the functions that send SQL
    perf_period_us: float
    functions: list[OffCpuFunction] = field(default_factory=list)


def sql_senders(xhprof_profiles) -> set[str]:
    """PHP functions that call a builtin waiting for the database, from xhprof's call graph
    ("caller==>callee" keys)."""
    senders = set()
    for profile in xhprof_profiles:
        for caller, callee, _ in entries(profile):      # f@2 is f, one level deeper in its recursion
            if caller is not None and _DB_CALL.match(callee):
                senders.add(caller)
    return senders


@dataclass
class Interval:
    """The time one Excimer sample stands for, and what perf saw in it."""
    request: str
    stack: str
    span_ns: float
    perf_samples: int
    delayed: bool            # the timer fired more than once before it: it ends a builtin call of its function


def _intervals(profiles: list[ExcimerProfile], samples: list[PerfSample], period_ms: float | None,
               ends: dict[str, int] | None = None):
    """(perf's sample period in ns, the intervals, the tails after each request's last sample as
    (span ns, perf samples)), or None without profiles, main-thread perf samples or a period."""
    if not profiles or not samples or not period_ms or period_ms <= 0:
        return None
    period_ns = period_ms * 1e6
    times: dict[int, list[int]] = defaultdict(list)
    periods: Counter = Counter()
    for s in samples:
        if s.tid == s.pid:
            times[s.pid].append(s.time_ns)
            periods[s.period] += 1
    if not periods:
        return None
    for t in times.values():
        t.sort()
    out, tails = [], []

    def on_cpu(t, start, end):
        return bisect.bisect_right(t, end) - bisect.bisect_right(t, start)

    for p in profiles:
        t = times.get(p.pid, [])
        ordered = sorted(p.samples, key=lambda s: s[0])
        first_t, first_w = ordered[0][0], ordered[0][1]
        previous = p.start_ns if p.start_ns is not None and p.start_ns <= first_t else first_t - first_w * period_ns
        for time_ns, weight, i in ordered:
            out.append(Interval(p.request, p.stacks[i], time_ns - previous, on_cpu(t, previous, time_ns), weight > 1))
            previous = time_ns
        end = (ends or {}).get(p.request)
        if end is not None and end > previous:
            tails.append((end - previous, on_cpu(t, previous, end)))
    return periods.most_common(1)[0][0], out, tails


def off_cpu(profiles: list[ExcimerProfile], samples: list[PerfSample], period_ms: float | None,
            senders: set[str] | None, exclude: set[str] = frozenset(), frames_shown: int = 4,
            run_delay_us: dict[str, int] | None = None, ends: dict[str, int] | None = None) -> OffCpu | None:
    """Wall, estimated CPU, off-CPU and blocked time per leaf PHP function over the profiles'
    requests (`exclude` left out), means per request. `samples` are perf's, of the same
    requests; only the worker's main thread counts (Excimer's timer thread is another). The
    totals take in the time from each request's last sample to its end (`ends`, ns). None
    without profiles, perf samples or a period.

    Off the CPU includes waiting in the run queue, which on a busy host every function does in
    proportion to the CPU it asks for, wherever its samples land: given each request's
    run-queue delay (`run_delay_us`, from the scheduler), a function's share of it is taken as
    its CPU time times the capture's delay per unit of CPU (`queue_us`), and `blocked_us` is
    the off-CPU time of its late samples' intervals less that share: the waits the function
    itself made (plus the run-queue wait after waking from them)."""
    profiles = [p for p in profiles if p.request not in exclude and p.samples]
    walked = _intervals(profiles, samples, period_ms, ends)
    if walked is None:
        return None
    pp, intervals, tails = walked
    wall: Counter = Counter()
    on_samples: Counter = Counter()
    late_off: Counter = Counter()
    by_stack: Counter = Counter()
    for iv in intervals:
        leaf = iv.stack.rsplit(";", 1)[-1]
        wall[leaf] += iv.span_ns
        on_samples[leaf] += iv.perf_samples
        if iv.delayed:
            late_off[leaf] += iv.span_ns - iv.perf_samples * pp
            by_stack[iv.stack] += iv.span_ns - iv.perf_samples * pp
    n_req = len(profiles)
    worst: dict[str, tuple[float, str]] = {}
    for iv in intervals:
        leaf = iv.stack.rsplit(";", 1)[-1]
        off = by_stack.get(iv.stack, -math.inf)
        if leaf not in worst or off > worst[leaf][0]:
            worst[leaf] = (off, iv.stack)
    total_wall = sum(wall.values()) + sum(span for span, _ in tails)
    total_cpu = (sum(on_samples.values()) + sum(n for _, n in tails)) * pp
    delays = [(run_delay_us or {}).get(p.request) for p in profiles]
    per_cpu = (sum(delays) * 1e3 / total_cpu if total_cpu and all(d is not None for d in delays) else 0.0)
    rows = []
    for name, w in wall.items():
        cpu = min(on_samples[name] * pp, w)
        off = w - cpu
        queue = min(off, cpu * per_cpu)
        rows.append(OffCpuFunction(
            name=name, wall_us=w / 1e3 / n_req, cpu_us=cpu / 1e3 / n_req,
            off_cpu_us=off / 1e3 / n_req, queue_us=queue / 1e3 / n_req,
            blocked_us=max(0.0, late_off[name] - cpu * per_cpu) / 1e3 / n_req,
            error_us=math.sqrt(on_samples[name] + 1) * pp * (1 + per_cpu) / 1e3 / n_req,
            sql=bool(senders) and name in senders,
            stack=";".join(worst[name][1].split(";")[-frames_shown:])))
    rows.sort(key=lambda r: (-r.blocked_us, -r.off_cpu_us, r.name))
    return OffCpu(requests=n_req, wall_us=total_wall / 1e3 / n_req, cpu_us=total_cpu / 1e3 / n_req,
                  off_cpu_us=max(0.0, total_wall - total_cpu) / 1e3 / n_req, queue_per_cpu=round(per_cpu, 4),
                  sql_known=senders is not None, perf_period_us=pp / 1e3, functions=rows)


def wall_clock(capture: dict) -> bool:
    """Excimer sampled the wall clock (the default), the only profile that shows waits."""
    return capture.get("excimer_clock", "wall") == "wall"


def of_capture(manifest: dict, requests: list[RequestRecord], profiles: list[ExcimerProfile],
               samples: list[PerfSample], xhprof_profiles: list[dict],
               exclude: set[str] = frozenset()) -> OffCpu | None:
    """`off_cpu` over a bundle's requests, as the analysis and the blocking-wait detector both
    read it: the requests' run-queue delays and ends, the SQL senders from their xhprof
    profiles (unknown without any), stacks named relative to the app tree. None unless
    Excimer sampled the wall clock."""
    capture = manifest.get("capture") or {}
    if not wall_clock(capture):
        return None
    found = off_cpu(profiles, samples, capture.get("excimer_period_ms"),
                    sql_senders(xhprof_profiles) if xhprof_profiles else None, exclude,
                    run_delay_us={r.id: r.sched["run_delay_us"] for r in requests
                                  if r.sched and "run_delay_us" in r.sched},
                    ends={r.id: r.end_ns for r in requests})
    for row in found.functions if found else []:
        row.stack = app_relative(row.stack, manifest.get("run_dir"))
    return found


def off_cpu_stacks(profiles: list[ExcimerProfile], samples: list[PerfSample], period_ms: float | None,
                   exclude: set[str] = frozenset()) -> dict[str, int]:
    """Folded PHP stacks weighted by their off-CPU time in us (summed per stack; a stack whose
    estimate comes out below zero, where perf saw more CPU than its wall time, is left out):
    an off-CPU flame graph. Empty without profiles, perf samples or a period."""
    walked = _intervals([p for p in profiles if p.request not in exclude and p.samples], samples, period_ms)
    if walked is None:
        return {}
    pp, intervals, _tails = walked
    off: Counter = Counter()
    for iv in intervals:
        off[iv.stack] += iv.span_ns - iv.perf_samples * pp
    weights = {stack: round(ns / 1e3) for stack, ns in off.items()}
    return {stack: us for stack, us in weights.items() if us >= 1}


def significant(rows: list[OffCpuFunction], min_us: float = 100.0) -> list[OffCpuFunction]:
    """The rows whose blocked time is at least twice its error and `min_us` a request."""
    return [r for r in rows if r.blocked_us >= max(min_us, 2 * r.error_us)]


def app_relative(stack: str, run_dir: str | None) -> str:
    """Script frames named relative to the capture's app tree, as the flame graphs name them."""
    return stack.replace(f"{run_dir.rstrip('/')}/app/", "") if run_dir else stack
