"""hot-builtins (informational): which PHP builtins the requests spend their time in, and where
the engine's CPU goes -- the lists HHVM's 2015 lockdown started from (docs/pathologies.md
section 6: `get_object_vars`, `implode`, `function_exists`, `defined`, `str_replace`, `is_dir`,
PCRE, ...; PHP 5.6 on WordPress: under 30% bytecode interpretation, ~20% memory manager, ~13%
hash tables, ~5% regular expressions).

This is not a defect: it is the map a reader uses to decide where to look next, reported with
severity "info" whenever the bundle has xhprof profiles or native samples (nothing otherwise).

Builtins (from the xhprof profiles of the instrumented requests):
- a function is a builtin when the target engine's own lists say so (`php.internal_functions`,
  `php.internal_classes` in the manifest, recorded at capture time; `Class::method` by its
  class), as `lockdown analyze`'s hot builtins table does (lockdown/analyzers/builtins.py);
- bundles made before those lists were recorded fall back to a heuristic, stated in the
  finding: a function that calls no other function in any profile (a leaf; `main()` and
  lockdown's own capture functions excluded). Leaf user functions are then listed too;
- calls are the calls of the edges into the builtin from other callers (a direct self-edge
  `f==>f@1` of a builtin is tideways_xhprof 5's double count on PHP 8, never a real call), so
  they are exact counts of the profiled requests; per request = that sum / number of profiles;
- exclusive time is xhprof's inclusive time minus the edges out of the function (the callbacks
  of array_map, preg_replace_callback, usort ... are not the builtin's own time). Instrumented
  requests run slower; builtins are inflated less than user code, so the shares (exclusive time
  over the instrumented requests' measured wall time) are indicative only;
- sorted by exclusive time, `top` rows (thresholds.toml [hot-builtins]); calls lockdown's own
  prepend makes (`tideways_xhprof_*`, calls from `Lockdown\\Capture\\`, and the one hrtime,
  getrusage and register_shutdown_function per profile that tideways charges to `main()`)
  are left out.

Engine subsystems (from the native samples of the timed requests): each sample's subsystem by
lockdown/analyzers/subsystems.toml (vm, memory, gc, hashtable, string, regex, compile,
builtin, fs-io, net-io, kernel, profiler-ext, other), as % of on-CPU samples, overall and per
URL. The profiler-ext share is split into lockdown's own capture extensions (excimer, and
tideways_xhprof when an older lockdown loaded it in every worker) and any others, so capture
overhead is not read as the application's.

share_pct is None: the list is a map, not one fix, and informational findings are not ranked
by share. The top builtins' summed exclusive share is in `details["top_exclusive_share_pct"]`.

The helpers at the top of this module (ini values, native sample shares, xhprof call counts)
are shared by the engine detectors (debug-extension, opcache, pcre-jit-off, stat-storm).
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from ..builtins import base_name, compiled_to_opcode, top_callers
from ...php_ini import is_off, size_bytes
from ..findings import Evidence, Finding
from ..subsystems import breakdown, categorise, dso_name, passes_through
from .context import Context

ID = "hot-builtins"
SUBJECT = None  # one finding at most

# -- ini values (manifest php.ini: ini_get_all(null, false), strings or null) -------------------


def ini_value(ctx: Context, name: str) -> str | None:
    """The effective value as a string; None when the setting is unknown to the engine."""
    if name not in ctx.ini:
        return None
    v = ctx.ini[name]
    return "" if v is None else str(v)


def ini_flag(ctx: Context, name: str) -> bool | None:
    """A boolean setting ("1", "On", "" ...); None when the engine does not know it."""
    v = ini_value(ctx, name)
    return None if v is None else not is_off(v)


def ini_int(ctx: Context, name: str) -> int | None:
    v = ini_value(ctx, name)
    try:
        return None if v is None else int(v.strip())
    except ValueError:
        return None


def ini_bytes(ctx: Context, name: str) -> int | None:
    """A size setting ("4096K", "16M", "1G", "4096") in bytes, as PHP parses it."""
    return size_bytes(ini_value(ctx, name))


def php_version(ctx: Context) -> str:
    """major.minor of the engine ("8.2"), for paths such as /etc/php/8.2/fpm."""
    text = (ctx.manifest.get("versions") or {}).get("php") or (ctx.php.get("extensions") or {}).get("Core") or ""
    m = re.search(r"(\d+\.\d+)", str(text))
    return m.group(1) if m else "8.x"


# -- native samples (ctx.native: on-CPU perf samples of the timed requests) ---------------------
def self_dso(frames: list) -> str | None:
    """The object the sample's CPU was spent in: the first frame from the leaf that is not libc,
    the kernel or JIT code (those are charged to their caller, as subsystems.toml does), nor of
    an unknown object."""
    for _, symbol, _, dso in frames:
        if dso != "[unknown]" and not passes_through(symbol, dso):
            return dso_name(dso)
    return None


def sample_share(ctx: Context, chosen) -> float | None:
    """% of on-CPU native samples for which `chosen(sample)` holds; None without samples."""
    if not ctx.native:
        return None
    return 100.0 * sum(1 for s in ctx.native if chosen(s)) / len(ctx.native)


def share_by_url(ctx: Context, chosen) -> dict[str, float]:
    total: Counter = Counter()
    hit: Counter = Counter()
    for s in ctx.native:
        url = ctx.url_of.get(s.request, "?")
        total[url] += 1
        hit[url] += bool(chosen(s))
    return {u: round(100.0 * hit[u] / total[u], 2) for u in sorted(total)}


def cpu_fraction(ctx: Context) -> float:
    """CPU time over wall time of the timed requests (cpu_us), to turn a share of on-CPU
    samples into a share of request time. 1.0 when unknown."""
    wall = sum(r.wall_us for r in ctx.timed)
    cpu = sum(r.cpu_us for r in ctx.timed)
    return min(1.0, cpu / wall) if wall > 0 and cpu > 0 else 1.0


def request_share(ctx: Context, on_cpu_pct: float | None) -> float | None:
    """A share of on-CPU samples as an estimated share of request (wall) time."""
    return None if on_cpu_pct is None else round(on_cpu_pct * cpu_fraction(ctx), 2)


def example_requests(ctx: Context, chosen, n: int = 5) -> list[str]:
    """Request ids with the most matching samples."""
    c = Counter(s.request for s in ctx.native if s.request and chosen(s))
    return [rid for rid, _ in c.most_common(n)]


# -- xhprof -------------------------------------------------------------------------------------
def callee_calls(ctx: Context, rid: str) -> Counter:
    """Function -> calls in one profiled request, counting the edges into it from other
    callers (self-edges dropped: tideways' double count of builtins, and a user function's
    recursion, which this undercounts -- callers of this helper ask about builtins)."""
    calls: Counter = Counter()
    for (parent, child), e in ctx.xhprof_edges.get(rid, {}).items():
        if parent != child:          # a call from top-level code is an edge from main() there
            calls[child] += e["ct"]
    return calls


def profiled(ctx: Context) -> list[str]:
    return sorted(ctx.xhprof_profiles)


def sources(rids: list[str], n: int = 3) -> str:
    return f"xhprof of {', '.join(rids[:n])}{' ...' if len(rids) > n else ''}"


# -- lockdown's own capture --------------------------------------------------------------------
def capture_extensions(manifest: dict) -> dict[str, str]:
    """Extension name (lower case) -> how lockdown's capture loaded it, from the manifest.

    lockdown's php-fpm drops excimer and tideways_xhprof from the machine's configuration and
    loads them only for its collectors: excimer in every worker when `excimer` is collected;
    tideways_xhprof in a separate one-worker pool for the instrumented requests
    (`php.pool.instrumented_extension`), or, in bundles of older lockdown versions (`xhprof`
    collected, no `instrumented_extension` recorded), in every worker."""
    capture = manifest.get("capture") or {}
    php = manifest.get("php") or {}
    collect = set(capture.get("collect") or [])
    pool = php.get("pool") or {}
    out = {}
    if "excimer" in collect:
        out["excimer"] = ("by lockdown for its excimer collector (every worker; idle unless a captured request "
                          "starts it)")
    if "instrumented_extension" in pool:          # recorded (possibly null) since the separate pool
        if pool["instrumented_extension"]:
            out[str(pool["instrumented_extension"]).lower()] = (
                "by lockdown, only in its one-worker pool for the xhprof-instrumented requests")
    elif "xhprof" in collect:
        out["tideways_xhprof"] = ("by lockdown in every worker for its xhprof collector (a bundle of an older "
                                  "lockdown, before the separate instrumented pool)")
    return out


_CAPTURE_CALLERS = re.compile(r"^Lockdown\\Capture\\", re.I)
_CAPTURE_CALLEES = re.compile(r"^(tideways_xhprof_|excimer)", re.I)
# Builtins lockdown's prepend calls while xhprof is on, which tideways charges to main():
# Capture::shutdown() registers `finish`, finish() reads hrtime() and getrusage() before
# tideways_xhprof_disable() (lockdown/collectors/php/prepend.php). One call each per profile.
_PREPEND_MAIN_CALLS = ("hrtime", "getrusage", "register_shutdown_function")


def _is_leaf_everywhere(ctx: Context) -> set[str]:
    callers = {p for edges in ctx.xhprof_edges.values() for (p, c) in edges if p != c}
    names = {c for edges in ctx.xhprof_edges.values() for (_, c) in edges}
    return {n for n in names if n not in callers and n != "main()"}


def shared_callers(rows: list[dict], min_share_pct: float = 50.0) -> list[dict]:
    """Callers that account for at least `min_share_pct` of the time of two or more of the
    builtin rows: several rows of the table with one cause (WordPress: is_array,
    array_key_exists, is_string and count, 69-83% each from _wp_array_get)."""
    by: dict[str, list[tuple[str, float]]] = {}
    for r in rows:
        for c in r.get("callers") or []:
            if c["share_pct"] is not None and c["share_pct"] >= min_share_pct:
                by.setdefault(c["name"], []).append((r["name"], c["share_pct"]))
    return [{"caller": name, "builtins": [b for b, _ in hits], "min_share_pct": min(p for _, p in hits),
             "max_share_pct": max(p for _, p in hits)}
            for name, hits in sorted(by.items(), key=lambda kv: (-len(kv[1]), kv[0])) if len(hits) >= 2]


def _span(lo: float, hi: float) -> str:
    """`69-83%`, or `100%` when both ends round alike."""
    return f"{lo:.0f}%" if f"{lo:.0f}" == f"{hi:.0f}" else f"{lo:.0f}-{hi:.0f}%"


@dataclass
class Case:
    """The map: the top builtins of the profiled requests, the engine's CPU by subsystem."""
    profiles: list[str]
    heuristic: bool                 # builtins told by a heuristic (no internal function list)
    doubled: list[tuple[str, int]]  # profiled requests with builtins' self-edges, and how many
    rows: list[dict]                # the top builtins, with their callers
    wall: int                       # the profiled requests' wall time
    top_share: float | None         # the rows' exclusive time, % of it
    shares: dict[str, float]        # on-CPU samples by subsystem, %, overall and per URL
    by_url: dict[str, dict]
    samples: int
    sampled_requests: int
    profiler_ext: dict[str, float]  # profiler-ext samples by extension (lockdown's own, or other), %
    urls: list[str]

    @property
    def opcodes(self) -> list[str]:
        """Rows that are VM opcodes outside the instrumented worker."""
        return [r["name"] for r in self.rows if r["compiled_to_opcode"]]


