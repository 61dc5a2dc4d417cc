"""`perf script` text -> samples with their native call chains.

lockdown runs `perf script --ns --no-inline -F comm,pid,tid,time,period,event,ip,sym,symoff,dso`
(see `SCRIPT_FIELDS`); this reads that shape. Each sample is a header line
`comm PID/TID TIME: PERIOD EVENT:` and one frame per line, leaf first, `ADDR SYM+0xOFF (DSO)`,
then a blank line. Addresses are as perf prints them: relative to the DSO for user-space
objects, absolute for the kernel.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Iterator

SCRIPT_FIELDS = "comm,pid,tid,time,period,event,ip,sym,symoff,dso"

_HEADER = re.compile(r"^(?P<comm>.*?)\s+(?P<pid>-?\d{1,19})/(?P<tid>-?\d{1,19})\s+(?P<sec>\d{1,19})\.(?P<frac>\d+):"
                     r"\s+(?P<period>\d{1,19})\s+(?P<event>\S+?):?\s*$")
_FRAME = re.compile(r"^\s+(?P<addr>[0-9a-f]+)\s+(?P<sym>.*?)(?:\+0x(?P<off>[0-9a-f]+))?\s+\((?P<dso>.*)\)\s*$")
INT_MAX = (1 << 63) - 1      # what the bundle's records hold (bundle/model.py): perf's own are 64-bit


class PerfScriptError(ValueError):
    """A line that is neither a sample header nor a frame: the input is not what we asked for."""


@dataclass(frozen=True, slots=True)
class Frame:
    addr: int
    symbol: str          # "[unknown]" when perf could not name it
    offset: int | None   # offset into the symbol, when perf printed one
    dso: str

    def to_json(self) -> list:
        return [f"{self.addr:x}", self.symbol, self.offset, self.dso]

    @classmethod
    def from_json(cls, v: list) -> "Frame":
        return cls(int(v[0], 16), v[1], v[2], v[3])


@dataclass(slots=True)
class Sample:
    comm: str
    pid: int
    tid: int
    time_ns: int
    period: int
    event: str
    frames: list[Frame] = field(default_factory=list)   # leaf first


def _time_ns(sec: str, frac: str) -> int:
    return int(sec) * 1_000_000_000 + int(frac.ljust(9, "0")[:9])


def parse(lines: Iterable[str], source: str = "perf script") -> Iterator[Sample]:
    current: Sample | None = None
    for n, line in enumerate(lines, 1):
        line = line.rstrip("\n")
        if line.startswith("#"):     # `perf script --header` comments
            continue
        if not line.strip():
            if current is not None:
                yield current
                current = None
            continue
        if line[0] in " \t":
            m = _FRAME.match(line)
            if m is None or current is None:
                raise PerfScriptError(f"{source} line {n}: not a call-chain frame: {line[:80]!r}")
            off = m.group("off")
            frame = Frame(int(m.group("addr"), 16), m.group("sym") or "[unknown]",
                          int(off, 16) if off else None, m.group("dso"))
            if frame.addr >> 64 or (frame.offset or 0) > INT_MAX:
                raise PerfScriptError(f"{source} line {n}: a number out of range: {line[:80]!r}")
            current.frames.append(frame)
            continue
        m = _HEADER.match(line)
        if m is None:
            raise PerfScriptError(f"{source} line {n}: not a sample header: {line[:80]!r}")
        if current is not None:
            yield current
        current = Sample(m.group("comm"), int(m.group("pid")), int(m.group("tid")),
                         _time_ns(m.group("sec"), m.group("frac")), int(m.group("period")),
                         m.group("event"))
        if not all(-INT_MAX <= v <= INT_MAX for v in (current.pid, current.tid, current.time_ns, current.period)):
            raise PerfScriptError(f"{source} line {n}: a number out of range: {line[:80]!r}")
    if current is not None:
        yield current
