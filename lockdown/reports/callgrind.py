"""xhprof call graphs as callgrind files, the format KCachegrind, QCachegrind, webgrind and
valgrind's callgrind_annotate read (and Xdebug and SPX write). Pure: profiles in, text out.

An xhprof profile is a set of caller==>callee edges, each with the call count and the
callee's inclusive metrics over those calls. Callgrind wants, per function, its own
(exclusive) cost, and per call site the call count and the callee's inclusive cost:

- a function's exclusive cost is the inclusive cost of every edge into it less that of every
  edge out of it, as xhprof_html computes it (xhprof_compute_flat_info); main(), which no
  edge enters, has its own entry as its inclusive cost;
- each edge is a `calls=COUNT` line under its caller with the callee's inclusive cost, so a
  reader's inclusive cost of a function is the sum of its incoming calls, and the program's
  total (the sum of every exclusive cost) is main()'s inclusive cost;
- events are the metrics main() records, in xhprof's order: `wt` (wall time, us), `cpu`
  (CPU time, us), `pmu` (growth of the peak memory, bytes). `mu`, the net change of memory in
  use, is left out: a function that frees more than it allocates has a negative one, and a
  callgrind cost is a count (KCachegrind reads it unsigned). `ut` and `st` (user and system
  CPU, which some xhprof builds record) are kept when main() has them;
- names are the profile's: a recursive call stays `f@1`, a function of its own, as xhprof_html
  shows it (so the call graph has no cycles); the file is `php:internal` for the engine's
  functions and `php:user` for the rest (the profile names no source file), or `php` when
  the bundle has no list of internal functions.

Profiles are exported as `lockdown export` repairs them (xhprof_export.exported: main() is
the request, tideways' doubled internal calls removed), one file per request, per URL (the
URL's profiles summed, edge by edge, as xhprof_aggregate_runs sums runs without normalizing)
or for all of them. An exclusive cost below zero (callees timed longer than their caller,
which rounding or two clocks can give) is written as 0, since a callgrind cost is a count
(KCachegrind reads it unsigned); the file's comment says how much was added that way, so
that the costs add up to main()'s inclusive cost plus that amount (nothing in the captures
measured: main() is at least the sum of its callees after the repair).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Iterable

from .. import __version__
from .xhprof_export import ExportFile, Exported, internal_test, safe_name

EVENTS = {"wt": "Wall time (us)", "ut": "User CPU time (us)", "st": "System CPU time (us)",
          "cpu": "CPU time (us)", "pmu": "Peak memory growth (bytes)"}
GROUPS = ("request", "url", "all")
PREFIX = "callgrind.out."           # KCachegrind opens files named callgrind.out.*


@dataclass
class Function:
    name: str
    self_cost: list[int]
    calls: dict[str, tuple[int, list[int]]] = field(default_factory=dict)   # callee -> (count, inclusive)


def merge(profiles: Iterable[dict]) -> dict:
    """Profiles summed edge by edge and metric by metric (xhprof_aggregate_runs, weight 1,
    not divided by the number of runs)."""
    out: dict[str, dict] = {}
    for p in profiles:
        for key, metrics in p.items():
            into = out.setdefault(key, {})
            for m, v in metrics.items():
                into[m] = into.get(m, 0) + v
    return out


def events_of(profile: dict) -> list[str]:
    """The callgrind events of a profile: the metrics main() records, in EVENTS order."""
    main = profile.get("main()") or {}
    return [m for m in EVENTS if m in main]


def _edge(key: str) -> tuple[str | None, str]:
    parent, sep, child = key.partition("==>")
    return (parent, child) if sep else (None, key)


def functions(profile: dict, events: list[str]) -> dict[str, Function]:
    """Every function of `profile`, callers before callees where the graph allows (first seen
    order), with its exclusive cost and its calls."""
    incl: dict[str, list[int]] = defaultdict(lambda: [0] * len(events))
    out_of: dict[str, list[int]] = defaultdict(lambda: [0] * len(events))
    order: dict[str, None] = {}
    calls: dict[str, dict[str, tuple[int, list[int]]]] = defaultdict(dict)
    for key, metrics in profile.items():
        parent, child = _edge(key)
        cost = [int(round(metrics.get(e, 0))) for e in events]
        if parent is not None:
            order.setdefault(parent, None)
            out_of[parent] = [a + b for a, b in zip(out_of[parent], cost)]
            count, before = calls[parent].get(child, (0, [0] * len(events)))
            calls[parent][child] = (count + int(metrics.get("ct", 0)), [a + b for a, b in zip(before, cost)])
        order.setdefault(child, None)
        incl[child] = [a + b for a, b in zip(incl[child], cost)]
    return {name: Function(name, [i - o for i, o in zip(incl[name], out_of[name])], calls.get(name, {}))
            for name in order}


def render(profile: dict, command: str, file_of: Callable[[str], str]) -> str:
    """The callgrind text of one profile (or a merge of several): `command` is its `cmd:`
    line, `file_of` names each function's file."""
    events = events_of(profile)
    if not events:
        raise ValueError("main() records none of wt, ut, st, cpu, pmu")
    funcs = functions(profile, events)
    ids: dict[str, dict[str, int]] = {"fl": {}, "fn": {}}

    def ref(kind: str, name: str) -> str:
        """Name compression: `(N) name` the first time, `(N)` after."""
        seen = ids[kind]
        if name in seen:
            return f"({seen[name]})"
        seen[name] = len(seen) + 1
        return f"({seen[name]}) {name}"

    lines = ["# callgrind format", "version: 1", f"creator: lockdown {__version__}",
             f"cmd: {_one_line(command)}", "positions: line"]
    lines += [f"event: {e} : {EVENTS[e]}" for e in events]
    lines.append("events: " + " ".join(events))
    raised = [sum(max(0, -f.self_cost[i]) for f in funcs.values()) for i in range(len(events))]
    if any(raised):
        lines.append("# negative exclusive costs written as 0 (callees timed longer than their caller); "
                     "added: " + " ".join(f"{e} {n}" for e, n in zip(events, raised)))
    for f in funcs.values():
        lines += ["", f"fl={ref('fl', file_of(f.name))}", f"fn={ref('fn', _one_line(f.name))}",
                  "0 " + " ".join(str(max(0, c)) for c in f.self_cost)]
        for callee, (count, cost) in f.calls.items():
            lines += [f"cfl={ref('fl', file_of(callee))}", f"cfn={ref('fn', _one_line(callee))}",
                      f"calls={count} 0", "0 " + " ".join(map(str, cost))]
    return "\n".join(lines) + "\n"


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def file_namer(internal: Callable[[str], bool] | None) -> Callable[[str], str]:
    """A function's callgrind file: php:internal or php:user, by the bundle's lists (a
    recursion marker `@N` and tideways' copies are the function's own)."""
    if internal is None:
        return lambda name: "php"
    return lambda name: "php:internal" if name != "main()" and internal(name.split("@")[0]) else "php:user"


