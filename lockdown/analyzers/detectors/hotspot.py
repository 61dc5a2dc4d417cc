"""hotspot: a PHP function under which a large part of the sampled request time goes that no
finding explains -- a finding of its own, so that a pattern just under a known detector's
threshold (a function called 40 times where repeated-call wants 50, a candidate the argument
probe dismissed) is still reported when it is that large (docs/detectors.md, "Time nobody explains").

A post-detection step, not an ordinary detector: what is unexplained depends on every other
finding, so it cannot run beside them. `detect(ctx)` in detectors/__init__.py runs it last
(`AFTER`), on the other detectors' findings; `lockdown run` runs it again after the argument
probe (`after_probe`), because a dismissed repeated-call candidate explains nothing, and then
the probe's verdict on the function says whether its arguments repeat. Its findings own no
time in the accounting (accounting.UNCLAIMED): they point at unexplained time, they do not
explain it. The rejected alternative, a detector in the parallel list reading the accounting of
findings made before it, would have seen only the findings of the detectors listed before it.

Signature, from the time accounting (analyzers/accounting.py) of the other findings: the
unexplained sampled time (Excimer, split by perf where it ran) under each PHP user function,
inclusive and self, less the database's time (a slice whose innermost function calls a
database builtin, by xhprof's call graph, or that perf saw in a database client: the query
detectors judge statements; a clean app's largest hotspot is its queries). A function is a candidate when that time is at least
`min_share_pct` of the timed requests' sampled time, `min_ms_per_request` per sampled request
and `min_samples` Excimer periods, and either it runs at least `min_calls_per_request` times a
profiled request (xhprof) or its own code holds `min_share_pct` itself: an entry point called
once passes its time on to what it calls; a function called more often must take at least
`min_us_per_call` a call (a getter called 50 times at 7 us is where a clean app's time goes,
not a pattern; repeated-call's floor), unless it holds `always_share_pct`: no per-call floor
hides a hotspot that large. Of nested candidates the narrowest is kept: one
holding `narrow_share` of an enclosing candidate's time replaces it. At most `max_findings`,
largest first; severity from the share (`high_share_pct`, `medium_share_pct`).

Share of request time: the candidate's unexplained inclusive time over the sampled time, as the
accounting counts it; nothing a fix would save is assumed (there is no known fix).
"""
from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from .. import accounting
from ..builtins import ROOT
from ..findings import Evidence, Finding, severity_for
from .context import Context

ID = "hotspot"
SUBJECT = "function"  # what tells its findings apart (findings.SUBJECT_KEYS)
AFTER = True          # runs after the other detectors, on their findings (module docstring)
SHOWN = 5             # requests, callers and callees named


def user_function(frame: str) -> bool:
    """A PHP function or method of the app, not a file's top-level code nor a marker."""
    if frame.startswith("{closure"):
        return True
    return not (accounting.is_file_frame(frame) or frame.startswith("[") or frame == accounting.NO_STACK)


@dataclass
class Spot:
    """The unexplained time under one PHP function, outside database waits."""
    function: str
    inclusive_us: float = 0.0
    self_us: float = 0.0
    requests: Counter = field(default_factory=Counter)
    urls: Counter = field(default_factory=Counter)
    paths: Counter = field(default_factory=Counter)
    below: Counter = field(default_factory=Counter)     # user functions under it -> their time under it


def database_time(s, db: set[str]) -> bool:
    """A slice in a function that calls a database builtin (its wait, its client's work), or in
    a database client's frames: the statements' time, which the query detectors judge."""
    leaf = s.stack[-1] if s.stack else ""
    if leaf in db or (ROOT in db and accounting.is_file_frame(leaf)):
        return True
    return s.native is not None and accounting.family_of(accounting.builtin_of(s.native) or "") == "database"


