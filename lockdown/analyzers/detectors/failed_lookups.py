"""failed-lookups: files looked for on every request that are not there -- a search path
probed candidate by candidate (templates, includes, plugins, translations), each miss a system
call (docs/pathologies.md section 5, "Failed filesystem lookups").

Mechanism: file_exists()/is_readable() are an access(2) each, is_file()/is_dir()/stat()/
filemtime() a stat(2), fopen()/include of a missing file an open(2) after PHP has resolved the
path (lstat of its components); PHP's stat cache holds the last path only and its realpath
cache does not remember a miss, so every candidate that does not exist reaches the kernel again
on every request. A theme or include path of 6 directories x 4 extensions makes 20 misses for
each file found.

Signature, per URL: the median of its timed requests' failed lookups (the exits of
access/faccessat/stat/lstat/newfstatat/statx/open/openat that return ENOENT or ENOTDIR, counted
in the kernel alongside perf: collectors/engine_events.py) at least `min_failed_per_request`,
on at least `min_request_share` of them. PHP cannot tell a failed file_exists() from one that
succeeds; the system call can, but not which PHP function made it: the function is read from
the URL's xhprof-profiled requests, the callers of the lookup builtins that make that kind of
system call (LOOKUPS), each credited with the failures of its kind in proportion to its calls
(exact when one caller makes them all; `estimated` otherwise). Callers credited with at least
`min_failed_per_request` are findings (subject: the function); a URL without a profile gives one
finding for "(unknown)". A URL whose failures reach the floor with no single caller credited that
many (DokuWiki: 111 a page from a farm config probe, a plugin lister's is_dir per plugin and
type, template hooks tried in 3 places, none at 50) gives one finding for "(several functions)",
naming its `SHOWN` heaviest callers, when at least two callers are credited, together reach
the floor and cost `min_spread_share_pct` of the request (WordPress's block registration: 133
misses a page over 5 functions, 0.1% of the request, is not one).

Share: the credited caller's time in those builtins (xhprof edge time) x its failures over its
calls, over the request's wall time: the median of the URL's profiled requests (one request the
shared host held up does not set it), weighted by the URL's part of the timed requests' wall
time (xhprof; builtins are inflated less than user code by the instrumentation; native samples
are too few to split a lookup's hits from its misses). Severity by share (high >= 10,
medium >= 3, else low).

The paths tried are not in the capture (a tracepoint's filename is a user-space pointer); the
summary says where to look. Not flagged: failures of directory walks (fs-scan's), lookups that
succeed (stat-storm / hot-builtins), a capture without the syscall counts.
"""
from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass

from ..findings import Evidence, Finding, severity_for
from .context import Context
from .figures import number, spread
from .hot_builtins import sources
from .regex_compile import event_spread

ID = "failed-lookups"
SUBJECT = "function"
SPREAD = "(several functions)"      # the finding of a URL whose misses no one caller makes enough of
SHOWN = 5
# system call family -> its counted events, and the PHP builtins that make it for a missing file
FAMILIES = {
    "access": (("access", "faccessat", "faccessat2"),
               ("file_exists", "is_readable", "is_writable", "is_writeable", "is_executable")),
    "stat": (("newstat", "newlstat", "newfstatat", "statx"),
             ("is_file", "is_dir", "is_link", "stat", "lstat", "filemtime", "filectime", "fileatime", "filesize",
              "fileperms", "fileinode", "fileowner", "filegroup", "filetype", "realpath",
              "stream_resolve_include_path")),
    "open": (("open", "openat", "openat2"),
             ("fopen", "file_get_contents", "file", "readfile", "parse_ini_file", "simplexml_load_file")),
}
EVENTS = tuple(e for events, _ in FAMILIES.values() for e in events)


def family_spread(ctx: Context, url: str) -> dict[str, float]:
    """Median failures per timed request of `url`, by family."""
    return {fam: statistics.median(event_spread(ctx, events).get(url) or [0]) for fam, (events, _) in FAMILIES.items()}


def lookup_callers(ctx: Context, rids: list[str]) -> dict[str, dict[str, dict]]:
    """family -> caller -> {calls (per profiled request), builtins, time: {request: us in them}}."""
    got: dict[str, dict[str, Counter]] = defaultdict(lambda: defaultdict(Counter))
    names: dict[str, dict[str, set]] = defaultdict(lambda: defaultdict(set))
    of = {b: fam for fam, (_, builtins) in FAMILIES.items() for b in builtins}
    for rid in rids:
        for (p, c), e in ctx.xhprof_edges.get(rid, {}).items():
            fam = of.get(c.lower())
            if p == c or fam is None or p.startswith("Lockdown\\"):
                continue
            got[fam][p]["calls"] += e["ct"]
            got[fam][p][rid] += e["wt"]
            names[fam][p].add(c)
    n = max(1, len(rids))
    return {fam: {p: {"calls": v["calls"] / n, "builtins": sorted(names[fam][p]),
                      "time": {rid: v[rid] for rid in rids}}
                  for p, v in callers.items()} for fam, callers in got.items()}


