"""file-static-cache: static data read from a file one key at a time, on every request.

Mechanism (docs/pathologies.md section 2, the same pathology one store further): a cache of
data that never changes between requests -- translations, configuration -- kept in a file
that is opened and read again for every key: a CDB or DBM-like file walked with fseek/fread by
PHP code, a line-oriented file scanned with fgets. Debian's MediaWiki 1.39 is this case: its
`PlatformSettings.php` sets `$wgCacheDirectory`, so the localisation cache's `detect` store is
`LCStoreCDB`, and without the dba extension the CDB file is read by `Cdb\\Reader\\PHP` (a PHP
hash of the key, then several fseek/fread calls) for each of about a hundred messages a page
renders. A PHP file returning an array, `require`d once, is kept in shared memory by the opcode
cache and costs no read at all (`LCStoreStaticArray`; HHVM's lockdown measured +5% RPS on PHP 7
over a file store).

Signature, per xhprof-instrumented request (exact call counts), generic: no function or file
name is known in advance.
    - File-read builtins (fread, fgets, fgetc, fgetcsv, fscanf, stream_get_contents,
      stream_get_line and SplFileObject's readers) are attributed up the caller->callee edges
      to every user function, each caller getting its part of a callee's reads in proportion
      to the calls it made (xhprof keeps one level of context).
    - A user function called at least `min_lookups_per_request` times whose calls issue at
      least `min_reads_per_lookup` reads each on average is a lookup that goes to the file.
      Of several such functions, those with at least half the reads per call of the densest
      are the store's layers (a memo above the store reads on some calls only, and is left
      out). Of these, the getter reported is the one with the most reads under it over all
      profiled requests: the store's entry, which every caller's lookups pass through. Of
      equals (a wrapper that is its only caller), the outermost, the one with the most
      inclusive time. One getter for the capture, so every request names the same.
    - Nothing under the getter writes a file (fwrite, fputs, file_put_contents, ftruncate,
      fputcsv, SplFileObject::fwrite) in any of these requests: the store is only read.
    - The getter is a store layer in at least `min_request_share` of a URL's profiled
      requests (URLs below that are left out), and in at least two profiled requests
      (repetition has to be seen).

Not flagged
    - A file read once and decoded into memory (file_get_contents, include, unserialize of the
      whole file): its lookups issue no read each.
    - Fewer lookups than the threshold (a session file, a template read per page).
    - A store that is written while serving (a cache being filled, a log): writes under it.

Limits
    xhprof keeps no arguments, so the detector does not see which file is read nor which keys:
    "static" rests on the store being read-only in the capture and on the same lookups being
    made on every profiled request of a URL. The getter's reads are attributed by call counts,
    so a function that reads for some callers and not for others is credited on average. A
    store whose getter is called fewer than `min_lookups_per_request` times but whose inner
    reader issues one read per call, several calls per lookup, is reported under that reader
    (its calls counted as lookups); a buffered reader (fewer reads than calls) is not.

What it costs beyond its own time
    PHP's stream layer reads plain files through an 8 KB buffer that a seek outside the
    buffered bytes discards: then `fseek` + `fread($fh, 8)` is an lseek(2) and a read(2) of
    8192 bytes (strace). A reader that seeks before every read copies up to 8 KB from the
    page cache per read: MediaWiki's CDB reader up to 1.6 MB per page, minicms-files' up to
    4.3 MB. Besides the time Excimer sees in the getter, that traffic evicts the rest of the
    request's data from the CPU caches, which is charged to whatever runs next; `verify`
    measured gains of about twice the share (docs/detectors.md). The evidence gives the
    seeks and the upper bound of the bytes.

Share of request time
    The timed requests' Excimer samples with the getter on the stack (wall clock); without
    Excimer, its inclusive xhprof time over the instrumented requests' wall time (an upper
    bound: xhprof slows many small calls down). Severity follows `findings.severity_for`.

Details: `function` (the getter), `callers` (its top callers, calls per request), `reader_path` (getter
down to the read builtin), `lookups_per_request`, `reads_per_request`, `opens_per_request`,
`seeks_per_request`, `refill_bytes_per_request` (the upper bound above),
`reads_per_lookup`, `per_url` (lookups and reads per request by URL). The fix for MediaWiki is
`$wgLocalisationCacheConf['storeClass'] = 'LCStoreStaticArray'` and
`php maintenance/rebuildLocalisationCache.php` (remediation/recipes.toml); for another
application, a PHP file returning the data as an array (`var_export`), `require`d once.
"""
from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass

