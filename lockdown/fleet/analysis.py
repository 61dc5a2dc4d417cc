"""Pure views of fleet records (store.py's): the route table, folded stacks, hot functions,
the findings production data supports, and the traffic mix as a weighted URL list.

No file, no process: the CLI reads the store and hands the records here; fleet/report.py
renders what this returns.
"""
from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from typing import Iterable

from ..analyzers.detectors.fs_scan import is_walk_call

# Excimer takes its samples where the engine checks for interrupts (a user function's entry, a
# loop's back edge), after a builtin returns: a builtin (scandir, readdir) is never a frame of
# its stacks. A walk is recognised by the builtin when a stack has it, else by the name of the
# user function that walks (Drupal's file_scan_directory and drupal_system_listing, WordPress's
# list_files, Symfony's Finder, ...).
WALKER_NAME = re.compile(r"(scan|walk|readdir|glob|listing|list_?files|finder|director(y|ies)|(^|_)dirs?($|_))", re.I)
# a route's samples spent under a directory walk, a share of them (of all its samples)
WALK_SHARE_PCT = 10.0
# the most frequent (function, caller) frame pair among a route's samples: a repeated call
REPEATED_SHARE_PCT = 20.0
# statements per request above which a route is flagged
STATEMENTS_PER_REQUEST = 20.0
# a route needs this many samples before a share of them is read as a finding
MIN_SAMPLES = 20


def percentile(values: list[float], q: float) -> float | None:
    """The nearest-rank percentile (q in 0..100), None for no values."""
    if not values:
        return None
    s = sorted(values)
    return s[max(0, min(len(s) - 1, math.ceil(q / 100 * len(s)) - 1))]


def served(records: Iterable[dict]) -> list[dict]:
    """The request records (not the damaged entries)."""
    return [r for r in records if not r.get("damaged") and "route" in r]


def filtered(records: list[dict], route: str | None = None, host: str | None = None) -> list[dict]:
    return [r for r in records if (route is None or r.get("route") == route)
            and (host is None or r.get("host") == host)]


def route_key(r: dict) -> str:
    return f"{r.get('method', '')} {r.get('route', '')}".strip()