def spots(unexplained: list, db: set[str], url_of) -> dict[str, Spot]:
    """Function -> its Spot, from the accounting's unexplained slices."""
    out: dict[str, Spot] = {}
    for s, us in unexplained:
        if us <= 0 or not s.stack or database_time(s, db):
            continue
        frames = [(i, f) for i, f in enumerate(s.stack) if i > 0 and user_function(f)]
        seen: set[str] = set()
        for n, (i, f) in enumerate(frames):
            if f in seen:
                continue                  # recursion: once
            seen.add(f)
            sp = out.setdefault(f, Spot(f))
            sp.inclusive_us += us
            sp.requests[s.request] += us
            sp.urls[url_of.get(s.request, "?")] += us
            sp.paths[s.stack[:i + 1]] += us
            for g in {g for _, g in frames[n + 1:]} - {f}:
                sp.below[g] += us
        if frames and frames[-1][0] == len(s.stack) - 1:
            out[s.stack[-1]].self_us += us
    return out


@dataclass
class Case:
    """One unexplained hotspot."""
    function: str
    share: float                    # unexplained inclusive time, % of the sampled time
    self_share: float               # ... in its own code (and the builtins it calls)
    ms_per_request: float           # over the sampled requests
    samples: float                  # Excimer periods of it
    calls: float | None             # per profiled request (xhprof, median); None: not profiled
    path: list                      # its most common call path
    path_pct: float
    requests: list                  # timed requests with most of it
    request_count: int
    urls: list
    callers: list                   # (caller, calls per profiled request), most first
    callees: list                   # (callee, calls per call, us per call), heaviest first
    uniform: bool                   # every callee called a whole multiple of its calls
    explained_pct: float | None     # what the findings explain of the sampled time
    profiles: list                  # the profiled requests the calls come from
    probe: dict | None = None       # the argument probe's counts, when it probed the function
    basis: str = ""
    high: float = 15.0              # severity: high from this share, medium from the next
    medium: float = 8.0


def others(ctx: Context) -> list[Finding]:
    """The other detectors' findings (what detectors.detect gives this step)."""
    from . import link_consequences, modules
    found: list[Finding] = []
    for mod in modules():
        if not getattr(mod, "AFTER", False):
            found.extend(mod.detect(ctx))
    return link_consequences(ctx, found)


def _calls(ctx: Context, fn: str) -> tuple[float | None, list, list, bool, list]:
    """xhprof: calls per profiled request (median), callers, callees per call, uniform, profiles."""
    rows = [(rid, t[fn]) for rid, t in sorted(ctx.xhprof.items()) if fn in t]
    if not rows:
        return None, [], [], False, []
    calls = statistics.median(t["calls"] for _, t in rows)
    callers: Counter = Counter()
    callees: dict[str, list] = defaultdict(lambda: [0, 0])
    uniform = True
    for rid, t in rows:
        for (parent, child), v in ctx.xhprof_edges[rid].items():
            if child == fn:
                callers[parent] += v["ct"]
            elif parent == fn:
                callees[child][0] += v["ct"]
                callees[child][1] += v["wt"]
                uniform = uniform and v["ct"] % t["calls"] == 0
    total = sum(t["calls"] for _, t in rows)
    return (calls, [(c, n / len(rows)) for c, n in callers.most_common(SHOWN)],
            sorted(((c, ct / total, wt / total) for c, (ct, wt) in callees.items()), key=lambda x: -x[2])[:SHOWN],
            uniform, [rid for rid, _ in rows])


def _candidates(ctx: Context, found: dict[str, Spot], total: float, sampled: int, period_us: float) -> list[str]:
    cfg = ctx.thresholds.get(ID, {})
    min_share, min_calls = cfg.get("min_share_pct", 5.0), cfg.get("min_calls_per_request", 2)
    out = []
    for fn, sp in found.items():
        if (100.0 * sp.inclusive_us / total < min_share
                or sp.inclusive_us / sampled < cfg.get("min_ms_per_request", 0.5) * 1000
                or sp.inclusive_us < cfg.get("min_samples", 10) * period_us):
            continue
        calls = _calls(ctx, fn)[0]
        if (calls is None or calls < min_calls) and 100.0 * sp.self_us / total < min_share:
            continue                      # an entry point: its time is its callees'
        if (calls and sp.inclusive_us / sampled / calls < cfg.get("min_us_per_call", 20)
                and 100.0 * sp.inclusive_us / total < cfg.get("always_share_pct", 25.0)):
            continue                      # cheap calls, many of them: a getter (unless that large)
        out.append(fn)
    narrow = cfg.get("narrow_share", 0.5)
    # the narrowest: a candidate holding `narrow` of an enclosing one's time replaces it
    return [f for f in out if not any(g != f and found[f].below[g] >= narrow * found[f].inclusive_us for g in out)]


