"""regex-compile: regular expressions compiled on every request, because the pattern's text is
new each time (docs/pathologies.md section 5, "Regex compilation on the hot path").

Mechanism: every preg_* call looks its pattern up, by its exact text, in the worker's
compiled-regex cache (4096 entries per process, PHP's ext/pcre); a miss runs `pcre2_compile`,
and with `pcre.jit=1` `pcre2_jit_compile` as well, both far dearer than the match of a short
subject. A pattern built with per-call data (an id, a nonce, a counter, a user's search terms
in the pattern rather than in the subject) is new text every time, so every call compiles it
(and fills the cache, which PHP then empties, so fixed patterns compile again too).

Signature, per URL: the median of its timed requests' compilations (`pcre2_compile` calls,
counted by a uprobe alongside perf: collectors/engine_events.py) at least
`min_compiles_per_request`, on at least `min_request_share` of them, AND compilations per
preg_* call (the URL's xhprof-profiled requests; when it has none, not checked) at least
`min_compile_ratio`: a cached pattern compiles once per worker, not per call. The function
named is the caller of preg_* whose calls on the URL cost the most at its least time per call
in any profiled request (xhprof: its preg_* calls per request x that time; compilation is what
makes those calls slow, and a request the shared host preempted only inflates), or, without a
profile,
"(unknown)". URLs with the same function are one finding (subject: the function).

Share: the on-CPU native samples getting a compiled pattern (PHP's
`pcre_get_compiled_regex_cache(_ex)`: the cache lookup, the compilation and the cache's clean-up
when it is full; `pcre2_compile_8`, `pcre2_jit_compile_8`, PHP's bundled `php_pcre2_*compile*`)
x the timed requests' CPU/wall ratio,
on the finding's URLs, weighted by their part of the timed requests' wall time; with fewer
than MIN_SAMPLES samples there, the caller's preg_* time x the part of its calls that compile
(the URL's compilations over its calls, at most 1) over the
request's wall time, the median of each URL's profiled requests (xhprof), weighted likewise.
Severity by share (high >= 10, medium >= 3).

Not flagged: patterns that compile once per worker (the first request of each); a capture
without the compile count (no uprobe: PHP's bundled PCRE, perf without root) -- the issue is
then only in hot-builtins / pcre-jit-off; regex time with a cached pattern (a matter of the
pattern or the subject, not of compilation).
"""
from __future__ import annotations

import re
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass

from ..findings import Evidence, Finding, severity_for
from .context import Context
from .figures import native_on, number, spread
from .hot_builtins import cpu_fraction, sources

ID = "regex-compile"
SUBJECT = "function"
EVENT = "pcre2_compile"
PREG = ("preg_match", "preg_match_all", "preg_replace", "preg_replace_callback", "preg_replace_callback_array",
        "preg_split", "preg_grep", "preg_filter")
MIN_SAMPLES = 50                    # native samples on the URLs below which the share is xhprof's
_COMPILE_FRAME = re.compile(r"^(pcre2_compile_8|pcre2_jit_compile_8|php_pcre2_\w*compile\w*|"
                            r"pcre_get_compiled_regex_cache(_ex)?)$")


def is_compile_sample(frames: list) -> bool:
    return any(_COMPILE_FRAME.match(f[1]) for f in frames)


def event_spread(ctx: Context, names: tuple[str, ...] | str) -> dict[str, list[int]]:
    """URL -> the summed count of `names` in each of its timed requests the capture watched
    (requests of workers perf did not watch have no record and are left out)."""
    wanted = (names,) if isinstance(names, str) else names
    out: dict[str, list[int]] = defaultdict(list)
    for r in ctx.timed:
        counts = ctx.engine_events.get(r.id)
        if counts is not None:
            out[ctx.url_of[r.id]].append(sum(counts.get(n, 0) for n in wanted))
    return dict(out)


def _is_own(caller: str) -> bool:
    return caller.startswith("Lockdown\\")          # the capture's prepend


def preg_callers(ctx: Context, rids: list[str]) -> dict[str, dict]:
    """Caller -> its preg_* calls and their time per profiled request (`calls`, `wall_us`:
    averaged; `min_us`: the least of the requests, which a preempted call does not inflate)."""
    got: dict[str, Counter] = defaultdict(Counter)
    for rid in rids:
        for (p, c), e in ctx.xhprof_edges.get(rid, {}).items():
            if p != c and c in PREG and not _is_own(p):
                got[p]["calls"] += e["ct"]
                got[p][rid] += e["wt"]
    n = max(1, len(rids))
    return {p: {"calls": number(v["calls"] / n), "wall_us": number(sum(v[r] for r in rids) / n),
                "min_us": number(min(v[r] for r in rids))} for p, v in got.items()}


