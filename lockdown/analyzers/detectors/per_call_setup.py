"""per-call-setup: a function that redoes the same setup on every call -- a table parsed, a
lookup built, a file's lines split -- whatever its call count (docs/pathologies.md section 8,
"Per-call setup"; docs/detectors.md, "The same setup on every call").

Mechanism: the work that does not depend on the arguments (the setup) is done inside the
function, so a page that calls it N times does it N times. A cache of results (repeated-call)
does not help when the arguments differ; doing the setup once per request (a static, a
constant) does.

Signature, from xhprof's call graph of the profiled requests: a user function called at least
`min_calls_per_request` times in each profiled request that shows it, with a *loop callee*: a
builtin it calls `k` times per call, `k` a whole number at least `min_loop_calls`, the same
`k` in every profiled request (on every URL, with whatever arguments each page passes; the
function's own call count may differ). A loop the same size on every call, whatever the
call, runs over something the arguments do not change. The setup -- the loop callees (every builtin called a
whole `k >= min_loop_calls` times per call) and the function's own code, which runs the loop
-- must hold `min_setup_fraction` of the function's inclusive time (xhprof's wt): the other
callees, the per-call part, hold the rest. The setup dominates the call.

What is not flagged: ordinary per-row work -- a renderer called once per row calls its
builtins a few times per call (fewer than `min_loop_calls`), and a per-row loop over the row's
own items runs a different number of times per call from one page to the next (not a whole,
constant `k`). A function whose arguments repeat is repeated-call's as well; both findings
claim the function in the time accounting, which counts its time once.

Share: the function's inclusive share of the timed requests' Excimer samples (xhprof's
inclusive time over the profiled requests' wall time without Excimer, or with fewer than
MIN_SAMPLES samples: a fast page sampled every 2 ms gets few) times the setup
fraction times (calls - 1) / calls: what doing the setup once per request would save.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from ..builtins import ROOT
from ..findings import Evidence, Finding, severity_for
from .context import Context

ID = "per-call-setup"
SUBJECT = "function"  # what tells its findings apart (findings.SUBJECT_KEYS)
SHOWN = 5


@dataclass
class Case:
    function: str
    calls: float                    # per profiled request, median
    calls_seen: list                # the distinct call counts per profiled request
    loops: list                     # (builtin, calls per call), largest first
    others: list                    # (callee, calls per call, whole) of the rest
    setup_fraction: float           # of the function's inclusive wt, in the loop callees
    share: float                    # saved by doing the setup once per request, %
    whole_share: float              # the function's inclusive share, %
    basis: str                      # excimer | xhprof
    profiles: list
    urls: list


def children_of(ctx: Context) -> dict[str, dict[str, dict[str, dict]]]:
    """Request id -> caller -> callee -> {ct, wt} (xhprof's edges, indexed once)."""
    out: dict[str, dict[str, dict[str, dict]]] = {}
    for rid, edges in ctx.xhprof_edges.items():
        per = out[rid] = {}
        for (parent, child), v in edges.items():
            per.setdefault(parent, {})[child] = v
    return out


def _per_call(ctx: Context, fn: str, kids: dict) -> tuple[list, dict[str, set], dict[str, float], float]:
    """(profiles with fn, callee -> its calls per call in each, callee -> wt, fn's wt)."""
    rows = [rid for rid in sorted(ctx.xhprof) if ctx.xhprof[rid].get(fn, {}).get("calls")]
    ratios: dict[str, set] = {}
    wt: dict[str, float] = {}
    fn_wt = 0.0
    mine = {rid: {c: v for c, v in kids.get(rid, {}).get(fn, {}).items() if c != fn} for rid in rows}
    every = {c for m in mine.values() for c in m}
    for rid in rows:
        n = ctx.xhprof[rid][fn]["calls"]
        fn_wt += ctx.xhprof[rid][fn].get("inclusive_us", 0)
        for child in every:                  # a callee this request did not call: 0 per call
            v = mine[rid].get(child)
            ratios.setdefault(child, set()).add(v["ct"] / n if v else 0.0)
            wt[child] = wt.get(child, 0.0) + (v["wt"] if v else 0)
    return rows, ratios, wt, fn_wt


def builtin(ctx: Context, name: str, kids: dict) -> bool:
    """A builtin by the engine's lists; without them (older bundles), a callee that calls nothing."""
    if ctx.internal_functions:
        return ctx.is_internal(name)
    return not any(name in per for per in kids.values())


MIN_SAMPLES = 50    # Excimer samples of the timed requests below which the share is xhprof's


def _share(ctx: Context, fn: str, rows: list) -> tuple[float, str]:
    # a fast page sampled every 2 ms gets a sample on a few requests only (glossary: 4 to 11
    # samples in 200 requests), and a share of so few samples is anything from 0 to 60%
    if ctx.excimer_total >= MIN_SAMPLES:
        return ctx.php_share_pct(lambda f: f == fn), "excimer"
    parts = [100.0 * ctx.xhprof[rid][fn].get("inclusive_us", 0) / ctx.wall_us(rid) for rid in rows
             if ctx.wall_us(rid)]
    return (statistics.median(parts) if parts else 0.0), "xhprof"


def _case(ctx: Context, fn: str, cfg: dict, kids: dict) -> Case | None:
    rows, ratios, wt, fn_wt = _per_call(ctx, fn, kids)
    counts = [ctx.xhprof[rid][fn]["calls"] for rid in rows]
    if not rows or min(counts) < cfg.get("min_calls_per_request", 2) or not fn_wt:
        return None
    loops = [(c, next(iter(r))) for c, r in ratios.items()
             if len(r) == 1 and next(iter(r)) >= cfg.get("min_loop_calls", 8) and next(iter(r)).is_integer()
             and builtin(ctx, c, kids)]
    if not loops:
        return None
    loop_names = {c for c, _ in loops}
    # the setup: the loop callees and the function's own code (the loop itself); the per-call
    # part: the other callees
    # per profiled request, then the median: wall times are noisy on a busy host, and one request
    # preempted inside a per-call builtin must not decide it (the sum over requests let it)
    per = []
    for rid in rows:
        inc = ctx.xhprof[rid][fn].get("inclusive_us", 0)
        if inc:
            other = sum(v["wt"] for c, v in kids.get(rid, {}).get(fn, {}).items() if c != fn and c not in loop_names)
            per.append(max(0.0, 1.0 - other / inc))
    fraction = statistics.median(per) if per else 0.0
    if fraction < cfg.get("min_setup_fraction", 0.5):
        return None
    whole, basis = _share(ctx, fn, rows)
    n = statistics.median(counts)
    share = whole * fraction * (n - 1) / n
    if share < cfg.get("min_share_pct", 2.0):
        return None
    others = sorted(((c, statistics.mean(r), len(r) == 1 and next(iter(r)).is_integer())
                     for c, r in ratios.items() if c not in loop_names), key=lambda x: -wt[x[0]])[:SHOWN]
    urls = sorted({ctx.url_of.get(rid, "?") for rid in rows})
    return Case(fn, n, sorted(set(counts)), sorted(loops, key=lambda x: (-x[1], x[0])), others, fraction, share,
                whole, basis, rows, urls)


def decide(ctx: Context) -> list[Case]:
    cfg = ctx.thresholds.get(ID, {})
    least = cfg.get("min_calls_per_request", 2)
    functions = {fn for t in ctx.xhprof.values() for fn, v in t.items() if v.get("calls", 0) >= least}
    kids = children_of(ctx)
    cases = []
    for fn in sorted(functions):
        if fn == ROOT or ctx.is_internal(fn) or fn.startswith(("main()", "{")):
            continue
        c = _case(ctx, fn, cfg, kids)
        if c is not None:
            cases.append(c)
    return sorted(cases, key=lambda c: (-c.share, c.function))[:cfg.get("max_findings", 3)]


def detect(ctx: Context) -> list[Finding]:
    return [describe(c) for c in decide(ctx)]


def describe(c: Case) -> Finding:
    src_h = f"xhprof of {', '.join(c.profiles[:3])}{' ...' if len(c.profiles) > 3 else ''}"
    src_s = ("Excimer samples with it on the stack (timed requests)" if c.basis == "excimer"
             else "xhprof inclusive time over the profiled requests' wall time")
    loops = ", ".join(f"{b} ({k:g} per call)" for b, k in c.loops)
    evidence = [
        Evidence("calls per profiled request (median; each count seen)",
                 f"{c.calls:g} ({', '.join(f'{n:g}' for n in c.calls_seen)})", src_h),
        Evidence("builtins called the same whole number of times on every call, in every profiled request",
                 loops, src_h),
        Evidence("the setup's part of its inclusive time: all but its other callees (xhprof wt)",
                 f"{100 * c.setup_fraction:.0f}%", src_h),
        Evidence("its inclusive share of request time, %", round(c.whole_share, 2), src_s),
        Evidence("saved by doing the setup once per request: share x setup part x (calls-1)/calls, %",
                 round(c.share, 2), src_s),
    ]
    if c.others:
        evidence.append(Evidence("its other callees (calls per call)", ", ".join(
            f"{n} ({k:.3g}{'' if whole else ', varies'})" for n, k, whole in c.others), src_h))
    top = c.loops[0]
    return Finding(
        id=ID, severity=severity_for(c.share), share_pct=round(c.share, 2),
        title=f"{c.function} redoes the same setup on each of its {c.calls:g} calls a request",
        summary=(f"On every call {c.function} calls {top[0]} {top[1]:g} times, the same on every call and every "
                 f"page, {100 * c.setup_fraction:.0f}% of its time: work its arguments do not change, done "
                 f"{c.calls:g} times a request. Do it once per request (a static variable or a constant) and "
                 f"keep the per-call part."),
        urls=c.urls, requests=c.profiles[:5], evidence=evidence,
        details={"function": c.function, "calls_per_request": c.calls, "calls_seen": c.calls_seen,
                 "loops": [{"builtin": b, "per_call": k} for b, k in c.loops],
                 "setup_fraction": round(c.setup_fraction, 3), "whole_share_pct": round(c.whole_share, 2),
                 "basis": c.basis,
                 "no_patch": "where the setup ends and the per-call part begins is the app's: keep the setup's "
                             "result in a static variable, computed on the first call"})