def route_table(records: list[dict]) -> list[dict]:
    """One row per route (method and normalised path): its share of requests and of the fleet's
    CPU, p50/p99 wall, statements and samples per request; by CPU share, highest first."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        groups[route_key(r)].append(r)
    total_n = len(records) or 1
    total_cpu = sum(float(r.get("cpu", 0)) for r in records) or 1.0
    rows = []
    for key, rs in groups.items():
        walls = [float(r.get("wall", 0)) for r in rs]
        stmts = [r["stmts"] for r in rs if "stmts" in r]
        rows.append({
            "route": key, "script": Counter(r.get("script", "") for r in rs).most_common(1)[0][0],
            "requests": len(rs), "requests_pct": 100.0 * len(rs) / total_n,
            "cpu_s": sum(float(r.get("cpu", 0)) for r in rs),
            "cpu_pct": 100.0 * sum(float(r.get("cpu", 0)) for r in rs) / total_cpu,
            "wall_p50_ms": 1000 * percentile(walls, 50), "wall_p99_ms": 1000 * percentile(walls, 99),
            "statements_per_request": sum(stmts) / len(stmts) if stmts else None,
            "samples": sum(sum((r.get("stacks") or {}).values()) for r in rs),
            "hosts": sorted({r.get("host", "") for r in rs}),
            "errors": sum(1 for r in rs if int(r.get("status", 0)) >= 500),
        })
    return sorted(rows, key=lambda row: (-row["cpu_pct"], row["route"]))


def folded(records: list[dict]) -> Counter:
    """Folded stacks (frames root first, ';'-joined) -> samples, over the records."""
    out: Counter = Counter()
    for r in records:
        for stack, n in (r.get("stacks") or {}).items():
            out[stack] += int(n)
    return out


def hot_functions(stacks: Counter, top: int = 20) -> list[dict]:
    """Functions by self samples, with their inclusive samples (a recursive frame counted once
    per stack)."""
    total = sum(stacks.values()) or 1
    self_n: Counter = Counter()
    incl: Counter = Counter()
    for stack, n in stacks.items():
        frames = stack.split(";")
        self_n[frames[-1]] += n
        for f in set(frames):
            incl[f] += n
    return [{"function": f, "self": s, "self_pct": 100.0 * s / total, "inclusive": incl[f],
             "inclusive_pct": 100.0 * incl[f] / total}
            for f, s in sorted(self_n.items(), key=lambda kv: (-kv[1], kv[0]))[:top]]


def is_walker(frame: str) -> bool:
    """A builtin that walks a directory, or a user function named for walking one (not a file
    frame: an included script is named by its path)."""
    return is_walk_call(frame) or ("/" not in frame and "." not in frame.rsplit("::", 1)[-1]
                                   and WALKER_NAME.search(frame.rsplit("::", 1)[-1]) is not None)


def _walk_share(stacks: Counter) -> tuple[float, str | None, str | None]:
    """The share of samples under a directory walk, the walker most seen and its caller."""
    total = sum(stacks.values())
    under, walkers, callers = 0, Counter(), Counter()
    for stack, n in stacks.items():
        frames = stack.split(";")
        i = next((i for i, f in enumerate(frames) if is_walker(f)), None)
        if i is None:
            continue
        under += n
        walkers[frames[i]] += n
        callers[frames[i - 1] if i else "(main)"] += n
    if not total or not under:
        return 0.0, None, None
    return 100.0 * under / total, walkers.most_common(1)[0][0], callers.most_common(1)[0][0]


def _dominant_function(stacks: Counter) -> tuple[float, str | None, str | None]:
    """The user function (not the entry frames: a file, {main}) below which the most samples
    lie, with its inclusive share; a static-data getter or a repeated call shows so."""
    total = sum(stacks.values())
    incl: Counter = Counter()
    callers: dict[str, Counter] = defaultdict(Counter)
    for stack, n in stacks.items():
        frames = stack.split(";")
        for i in range(1, len(frames)):
            callers[frames[i]][frames[i - 1]] += n
        if any(is_walker(f) for f in frames):
            continue                          # the walk explains these (its own finding)
        for f in set(frames[2:-1]):      # not the entry file, not the handler it calls, not the leaf
            if not f.startswith(("{", "[")) and "/" not in f and not f.endswith(".php") and not is_walker(f):
                incl[f] += n
    if not total or not incl:
        return 0.0, None, None
    fn, n = min(incl.items(), key=lambda kv: (-kv[1], kv[0]))
    return 100.0 * n / total, fn, callers[fn].most_common(1)[0][0]


def findings(records: list[dict], rows: list[dict] | None = None) -> list[dict]:
    """What production data supports of the detectors, per route, by share of the fleet's
    samples (then of its requests): a directory walk (fs-scan), a function dominating a
    route's samples (repeated-call, db-static-cache, file-static-cache), many statements per
    request (n-plus-one, repeated-query). Each says what a lab run would confirm."""
    rows = rows if rows is not None else route_table(records)
    by_route: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        by_route[route_key(r)].append(r)
    fleet_samples = sum(row["samples"] for row in rows) or 1
    out = []
    for row in rows:
        stacks = folded(by_route[row["route"]])
        n = sum(stacks.values())
        if n >= MIN_SAMPLES:
            share, walker, caller = _walk_share(stacks)
            if share >= WALK_SHARE_PCT:
                out.append(_finding("directory-walk", row, share, n, fleet_samples,
                                    f"{share:.0f}% of the route's samples are under {walker}() called by {caller}",
                                    "lab run of this route: fs-scan with the directories walked per request "
                                    "and the lookup that fell back to the walk", function=caller, walker=walker))
            share, fn, caller = _dominant_function(stacks)
            if fn is not None and share >= REPEATED_SHARE_PCT and not any(
                    f["route"] == row["route"] and f["function"] == fn for f in out):
                out.append(_finding("dominant-function", row, share, n, fleet_samples,
                                    f"{share:.0f}% of the route's samples are under {fn}, called by {caller}",
                                    "lab run of this route with the argument probe: repeated-call (same "
                                    "arguments again), db-static-cache or file-static-cache (static data "
                                    "read key by key)", function=fn, caller=caller))
        spr = row["statements_per_request"]
        if spr is not None and spr >= STATEMENTS_PER_REQUEST:
            out.append(_finding("many-statements", row, None, n, fleet_samples,
                                f"{spr:.1f} statements per request",
                                "lab run of this route with the slow log: n-plus-one or repeated-query "
                                "with the statements and their callers", statements_per_request=spr))
    return merged(out)


def merged(found: list[dict]) -> list[dict]:
    """The findings of one kind about one function on several routes as one, named by the route
    with the most samples of it, listing the others; the fleet shares added. Ranked by share of
    the fleet's samples, then of its requests."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for f in found:
        groups[(f["kind"], f["function"] or f["route"])].append(f)
    out = []
    for fs in groups.values():
        fs.sort(key=lambda f: (-(f["fleet_share_pct"] or 0), -f["requests_pct"], f["route"]))
        top = dict(fs[0])
        shares = [f["fleet_share_pct"] for f in fs if f["fleet_share_pct"] is not None]
        top["fleet_share_pct"] = sum(shares) if shares else None
        top["routes"] = [f["route"] for f in fs]
        top["requests_pct"] = sum(f["requests_pct"] for f in fs)
        out.append(top)
    return sorted(out, key=lambda f: (-(f["fleet_share_pct"] or 0), -f["requests_pct"], f["kind"], f["route"]))