def decide(ctx: Context, findings: list[Finding] | None = None) -> list[Case]:
    found = [f for f in (others(ctx) if findings is None else findings) if f.id != ID]
    acc = accounting.of_context(ctx, found)
    total, sampled = acc.overall.total_us, acc.overall.sampled_requests
    if not total or not sampled or not acc.period_ms:
        return []                     # no PHP stacks (perf alone, or nothing sampled)
    db = (accounting.db_callers(ctx.xhprof_profiles.values(), ctx.is_internal if ctx.internal_functions else None)
          if ctx.xhprof_profiles else set())
    by_fn = spots(acc.unexplained_slices, db, ctx.url_of)
    chosen = _candidates(ctx, by_fn, total, sampled, acc.period_ms * 1000.0)
    cfg = ctx.thresholds.get(ID, {})
    cases = []
    for fn in sorted(chosen, key=lambda f: (-by_fn[f].inclusive_us, f))[:cfg.get("max_findings", 5)]:
        sp = by_fn[fn]
        calls, callers, callees, uniform, profiles = _calls(ctx, fn)
        path, on_path = max(sp.paths.items(), key=lambda kv: (kv[1], kv[0]))
        cases.append(Case(fn, 100.0 * sp.inclusive_us / total, 100.0 * sp.self_us / total,
                          sp.inclusive_us / sampled / 1000.0, sp.inclusive_us / (acc.period_ms * 1000.0), calls,
                          list(path), 100.0 * on_path / sp.inclusive_us,
                          [r for r, _ in sp.requests.most_common(SHOWN)], len(sp.requests),
                          [u for u, _ in sp.urls.most_common()], callers, callees, uniform,
                          acc.overall.explained_pct, profiles, basis=acc.basis,
                          high=cfg.get("high_share_pct", 15.0), medium=cfg.get("medium_share_pct", 8.0)))
    return cases


def detect(ctx: Context, findings: list[Finding] | None = None) -> list[Finding]:
    return [describe(c) for c in decide(ctx, findings)]


# -- after the argument probe (lockdown run) ----------------------------------------------------

def probe_of(fn: str, dismissed: list[dict], findings: list[Finding]) -> dict | None:
    """The argument probe's counts for `fn`, from a dismissed candidate or a kept finding."""
    for d in dismissed:
        p = d.get("probe") or {}
        if p.get("function") == fn and p.get("calls"):
            return p
    for f in findings:
        p = (f.details or {}).get("probe") or {}
        if p.get("function") == fn and p.get("calls"):
            return p
    return None


def after_probe(ctx: Context, findings: list[Finding], dismissed: list[dict]) -> list[Finding]:
    """The run's findings after the argument probe with the hotspot findings made again on
    them (a dismissed candidate explains nothing now), each with the probe's verdict on its
    function when the probe ran it."""
    rest = [f for f in findings if f.id != ID]
    cases = decide(ctx, rest)
    for c in cases:
        c.probe = probe_of(c.function, dismissed, rest)
    from . import rank
    return rank(rest + [describe(c) for c in cases])


def candidates(findings: list[Finding]) -> dict[str, list[str]]:
    """function -> URLs, for the hotspot findings the argument probe has not run (a second
    probe pass, `lockdown run`'s hotspot step)."""
    return {f.details["function"]: sorted(f.urls) for f in findings
            if f.id == ID and f.details.get("function") and not f.details.get("probe")}


def attach_probe(findings: list[Finding], located: dict[str, str], rows: dict[str, list[dict]]) -> list[Finding]:
    """The hotspot findings with the probe's counts of their function, where it ran them."""
    from .repeated_call import _probe_summary
    for f in findings:
        fn = f.details.get("function") if f.id == ID else None
        p = _probe_summary(fn, located, rows) if fn else None
        if p is not None:
            describe_probed(f, p)
    return findings