def _groups(items: list[Exported], group: str) -> list[tuple[str, str, list[Exported]]]:
    """(file name, what it holds, its requests) for each file of `group`, in capture order."""
    if group == "request":
        return [(PREFIX + safe_name(e.request.id, "request"), f"request {e.request.id}", [e]) for e in items]
    if group == "all":
        return [(PREFIX + "all", f"all {len(items)} profiled requests", items)]
    by_url: dict[str, list[Exported]] = {}
    for e in items:
        by_url.setdefault(e.request.url or e.request.uri or "/", []).append(e)
    return [(f"{PREFIX}url{n}", f"URL {url} ({len(members)} requests)", members)
            for n, (url, members) in enumerate(by_url.items(), 1)]


def callgrind_files(manifest: dict, items: list[Exported], group: str = "request") -> list[ExportFile]:
    """One callgrind file per request, per URL or for all `items` (from xhprof_export.exported),
    and index.tsv: file, requests, URLs, request ids, main()'s wall time and how the profiles
    were exported."""
    if group not in GROUPS:
        raise ValueError(f"unknown group {group!r}")
    file_of = file_namer(internal_test(manifest))
    target = manifest.get("target", {}).get("name") or "lockdown"
    files, rows = [], ["file\trequests\turls\trequest_ids\twall_us\tprofile"]
    for name, what, members in _groups(items, group):
        profile = merge(e.profile for e in members) if len(members) > 1 else members[0].profile
        first = members[0].request
        command = (f"{target}: {first.method} {first.uri} ({what})" if group == "request"
                   else f"{target}: {what}")
        files.append(ExportFile(name, render(profile, command, file_of).encode(),
                                first.start_unix if group == "request" else None))
        urls = sorted({e.request.url or e.request.uri or "/" for e in members})
        described = sorted({e.describe() for e in members})
        rows.append("\t".join(_one_line(v) for v in (
            name, len(members), " ".join(urls), " ".join(e.request.id for e in members),
            profile["main()"].get("wt", ""), " | ".join(described))))
    files.append(ExportFile("index.tsv", ("\n".join(rows) + "\n").encode()))
    return files
