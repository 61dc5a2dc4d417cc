"""`lockdown validate`: is a bundle intact, and did the capture get what it promised?

Integrity problems (a missing, truncated or damaged file, an unknown version) raise
BundleError: one line naming the file. Coverage checks (requests logged, samples attributed,
stacks per request, profiles, statements tied to requests) are returned as `Check`s.
"""
from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass

from .model import RequestRecord
from .store import Bundle, BundleError, open_bundle, sha256_of

PERF_ATTRIBUTED_MIN = 0.90


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


def check_integrity(bundle: Bundle) -> None:
    """Every listed file has its recorded hash, and reads as the analyzers will read it: every
    JSON record has its fields and shapes, the build ids and xhprof profiles theirs (store.py)."""
    for rel, meta in bundle.files.items():
        if sha256_of(bundle.root / rel) != meta.get("sha256"):
            raise BundleError(f"{bundle.root / rel}: content differs from manifest.json "
                              f"(SHA-256); the file is damaged")
    bundle.requests()
    bundle.statements()
    deque(bundle.perf_samples(), maxlen=0)
    bundle.excimer()
    bundle.engine_events()
    bundle.build_ids()
    for rid in bundle.xhprof_ids():
        bundle.xhprof(rid)


def wilson_upper(hits: int, n: int, z: float = 1.96) -> float:
    """Upper end of the 95% Wilson interval of the share hits/n."""
    if n == 0:
        return 0.0
    p = hits / n
    centre = p + z * z / (2 * n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (centre + half) / (1 + z * z / n)


def _client_windows(requests: list[RequestRecord]) -> list[tuple[int, int]]:
    """Union of the driver's send..receive intervals, sorted and merged."""
    spans = sorted((r.client_start_ns, r.client_end_ns) for r in requests
                   if r.client_start_ns and r.client_end_ns is not None)
    merged: list[list[int]] = []
    for a, b in spans:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [(a, b) for a, b in merged]


def _ran_us(request) -> int:
    """The request's wall time less its wait in the run queue, when the scheduler's figure was kept."""
    return request.wall_us - ((request.sched or {}).get("run_delay_us") or 0)


def coverage_checks(bundle: Bundle) -> list[Check]:
    m = bundle.manifest
    checks = []
    requests = bundle.requests()
    counts = m.get("requests", {})
    sent = counts.get("sent", len(requests))
    checks.append(Check("requests logged", len(requests) == sent and sent > 0,
                        f"{len(requests)} of {sent} requests logged"
                        + (f"; {counts.get('lost')} lost" if counts.get("lost") else "")))
    bad = [r for r in requests if r.status >= 500 or r.status == 0]
    checks.append(Check("responses", not bad, f"{len(bad)} requests with status 5xx or none"
                        if bad else f"no 5xx among {len(requests)} requests"))
    collect = set(m.get("capture", {}).get("collect", []))
    if "perf" in collect:
        windows = _client_windows(requests)
        starts = [a for a, _ in windows]
        inside = attributed = total = 0
        for s in bundle.perf_samples():
            total += 1
            i = bisect.bisect_right(starts, s.time_ns) - 1
            if i >= 0 and s.time_ns <= windows[i][1]:
                inside += 1
                attributed += s.request is not None
        share = attributed / inside if inside else 0.0
        # a worker's request window opens in the prepend and closes after the app's shutdown
        # functions: PHP's request start-up and lockdown's bookkeeping fall outside, a fixed
        # cost that is 1-2% of a 200 ms page but a quarter of a 5 ms one
        client = sum(b - a for a, b in windows)
        covered = min(1.0, sum(r.end_ns - r.start_ns for r in requests) / client) if client else 1.0
        need = PERF_ATTRIBUTED_MIN * covered
        # a short re-capture has a few dozen samples: fail only on a shortfall beyond their noise
        checks.append(Check("perf samples attributed", inside > 0 and wilson_upper(attributed, inside) >= need,
                            f"{attributed} of {inside} samples inside request windows attributed "
                            f"({share:.1%}; {total} samples in all)"
                            + (f"; the PHP request windows cover {covered:.0%} of the client's, so at "
                               f"least {need:.0%} is expected" if covered < 0.95 else "")))
    if "excimer" in collect:
        with_stacks = {p.request for p in bundle.excimer() if p.samples}
        period_us = 1000 * (m.get("capture", {}).get("excimer_period_ms") or 0)
        # a request shorter than three sampling periods may end before a tick is taken: the
        # timer only marks a sample due, the VM takes it at its next check (a patched minicms
        # had 4.0-4.3 ms pages without a sample at a 2 ms period). Time spent waiting for a
        # CPU does not count: Excimer's timer notifies through a thread of the same process,
        # which waits in the same queue (a 7.4 ms page, 5.5 ms of it queued, had no sample)
        short = [r.id for r in requests if r.id not in with_stacks and _ran_us(r) < 3 * period_us]
        missing = [r.id for r in requests if r.id not in with_stacks and r.id not in short]
        checks.append(Check("PHP stacks per request", not missing and bool(requests),
                            f"{len(requests) - len(missing) - len(short)} of {len(requests)} requests have "
                            f"Excimer stacks" + (f" (missing: {', '.join(missing[:5])})" if missing else "")
                            + (f"; {len(short)} shorter than three {period_us / 1000:g} ms sampling periods "
                               f"(their wait for a CPU not counted) have none, as can happen" if short else "")))
    if "xhprof" in collect:
        have = set(bundle.xhprof_ids())
        selected = [r.id for r in requests if r.instrumented]
        missing = [i for i in selected if i not in have]
        every = m.get("capture", {}).get("xhprof_every", 0)
        checks.append(Check("xhprof profiles", not missing and (bool(selected) or not every),
                            f"{len(selected) - len(missing)} of {len(selected)} instrumented "
                            f"requests have an xhprof profile (1 in {every} per URL)"))
    if "queries" in collect:
        stmts = bundle.statements()
        by = {}
        for s in stmts:
            by[s.attribution] = by.get(s.attribution, 0) + 1
        concurrency = m.get("driver", {}).get("concurrency", 1)
        unattributed = sum(1 for s in stmts if s.request is None)
        ok = bool(stmts) and (unattributed == 0 if concurrency == 1 else by.get("none", 0) == 0)
        tied_to = ", ".join(f"{k} {v}" for k, v in sorted(by.items()))
        checks.append(Check("statements attributed", ok,
                            f"{len(stmts) - unattributed} of {len(stmts)} statements tied to a "
                            f"request at concurrency {concurrency} ({tied_to})"))
    return checks


def validate(path) -> tuple[Bundle, list[Check]]:
    bundle = open_bundle(path)
    check_integrity(bundle)
    return bundle, coverage_checks(bundle)
