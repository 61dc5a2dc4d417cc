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
inclusive and self, less the database's time (a slice whose innermost function calls a database
builtin, by xhprof's call graph, or that perf saw in a database client: the query detectors
judge statements; a clean app's largest hotspot is its queries). A function is a candidate when
that time is at least `min_share_pct` of the timed requests' sampled time, `min_ms_per_request`
per sampled request and `min_samples` Excimer samples (a late sample, which counts every period
it covers, is one: on a busy host the periods a worker spends waiting for a CPU land on whatever
it runs when it resumes, so a few late samples can make a cheap function look large), and
either it runs at least
`min_calls_per_request` times a profiled request (xhprof) or its own code holds `min_share_pct`
itself: an entry point called once passes its time on to what it calls; a function called more
often must take at least `min_us_per_call` a call (a getter called 50 times at 7 us is where a
clean app's time goes, not a pattern; repeated-call's floor; the sampled time less the part the
requests spent waiting for a CPU, `running_part`), unless it holds `always_share_pct`: no
per-call floor hides a hotspot that large. Of nested candidates the narrowest is kept: one
holding `narrow_share` of an enclosing candidate's time replaces it. At most `max_findings`,
largest first; severity from the share (`high_share_pct`, `medium_share_pct`).

Share of request time: the candidate's unexplained inclusive time over the sampled time, as the
accounting counts it; nothing a fix would save is assumed (there is no known fix).

Builtin families and engine subsystems (where perf ran): the unexplained on-CPU slices left
after the function findings -- outside the database's time and outside every reported function
hotspot's stack, so no moment is counted by two hotspot findings -- each go to one bucket: the
builtin family of the builtin it ran in (accounting.FAMILIES: preg_*, file system, file i/o,
serialization, ...) or, outside any builtin, its engine subsystem (subsystems.toml; not `vm`,
PHP code itself, which the function hotspots speak for, nor `builtin`, `other` or
`profiler-ext`, the capture's own profiler). A bucket with at least `native_min_share_pct` of
the sampled time, `min_ms_per_request` and `native_min_samples` perf samples is a finding
(`native_max_findings`, largest first), naming its builtins, their PHP callers, the calls a
profiled request makes (xhprof) and what to look at for that family or subsystem. The shares of
all hotspot findings add up to at most the unexplained share.
"""
from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from .. import accounting, subsystems
from ..builtins import ROOT
from ..closure_names import frames_named
from ..findings import Evidence, Finding, severity_for
from .context import Context
from .repeated_call import changes_state_each_call, dispatchers

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
    samples: set = field(default_factory=set)           # the Excimer samples (accounting.Slice.sample) under it


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
            sp.samples.add(s.sample)
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
    dispatcher: bool = False        # it runs callbacks it is given (repeated_call.dispatchers)
    state_change: str | None = None  # a state-changing builtin each call reaches (flush, fwrite, ...)


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


def running_part(ctx: Context) -> float:
    """The part of the timed requests' wall time not spent waiting for a CPU (the scheduler's
    run-queue delay, requests.jsonl `sched`): 1.0 without it. Excimer samples wall time, so on
    a busy host a call's sampled time stretches by the wait (CI: 75% of minicms-clean's wall time
    queued, theme_get's 5 us calls sampled at 24 us); the per-call floor is about the work."""
    wall = queued = 0
    for r in ctx.timed:
        delay = (r.sched or {}).get("run_delay_us")
        if delay is not None and r.wall_us:
            wall += r.wall_us
            queued += min(delay, r.wall_us)
    return 1.0 - queued / wall if wall else 1.0


