"""`perf script -F pid,tid,time,event --ns` text of counted events (no call chains) -> (pid,
time ns, event name) triples. One line per event: `PID/TID SEC.NSEC: GROUP:NAME:` (perf pads
the event column; a tracepoint prints nothing after the name with this field list)."""
from __future__ import annotations

import re
from typing import Iterable, Iterator, NamedTuple

EVENT_FIELDS = "pid,tid,time,event"
_LINE = re.compile(r"^\s*(?P<pid>\d{1,19})/(?P<tid>\d{1,19})\s+(?P<sec>\d{1,19})\.(?P<frac>\d{1,9}):"
                   r"\s+(?P<event>[A-Za-z0-9_.-]+:[A-Za-z0-9_.-]+):?\s*$")


class PerfEventsError(ValueError):
    """A line that is not an event line: the input is not what lockdown asked perf for."""


class Event(NamedTuple):
    pid: int
    time_ns: int
    name: str          # as perf names it: `syscalls:sys_exit_access`, `GROUP:pcre2_compile`


def parse(lines: Iterable[str], source: str = "perf script") -> Iterator[Event]:
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        m = _LINE.match(line)
        if m is None:
            raise PerfEventsError(f"{source} line {n}: not an event line ({line[:60]!r})")
        frac = m["frac"].ljust(9, "0")
        yield Event(int(m["pid"]), int(m["sec"]) * 1_000_000_000 + int(frac), m["event"])
