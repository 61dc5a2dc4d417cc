"""fs-scan: the same directory walk on every request.

Mechanism (docs/pathologies.md section 1), in two kinds the detector tells apart:
- **miss-fallback**: a registry or configuration lookup misses -- a module recorded as enabled
  whose files are gone -- and the code falls back to walking the source tree to find it (Drupal
  7's drupal_get_filename -> drupal_system_listing -> file_scan_directory), on every request,
  because the miss is not cached. HHVM's lockdown saw `is_dir`, `opendir` and `readdir`
  "incredibly hot" on Drupal 7 before finding the zombie row.
- **discovery**: the walk is how the app learns what it has (plugins, manifests, templates):
  its result is the list of everything found, and nothing keeps it between requests.

Signature, per xhprof-instrumented request (exact call counts): directory-walk builtins --
opendir/readdir/closedir, scandir, glob, dir(), the Directory/Filesystem/RecursiveDirectory
iterators -- plus is_dir, at least `min_dir_ops_per_request` calls in one request, in at least
`min_repeat_share` of the profiled requests of a URL (a cron job or an admin page that walks
once is not this). The walker is the user function nearest to the builtins on the heaviest
xhprof call path (file_scan_directory); its caller chain up to main() says which lookup fell
back to it. Time share: the Excimer samples with the walker on the stack (wall clock), else
the walker's inclusive xhprof time over main()'s.

Directories, each counted once however it is walked: every opening mechanism -- opendir,
scandir, glob, dir(), DirectoryIterator, FilesystemIterator, GlobIterator, and
RecursiveDirectoryIterator -- makes one call per directory it visits, and one walk may use
several on the same directories (an iterator yields each directory and a glob() lists its
files; scandir() to list, then opendir() to read), so each mechanism is an estimate of the same
directories and the count is the largest of them, not their sum. RecursiveDirectoryIterator
opens the root with `__construct` and every other directory with `getChildren`, which
constructs the child (xhprof counts that `__construct` too): its count is the larger of
`__construct` and `getChildren + 1`. A walk whose directories are split between two mechanisms
is counted as its larger part (an estimate that errs low, never double), a mechanism called
twice per directory (two glob patterns) counts each directory twice, and one glob() whose
pattern spans directories (`*/*.json`) counts once for all of them.

Which kind (`details["walk"]`, what showed it in `details["walk_evidence"]`), from the capture
alone: **miss-fallback** when, among the three user functions nearest above the walker on its
chain (closures left out: tideways names every closure of a scope alike), one was called more
often per request than it went toward the walk -- a lookup asked for many names that walked for
few (minicms's drupal_get_filename: 118 calls, 1 walk) -- and it, or a function between it and
the walker, read the database off the walk (a statement-sending builtin within four calls): the
registry read. The single-row key lookups among the request's statements sent as often as that
read are recorded as the registry's statements (none when the capture took no statements).
Otherwise **discovery**: the walk is entered as often as the functions above it are called, or
nothing read a registry first; the files read under the walker (manifests it found) are
recorded as observed.

Not flagged: a walk in few requests of a URL; stat calls without a walk (stat-storm).
The detector is pure; the remediation (which registry rows point at missing files) is derived
by lockdown.remediation.registry_probe from the capture's probes of the lookups.
"""
from __future__ import annotations

import re
import statistics
from collections import Counter
from dataclasses import dataclass, field

from ..findings import Evidence, Finding, severity_for
from ..query_digest import fingerprint
from ..round_trip import is_client_call
from ..sql_text import point_lookup
from .context import Context

ID = "fs-scan"
SUBJECT = "walker"  # what tells its findings apart (findings.SUBJECT_KEYS)
# builtins that walk a directory, and the methods of PHP's directory iterators
WALKERS = ("opendir", "readdir", "closedir", "rewinddir", "scandir", "glob", "dir")
ITERATOR = re.compile(r"^(RecursiveDirectoryIterator|DirectoryIterator|FilesystemIterator|GlobIterator"
                      r"|Directory)::", re.I)
# mechanism -> the call it makes once per directory it opens (RecursiveDirectoryIterator: below)
OPENERS = {"opendir": "opendir", "scandir": "scandir", "glob": "glob", "dir": "dir",
           "DirectoryIterator": "directoryiterator::__construct",
           "FilesystemIterator": "filesystemiterator::__construct",
           "GlobIterator": "globiterator::__construct"}
RDI = "RecursiveDirectoryIterator"
STATS = ("is_dir",)
# builtins that read a file the walk found (a manifest, an info file)
FILE_READS = ("file_get_contents", "file", "fopen", "parse_ini_file", "simplexml_load_file",
              "yaml_parse_file", "splfileobject::__construct")