@dataclass
class Credit:
    """One caller's failures on one URL."""
    url: str
    function: str
    failed: float                   # failures per request credited to it
    calls: float                    # its calls of the lookup builtins, per profiled request
    builtins: list[str]
    families: list[str]
    estimated: bool                 # shared with other callers of the same family
    time_us: dict[str, float]       # per profiled request: its time in those builtins x failed/calls
    profiles: list[str]

    def share(self, ctx: Context) -> float | None:
        """The median over the profiled requests of the credited time over the request's wall
        time (a median: one request the shared host held up does not set it)."""
        parts = [100.0 * us / ctx.wall_us(r) for r, us in self.time_us.items() if ctx.wall_us(r)]
        return statistics.median(parts) if parts else None


def credits(ctx: Context, url: str, medians: dict[str, float]) -> list[Credit]:
    rids = ctx.profiled_by_url.get(url, [])
    if not rids:
        total = sum(medians.values())
        return [Credit(url, "(unknown)", total, 0, [], [f for f, n in medians.items() if n], False, {}, [])]
    out: dict[str, Credit] = {}
    for fam, callers in lookup_callers(ctx, rids).items():
        failed = medians.get(fam, 0)
        all_calls = sum(v["calls"] for v in callers.values())
        if not failed or not all_calls:
            continue
        for p, v in callers.items():
            mine = min(v["calls"], failed * v["calls"] / all_calls)
            c = out.setdefault(p, Credit(url, p, 0, 0, [], [], False, dict.fromkeys(rids, 0.0), rids))
            c.failed += mine
            c.calls += v["calls"]
            c.builtins = sorted({*c.builtins, *v["builtins"]})
            c.families.append(fam)
            c.estimated = c.estimated or len(callers) > 1 or failed > all_calls
            for rid, us in v["time"].items():
                c.time_us[rid] += us * mine / v["calls"]
    return list(out.values())


@dataclass
class Case:
    function: str
    credits: list[Credit]
    failed: dict[str, dict]         # URL -> spread of all failed lookups per timed request
    by_family: dict[str, dict]      # URL -> family -> median
    share: float | None


def decide(ctx: Context) -> list[Case]:
    if not set(EVENTS) & set(ctx.events_counted):
        return []
    least, share = ctx.threshold(ID, "min_failed_per_request"), ctx.threshold(ID, "min_request_share")
    found: dict[str, list[Credit]] = defaultdict(list)
    failed, by_family = {}, {}
    for url, counts in sorted(event_spread(ctx, EVENTS).items()):
        if statistics.median(counts) < least or sum(1 for n in counts if n >= least) < share * len(counts):
            continue
        medians = family_spread(ctx, url)
        made = credits(ctx, url, medians)
        hits = [c for c in made if c.failed >= least]
        for c in hits:
            found[c.function].append(c)
        if not hits:                   # as many misses, spread over several callers
            spread_over = sorted((c for c in made if c.failed > 0), key=lambda c: (-c.failed, c.function))
            if len(spread_over) >= 2 and sum(c.failed for c in spread_over) >= least:
                found[SPREAD].extend(spread_over[:SHOWN])
            else:
                continue               # one caller under the floor: not a finding
        if hits or made:
            failed[url], by_family[url] = spread(counts), {f: number(n) for f, n in medians.items() if n}
    cases = [Case(fn, cs, {c.url: failed[c.url] for c in cs}, {c.url: by_family[c.url] for c in cs},
                  share_of(ctx, cs)) for fn, cs in sorted(found.items())]
    # spread misses are many small costs: a finding only when together they cost something
    spread_floor = ctx.threshold(ID, "min_spread_share_pct")
    return [c for c in cases if c.function != SPREAD or (c.share or 0.0) >= spread_floor]


def share_of(ctx: Context, cs: list[Credit]) -> float | None:
    """Each URL's credited share (`Credit.share`), weighted by the URL's part of the timed
    requests' wall time."""
    if not ctx.wall_us_total or not all(c.profiles for c in cs):
        return None
    total = 0.0
    for c in cs:
        weight = sum(r.wall_us for r in ctx.timed if ctx.url_of[r.id] == c.url) / ctx.wall_us_total
        total += (c.share(ctx) or 0.0) * weight
    return round(min(100.0, total), 2)


def detect(ctx: Context) -> list[Finding]:
    return [describe(c) for c in decide(ctx)]


# -- description ---------------------------------------------------------------------------------