from ..call_graph import attributed, call_graph
from ..findings import Evidence, Finding, severity_for
from .context import Context
from .figures import spread

ID = "file-static-cache"
SUBJECT = "function"  # what tells its findings apart (findings.SUBJECT_KEYS)

READS = frozenset(("fread", "fgets", "fgetc", "fgetcsv", "fscanf", "stream_get_contents",
                   "stream_get_line", "splfileobject::fread", "splfileobject::fgets",
                   "splfileobject::fgetc", "splfileobject::fgetcsv", "splfileobject::fscanf"))
OPENS = frozenset(("fopen", "splfileobject::__construct", "gzopen"))
SEEKS = frozenset(("fseek", "rewind", "splfileobject::fseek", "splfileobject::rewind"))
STREAM_CHUNK = 8192   # PHP's stream read buffer: a read after a seek asks the kernel for this much
WRITES = frozenset(("fwrite", "fputs", "file_put_contents", "ftruncate", "fputcsv",
                    "splfileobject::fwrite", "splfileobject::fputcsv", "splfileobject::ftruncate"))


def _in(names: frozenset[str]):
    return lambda fn: fn.lower() in names


def store_layers(ctx: Context, rid: str) -> tuple[dict[str, dict], dict[str, float]]:
    """The request's candidate getters (see the module docstring), function -> counts; and the
    reads credited to every function of the request (for `reader_path`)."""
    min_lookups = ctx.threshold(ID, "min_lookups_per_request")
    min_reads = ctx.threshold(ID, "min_reads_per_lookup")
    edges = ctx.xhprof_edges.get(rid, {})
    if not any(c.lower() in READS for _, c in edges):
        return {}, {}
    reads, opens, writes, seeks = attributed(edges, _in(READS), _in(OPENS), _in(WRITES), _in(SEEKS))
    totals = ctx.xhprof[rid]
    found = {}
    for fn, r in reads.items():
        t = totals.get(fn)
        if (not t or fn == "main()" or ctx.is_internal(fn) or t["calls"] < min_lookups
                or r / t["calls"] < min_reads):
            continue
        found[fn] = {"function": fn, "calls": t["calls"], "inclusive_us": t["inclusive_us"],
                     "reads": r, "opens": opens.get(fn, 0.0), "writes": writes.get(fn, 0.0),
                     "seeks": seeks.get(fn, 0.0)}
    if not found:
        return {}, reads
    # A memo layer above the store reads on some calls only: fewer reads per call than the
    # store's own layers.
    densest = max(g["reads"] / g["calls"] for g in found.values())
    return {fn: g for fn, g in found.items() if g["reads"] / g["calls"] >= densest / 2}, reads


def getter(layers: dict[str, dict[str, dict]]) -> str | None:
    """Of every request's store layers, the store's entry: the most reads under it over the
    capture (every caller's lookups pass through it); of equals, the outermost (the most
    inclusive time). Chosen once for the capture, so that every request names the same."""
    reads: Counter = Counter()
    incl: Counter = Counter()
    for per_fn in layers.values():
        for fn, g in per_fn.items():
            reads[fn] += g["reads"]
            incl[fn] += g["inclusive_us"]
    return max(reads, key=lambda fn: (round(reads[fn], 6), incl[fn], fn), default=None)