LOOKUP_SPAN = 3         # user functions above the walker searched for the lookup that fell back
REGISTRY_DEPTH = 4      # calls from the lookup to the statement-sending builtin


def is_walk_call(name: str) -> bool:
    return name.lower() in WALKERS or ITERATOR.match(name) is not None


def dir_ops(totals: dict) -> Counter:
    """Builtin -> calls, for the walk builtins, iterator methods and is_dir of one request."""
    return Counter({f: t["calls"] for f, t in totals.items()
                    if is_walk_call(f) or f.lower() in STATS})


def directories_by_mechanism(ops: Counter) -> dict[str, int]:
    """Mechanism -> directories it opened in one request (mechanisms that opened none left out)."""
    low = Counter()
    for f, c in ops.items():
        low[f.lower()] += c
    out = {m: low[call] for m, call in OPENERS.items() if low[call]}
    construct, children = low[f"{RDI.lower()}::__construct"], low[f"{RDI.lower()}::getchildren"]
    if construct or children:
        out[RDI] = max(construct, children + 1 if children else 0)
    return out


def directories_visited(ops: Counter) -> int:
    """Directories walked in one request, each once: the largest count of one mechanism."""
    return max(directories_by_mechanism(ops).values(), default=0)


def walker_of(ctx: Context, rid: str, ops: Counter) -> tuple[str | None, list[str]]:
    """The user function driving the walk and the call chain down to it (from main())."""
    hottest = max((f for f in ops if is_walk_call(f)), key=lambda f: (ops[f], f), default=None)
    if hottest is None:
        return None, []
    chain = ctx.call_chain(rid, hottest, depth=16)
    user = [f for f in chain[:-1] if f != "main()" and not ITERATOR.match(f) and not ctx.is_internal(f)]
    return (user[-1] if user else None), chain


@dataclass
class Walk:
    """What the capture shows of why the walk runs (the kind, and the observations behind it)."""
    kind: str                               # "miss-fallback" or "discovery"
    entries: int                            # times the walker was entered from outside, per request
    missed_lookup: str | None = None        # miss-fallback: the lookup that fell back to the walk
    lookup_calls: int = 0                   # ... its calls per request
    lookup_walks: int = 0                   # ... of which went toward the walk
    registry_read: str | None = None        # ... the statement-sending builtin it reached
    registry_statements: list[str] = field(default_factory=list)   # single-row key lookups seen
    file_reads: dict[str, int] = field(default_factory=dict)       # file reads under the walker

    def to_json(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "kind"}


def callees(ctx: Context, rid: str) -> dict[str, list[tuple[str, int]]]:
    """Caller -> [(callee, calls)] of one request's xhprof edges, callees sorted."""
    out: dict[str, list[tuple[str, int]]] = {}
    for (caller, callee), v in sorted(ctx.xhprof_edges[rid].items()):
        out.setdefault(caller, []).append((callee, v["ct"]))
    return out


def _reaches_client(ctx: Context, graph: dict, start: str, avoid: str) -> tuple[str, int] | None:
    """(the statement-sending builtin `start` reaches within REGISTRY_DEPTH calls, not through
    `avoid` -- the next function toward the walk --, the calls `start` made on that path), or None."""
    frontier, seen = [(start, 0)], {start, avoid}
    for _ in range(REGISTRY_DEPTH):
        nxt = []
        for p, first in frontier:
            for callee, ct in graph.get(p, []):
                if callee in seen:
                    continue
                calls = first or ct
                if is_client_call(callee):
                    return callee, calls
                seen.add(callee)
                if not ctx.is_internal(callee):
                    nxt.append((callee, calls))
        frontier = nxt
    return None


def _key_lookups(ctx: Context, rid: str, calls: int) -> list[str]:
    """Fingerprints of the request's single-row key lookups sent `calls` times (as often as the
    lookup called toward the database: its registry read), else the 3 sent closest to that."""
    n = Counter(fingerprint(s.sql) for s in ctx.statements_of.get(rid, [])
                if s.rows_sent == 1 and point_lookup(s.sql))
    exact = sorted(fp for fp in n if n[fp] == calls)
    return exact or sorted(n, key=lambda fp: (abs(n[fp] - calls), fp))[:3]


def _file_reads(ctx: Context, graph: dict, walker: str) -> dict[str, int]:
    """File-reading builtins called by the walker and the user functions under it."""
    under, frontier, reads = {walker}, [walker], Counter()
    while frontier:
        for callee, ct in graph.get(frontier.pop(), []):
            if callee.lower() in FILE_READS:
                reads[callee] += ct
            elif callee not in under and not ctx.is_internal(callee):
                under.add(callee)
                frontier.append(callee)
    return dict(sorted(reads.items()))