def decide(ctx: Context) -> list[Case]:
    rids = profiled(ctx)
    if not rids and not ctx.native:
        return []
    heuristic = bool(rids) and not (ctx.internal_functions or ctx.internal_classes)
    rows, doubled, wall = _builtin_rows(ctx, rids, heuristic) if rids else ([], [], 0)
    shares, by_url, profiler_ext = {}, {}, {}
    if ctx.native:
        counts = breakdown(ctx.native)
        total = sum(counts.values())
        shares = {k: round(100.0 * v / total, 2) for k, v in counts.most_common()}
        by_url = {u: {k: round(100.0 * v / sum(c.values()), 2) for k, v in c.most_common()}
                  for u, c in sorted(breakdown(ctx.native, key=lambda s: ctx.url_of.get(s.request, "?")).items())}
        ours = capture_extensions(ctx.manifest)
        own = Counter()
        for s in ctx.native:
            if categorise(s.frames) == "profiler-ext":
                d = (self_dso(s.frames) or "").lower()
                own[d.removesuffix(".so") if d.removesuffix(".so") in ours else "other"] += 1
        profiler_ext = {k: round(100.0 * v / total, 2) for k, v in own.most_common()}
    excl = sum(r["exclusive_us"] for r in rows)
    return [Case(rids, heuristic, doubled, rows, wall, round(100.0 * excl / wall, 2) if wall else None,
                 shares, by_url, len(ctx.native), len({s.request for s in ctx.native}), profiler_ext,
                 sorted(ctx.by_url))]