def _candidates(ctx: Context, found: dict[str, Spot], total: float, sampled: int) -> list[str]:
    cfg = ctx.thresholds.get(ID, {})
    min_share, min_calls = cfg.get("min_share_pct", 5.0), cfg.get("min_calls_per_request", 2)
    running = running_part(ctx)
    out = []
    for fn, sp in found.items():
        if (100.0 * sp.inclusive_us / total < min_share
                or sp.inclusive_us / sampled < cfg.get("min_ms_per_request", 0.5) * 1000
                or len(sp.samples) < cfg.get("min_samples", 10)):
            continue
        calls = _calls(ctx, ctx.xhprof_name(fn))[0]
        if (calls is None or calls < min_calls) and 100.0 * sp.self_us / total < min_share:
            continue                      # an entry point: its time is its callees'
        if (calls and running * sp.inclusive_us / sampled / calls < cfg.get("min_us_per_call", 20)
                and 100.0 * sp.inclusive_us / total < cfg.get("always_share_pct", 25.0)):
            continue                      # cheap calls, many of them: a getter (unless that large)
        out.append(fn)
    narrow = cfg.get("narrow_share", 0.5)
    # the narrowest: a candidate holding `narrow` of an enclosing one's time replaces it
    return [f for f in out if not any(g != f and found[f].below[g] >= narrow * found[f].inclusive_us for g in out)]


def _state_change(ctx: Context, fn: str) -> str | None:
    """The state-changing builtin every call of `fn` reaches in some profiled request
    (repeated_call.changes_state_each_call): a cache of its result would skip the effect."""
    for rid, t in sorted(ctx.xhprof.items()):
        if fn in t and t[fn]["calls"]:
            found = changes_state_each_call(ctx.xhprof_edges[rid], fn, t[fn]["calls"])
            if found:
                return found
    return None


def decide(ctx: Context, findings: list[Finding] | None = None) -> list:
    found = [f for f in (others(ctx) if findings is None else findings) if f.id != ID]
    acc = accounting.of_context(ctx, found)
    total, sampled = acc.overall.total_us, acc.overall.sampled_requests
    if not total or not sampled or not acc.period_ms:
        return []                     # no PHP stacks (perf alone, or nothing sampled)
    db = (frames_named(accounting.db_callers(ctx.xhprof_profiles.values(),
                                             ctx.is_internal if ctx.internal_functions else None), ctx.closure_joins)
          if ctx.xhprof_profiles else set())
    by_fn = spots(acc.unexplained_slices, db, ctx.url_of)
    chosen = _candidates(ctx, by_fn, total, sampled)
    cfg = ctx.thresholds.get(ID, {})
    given = set().union(*(dispatchers(edges, ctx.is_internal) for edges in ctx.xhprof_edges.values()))
    cases = []
    for fn in sorted(chosen, key=lambda f: (-by_fn[f].inclusive_us, f))[:cfg.get("max_findings", 5)]:
        sp = by_fn[fn]
        calls, callers, callees, uniform, profiles = _calls(ctx, ctx.xhprof_name(fn))
        path, on_path = max(sp.paths.items(), key=lambda kv: (kv[1], kv[0]))
        cases.append(Case(fn, 100.0 * sp.inclusive_us / total, 100.0 * sp.self_us / total,
                          sp.inclusive_us / sampled / 1000.0, sp.inclusive_us / (acc.period_ms * 1000.0), calls,
                          list(path), 100.0 * on_path / sp.inclusive_us,
                          [r for r, _ in sp.requests.most_common(SHOWN)], len(sp.requests),
                          [u for u, _ in sp.urls.most_common()], callers, callees, uniform,
                          acc.overall.explained_pct, profiles, basis=acc.basis,
                          high=cfg.get("high_share_pct", 15.0), medium=cfg.get("medium_share_pct", 8.0),
                          dispatcher=ctx.xhprof_name(fn) in given,
                          state_change=_state_change(ctx, ctx.xhprof_name(fn))))
    if acc.perf:
        cases += decide_native(ctx, acc, db, {c.function for c in cases})
    return cases


def detect(ctx: Context, findings: list[Finding] | None = None) -> list[Finding]:
    return [describe(c) for c in decide(ctx, findings)]


# -- builtin families and engine subsystems ------------------------------------------------------