def least_per_call(ctx: Context) -> dict[str, float]:
    """Caller -> the least time per preg_* call it took in any profiled request (us)."""
    out: dict[str, float] = {}
    for rid in ctx.xhprof_profiles:
        got: dict[str, Counter] = defaultdict(Counter)
        for (p, c), e in ctx.xhprof_edges.get(rid, {}).items():
            if p != c and c in PREG and not _is_own(p):
                got[p]["ct"] += e["ct"]
                got[p]["wt"] += e["wt"]
        for p, v in got.items():
            if v["ct"]:
                out[p] = min(out.get(p, float("inf")), v["wt"] / v["ct"])
    return out


@dataclass
class UrlCase:
    url: str
    compiles: dict                  # spread of compilations per timed request
    requests: int                   # timed requests counted
    showing: int                    # ... with at least min_compiles_per_request
    profiles: list[str]
    preg_calls: float | None        # preg_* calls per profiled request (the app's own)
    ratio: float | None             # median compilations / preg_* calls
    callers: dict[str, dict]        # preg_* callers in the profiled requests
    function: str


def url_case(ctx: Context, url: str, counts: list[int]) -> UrlCase | None:
    least, share = ctx.threshold(ID, "min_compiles_per_request"), ctx.threshold(ID, "min_request_share")
    showing = sum(1 for n in counts if n >= least)
    median = statistics.median(counts)
    if median < least or showing < share * len(counts):
        return None
    rids = ctx.profiled_by_url.get(url, [])
    callers = preg_callers(ctx, rids)
    calls = number(sum(v["calls"] for v in callers.values())) if rids else None
    if calls and median / calls < ctx.threshold(ID, "min_compile_ratio"):
        return None
    ratio = round(median / calls, 2) if calls else None
    # compiling is what makes a call slow: the caller whose preg_* calls here cost the most at
    # its least time per call in any profiled request (the host preempting one does not decide it)
    per_call = least_per_call(ctx)
    function = (max(callers, key=lambda p: (callers[p]["calls"] * per_call.get(p, 0), callers[p]["min_us"], p))
                if callers else "(unknown)")
    return UrlCase(url, spread(counts), len(counts), showing, rids, calls, ratio, callers, function)


@dataclass
class Case:
    function: str
    urls: list[UrlCase]
    cpu: float | None               # compile samples, % of the URLs' on-CPU samples
    share: float | None
    share_source: str
    samples: int
    requests: list[str]


def decide(ctx: Context) -> list[Case]:
    if EVENT not in ctx.events_counted:
        return []
    by_function: dict[str, list[UrlCase]] = defaultdict(list)
    for url, counts in sorted(event_spread(ctx, EVENT).items()):
        c = url_case(ctx, url, counts)
        if c is not None:
            by_function[c.function].append(c)
    return [case_of(ctx, function, urls) for function, urls in sorted(by_function.items())]


def case_of(ctx: Context, function: str, urls: list[UrlCase]) -> Case:
    samples, hits, _ = native_on(ctx, {u.url for u in urls}, is_compile_sample)
    cpu = round(100.0 * len(hits) / len(samples), 2) if samples else None
    weights = {u.url: sum(r.wall_us for r in ctx.timed if ctx.url_of[r.id] == u.url) / ctx.wall_us_total
               if ctx.wall_us_total else 0.0 for u in urls}
    if len(samples) >= MIN_SAMPLES:
        share = round(cpu * cpu_fraction(ctx) * sum(weights.values()), 2)
        source = (f"perf samples getting compiled patterns (pcre_get_compiled_regex_cache, pcre2_compile_8, "
                  f"pcre2_jit_compile_8 on the stack): {len(hits)} of the "
                  f"{len(samples)} on the finding's URLs, x CPU/wall of the timed requests, x their part of all "
                  "timed requests' wall time")
    else:
        share = round(sum(xhprof_share(ctx, function, u) * weights[u.url] for u in urls), 2)
        source = (f"xhprof: {function}'s preg_* time x the part of its calls that compile, over the request's wall "
                  "time, median "
                  f"of each URL's profiled requests, weighted by the URLs' part of the timed requests' wall time "
                  f"(fewer than {MIN_SAMPLES} native samples: {len(samples)})")
    examples = Counter()
    for s in hits:
        examples[s.request] += 1
    rids = [r for r, _ in examples.most_common(5)] or [rid for u in urls for rid in u.profiles][:5]
    return Case(function, urls, cpu, share, source, len(samples), rids)


