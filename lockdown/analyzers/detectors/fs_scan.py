"""fs-scan: the same directory walk on every request.

Mechanism (docs/pathologies.md section 1): a registry or configuration lookup misses -- a
module recorded as enabled whose files are gone -- and the code falls back to walking the
source tree to find it (Drupal 7's drupal_get_filename -> drupal_system_listing ->
file_scan_directory), on every request, because the miss is not cached. HHVM's lockdown saw
`is_dir`, `opendir` and `readdir` "incredibly hot" on Drupal 7 before finding the zombie row.

Signature, per xhprof-instrumented request (exact call counts): directory-walk builtins --
opendir/readdir/closedir, scandir, glob, dir(), the Directory/Filesystem/RecursiveDirectory
iterators -- plus is_dir, at least `min_dir_ops_per_request` calls in one request, in at least
`min_repeat_share` of the profiled requests of a URL (a cron job or an admin page that walks
once is not this). The walker is the user function nearest to the builtins on the heaviest
xhprof call path (file_scan_directory); its caller chain up to main() says which lookup fell
back to it. Time share: the Excimer samples with the walker on the stack (wall clock), else
the walker's inclusive xhprof time over main()'s.

Not flagged: a walk in few requests of a URL; stat calls without a walk (stat-storm).
The detector is pure; the remediation (which registry rows point at missing files) is derived
by lockdown.remediation.fs_scan from the capture's probes of the lookups.
"""
from __future__ import annotations

import re
import statistics
from collections import Counter
from dataclasses import dataclass

from ..findings import Evidence, Finding, severity_for
from .context import Context

ID = "fs-scan"
SUBJECT = "walker"  # what tells its findings apart (findings.SUBJECT_KEYS)
# builtins that walk a directory, and the methods of PHP's directory iterators
WALKERS = ("opendir", "readdir", "closedir", "rewinddir", "scandir", "glob", "dir")
ITERATOR = re.compile(r"^(RecursiveDirectoryIterator|DirectoryIterator|FilesystemIterator|GlobIterator"
                      r"|Directory)::", re.I)
OPENERS = ("opendir", "scandir", "glob", "dir")   # one call per directory visited
STATS = ("is_dir",)


def is_walk_call(name: str) -> bool:
    return name.lower() in WALKERS or ITERATOR.match(name) is not None


def dir_ops(totals: dict) -> Counter:
    """Builtin -> calls, for the walk builtins, iterator methods and is_dir of one request."""
    return Counter({f: t["calls"] for f, t in totals.items()
                    if is_walk_call(f) or f.lower() in STATS})


def directories_visited(ops: Counter) -> int:
    n = sum(c for f, c in ops.items() if f.lower() in OPENERS)
    n += sum(c for f, c in ops.items() if re.match(r"^RecursiveDirectoryIterator::(__construct|getChildren)$", f, re.I))
    n += sum(c for f, c in ops.items() if re.match(r"^(DirectoryIterator|FilesystemIterator|GlobIterator)::__construct$", f, re.I))
    return n


def walker_of(ctx: Context, rid: str, ops: Counter) -> tuple[str | None, list[str]]:
    """The user function driving the walk and the call chain down to it (from main())."""
    hottest = max((f for f in ops if is_walk_call(f)), key=lambda f: (ops[f], f), default=None)
    if hottest is None:
        return None, []
    chain = ctx.call_chain(rid, hottest, depth=16)
    user = [f for f in chain[:-1] if f != "main()" and not ITERATOR.match(f) and not ctx.is_internal(f)]
    return (user[-1] if user else None), chain


@dataclass
class Case:
    """The same directory walk on most profiled requests of some URLs."""
    urls: list[str]
    requests: list[str]             # the scanning profiled requests, sorted
    walker: str | None              # the user function driving the walk, its call chain, its caller
    chain: list[str]
    lookup: str | None
    calls: dict[str, list[int]]     # walk builtin -> calls in each request
    directories: list[int]          # directories visited in each request
    walker_calls: list[int]
    share: float                    # % of request time
    by_excimer: bool                # the share from Excimer samples (else xhprof inclusive time)


def decide(ctx: Context) -> list[Case]:
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
    return [Case(
        urls=sorted(scanning), requests=rids, walker=walker, chain=chain,
        lookup=chain[chain.index(walker) - 1] if walker in chain and chain.index(walker) > 0 else None,
        calls={f: [ops_of[r][f] for r in rids] for f in sorted({f for r in rids for f in ops_of[r]})},
        directories=[directories_visited(ops_of[r]) for r in rids],
        walker_calls=[ctx.xhprof[r].get(walker, {}).get("calls", 0) for r in rids] if walker else [],
        share=share, by_excimer=by_excimer)]


def detect(ctx: Context) -> list[Finding]:
    return [describe(c) for c in decide(ctx)]


def describe(c: Case) -> Finding:
    rids, walker, calls, urls = c.requests, c.walker, c.calls, c.urls
    mid = lambda xs: statistics.median(xs) if xs else 0
    dirs = mid(c.directories)
    share_source = ("Excimer samples with the walker on the stack, timed requests" if c.by_excimer
                    else "xhprof inclusive time of the walker over the request's wall time")
    evidence = [Evidence("directories walked per request (median)", dirs,
                         f"xhprof of {len(rids)} request(s): opendir/scandir/glob/iterator calls")]
    for f, per_request in calls.items():
        lo, hi = min(per_request), max(per_request)
        evidence.append(Evidence(f"{f} calls per request", lo if lo == hi else f"{lo}..{hi}",
                                 f"xhprof of {', '.join(rids[:3])}{' ...' if len(rids) > 3 else ''}"))
    if walker:
        evidence.append(Evidence("walker (user function) calls per request", mid(c.walker_calls),
                                 f"xhprof: {walker}"))
    evidence.append(Evidence("call chain", " > ".join(c.chain), f"xhprof of {rids[0]} (heaviest callers)"))
    evidence.append(Evidence("share of request time, %", round(c.share, 2), share_source))
    return Finding(
        id=ID, title=f"Every request walks {dirs:.0f} directories ({walker or 'directory scan'})",
        severity=severity_for(c.share, high=10, medium=3), share_pct=round(c.share, 2),
        summary=(f"On {len(urls)} URL(s) every profiled request walked the same directory tree: "
                 f"{dirs:.0f} directories, {sum(mid(x) for x in calls.values()):.0f} directory "
                 f"calls per request, driven by {walker or 'a directory walk'}"
                 f"{f' called from {c.lookup}' if c.lookup else ''}. A lookup that misses (a registry row "
                 "whose files are gone) falls back to scanning the tree, and the miss is not "
                 "cached, so every request pays for it."),
        evidence=evidence, urls=urls, requests=rids[:5],
        details={"walker": walker, "lookup": c.lookup, "chain": c.chain, "directories": c.directories,
                 "calls_per_request": calls, "requests": rids})
