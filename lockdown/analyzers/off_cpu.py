"""Where PHP waited: Excimer's wall-clock samples less perf's on-CPU samples, by PHP function.

Excimer on the wall clock takes a sample at the first function call or loop after its timer
fired; a sample stands here for the time since the sample before it (the first one for its
weight in periods), so that a request's samples tile its time exactly, and a wait ends in the
sample taken right after it, on the PHP function that waited. perf samples the worker's thread
only while it runs on a CPU, one sample per `period` ns of CPU. The perf samples of the worker
that fall in an Excimer sample's interval estimate the CPU time in it; the rest of the interval
the worker was off the CPU: blocked (a statement's reply, a remote call, a sleep, a lock, the disk)
or runnable and waiting for a CPU. Summed per function, the estimate is unbiased (each perf
sample counts in full, never clipped per interval); its sampling error, given with each row, is
taken as sqrt(n + 1) perf periods for n perf samples (n = 0 still leaves doubt: a function
that used a whole perf period of CPU would show no sample one time in e).

What it can name: waits of at least an Excimer period (a remote call, a sleep, a lock, a large
read), during which the timer fires, so that the interval of the sample taken after the wait is
mostly the wait. A wait much shorter than the period (one fast statement) is spread over the
functions whose samples follow it. `significant` keeps the rows whose off-CPU time is at least
twice its error.

Excimer takes a sample at the next function call or loop after its timer fired, so the time of
a blocking builtin (curl_exec, usleep, mysqli::query) lands on the PHP function that called it:
the rows name the PHP code that waited. xhprof's call graph names which of them send SQL
(`sql_senders`), so that waiting for the database is told apart from other waits.
"""
from __future__ import annotations

import bisect
import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from ..bundle.model import ExcimerProfile, PerfSample

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
    blocked_us: float       # off-CPU beyond that queueing, never below 0: what it waited for
    error_us: float         # the estimate's sampling error (about one standard error)
    sql: bool               # calls a builtin that waits for the database (xhprof)
    stack: str              # the stack that waited most under it, root..leaf, last frames only


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
        for key in profile:
            caller, sep, callee = key.partition("==>")
            if sep and _DB_CALL.match(callee):
                senders.add(caller)
    return senders


def _intervals(profiles: list[ExcimerProfile], samples: list[PerfSample], period_ms: float | None):
    """(perf's sample period in ns, [(profile, stack, interval ns, perf samples in it)]), or None
    without profiles, main-thread perf samples or a period."""
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
    out = []
    for p in profiles:
        t = times.get(p.pid, [])
        ordered = sorted(p.samples, key=lambda s: s[0])
        previous = ordered[0][0] - ordered[0][1] * period_ns
        for time_ns, _weight, i in ordered:
            n = bisect.bisect_right(t, time_ns) - bisect.bisect_right(t, previous)
            out.append((p, p.stacks[i], time_ns - previous, n))
            previous = time_ns
    return periods.most_common(1)[0][0], out


def off_cpu(profiles: list[ExcimerProfile], samples: list[PerfSample], period_ms: float | None,
            senders: set[str] | None, exclude: set[str] = frozenset(), frames_shown: int = 4,
            run_delay_us: dict[str, int] | None = None) -> OffCpu | None:
    """Wall, estimated CPU and off-CPU time per leaf PHP function over the profiles' requests
    (`exclude` left out), means per request. `samples` are perf's, of the same requests; only
    the worker's main thread counts (Excimer's timer thread is another). None without
    profiles, perf samples or a period.

    Off the CPU includes waiting in the run queue, which on a busy host every function does in
    proportion to the CPU it asks for: given each request's run-queue delay (`run_delay_us`,
    from the scheduler), a function's share of it is taken as its CPU time times the capture's
    delay per unit of CPU, and `blocked_us` is what is left: the waits the function itself
    made (plus the run-queue wait after waking from them)."""
    profiles = [p for p in profiles if p.request not in exclude and p.samples]
    walked = _intervals(profiles, samples, period_ms)
    if walked is None:
        return None
    perf_period_ns, intervals = walked
    wall: Counter = Counter()
    on_samples: Counter = Counter()
    by_stack: Counter = Counter()
    for _p, stack, span, n in intervals:
        leaf = stack.rsplit(";", 1)[-1]
        wall[leaf] += span
        on_samples[leaf] += n
        by_stack[stack] += span - n * perf_period_ns
    n_req = len(profiles)
    worst: dict[str, tuple[float, str]] = {}
    for stack, off in by_stack.items():
        leaf = stack.rsplit(";", 1)[-1]
        if off > worst.get(leaf, (-math.inf, ""))[0]:
            worst[leaf] = (off, stack)
    total_wall = sum(wall.values())
    total_cpu = sum(on_samples.values()) * perf_period_ns
    delays = [(run_delay_us or {}).get(p.request) for p in profiles]
    per_cpu = (sum(delays) * 1e3 / total_cpu if total_cpu and all(d is not None for d in delays) else 0.0)
    rows = []
    for name, w in wall.items():
        cpu = on_samples[name] * perf_period_ns
        off = max(0.0, w - cpu)
        queue = min(off, min(cpu, w) * per_cpu)
        rows.append(OffCpuFunction(
            name=name, wall_us=w / 1e3 / n_req, cpu_us=min(cpu, w) / 1e3 / n_req,
            off_cpu_us=off / 1e3 / n_req, queue_us=queue / 1e3 / n_req, blocked_us=(off - queue) / 1e3 / n_req,
            error_us=math.sqrt(on_samples[name] + 1) * perf_period_ns * (1 + per_cpu) / 1e3 / n_req,
            sql=bool(senders) and name in senders,
            stack=";".join(worst[name][1].split(";")[-frames_shown:])))
    rows.sort(key=lambda r: (-r.blocked_us, -r.off_cpu_us, r.name))
    off_total = max(0.0, total_wall - total_cpu) / 1e3 / n_req
    return OffCpu(requests=n_req, wall_us=total_wall / 1e3 / n_req, cpu_us=total_cpu / 1e3 / n_req,
                  off_cpu_us=off_total, queue_per_cpu=round(per_cpu, 4), sql_known=senders is not None,
                  perf_period_us=perf_period_ns / 1e3, functions=rows)


def off_cpu_stacks(profiles: list[ExcimerProfile], samples: list[PerfSample], period_ms: float | None,
                   exclude: set[str] = frozenset()) -> dict[str, int]:
    """Folded PHP stacks weighted by their off-CPU time in us (summed per stack; a stack whose
    estimate comes out below zero, where perf saw more CPU than its wall time, is left out):
    an off-CPU flame graph. Empty without profiles, perf samples or a period."""
    walked = _intervals([p for p in profiles if p.request not in exclude and p.samples], samples, period_ms)
    if walked is None:
        return {}
    perf_period_ns, intervals = walked
    off: Counter = Counter()
    for _p, stack, span, n in intervals:
        off[stack] += span - n * perf_period_ns
    return {stack: round(ns / 1e3) for stack, ns in off.items() if ns / 1e3 >= 0.5}


def significant(rows: list[OffCpuFunction], min_us: float = 100.0) -> list[OffCpuFunction]:
    """The rows whose blocked time is at least twice its error and `min_us` a request."""
    return [r for r in rows if r.blocked_us >= max(min_us, 2 * r.error_us)]


def app_relative(stack: str, run_dir: str | None) -> str:
    """Script frames named relative to the capture's app tree, as the flame graphs name them."""
    return stack.replace(f"{run_dir.rstrip('/')}/app/", "") if run_dir else stack