def xhprof_share(ctx: Context, function: str, u: UrlCase) -> float:
    """The median over the URL's profiled requests of the function's preg_* time x the part of
    its calls that compile (the URL's compilations over its calls, at most 1), % of the request's
    wall time (0 without a profile)."""
    calls = (u.callers.get(function) or {}).get("calls") or 0
    compiling = min(1.0, u.compiles["median"] / calls) if calls else 0.0
    parts = []
    for rid in u.profiles:
        us = sum(e["wt"] for (p, c), e in ctx.xhprof_edges.get(rid, {}).items() if p == function and c in PREG)
        if ctx.wall_us(rid):
            parts.append(100.0 * us * compiling / ctx.wall_us(rid))
    return statistics.median(parts) if parts else 0.0


def detect(ctx: Context) -> list[Finding]:
    return [describe(c) for c in decide(ctx)]


# -- description ---------------------------------------------------------------------------------

def describe_evidence(c: Case) -> list[Evidence]:
    evidence = []
    for u in c.urls:
        evidence.append(Evidence(f"{u.url}: patterns compiled per request (min/median/max)",
                                 f"{u.compiles['min']}/{u.compiles['median']}/{u.compiles['max']}",
                                 f"pcre2_compile_8 uprobe, {u.showing} of {u.requests} timed requests "
                                 "(perf/events.jsonl)"))
        if u.preg_calls is not None:
            evidence.append(Evidence(f"{u.url}: preg_* calls per request; compiled per call",
                                     f"{u.preg_calls:g}; {u.ratio:g}", sources(u.profiles)))
        for p, v in sorted(u.callers.items(), key=lambda kv: -kv[1]["min_us"])[:3]:
            evidence.append(Evidence(f"{u.url}: preg_* calls from {p} per request, and their us (mean, least)",
                                     f"{v['calls']:g}, {v['wall_us']:g}, {v['min_us']:g}", sources(u.profiles)))
    if c.cpu is not None:
        evidence.append(Evidence("on-CPU samples getting compiled patterns "
                                 "(PHP's regex cache, PCRE's compiler and JIT), %",
                                 c.cpu, f"perf samples of the timed requests on these URLs ({c.samples})"))
    evidence.append(Evidence("share of request time, %", c.share, c.share_source))
    return evidence


def describe(c: Case) -> Finding:
    med = max(u.compiles["median"] for u in c.urls)
    calls = [u.preg_calls for u in c.urls if u.preg_calls is not None]
    return Finding(
        id=ID, title=f"Regexes compiled on every request: {med:g} patterns per request, from {c.function}",
        severity=severity_for(c.share, high=10, medium=3), share_pct=c.share,
        summary=(f"PCRE compiled {med:g} patterns per request"
                 + (f" for {max(calls):g} preg_* calls" if calls else "")
                 + f"; the preg_* calls that cost the most come from {c.function}. PHP keeps compiled "
                   "patterns per worker by their exact text, so a pattern that holds per-call data (an id, a "
                   "counter, a nonce, the user's input) is new text and compiled again, with the JIT, on "
                   "every call. Keep the pattern's text fixed (a constant or one pattern built once) and pass "
                   "the variable part as the subject, a capture group or a preg_quote'd alternation built "
                   "once per request."),
        evidence=describe_evidence(c),
        urls=[u.url for u in c.urls], requests=c.requests,
        details={"function": c.function,
                 "compiled_per_request": {u.url: u.compiles for u in c.urls},
                 "preg_calls_per_request": {u.url: u.preg_calls for u in c.urls},
                 "compiled_per_call": {u.url: u.ratio for u in c.urls},
                 "callers": {u.url: u.callers for u in c.urls},
                 "compile_on_cpu_pct": c.cpu,
                 "no_patch": ("the pattern's text is built in the application's code: keep it fixed and pass the "
                              "variable part in the subject (verify a change with `lockdown verify --patch`)")})