FAMILY, SUBSYSTEM = "builtin family", "subsystem"
# subsystems that are no hotspot of their own: PHP code (the function hotspots'), builtins whose
# handler perf did not name, what no rule knows, and the capture's own profiler
NOT_A_SUBSYSTEM_HOTSPOT = frozenset({"vm", "builtin", "other", "profiler-ext"})


@dataclass
class NativeSpot:
    """Unexplained on-CPU time of one builtin family or engine subsystem."""
    kind: str                                            # FAMILY | SUBSYSTEM
    name: str
    us: float = 0.0
    samples: int = 0                                     # perf slices
    requests: Counter = field(default_factory=Counter)
    urls: Counter = field(default_factory=Counter)
    callers: Counter = field(default_factory=Counter)    # innermost PHP function -> us
    members: Counter = field(default_factory=Counter)    # builtins (families) -> us
    paths: Counter = field(default_factory=Counter)


def native_bucket(s) -> tuple[str, str, str | None] | None:
    """(kind, name, builtin) of the one bucket an on-CPU slice counts toward, or None."""
    b = accounting.builtin_of(s.native)
    if b is not None:
        return FAMILY, accounting.family_of(b), b
    sub = subsystems.categorise(list(s.native))
    return None if sub in NOT_A_SUBSYSTEM_HOTSPOT else (SUBSYSTEM, sub, None)


def native_spots(unexplained: list, db: set[str], url_of, under: set[str]) -> dict[tuple, NativeSpot]:
    """(kind, name) -> its NativeSpot: each unexplained perf slice outside the database's time
    and outside the stacks of the functions in `under` (the function hotspots) counted once."""
    out: dict[tuple, NativeSpot] = {}
    for s, us in unexplained:
        if us <= 0 or not s.on_cpu or s.native is None or database_time(s, db) or under.intersection(s.stack):
            continue
        got = native_bucket(s)
        if got is None:
            continue
        kind, name, member = got
        sp = out.setdefault((kind, name), NativeSpot(kind, name))
        sp.us += us
        sp.samples += 1
        sp.requests[s.request] += us
        sp.urls[url_of.get(s.request, "?")] += us
        innermost = s.stack[-1] if s.stack else accounting.NO_STACK
        inner = next((f for f in reversed(s.stack) if user_function(f)), innermost)
        sp.callers[inner] += us
        sp.paths[s.stack + ((member,) if member else ())] += us
        if member:
            sp.members[member] += us
    return out


@dataclass
class NativeCase:
    """One unexplained builtin family or subsystem."""
    kind: str
    name: str
    share: float
    ms_per_request: float
    samples: int
    path: list
    path_pct: float
    requests: list
    request_count: int
    urls: list
    callers: list                   # (innermost PHP function, % of its time)
    members: list                   # (builtin, % of its time, calls per profiled request or None)
    profiles: list
    high: float = 15.0
    medium: float = 8.0


def _member_calls(ctx: Context, name: str) -> tuple[float | None, list]:
    rows = [(rid, t[name]["calls"]) for rid, t in sorted(ctx.xhprof.items()) if name in t]
    return (statistics.median(n for _, n in rows) if rows else None), [rid for rid, _ in rows]