def describe_probed(f: Finding, p: dict) -> None:
    """A hotspot finding with the probe's counts: evidence, what to look at, the summary."""
    d = f.details
    case = Case(d["function"], f.share_pct or 0.0, d.get("self_pct") or 0.0, 0.0, 0.0, d.get("calls_per_request"),
                [], 0.0, [], 0, [], [], [], bool(d.get("uniform_callees")), None, [], probe=p)
    d["probe"] = p
    f.evidence.append(describe_probe(p))
    d["look_at"] = look = describe_look(case)
    f.summary = f.summary.rsplit(" No finding explains it.", 1)[0] + f" No finding explains it. {look}"


# -- the finding ---------------------------------------------------------------------------------

def describe(c: Case) -> Finding:
    src_x = "analyzers/accounting.py: Excimer samples no finding explains, database waits left out"
    src_h = f"xhprof of {', '.join(c.profiles[:3])}{' ...' if len(c.profiles) > 3 else ''}"
    calls = "-" if c.calls is None else f"{c.calls:g}"
    evidence = [
        Evidence("unexplained time under it (inclusive), % of the sampled request time", round(c.share, 2), src_x),
        Evidence("... in its own code and the builtins it calls (self), %", round(c.self_share, 2), src_x),
        Evidence("ms per sampled request", round(c.ms_per_request, 3), src_x),
        Evidence("calls per profiled request", calls, src_h if c.calls is not None else "no xhprof profile shows it"),
        Evidence("call path", " > ".join(c.path[-6:]) + f" ({c.path_pct:.0f}% of its time)", src_x),
        Evidence("requests that show it", f"{c.request_count}: {', '.join(c.requests)}", src_x),
    ]
    if c.callers:
        evidence.append(Evidence("callers (calls per profiled request)",
                                 ", ".join(f"{p} ({n:g})" for p, n in c.callers), src_h))
    if c.callees:
        evidence.append(Evidence("callees per call (calls, us)",
                                 ", ".join(f"{n} ({ct:.3g}, {us:.0f} us)" for n, ct, us in c.callees), src_h))
    if c.probe:
        evidence.append(describe_probe(c.probe))
    look = describe_look(c)
    return Finding(
        id=ID, severity=severity_for(c.share, high=c.high, medium=c.medium), share_pct=round(c.share, 2),
        title=f"{c.function}: {c.share:.1f}% of the sampled request time that no finding explains",
        summary=(f"{c.function} holds {c.share:.1f}% of the sampled request time ({c.ms_per_request:.2f} ms a "
                 f"request, {c.self_share:.1f}% in its own code), called {calls} times a profiled request. "
                 f"No finding explains it. {look}"),
        urls=c.urls, evidence=evidence,
        details={"function": c.function, "share_pct": round(c.share, 2), "self_pct": round(c.self_share, 2),
                 "calls_per_request": c.calls, "path": c.path, "requests": c.requests,
                 "callers": [p for p, _ in c.callers], "callees": [n for n, _, _ in c.callees],
                 "uniform_callees": c.uniform, "probe": c.probe, "look_at": look,
                 "no_patch": "a hotspot is time no known pattern explains: there is no generated fix; "
                             "see what to look at"})


def describe_probe(p: dict) -> Evidence:
    return Evidence("calls that repeat an earlier (object, arguments) pair (argument probe)",
                    f"{p['repeats']} of {p['calls']} ({p['repeat_pct']:.0f}%)",
                    f"argument probe: {p.get('requests', 0)} request(s); defined at {p.get('located')}")


def describe_look(c: Case) -> str:
    """What to look at, from what is known."""
    if c.probe and c.probe.get("repeat_pct", 0) >= 25:
        return (f"The argument probe saw {c.probe['repeat_pct']:.0f}% of its calls repeat an earlier (object, "
                f"arguments) pair: a per-request cache of its result is the first thing to try.")
    if c.calls is not None and c.calls >= 2 and c.uniform:
        differ = (f" The argument probe saw its arguments differ ({c.probe['repeat_pct']:.0f}% repeats), so a "
                  f"cache of results would not help." if c.probe else "")
        return (f"Every call makes the same calls (the same work redone on each of its {c.calls:g} calls); "
                f"look for per-call setup that does not depend on its arguments and do it once per request "
                f"(a static or a constant).{differ}")
    if c.self_share >= 0.5 * c.share:
        return "Most of it is its own code and the builtins it calls: look at its loops and what they call."
    return "Most of it is in the functions it calls: look at them in the flame graph under this call path."