def describe_evidence(c: Case) -> list[Evidence]:
    evidence = []
    for cr in c.credits:
        f = c.failed[cr.url]
        evidence.append(Evidence(f"{cr.url}: failed lookups per request (min/median/max)",
                                 f"{f['min']}/{f['median']}/{f['max']}",
                                 "ENOENT/ENOTDIR exits of access/stat/open system calls, per timed request "
                                 "(perf/events.jsonl)"))
        evidence.append(Evidence(f"{cr.url}: failed lookups per request by system call",
                                 ", ".join(f"{k} {v:g}" for k, v in c.by_family[cr.url].items()),
                                 "perf/events.jsonl (median per family)"))
        if cr.profiles:
            evidence.append(Evidence(f"{cr.url}: {cr.function}'s calls of {', '.join(cr.builtins)} per request; "
                                     "the failures credited to it" + (" (estimated: shared with other callers)"
                                                                      if cr.estimated else ""),
                                     f"{number(cr.calls):g}; {number(cr.failed):g}", sources(cr.profiles)))
    evidence.append(Evidence("share of request time, %", c.share,
                             "xhprof: its time in the lookup builtins x failed/calls over the request's wall time, "
                             "median of each URL's profiled requests, weighted by the URLs' part of the timed "
                             "requests' wall time"))
    return evidence


def describe(c: Case) -> Finding:
    if c.function == SPREAD:
        return describe_spread(c)
    top = max(c.credits, key=lambda cr: cr.failed)
    builtins = sorted({b for cr in c.credits for b in cr.builtins})
    return Finding(
        id=ID, title=f"Failed file lookups: {number(top.failed):g} per request from {c.function}",
        severity=severity_for(c.share, high=10, medium=3), share_pct=c.share,
        summary=(f"{c.function} looks for files that are not there: {number(top.failed):g} failed lookups per "
                 f"request on {top.url}"
                 + (f" ({', '.join(builtins)} calls)" if builtins else "")
                 + ". Each miss is a system call on every request (PHP caches neither a missing file nor more "
                   "than the last stat). Build the map of what exists once (a generated name -> path map, or "
                   "a per-deploy cache of the resolution) and look names up in it; or try the likeliest "
                   "location first. The capture counts the misses in the kernel; the paths themselves are "
                   "the candidates this function builds."),
        evidence=describe_evidence(c),
        urls=[cr.url for cr in c.credits], requests=[r for cr in c.credits for r in cr.profiles][:5],
        details={"function": c.function,
                 "failed_per_request": c.failed,
                 "failed_by_syscall": c.by_family,
                 "credited_per_request": {cr.url: number(cr.failed) for cr in c.credits},
                 "calls_per_request": {cr.url: number(cr.calls) for cr in c.credits},
                 "builtins": builtins,
                 "estimated": any(cr.estimated for cr in c.credits),
                 "no_patch": ("the candidates are built in the application's code: a map of what exists, built once, "
                              "is its change (verify it with `lockdown verify --patch`)")})


def describe_spread(c: Case) -> Finding:
    """The finding of URLs whose misses are spread over several callers (module docstring)."""
    urls = sorted({cr.url for cr in c.credits})
    worst = max(urls, key=lambda u: (c.failed[u]["median"], u))
    named = sorted((cr for cr in c.credits if cr.url == worst), key=lambda cr: -cr.failed)
    builtins = sorted({b for cr in c.credits for b in cr.builtins})
    who = ", ".join(f"{cr.function} {number(cr.failed):g}" for cr in named)
    return Finding(
        id=ID, title=f"Failed file lookups: {c.failed[worst]['median']:g} per request, spread over several functions",
        severity=severity_for(c.share, high=10, medium=3), share_pct=c.share,
        summary=(f"Requests look for files that are not there: {c.failed[worst]['median']:g} failed lookups per "
                 f"request on {worst}, none of the calling functions making {number(named[0].failed):g} or more "
                 f"of them alone; the heaviest: {who}"
                 + (f" ({', '.join(builtins)} calls)" if builtins else "")
                 + ". Each miss is a system call on every request. Look at each function's candidates: a "
                   "configuration probed in several places, a lister testing every plugin for every kind, a "
                   "template hook tried in each theme directory; build the map of what exists once, or try "
                   "the likeliest place first."),
        evidence=describe_evidence(c),
        urls=urls, requests=[r for cr in c.credits for r in cr.profiles][:5],
        details={"function": SPREAD, "callers": [cr.function for cr in named],
                 "failed_per_request": c.failed,
                 "failed_by_syscall": c.by_family,
                 "credited_per_request": {f"{cr.url} {cr.function}": number(cr.failed) for cr in c.credits},
                 "builtins": builtins,
                 "estimated": True,
                 "no_patch": ("the misses come from several functions, each building its own candidates: a map of "
                              "what exists, built once, is each one's change (verify it with `lockdown verify "
                              "--patch`)")})