def reader_path(edges: dict, fn: str, reads: dict[str, float], depth: int = 12) -> list[str]:
    """The getter down to the read builtin, each step to the callee that read the most."""
    children, calls_in = call_graph(edges)
    path = [fn]
    while len(path) < depth:
        best = None
        for c, ct in children.get(path[-1], ()):
            if c in path:
                continue
            got = ct if c.lower() in READS else ct / calls_in[c] * reads.get(c, 0.0)
            if got and (best is None or got > best[0]):
                best = (got, c)
        if best is None:
            break
        path.append(best[1])
        if best[1].lower() in READS:
            break
    return path


def share_pct(ctx: Context, fn: str, found: list[dict], rids: list[str]) -> tuple[float, bool]:
    """(% of request time in the getter, whether from Excimer): timed PHP samples with it on
    the stack, else its inclusive xhprof time over the instrumented requests' wall time."""
    if fn in ctx.excimer_frames and ctx.excimer_total:
        return ctx.php_share_pct(lambda f: f == fn), True
    walls = [ctx.wall_us(r) for r in rids]
    # each request's part at most its wall time (xhprof's inclusive time sums every call of
    # the getter, a call inside another counted twice): a share is part of the same requests' time
    return (100.0 * sum(min(g["inclusive_us"], w) for g, w in zip(found, walls)) / sum(walls)
            if sum(walls) else 0.0), False


@dataclass
class Case:
    """The getter of a read-only file store, on most profiled requests of some URLs."""
    function: str
    urls: list[str]
    requests: list[str]             # the profiled requests with its lookups, sorted
    lookups: dict                   # per request (spread): calls of the getter, reads, opens, seeks under it
    reads: dict
    opens: dict
    seeks: dict
    refills: float                  # reads after a seek per request (median): buffer refills
    reads_per_lookup: float
    us_per_lookup: float            # inclusive, instrumented
    callers: list[dict]             # the top 3, with calls per request
    path: list[str]                 # the getter down to the read builtin
    share: float
    by_excimer: bool
    per_url: dict


def decide(ctx: Context) -> list[Case]:
    min_share = ctx.threshold(ID, "min_request_share")
    per_request = {rid: store_layers(ctx, rid) for rid in sorted(ctx.xhprof)}
    layers = {rid: got[0] for rid, got in per_request.items()}
    fn = getter(layers)
    if fn is None:
        return []
    per_rid: dict[str, dict] = {}
    for url, rids in ctx.profiled_by_url.items():
        mine = {rid: layers[rid][fn] for rid in rids if fn in layers[rid]}
        if len(mine) >= min_share * len(rids):
            per_rid.update(mine)
    if len(per_rid) < 2 or any(g["writes"] for g in per_rid.values()):
        return []
    rids = sorted(per_rid)
    found = [per_rid[r] for r in rids]
    urls = sorted({ctx.url_of.get(r, "?") for r in rids})
    callers: Counter = Counter()
    for r in rids:
        for (p, c), e in ctx.xhprof_edges[r].items():
            if c == fn and p != fn:
                callers[p] += e["ct"]
    per_url = {}
    for u in urls:
        mine = [per_rid[r] for r in rids if ctx.url_of.get(r) == u]
        per_url[u] = {"profiled": len(ctx.profiled_by_url[u]), "with_lookups": len(mine),
                      "lookups_per_request": spread([g["calls"] for g in mine]),
                      "reads_per_request": spread([g["reads"] for g in mine])}
    share, by_excimer = share_pct(ctx, fn, found, rids)
    calls = sum(g["calls"] for g in found)
    return [Case(
        function=fn, urls=urls, requests=rids, lookups=spread([g["calls"] for g in found]),
        reads=spread([g["reads"] for g in found]), opens=spread([g["opens"] for g in found]),
        seeks=spread([g["seeks"] for g in found]),
        # PHP's stream layer drops its read buffer on a seek outside the bytes it holds; the next
        # read refills it with one read(2) of a whole chunk, however few bytes were asked for.
        refills=statistics.median(min(g["seeks"], g["reads"]) for g in found),
        reads_per_lookup=round(sum(g["reads"] for g in found) / calls, 2),
        us_per_lookup=round(sum(g["inclusive_us"] for g in found) / calls, 1),
        callers=[{"function": p, "calls_per_request": round(n / len(rids), 1)} for p, n in callers.most_common(3)],
        path=reader_path(ctx.xhprof_edges[rids[0]], fn, per_request[rids[0]][1]),
        share=share, by_excimer=by_excimer, per_url=per_url)]