def decide_native(ctx: Context, acc, db: set[str], under: set[str]) -> list[NativeCase]:
    cfg = ctx.thresholds.get(ID, {})
    total, sampled = acc.overall.total_us, acc.overall.sampled_requests
    out = []
    for sp in native_spots(acc.unexplained_slices, db, ctx.url_of, under).values():
        if (100.0 * sp.us / total < cfg.get("native_min_share_pct", 5.0)
                or sp.us / sampled < cfg.get("min_ms_per_request", 0.5) * 1000
                or sp.samples < cfg.get("native_min_samples", 10)):
            continue
        members, profiles = [], set()
        for b, us in sp.members.most_common(SHOWN):
            calls, rids = _member_calls(ctx, b)
            members.append((b, 100.0 * us / sp.us, calls))
            profiles.update(rids)
        path, on_path = max(sp.paths.items(), key=lambda kv: (kv[1], kv[0]))
        out.append(NativeCase(sp.kind, sp.name, 100.0 * sp.us / total, sp.us / sampled / 1000.0, sp.samples,
                              list(path), 100.0 * on_path / sp.us, [r for r, _ in sp.requests.most_common(SHOWN)],
                              len(sp.requests), [u for u, _ in sp.urls.most_common()],
                              [(f, 100.0 * us / sp.us) for f, us in sp.callers.most_common(SHOWN)], members,
                              sorted(profiles), high=cfg.get("high_share_pct", 15.0),
                              medium=cfg.get("medium_share_pct", 8.0)))
    out.sort(key=lambda c: (-c.share, c.kind, c.name))
    return out[:cfg.get("native_max_findings", 3)]


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
        if isinstance(c, Case):
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
                [], 0.0, [], 0, [], [], [], bool(d.get("uniform_callees")), None, [], probe=p,
                dispatcher=bool(d.get("dispatcher")), state_change=d.get("state_change"))
    d["probe"] = p
    f.evidence.append(describe_probe(p))
    d["look_at"] = look = describe_look(case)
    f.summary = f.summary.rsplit(" No finding explains it.", 1)[0] + f" No finding explains it. {look}"


# -- the finding ---------------------------------------------------------------------------------

def describe(c) -> Finding:
    if isinstance(c, NativeCase):
        return describe_native(c)
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
                 "dispatcher": c.dispatcher, "state_change": c.state_change,
                 "no_patch": "a hotspot is time no known pattern explains: there is no generated fix; "
                             "see what to look at"})


def describe_probe(p: dict) -> Evidence:
    return Evidence("calls that repeat an earlier (object, arguments) pair (argument probe)",
                    f"{p['repeats']} of {p['calls']} ({p['repeat_pct']:.0f}%)",
                    f"argument probe: {p.get('requests', 0)} request(s); defined at {p.get('located')}")


def describe_look(c: Case) -> str:
    """What to look at, from what is known."""
    if c.dispatcher:       # its calls run what it is given: a cache of its result is no fix
        return ("It runs callbacks it is given (a hook or event dispatcher), so its time is theirs and a cache of "
                "its result would skip their work: look at the heaviest callbacks under it in the flame graph.")
    if c.state_change:     # each call changes state: a cache of its result would skip the change
        flush = c.state_change.lower() in ("flush", "ob_flush")
        return (f"Each of its calls reaches {c.state_change}, which changes state, so a cache of its result would "
                f"skip that: "
                + ("its time is largely output handed to the web server (flushing the buffer); flush less often, "
                   "or not at all before the end of the page." if flush else
                   "look at what it does on every call and whether that must happen each time."))
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


