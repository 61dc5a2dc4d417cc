"""Which request was running: pure functions that tie perf samples and SQL statements to the
requests of the request log. Never a guess presented as a fact: what cannot be tied exactly
is marked (`request: null`, or `attribution: "ambiguous"` with its candidates)."""
from __future__ import annotations

import bisect
import re
from collections import defaultdict
from typing import Iterable, Iterator

from ..bundle.model import PerfSample, RequestRecord, Statement
from ..formats.perf_script import Sample
from ..formats.slowlog import SlowLogEntry

MARKER = re.compile(r"^SELECT /\*lockdown-capture ([A-Za-z0-9._-]+)\*/")
ADMIN_TAG = "/*lockdown-admin*/"


def attribute_samples(samples: Iterable[Sample], requests: list[RequestRecord]) -> Iterator[PerfSample]:
    """A sample belongs to the request its worker was running at that instant (the request
    log's start and end on CLOCK_MONOTONIC, the clock perf recorded with)."""
    windows: dict[int, list[RequestRecord]] = defaultdict(list)
    for r in requests:
        windows[r.pid].append(r)
    starts = {}
    for pid, rs in windows.items():
        rs.sort(key=lambda r: r.start_ns)
        starts[pid] = [r.start_ns for r in rs]
    for s in samples:
        request = None
        rs = windows.get(s.pid)
        if rs:
            i = bisect.bisect_right(starts[s.pid], s.time_ns) - 1
            if i >= 0 and s.time_ns <= rs[i].end_ns:
                request = rs[i].id
        yield PerfSample(s.time_ns, s.pid, s.tid, s.comm, s.period, request,
                         [f.to_json() for f in s.frames])


def attribute_statements(entries: list[SlowLogEntry], requests: list[RequestRecord],
                         concurrency: int) -> list[Statement]:
    """Statements of the application, each with its request.

    1. `connection`: the request named the connection (thread id) in its log; when one
       connection served several requests (persistent connections), the request whose
       end-marker follows the statement first among them.
    2. `order`: one request at a time, so an unnamed connection's statement belongs to the
       request whose end-marker comes next in the log.
    3. `ambiguous`: several requests were running; `candidates` are those whose window
       contains the statement's start second.
    """
    by_id = {r.id: r for r in requests}
    markers: list[tuple[int, str]] = []        # (entry index, request id)
    marker_threads = set()
    for i, e in enumerate(entries):
        m = MARKER.match(e.sql)
        if m:
            markers.append((i, m.group(1)))
            marker_threads.add(e.thread_id)
    marker_pos = [i for i, _ in markers]
    marker_index = {rid: i for i, rid in markers}
    thread_requests: dict[int, list[str]] = defaultdict(list)
    for r in requests:
        for t in r.db_threads or ():
            thread_requests[t].append(r.id)

    def next_marker(i: int, among: list[str] | None = None) -> str | None:
        if among is not None:
            later = [(marker_index[rid], rid) for rid in among if marker_index.get(rid, -1) > i]
            return min(later)[1] if later else None
        k = bisect.bisect_right(marker_pos, i)
        return markers[k][1] if k < len(markers) else (markers[-1][1] if markers else None)

    out: list[Statement] = []
    for i, e in enumerate(entries):
        if e.thread_id in marker_threads or ADMIN_TAG in e.sql:
            continue
        owners = thread_requests.get(e.thread_id)
        candidates: list[str] = []
        if owners:
            how = "connection"
            request = owners[0] if len(owners) == 1 else next_marker(i, owners)
            if request is None:
                how, request, candidates = "ambiguous", None, sorted(owners)
        elif concurrency == 1 and markers:
            how, request = "order", next_marker(i)
        else:
            request = None
            if e.timestamp is not None:
                candidates = sorted(r.id for r in requests
                                    if r.start_unix - 1 <= e.timestamp <= r.start_unix + r.wall_us / 1e6 + 1)
            how = "ambiguous" if candidates else "none"
            if len(candidates) == 1 and concurrency == 1:
                how, request, candidates = "order", candidates[0], []
        out.append(Statement(len(out), request if request in by_id else None, how, e.thread_id,
                             e.schema, e.sql, e.query_time_us, e.lock_time_us, e.rows_sent,
                             e.rows_examined, e.rows_affected, e.timestamp, candidates))
    return out
