"""blocking-wait (informational): a PHP function that waits off the CPU in the request path, not
for SQL: a remote call (curl_exec, file_get_contents of a URL), a sleep, a lock (flock), a
process it starts, a large read. A page that waits on another service is as slow as that
service, and its worker can serve nobody else meanwhile.

From lockdown/analyzers/off_cpu.py: Excimer's wall samples less perf's on-CPU samples of the
worker, by PHP function, counting only waits in builtin calls longer than an Excimer period
(a sample held up for more than a period names the function that made the call), the run-queue
wait its CPU explains taken out. A function is reported
when its blocked time stands out of its sampling error (`off_cpu.significant`), it sends no SQL
(it calls no database builtin in xhprof; statements have their own detectors), and it blocks
at least `min_share_pct` of the timed requests' wall time and `min_ms` a request. What it
waited in comes from xhprof where the capture has it: the builtins it calls, by their wall
time (tideways_xhprof measures a builtin's wall time, waits included).

Informational: the fix depends on what is waited for (cache a remote answer, move the call to
a background job or a queue, give it a timeout, take the lock for less time), so there is no
patch to check; `share_pct` is None as for every informational finding, and the share is in
the summary and `details`.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..findings import Evidence, Finding
from ..off_cpu import of_capture, significant
from .context import Context

ID = "blocking-wait"
SUBJECT = "function"  # what tells its findings apart (findings.SUBJECT_KEYS)


@dataclass
class Case:
    """One PHP function blocked off the CPU, not for SQL (an off_cpu row)."""
    row: object                     # off_cpu's row: name, blocked_us, error_us, wall_us, queue_us, stack
    share: float                    # blocked time, % of the timed requests' wall time
    timed: int                      # timed requests the estimate rests on
    waited_in: list[tuple[str, float, float]]   # builtins it calls: (name, calls, wall us) a profiled request
    profiles: list[str]             # the profiled requests those come from
    requests: list[str]             # timed requests whose stacks end in it, sorted
    urls: list[str]


def decide(ctx: Context) -> list[Case]:
    cfg = ctx.thresholds.get(ID, {})
    found = of_capture(ctx.manifest, ctx.timed, [p for p in ctx.excimer_profiles if p.request in ctx.timed_ids],
                       ctx.native, list(ctx.xhprof_profiles.values()))
    if found is None or not found.wall_us:
        return []
    out = []
    for row in significant(found.functions):
        share = 100.0 * row.blocked_us / found.wall_us
        if row.sql or share < cfg.get("min_share_pct", 5.0) or row.blocked_us < cfg.get("min_ms", 1.0) * 1000:
            continue
        seen = sorted(p.request for p in ctx.excimer_profiles if p.request in ctx.timed_ids
                      and any(s.rsplit(";", 1)[-1] == row.name for s in p.stacks))
        out.append(Case(row, share, found.requests, _builtins_called(ctx, row.name), sorted(ctx.xhprof_profiles),
                        seen, sorted({ctx.url_of[r] for r in seen})))
        if len(out) >= cfg.get("max_findings", 3):
            break
    return out


def detect(ctx: Context) -> list[Finding]:
    return [describe(c) for c in decide(ctx)]


def describe(c: Case) -> Finding:
    row, share, waited_in, profiles = c.row, c.share, c.waited_in, c.profiles
    source = (f"Excimer wall samples less perf's on-CPU samples of {c.timed} timed requests "
              f"(analyzers/off_cpu.py)")
    evidence = [
        Evidence("blocked off the CPU, ms a request (+- one standard error)",
                 f"{row.blocked_us / 1000:.2f} +- {row.error_us / 1000:.2f}", source),
        Evidence("share of the requests' wall time, %", round(share, 1), source),
        Evidence("its wall time as the leaf of the PHP stacks, ms a request", round(row.wall_us / 1000, 2), source),
        Evidence("waiting for a CPU its own CPU explains, taken out, ms a request", round(row.queue_us / 1000, 2),
                 "the requests' run-queue delay (requests.jsonl sched) per unit of CPU"),
        Evidence("the stack that waited most (last frames)", row.stack, "excimer.jsonl"),
    ]
    for name, calls, wall_us in waited_in:
        evidence.append(Evidence(f"{name} called by it, calls and wall ms a request",
                                 f"{calls:g}, {wall_us / 1000:.2f}",
                                 f"xhprof of {', '.join(profiles[:3])}{' ...' if len(profiles) > 3 else ''}"))
    what = (f"; in xhprof it spends that time in {', '.join(n for n, _, _ in waited_in)}" if waited_in else "")
    summary = (f"{row.name} waits {row.blocked_us / 1000:.1f} ms a request off the CPU, not for SQL "
               f"({share:.0f}% of the timed requests' wall time){what}. A request that waits on a remote "
               f"service, a sleep, a lock or a slow read is as slow as what it waits for, and its php-fpm "
               f"worker serves nobody else meanwhile. Look at what it waits for: cache a remote answer, "
               f"move the call to a background job or a queue, give it a short timeout, hold the lock "
               f"for less time.")
    return Finding(id=ID, title=f"{row.name} waits {row.blocked_us / 1000:.1f} ms a request off the CPU",
                   severity="info", share_pct=None, summary=summary, evidence=evidence,
                   urls=c.urls, requests=c.requests[:5],
                   details={"function": row.name, "blocked_us": round(row.blocked_us, 1),
                            "error_us": round(row.error_us, 1), "queue_us": round(row.queue_us, 1),
                            "wall_share_pct": round(share, 2),
                            "stack": row.stack,
                            "waited_in": [{"builtin": n, "calls_per_request": k, "wall_us_per_request": round(w, 1)}
                                          for n, k, w in waited_in]})


def _builtins_called(ctx: Context, function: str, top: int = 3) -> list[tuple[str, float, float]]:
    """The builtins `function` calls directly, by wall time a profiled request: (name, calls,
    wall us), those with at least a tenth of the biggest one's time."""
    calls: dict[str, float] = {}
    wall: dict[str, float] = {}
    for edges in ctx.xhprof_edges.values():
        for (caller, callee), m in edges.items():
            if caller == function and ctx.is_internal(callee):
                calls[callee] = calls.get(callee, 0) + m["ct"]
                wall[callee] = wall.get(callee, 0) + m["wt"]
    n = len(ctx.xhprof_profiles) or 1
    rows = sorted(((c, calls[c] / n, wall[c] / n) for c in wall), key=lambda r: -r[2])[:top]
    return [r for r in rows if rows and r[2] >= 0.1 * rows[0][2] and r[2] > 0]
