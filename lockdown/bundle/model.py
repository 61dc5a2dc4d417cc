"""Record types of bundle format v1 (docs/bundle-format.md). JSON in, JSON out, nothing else."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

FORMAT = "lockdown-bundle"
VERSION = 1


class _Record:
    @classmethod
    def from_json(cls, data: dict):
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class RequestRecord(_Record):
    """One request as the prepend logged it, joined with what the driver saw."""
    id: str
    pid: int
    method: str
    uri: str
    status: int
    start_ns: int            # CLOCK_MONOTONIC, same clock as perf samples and the driver
    end_ns: int
    start_unix: float
    wall_us: int
    cpu_us: int
    peak_memory: int
    instrumented: bool       # xhprof was on: leave out of timing analysis
    seq: int | None = None
    url: str | None = None   # the path the driver asked for
    client_start_ns: int | None = None
    client_end_ns: int | None = None
    client_status: int | None = None
    db_threads: list | None = None
    capture_us: int | None = None   # time the prepend spent after the request, writing the capture
    capture_blocking_us: int | None = None  # the part of it before the response was released


@dataclass
class Statement(_Record):
    """One SQL statement from the slow log, with the request it belongs to.

    attribution: "connection" (the request's own connection, exact), "order" (one request at a
    time, placed by the request markers in the log), "ambiguous" (several requests possible:
    `candidates`), "none" (no request could have sent it).
    """
    seq: int
    request: str | None
    attribution: str
    thread_id: int
    schema: str
    sql: str
    duration_us: int
    lock_us: int
    rows_sent: int
    rows_examined: int
    rows_affected: int | None
    timestamp: int | None
    candidates: list = field(default_factory=list)


@dataclass
class PerfSample(_Record):
    """One native sample of a php-fpm worker; frames leaf first as [addr hex, symbol, offset, dso]."""
    time_ns: int
    pid: int
    tid: int
    comm: str
    period: int
    request: str | None
    frames: list


@dataclass
class ExcimerProfile(_Record):
    """Excimer's PHP stacks for one request: `stacks` are distinct folded stacks
    ("root;...;leaf"), `samples` are [time ns, weight, index into stacks]."""
    request: str
    pid: int
    stacks: list
    samples: list

    def folded(self) -> dict:
        """Folded stack -> total weight, for flame graphs."""
        out: dict = {}
        for _, weight, i in self.samples:
            out[self.stacks[i]] = out.get(self.stacks[i], 0) + weight
        return out
