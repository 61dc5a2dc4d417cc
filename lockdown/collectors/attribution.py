"""Which request was running: pure functions that tie perf samples and SQL statements to the
requests of the request log. Never a guess presented as a fact: what cannot be tied exactly
is marked (`request: null`, or `attribution: "ambiguous"` with its candidates)."""
from __future__ import annotations

import bisect
import re
from collections import defaultdict
from typing import Iterable, Iterator

from ..bundle.model import CAPTURE_MARKER, PerfSample, RequestRecord, Statement
from ..formats.perf_script import Sample
from ..formats.slowlog import SlowLogEntry

# the prepend's marker: SHOW ... PROCESSLIST (SELECT ... FROM information_schema before 0.1.0's
# twelfth stop; both are read)
MARKER = re.compile(r"^(?:SELECT|SHOW) /\*" + re.escape(CAPTURE_MARKER) + r" ([A-Za-z0-9._-]+)\*/")
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

    The server writes a statement's log entry after sending its result, so an entry can land
    after a marker sent later from another connection; but on one connection entries stay in
    order, each written before the next statement runs. Hence:

    1. `connection`: the request named the connection (thread id) in its log. When one
       connection served several requests (persistent connections), the owner whose marker
       follows the entry first; the first entry after an owner's marker may be that owner's
       late-written last one, so it is `ambiguous` between the two.
    2. `order` (one request at a time, connection closed before the request ended): the whole
       connection belongs to the request whose marker follows its first entry, which is
       written before its second statement runs. A connection with a single statement
       cannot be placed that way and is `ambiguous` between the marker's request and the one
       before.
    3. `ambiguous` (requests overlapping, connection not named): `candidates` are the requests
       whose window contains the statement's start second; `none` when there are none.
    """
    markers = _Markers(entries)
    thread_requests: dict[int, list[str]] = defaultdict(list)
    for r in requests:
        for t in r.db_threads or ():
            thread_requests[t].append(r.id)
    threads: dict[int, list[int]] = defaultdict(list)
    for i, e in enumerate(entries):
        if e.thread_id not in markers.threads and ADMIN_TAG not in e.sql:
            threads[e.thread_id].append(i)

    placed: dict[int, tuple[str | None, str, list]] = {}     # entry -> (request, how, candidates)
    for thread, idx in threads.items():
        owners = thread_requests.get(thread)
        if owners and len(owners) == 1:
            for i in idx:
                placed[i] = (owners[0], "connection", [])
        elif owners:
            placed.update(_among_owners(idx, owners, markers.index))
        elif concurrency == 1 and markers.found:
            placed.update(_by_order(idx, markers))
        else:
            placed.update(_by_time(idx, entries, requests))
    return _statements(entries, placed, {r.id for r in requests})


class _Markers:
    """The prepend's markers in the slow log: which request each names, where, on which
    connections."""

    def __init__(self, entries: list[SlowLogEntry]):
        self.found: list[tuple[int, str]] = []      # (entry index, request id)
        self.threads = set()
        for i, e in enumerate(entries):
            m = MARKER.match(e.sql)
            if m:
                self.found.append((i, m.group(1)))
                self.threads.add(e.thread_id)
        self.pos = [i for i, _ in self.found]
        self.index = {rid: i for i, rid in self.found}

    def next(self, i: int) -> str | None:
        """The request of the first marker after entry `i` (the last marker's after the last)."""
        k = bisect.bisect_right(self.pos, i)
        return self.found[k][1] if k < len(self.found) else (self.found[-1][1] if self.found else None)

    def previous(self, i: int) -> str | None:
        k = bisect.bisect_left(self.pos, i)
        return self.found[k - 1][1] if k > 0 else None


def _among_owners(idx: list[int], owners: list[str], marker_index: dict[str, int]) -> dict:
    """A connection several requests named (1., persistent connections): each entry is the
    owner's whose marker follows it first, ambiguous just after an owner's marker."""
    placed = {}
    owned = sorted((marker_index[o], o) for o in owners if o in marker_index)
    previous = -1
    for i in idx:
        after = [o for p, o in owned if p > i]
        crossed = [o for p, o in owned if previous < p < i]
        request = after[0] if after else None
        if crossed or request is None:
            placed[i] = (None, "ambiguous", sorted({*crossed[-1:], *after[:1]} or owners))
        else:
            placed[i] = (request, "connection", [])
        previous = i
    return placed


def _by_order(idx: list[int], markers: _Markers) -> dict:
    """A connection no request named, one request at a time (2.): the request whose marker
    follows its first entry."""
    request = markers.next(idx[0])
    before = markers.previous(idx[0])
    if len(idx) == 1 and before is not None and before != request:
        return {idx[0]: (None, "ambiguous", sorted({before, request}))}
    return {i: (request, "order", []) for i in idx}


def _by_time(idx: list[int], entries: list[SlowLogEntry], requests: list[RequestRecord]) -> dict:
    """Requests overlapping (3.): the candidates whose window holds the entry's start second."""
    placed = {}
    for i in idx:
        e = entries[i]
        candidates = [] if e.timestamp is None else sorted(
            r.id for r in requests
            if r.start_unix - 1 <= e.timestamp <= r.start_unix + r.wall_us / 1e6 + 1)
        placed[i] = (None, "ambiguous" if candidates else "none", candidates)
    return placed


def _statements(entries: list[SlowLogEntry], placed: dict, ids: set[str]) -> list[Statement]:
    out: list[Statement] = []
    for i in sorted(placed):
        e = entries[i]
        request, how, candidates = placed[i]
        out.append(Statement(len(out), request if request in ids else None, how, e.thread_id,
                             e.schema, e.sql, e.query_time_us, e.lock_time_us, e.rows_sent,
                             e.rows_examined, e.rows_affected, e.timestamp, candidates, e.plan))
    return out
