"""session-per-request: a PHP session started on every request, so that every visitor without a
session cookie (a first visit, a crawler, a health check, a cache's fetch) gets a new session:
a file created and written on every request with PHP's default files handler.

Mechanism: `session_start()` with no session cookie in the request makes a new id, and the files
handler opens `sess_<id>` with O_CREAT at once and writes it at the end of the request, even
when nothing was stored; the Set-Cookie it answers with also keeps the page out of shared
caches. lockdown's capture, like wrk and ab, sends no cookie: each of its requests is a first
visit. DokuWiki starts one in `init_session()` on every page: about 12% of the workers' CPU in
the trial that found it was the kernel creating and flushing those files.

Signature, per URL: `session_start` called in at least `min_request_share` of the URL's
xhprof-profiled requests. The function named is its caller (the most frequent one). Share: with
perf, the on-CPU native samples of the finding's URLs with PHP's session code on the stack
(`php_session_*`, the files handler `ps_*_files`, and what they call, the kernel's file creation
included) x the timed requests' CPU/wall ratio x the URLs' part of the timed wall time; without
enough samples, xhprof's time in `session_start` over the wall time (the open and the read; the
write at the end of the request is outside PHP's stacks, so this is a floor). Reported from
`min_share_pct`.

The fix is the app's: start the session only when something is stored in it (or a cookie came
with the request), and leave anonymous pages without one. No patch (`details.no_patch`)."""
from __future__ import annotations

import re
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass

from ..findings import Evidence, Finding, severity_for
from .context import Context
from .figures import native_on
from .hot_builtins import cpu_fraction

ID = "session-per-request"
SUBJECT = "function"  # what tells its findings apart (findings.SUBJECT_KEYS)
MIN_SAMPLES = 50      # native samples on the URLs below which the share is xhprof's
_SESSION_FRAME = re.compile(r"^(php_session_\w+|ps_\w+_files|ps_files_\w+|php_session_flush|session_\w+_handler)$")
NO_PATCH = ("where a session is needed is the app's to say: start it only when something is stored in it or the "
            "request carries a session cookie (verify a change with `lockdown verify --patch`)")


def is_session_sample(frames: list) -> bool:
    return any(_SESSION_FRAME.match(f[1] or "") for f in frames)


@dataclass
class Case:
    function: str                   # the caller of session_start (the most frequent)
    urls: list[str]
    profiled: dict[str, tuple[int, int]]    # URL -> (profiled requests calling it, profiled requests)
    share: float | None
    source: str
    samples: int                    # native samples on the URLs
    hits: int                       # ... with session code on the stack
    requests: list[str]


def _starts(ctx: Context, rid: str) -> Counter:
    """Caller -> session_start calls in one profiled request."""
    return Counter({p: e["ct"] for (p, c), e in ctx.xhprof_edges.get(rid, {}).items() if c == "session_start"})


def decide(ctx: Context) -> list[Case]:
    least = ctx.threshold(ID, "min_request_share")
    by_url: dict[str, list[str]] = defaultdict(list)
    for rid in sorted(ctx.xhprof_profiles):
        by_url[ctx.url_of.get(rid, "?")].append(rid)
    urls, profiled, callers = [], {}, Counter()
    for url, rids in sorted(by_url.items()):
        starting = [rid for rid in rids if _starts(ctx, rid)]
        if rids and len(starting) >= least * len(rids):
            urls.append(url)
            profiled[url] = (len(starting), len(rids))
            for rid in starting:
                callers.update(_starts(ctx, rid))
    if not urls:
        return []
    share, source, n, hits, examples = _share(ctx, set(urls), by_url)
    if share is not None and share < ctx.threshold(ID, "min_share_pct"):
        return []
    return [Case(callers.most_common(1)[0][0], urls, profiled, share, source, n, hits, examples)]


def _share(ctx: Context, mine: set[str], by_url: dict[str, list[str]]):
    samples, hits, weight = native_on(ctx, mine, is_session_sample)
    if len(samples) >= MIN_SAMPLES:
        share = round(100.0 * len(hits) / len(samples) * cpu_fraction(ctx) * weight, 2)
        source = (f"perf samples with PHP's session code on the stack (php_session_*, the files handler): "
                  f"{len(hits)} of the {len(samples)} on the finding's URLs, x CPU/wall of the timed requests, "
                  f"x their part of all timed requests' wall time")
        examples = [r for r, _ in Counter(s.request for s in hits).most_common(5)]
        return share, source, len(samples), len(hits), examples
    parts = []
    for url in sorted(mine):
        for rid in by_url[url]:
            us = sum(e["wt"] for (p, c), e in ctx.xhprof_edges.get(rid, {}).items() if c == "session_start")
            if ctx.wall_us(rid):
                parts.append(100.0 * us / ctx.wall_us(rid))
    share = round(statistics.median(parts) * weight, 2) if parts else None
    source = (f"xhprof: session_start's time over the request's wall time, median of the profiled requests, x the "
              f"URLs' part of the timed wall time (fewer than {MIN_SAMPLES} native samples: {len(samples)}); the "
              f"write at the end of the request is not in it")
    return share, source, len(samples), len(hits), sorted(r for u in mine for r in by_url[u])[:5]


def detect(ctx: Context) -> list[Finding]:
    return [describe(c) for c in decide(ctx)]


def describe(c: Case) -> Finding:
    calling = ", ".join(f"{u} ({k} of {n})" for u, (k, n) in c.profiled.items())
    share = "" if c.share is None else f", about {c.share:.1f}% of the request time"
    return Finding(
        id=ID, title=f"A new session on every request, started by {c.function}",
        severity=severity_for(c.share, high=10, medium=3), share_pct=c.share,
        summary=(f"{c.function} starts a PHP session on every request of {len(c.urls)} URL(s), so every request "
                 f"without a session cookie (a first visit, a crawler, a health check, a cache fetching the page; "
                 f"lockdown's capture sends none) gets a new one: a session file created and written each time"
                 f"{share}, and a Set-Cookie that keeps the page out of shared caches. Start the session only "
                 f"when something is stored in it, or when the request brings a session cookie."),
        evidence=[Evidence("profiled requests calling session_start, per URL", calling, "xhprof"),
                  Evidence("share of request time, %", c.share, c.source),
                  Evidence("native samples in PHP's session code, of those on the URLs",
                           f"{c.hits} of {c.samples}", "perf (bundle/perf/samples.jsonl)")],
        urls=c.urls, requests=c.requests,
        details={"function": c.function, "profiled": {u: list(v) for u, v in c.profiled.items()},
                 "native_samples": c.samples, "session_samples": c.hits, "no_patch": NO_PATCH})