def classify(ctx: Context, rid: str, walker: str | None, chain: list[str]) -> Walk:
    """The walk's kind in one scanning request (module docstring: which kind)."""
    if walker is None or walker not in chain:
        return Walk("discovery", 0)
    edges, totals = ctx.xhprof_edges[rid], ctx.xhprof[rid]
    entries = sum(v["ct"] for (p, c), v in edges.items() if c == walker and p != walker)
    graph = callees(ctx, rid)
    file_reads = _file_reads(ctx, graph, walker)
    i = chain.index(walker)
    above = [j for j in range(i - 1, 0, -1)
             if not ctx.is_internal(chain[j]) and "{closure}" not in chain[j]][:LOOKUP_SPAN]
    for j in above:
        f = chain[j]
        calls, walks = totals.get(f, {}).get("calls", 0), edges.get((f, chain[j + 1]), {}).get("ct", 0)
        if not walks or calls <= walks:
            continue
        sent = next((hit for k in range(j, i) if (hit := _reaches_client(ctx, graph, chain[k], chain[k + 1]))), None)
        if sent:
            return Walk("miss-fallback", entries, f, calls, walks, sent[0], _key_lookups(ctx, rid, sent[1]),
                        file_reads)
    return Walk("discovery", entries, file_reads=file_reads)


@dataclass
class Case:
    """The same directory walk on most profiled requests of some URLs."""
    urls: list[str]
    requests: list[str]             # the scanning profiled requests, sorted
    walker: str | None              # the user function driving the walk, its call chain, its caller
    chain: list[str]
    lookup: str | None
    calls: dict[str, list[int]]     # walk builtin -> calls in each request
    directories: list[int]          # directories visited in each request, each once
    by_mechanism: dict[str, list[int]]   # opening mechanism -> directories it opened, per request
    walker_calls: list[int]
    walk: Walk                      # why it walks: miss-fallback or discovery, and what showed it
    share: float                    # % of request time
    by_excimer: bool                # the share from Excimer samples (else xhprof inclusive time)


def scanning_requests(ctx: Context) -> tuple[dict[str, list[str]], dict[str, Counter]]:
    """{URL: its scanning profiled requests} for the URLs that walk on most of them, and each
    scanning request's walk calls."""
    min_ops = ctx.threshold(ID, "min_dir_ops_per_request")
    min_share = ctx.threshold(ID, "min_repeat_share")
    scanning: dict[str, list[str]] = {}
    ops_of: dict[str, Counter] = {}
    for url, rids in sorted(ctx.profiled_by_url.items()):
        hits = []
        for rid in rids:
            ops = dir_ops(ctx.xhprof[rid])
            if sum(ops.values()) >= min_ops:
                hits.append(rid)
                ops_of[rid] = ops
        if hits and len(hits) >= min_share * len(rids):
            scanning[url] = hits
    return scanning, ops_of


def decide(ctx: Context) -> list[Case]:
    scanning, ops_of = scanning_requests(ctx)
    if not scanning:
        return []
    rids = sorted(r for hits in scanning.values() for r in hits)
    walker, chain = walker_of(ctx, rids[0], ops_of[rids[0]])
    by_excimer = bool(walker and ctx.excimer_total)
    if by_excimer:
        share = ctx.php_share_pct(lambda f, w=walker: f == w)
    else:
        main = [ctx.wall_us(r) for r in rids]
        top = walker or chain[-1]      # time entering it from outside: recursion counted once
        spent = [sum(v["wt"] for (p, c), v in ctx.xhprof_edges[r].items() if c == top and p != top)
                 for r in rids]
        # each request's part at most its wall time: a share is part of the same requests' time
        share = 100.0 * sum(map(min, spent, main)) / sum(main) if sum(main) else 0.0
    opened = [directories_by_mechanism(ops_of[r]) for r in rids]
    return [Case(
        urls=sorted(scanning), requests=rids, walker=walker, chain=chain,
        lookup=chain[chain.index(walker) - 1] if walker in chain and chain.index(walker) > 0 else None,
        calls={f: [ops_of[r][f] for r in rids] for f in sorted({f for r in rids for f in ops_of[r]})},
        directories=[max(o.values(), default=0) for o in opened],
        by_mechanism={m: [o.get(m, 0) for o in opened] for m in sorted({m for o in opened for m in o})},
        walker_calls=[ctx.xhprof[r].get(walker, {}).get("calls", 0) for r in rids] if walker else [],
        walk=classify(ctx, rids[0], walker, chain), share=share, by_excimer=by_excimer)]