def _finding(kind: str, row: dict, share: float | None, samples: int, fleet_samples: int,
             summary: str, confirm: str, **details) -> dict:
    fleet = share * samples / fleet_samples if share is not None else None
    return {"kind": kind, "route": row["route"], "requests_pct": row["requests_pct"],
            "route_share_pct": share, "fleet_share_pct": fleet, "samples": samples,
            "summary": summary, "confirm": confirm, "function": details.pop("function", None), **details}


def url_mix(records: list[dict], top: int = 50) -> list[dict]:
    """The GET requests answered 2xx, by URI (path and query, as sent), most frequent first: the
    `top` of them with their share; weights are counts, so a target's mix is the fleet's."""
    counts = Counter(r.get("uri") or r.get("route") for r in records
                     if r.get("method") == "GET" and 200 <= int(r.get("status", 0)) < 300)
    total = sum(counts.values()) or 1
    return [{"path": uri, "weight": n, "share_pct": 100.0 * n / total}
            for uri, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top]]


def losses(records: Iterable[dict]) -> dict[str, int]:
    """(host, pool) -> records the agents counted as lost and reported since.

    A record carries `lost`, the sends that failed for sure, and `unsure`, [rid, n] pairs for
    sends whose reply never came: those n records are lost only if no record with that rid is
    among `records`. An unsure pair may be carried by several records (the one carrying it may
    itself have timed out after arriving); it counts once."""
    records = list(records)
    present = {r["rid"] for r in records if r.get("rid")}
    out: Counter = Counter()
    unsure: dict[str, tuple[str, int]] = {}
    for r in records:
        key = f"{r.get('host', '')}/{r.get('pool', '')}"
        if r.get("lost"):
            out[key] += int(r["lost"])
        for pair in r.get("unsure") or ():
            if isinstance(pair, list) and len(pair) == 2:
                unsure.setdefault(str(pair[0]), (key, int(pair[1])))
    for rid, (key, n) in unsure.items():
        if rid not in present:
            out[key] += n
    return dict(out)