def _builtin_rows(ctx: Context, rids: list[str], heuristic: bool) -> tuple[list[dict], list[tuple[str, int]], int]:
    """(the `top` builtins by exclusive time, with their callers; the requests with builtins'
    direct self-edges, tideways_xhprof's double count, and how many; the requests' wall time)."""
    is_builtin = _is_leaf_everywhere(ctx).__contains__ if heuristic else ctx.is_internal
    calls: Counter = Counter()
    excl: Counter = Counter()
    incl: Counter = Counter()
    callers: dict[str, dict[str, Counter]] = {}
    doubled_in = []
    for rid in rids:
        mine = Counter()
        for (p, c), e in ctx.xhprof_edges.get(rid, {}).items():
            if p != c and _CAPTURE_CALLERS.match(p):
                mine[c] += e["ct"]
            elif p == "main()" and c in _PREPEND_MAIN_CALLS and e["ct"] >= 1:
                mine[c] += 1
            elif p != c:
                mine_of = callers.setdefault(c, {}).setdefault(p, Counter())
                mine_of["calls"] += e["ct"]
                mine_of["inclusive_us"] += e["wt"]
        for f, n in callee_calls(ctx, rid).items():
            if f == "main()" or _CAPTURE_CALLEES.match(f) or _CAPTURE_CALLERS.match(f) or not is_builtin(f):
                continue
            if n - mine[f] <= 0:
                continue
            calls[f] += n - mine[f]
            excl[f] += ctx.xhprof[rid].get(f, {}).get("exclusive_us", 0)
            incl[f] += ctx.xhprof[rid].get(f, {}).get("inclusive_us", 0)
        doubled = 0
        for key in ctx.xhprof_profiles.get(rid, {}):
            parent, sep, child = key.partition("==>")
            child = base_name(child)
            doubled += bool(sep) and base_name(parent) == child and is_builtin(child)
        if doubled:
            doubled_in.append((rid, doubled))
    wall = sum(ctx.wall_us(r) for r in rids)
    n = len(rids)
    rows = []
    for f in sorted(calls, key=lambda f: (-excl[f], -calls[f], f))[:ctx.threshold(ID, "top")]:
        rows.append({"name": f, "calls": calls[f], "calls_per_request": round(calls[f] / n, 1),
                     "exclusive_us": excl[f], "exclusive_us_per_request": round(excl[f] / n, 1),
                     "exclusive_share_pct": round(100.0 * excl[f] / wall, 2) if wall else None,
                     "compiled_to_opcode": compiled_to_opcode(f),
                     # where an engineer looks next: the callers with most of its time
                     "callers": [{"name": c["name"],
                                  "share_pct": round(100.0 * c["inclusive_us"] / incl[f], 1) if incl[f] else None}
                                 for c in top_callers(callers.get(f) or {})]})
    return rows, doubled_in, wall