def detect(ctx: Context) -> list[Finding]:
    return [describe(c) for c in decide(ctx)]


def describe(c: Case) -> Finding:
    fn, rids, urls, lookups, reads, seeks, path = c.function, c.requests, c.urls, c.lookups, c.reads, c.seeks, c.path
    source = f"xhprof of {', '.join(rids[:3])}{' ...' if len(rids) > 3 else ''}"
    if c.by_excimer:
        share_evidence = Evidence(f"timed PHP samples with {fn} on the stack", f"{c.share:.1f}%",
                                  "excimer.jsonl (timed requests, wall clock)")
    else:
        share_evidence = Evidence(f"inclusive time of {fn}, % of the instrumented requests' wall time",
                                  f"{c.share:.1f}%", "xhprof (no Excimer samples name it: an upper bound, "
                                  "xhprof slows small calls down)")
    summary = (
        f"{lookups['median']} lookups per request (median) go through `{fn}`, and each one reads "
        f"a file: {reads['median']} file reads per request under it ({c.reads_per_lookup} per lookup, "
        f"`{' -> '.join(path[1:])}`), on {len(rids)} profiled requests of "
        f"{', '.join(urls[:3])}{' ...' if len(urls) > 3 else ''}; nothing under it writes a file. "
        "This is a read-only store of static data (translations, configuration) read from disk "
        "and decoded one key at a time on every request. A PHP file returning the data as an "
        "array, loaded once with `require`, is kept in shared memory by the opcode cache and "
        "costs no read (MediaWiki: LCStoreStaticArray and rebuildLocalisationCache.php).")
    return Finding(
        id=ID,
        title=f"Static data read from a file key by key: {lookups['median']} lookups per request in {fn}",
        severity=severity_for(c.share), share_pct=round(c.share, 2), summary=summary,
        evidence=[
            Evidence("lookups per request, calls of the getter (min/median/max)",
                     f"{lookups['min']}/{lookups['median']}/{lookups['max']}", source),
            Evidence("file reads per request under it (min/median/max)",
                     f"{reads['min']}/{reads['median']}/{reads['max']}", source),
            Evidence("file reads per lookup", c.reads_per_lookup, source),
            Evidence("files opened per request under it (median)", c.opens["median"], source),
            Evidence("seeks per request under it (fseek, rewind; min/median/max)",
                     f"{seeks['min']}/{seeks['median']}/{seeks['max']}", source),
            Evidence("bytes the kernel may copy per request for reads after a seek (median; a seek "
                     f"outside PHP's {STREAM_CHUNK}-byte stream buffer makes the next read refill it)",
                     f"up to {c.refills * STREAM_CHUNK / 1e6:.1f} MB", source),
            Evidence("file writes under it (fwrite, file_put_contents, ...)", 0, source),
            Evidence("path to the reads", " -> ".join(path), f"xhprof of {rids[0]}"),
            *[Evidence("caller (calls per request, mean)", f"{x['function']} ({x['calls_per_request']:g})",
                       source) for x in c.callers],
            Evidence("inclusive time per lookup (instrumented, inflated by xhprof)",
                     f"{c.us_per_lookup} us", source),
            share_evidence,
        ],
        urls=urls, requests=rids[:5],
        details={"function": fn, "callers": c.callers, "reader_path": path,
                 "lookups_per_request": lookups, "reads_per_request": reads,
                 "opens_per_request": c.opens, "seeks_per_request": seeks,
                 "refill_bytes_per_request": int(c.refills * STREAM_CHUNK), "reads_per_lookup": c.reads_per_lookup,
                 "per_url": c.per_url})