def detect(ctx: Context) -> list[Finding]:
    return [describe(c) for c in decide(ctx)]


def _mid(xs) -> float:
    return statistics.median(xs) if xs else 0


def _range(xs: list[int]) -> int | str:
    lo, hi = min(xs), max(xs)
    return lo if lo == hi else f"{lo}..{hi}"


def describe_kind(c: Case) -> tuple[str, str]:
    """(title, summary) for the kind of walk observed: what was seen, then the fix."""
    dirs, w = _mid(c.directories), c.walk
    name = c.walker or "a directory walk"
    seen = (f"On {len(c.urls)} URL(s) every profiled request walked the same directory tree: {dirs:.0f} "
            f"directories, {sum(_mid(x) for x in c.calls.values()):.0f} directory calls per request, "
            f"driven by {name}{f' called from {c.lookup}' if c.lookup else ''}.")
    if w.kind == "miss-fallback":
        return (f"Every request walks {dirs:.0f} directories after a lookup misses ({c.walker or 'directory scan'})",
                f"{seen} The walk is a lookup's fallback: {w.missed_lookup} was called {w.lookup_calls} times "
                f"per request and walked on {w.lookup_walks} of them, after reading the database "
                f"({w.registry_read}). A name the registry holds but the files do not (a row whose files "
                "are gone) misses, the lookup scans the tree for it, and the miss is not cached, so every "
                "request pays for it. Fix: repair the registry row (delete it, or point it at the files) "
                "and cache the miss.")
    read = sum(w.file_reads.values())
    return (f"Every request walks {dirs:.0f} directories to discover what they hold ({c.walker or 'directory scan'})",
            f"{seen} The walk is the discovery itself: {name} was entered {w.entries} time(s) per request, "
            "not as the fallback of a lookup (no function above it answered other calls without walking)"
            f"{f', and read {read} file(s) it found' if read else ''}. Its result is the list of what the tree "
            "holds, and nothing keeps it, so every request walks again. Fix: cache the walk's result "
            "(a PHP array file OPcache keeps, or APCu), rebuilt when a directory of the tree changes "
            "(its mtime), instead of walking on every request.")


def describe(c: Case) -> Finding:
    rids, walker, urls = c.requests, c.walker, c.urls
    xh = f"xhprof of {', '.join(rids[:3])}{' ...' if len(rids) > 3 else ''}"
    share_source = ("Excimer samples with the walker on the stack, timed requests" if c.by_excimer
                    else "xhprof inclusive time of the walker over the request's wall time")
    busiest = ", ".join(f"{m} {_mid(n):.0f}" for m, n in c.by_mechanism.items())
    evidence = [Evidence("directories walked per request (median)", _mid(c.directories),
                         f"xhprof of {len(rids)} request(s): each directory once, the largest count of "
                         f"one opening mechanism ({busiest or 'none'}), not their sum")]
    for f, per_request in c.calls.items():
        evidence.append(Evidence(f"{f} calls per request", _range(per_request), xh))
    if walker:
        evidence.append(Evidence("walker (user function) calls per request", _mid(c.walker_calls),
                                 f"xhprof: {walker}"))
    evidence.append(Evidence("call chain", " > ".join(c.chain), f"xhprof of {rids[0]} (heaviest callers)"))
    w = c.walk
    if w.kind == "miss-fallback":
        evidence.append(Evidence("lookup calls per request, of which walked", f"{w.lookup_calls}, {w.lookup_walks}",
                                 f"xhprof of {rids[0]}: {w.missed_lookup}"))
        rows = f"; single-row key lookups: {'; '.join(w.registry_statements)}" if w.registry_statements else ""
        evidence.append(Evidence("registry read before the walk", w.registry_read,
                                 f"xhprof of {rids[0]}: {w.missed_lookup}'s calls off the walk{rows}"))
    elif w.file_reads:
        evidence.append(Evidence("files read under the walker per request", sum(w.file_reads.values()),
                                 f"xhprof of {rids[0]}: " + ", ".join(f"{f} {n}" for f, n in w.file_reads.items())))
    evidence.append(Evidence("share of request time, %", round(c.share, 2), share_source))
    title, summary = describe_kind(c)
    return Finding(
        id=ID, title=title, severity=severity_for(c.share, high=10, medium=3), share_pct=round(c.share, 2),
        summary=summary, evidence=evidence, urls=urls, requests=rids[:5],
        details={"walker": walker, "lookup": c.lookup, "chain": c.chain, "directories": c.directories,
                 "directories_by_mechanism": c.by_mechanism, "walk": w.kind, "walk_evidence": w.to_json(),
                 "calls_per_request": c.calls, "requests": rids})