def detect(ctx: Context) -> list[Finding]:
    return [describe(c) for c in decide(ctx)]


# -- description ---------------------------------------------------------------------------------

def describe_notes(c: Case) -> list[str]:
    notes = []
    if c.heuristic:
        notes.append("builtins identified by a heuristic (no internal function list in the manifest)")
    notes += [f"{rid}: {doubled} builtin(s) with a direct self-edge (tideways_xhprof's double "
              "count), not counted as calls" for rid, doubled in c.doubled]
    if c.opcodes:
        notes.append(f"{', '.join(c.opcodes)}: the engine compiles these calls to VM opcodes in the timed "
                     "workers (global namespace or fully qualified call sites); tideways_xhprof, loaded only "
                     "in the instrumented worker, turns that off, so their calls and time exist only under "
                     "instrumentation and their cost in the timed requests is part of vm")
    capture = {k: v for k, v in c.profiler_ext.items() if k != "other"}
    if capture:
        notes.append("profiler-ext includes lockdown's own capture extensions ("
                     + ", ".join(f"{k} {v:g}%" for k, v in capture.items())
                     + " of on-CPU samples): capture overhead, not the application's")
    return notes


def describe_evidence(c: Case) -> list[Evidence]:
    evidence = []
    rids = c.profiles
    for r in c.rows[:5] if rids else []:
        by = ", ".join(f"{x['name']} {x['share_pct']:.0f}%" for x in r["callers"] if x["share_pct"] is not None)
        evidence.append(Evidence(f"{r['name']}: calls per request, exclusive us per request"
                                 + ("; its callers, by share of its time" if by else ""),
                                 f"{r['calls_per_request']:g}, {r['exclusive_us_per_request']:.0f}"
                                 + (f"; {by}" if by else ""), sources(rids)))
    if rids and c.wall:
        evidence.append(Evidence(f"top {len(c.rows)} builtins' exclusive time, % of the instrumented requests' "
                                 "wall time", c.top_share, f"{sources(rids)}; requests.jsonl wall_us"))
    if c.samples:
        evidence.append(Evidence("on-CPU samples by engine subsystem (%)",
                                 ", ".join(f"{k} {v:g}" for k, v in c.shares.items()),
                                 f"perf samples of {c.sampled_requests} timed requests (subsystems.toml)"))
    return evidence