# what to look at, by builtin family or subsystem (the family's or subsystem's usual causes)
LOOK_AT = {
    (FAMILY, "regex"): "patterns matched or replaced on every call: a pattern built per call (variable parts in it) "
                       "is compiled anew; reuse one pattern, or a string function where no pattern is needed",
    (FAMILY, "filesystem"): "file tests and directory reads on every request: the paths tried (strace, or the "
                            "failed-lookups detector's counts) and a per-request or generated cache of the answers",
    (FAMILY, "file i/o"): "files read and parsed on every request: keep the parsed form (a generated PHP array "
                          "OPcache holds) instead of reading the file again",
    (FAMILY, "json/serialize"): "data encoded or decoded on every request: decode once and keep the result, or "
                                "store it in the form it is used in",
    (FAMILY, "hash/encoding"): "hashes and encodings computed on every request: the inputs that do not change "
                               "can be hashed once and kept",
    (FAMILY, "class/function lookup"): "class and function lookups (autoloading, class_exists, call_user_func): "
                                       "the autoloader and the lookups that miss",
    (FAMILY, "date/time"): "dates formatted or parsed per call: the same timestamp formatted again, or "
                           "date_default_timezone_set missing (a time zone looked up)",
    (FAMILY, "output"): "output built in pieces or buffered several times over: the buffers and what writes them",
    (FAMILY, "array"): "arrays sorted, merged or searched in loops: in_array over a list that could be keys, "
                       "a sort redone per call",
    (FAMILY, "string"): "strings built, split or replaced in loops: the same text processed again",
    (SUBSYSTEM, "gc"): "the cycle collector: many objects with reference cycles made per request; fewer "
                       "temporary objects, or gc_disable around a bulk step",
    (SUBSYSTEM, "memory"): "the allocator: many small temporary values (strings, arrays) made and freed in loops",
    (SUBSYSTEM, "hashtable"): "arrays built, copied and looked up in PHP code: an array copied on write, a "
                              "lookup table rebuilt per call",
    (SUBSYSTEM, "string"): "strings concatenated and copied in PHP code",
    (SUBSYSTEM, "compile"): "PHP compiled while serving: eval, create_function, or files OPcache does not keep",
    (SUBSYSTEM, "fs-io"): "the engine's own file work: include and require resolving paths, streams opened",
    (SUBSYSTEM, "net-io"): "network reads and writes outside the database client: the response's size, a "
                           "remote call",
    (SUBSYSTEM, "regex"): "the regex engine outside preg_* builtins perf named: patterns compiled or matched",
}


def describe_native(c: NativeCase) -> Finding:
    src_x = "analyzers/accounting.py: perf slices no finding explains, database and function hotspots left out"
    src_h = f"xhprof of {', '.join(c.profiles[:3])}{' ...' if len(c.profiles) > 3 else ''}"
    what = f"{c.kind} {c.name}"
    evidence = [
        Evidence(f"unexplained on-CPU time in the {what}, % of the sampled request time", round(c.share, 2), src_x),
        Evidence("ms per sampled request", round(c.ms_per_request, 3), src_x),
        Evidence("perf samples", c.samples, src_x),
        Evidence("call path", " > ".join(c.path[-6:]) + f" ({c.path_pct:.0f}% of its time)", src_x),
        Evidence("PHP callers (% of its time)", ", ".join(f"{f} ({p:.0f}%)" for f, p in c.callers), src_x),
        Evidence("requests that show it", f"{c.request_count}: {', '.join(c.requests)}", src_x),
    ]
    if c.members:
        evidence.append(Evidence("builtins (% of its time, calls per profiled request)", ", ".join(
            f"{b} ({p:.0f}%, {'-' if n is None else f'{n:g}'})" for b, p, n in c.members),
            src_h if c.profiles else src_x))
    top = c.callers[0][0] if c.callers else accounting.NO_STACK
    look = (f"Look at {top}, which holds {c.callers[0][1]:.0f}% of it: "
            + LOOK_AT.get((c.kind, c.name), "what its callers do with it on every request") + ".")
    builtins = ", ".join(b for b, _, _ in c.members[:3])
    return Finding(
        id=ID, severity=severity_for(c.share, high=c.high, medium=c.medium), share_pct=round(c.share, 2),
        title=f"{what}: {c.share:.1f}% of the sampled request time that no finding explains",
        summary=(f"The {what} takes {c.share:.1f}% of the sampled request time ({c.ms_per_request:.2f} ms a "
                 f"request{', in ' + builtins if builtins else ''}) outside the database and the function "
                 f"hotspots. No finding explains it. {look}"),
        urls=c.urls, evidence=evidence,
        details={"case": what, "kind": c.kind, "name": c.name, "share_pct": round(c.share, 2), "path": c.path,
                 "requests": c.requests, "callers": [f for f, _ in c.callers],
                 "builtins": [{"name": b, "pct": round(p, 1), "calls_per_request": n} for b, p, n in c.members],
                 "subsystem": c.name if c.kind == SUBSYSTEM else None, "look_at": look,
                 "no_patch": "a hotspot is time no known pattern explains: there is no generated fix; "
                             "see what to look at"})