def describe_summary(c: Case, called: list[dict], shared: list[dict], notes: list[str]) -> str:
    parts = []
    if c.profiles and not c.rows:
        parts.append(f"No builtin calls of the application in the {len(c.profiles)} xhprof profile(s).")
    if c.rows:
        parts.append("Top builtins by exclusive time (xhprof, per request): " + "; ".join(
            f"{r['name']} {r['calls_per_request']:g} calls, {r['exclusive_us_per_request']:.0f} us"
            for r in called[:5]) + ".")
        if len(called) < len(c.rows):
            parts.append(f"Not listed: {', '.join(c.opcodes)}: outside the instrumented worker "
                         "PHP compiles these to VM opcodes, not calls.")
        if shared:
            parts.append(" ".join(
                f"Calls from {x['caller']} take most of the time of {', '.join(x['builtins'])} "
                f"({_span(x['min_share_pct'], x['max_share_pct'])} each): one function to look at for "
                f"{len(x['builtins'])} of the top builtins." for x in shared))
    if c.shares:
        top_subsystems = list(c.shares.items())[:6]
        parts.append("Engine CPU by subsystem: " + ", ".join(f"{k} {v:g}%" for k, v in top_subsystems) + ".")
    parts.append("Informational: where to look first, in the spirit of HHVM's lockdown lists; "
                 "xhprof timings are from instrumented (slower) requests.")
    if any("capture overhead" in x for x in notes):
        parts.append("Part of profiler-ext is lockdown's own capture.")
    return " ".join(parts)


def describe(c: Case) -> Finding:
    details: dict = {}
    if c.profiles:
        details.update(builtins=c.rows, profiles=c.profiles,
                       builtin_source=("heuristic: functions that call no other function in any profile (this "
                                       "bundle's manifest has no internal function list; leaf user functions may "
                                       "be listed)") if c.heuristic
                       else "the engine's internal function and class lists (manifest)",
                       top_exclusive_share_pct=c.top_share)
    if c.samples:
        details["subsystems"] = c.shares
        details["subsystems_by_url"] = c.by_url
        details["native_samples"] = c.samples
        if c.profiler_ext:
            details["profiler_ext"] = c.profiler_ext
    notes = describe_notes(c)
    if notes:
        details["notes"] = notes
    # calls compiled to opcodes outside the instrumented worker are not builtins to look at first
    called = [r for r in c.rows if not r["compiled_to_opcode"]] or c.rows
    shared = shared_callers(c.rows) if c.rows else []
    if shared:
        details["shared_callers"] = shared
    return Finding(
        id=ID, title=(f"Hot builtins: {', '.join(r['name'] for r in called[:3])}" if c.rows
                      else "Engine CPU by subsystem" if c.shares else "Hot builtins: none in the profiles"),
        severity="info", share_pct=None, summary=describe_summary(c, called, shared, notes),
        evidence=describe_evidence(c), urls=c.urls, requests=c.profiles[:5], details=details)
