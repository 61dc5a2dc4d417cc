"""The fleet store: hourly partitions of request records, each with its folded Excimer stacks.

`STORE/YYYYMMDDHH/records-CONSUMER.jsonl`: one JSON object a line, a request's record as the
agent sent it plus `id`, its Redis stream entry id, and `stream`. The hour is the entry id's
(the time Redis took it), so an entry written twice lands in the same file. Files are only
appended to and each batch is fsync'd before the collector acknowledges it; an entry
delivered again after a kill -9 may be written twice, and the reader keeps the first line of
every id, so nothing is counted twice. A line cut short by a kill is skipped by the reader, and
the writer starts a new line after it. Retention removes whole hours.
"""
from __future__ import annotations

import calendar
import json
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from ..errors import UsageError

HOUR_RE = re.compile(r"^\d{10}$")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str, what: str) -> float:
    """'24h', '30m', '7d' -> seconds; anything else is refused in one line naming `what`."""
    m = _DURATION.match(text.strip())
    if not m or float(m.group(1)) <= 0:
        raise UsageError(f"{what}: {text!r} is not a duration; give a number and a unit, "
                         f"s, m, h, d or w (24h, 7d)")
    return float(m.group(1)) * _UNITS[m.group(2)]


def entry_ms(entry_id: str) -> int:
    """A Redis stream entry id's milliseconds ("1700000000000-3" -> 1700000000000)."""
    return int(entry_id.split("-", 1)[0])


def hour_of(ms: int) -> str:
    return time.strftime("%Y%m%d%H", time.gmtime(ms / 1000))


def _utc(name: str) -> float:
    """The start of an hour partition, in epoch seconds."""
    return calendar.timegm(time.strptime(name, "%Y%m%d%H"))


@dataclass
class StoreWriter:
    """Appends batches of entries to the store's hourly files of one consumer."""

    root: Path
    consumer: str
    _open: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", self.consumer):
            raise UsageError(f"consumer name {self.consumer!r}: use letters, digits, '.', '_' and '-'")
        self.root.mkdir(parents=True, exist_ok=True)

    def _file(self, hour: str):
        f = self._open.get(hour)
        if f is None:
            d = self.root / hour
            d.mkdir(exist_ok=True)
            path = d / f"records-{self.consumer}.jsonl"
            f = open(path, "ab")
            if f.tell() and not _ends_with_newline(path):
                f.write(b"\n")          # a line a kill cut short stays alone on its line
            self._open[hour] = f
        return f

    def append(self, entries: Iterable[tuple[str, str, dict]]) -> int:
        """(stream, entry id, record) each as one line, then every file touched fsync'd: when
        this returns, the batch is durable. Returns the number of lines written."""
        touched, n = set(), 0
        for stream, entry_id, record in entries:
            line = json.dumps({"id": entry_id, "stream": stream, **record}, separators=(",", ":"),
                              ensure_ascii=False)
            hour = hour_of(entry_ms(entry_id))
            self._file(hour).write(line.encode("utf-8", "replace") + b"\n")
            touched.add(hour)
            n += 1
        for hour in touched:
            f = self._open[hour]
            f.flush()
            os.fsync(f.fileno())
        if touched:
            _fsync_dir(self.root)
        return n

    def close(self) -> None:
        for f in self._open.values():
            f.close()
        self._open.clear()

    def expire(self, keep_s: float, now: float | None = None) -> list[str]:
        """Whole hours that ended more than `keep_s` ago removed; returns their names."""
        return expire(self.root, keep_s, now)


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def hours(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.is_dir() and HOUR_RE.match(p.name)) \
        if root.is_dir() else []


def expire(root: Path, keep_s: float, now: float | None = None) -> list[str]:
    now = time.time() if now is None else now
    gone = [h for h in hours(root) if _utc(h) + 3600 < now - keep_s]
    for h in gone:
        shutil.rmtree(root / h, ignore_errors=True)
    return gone


@dataclass
class ReadStats:
    lines: int = 0
    duplicates: int = 0
    damaged: int = 0


def read_records(root: Path, since: float | None = None, until: float | None = None,
                 stats: ReadStats | None = None) -> Iterator[dict]:
    """Every record of the store from `since` (epoch seconds, by entry time) on, each id once."""
    if not root.is_dir():
        raise UsageError(f"{root}: no fleet store there; give the --store of `lockdown fleet collect`")
    stats = stats if stats is not None else ReadStats()
    seen: set[str] = set()
    for hour in hours(root):
        if since is not None and _utc(hour) + 3600 <= since:
            continue
        for path in sorted((root / hour).glob("records-*.jsonl")):
            with open(path, "rb") as f:
                for raw in f:
                    stats.lines += 1
                    try:
                        rec = json.loads(raw)
                        ms = entry_ms(rec["id"])
                    except (ValueError, KeyError, TypeError, AttributeError):
                        stats.damaged += 1
                        continue
                    if rec["id"] in seen:
                        stats.duplicates += 1
                        continue
                    seen.add(rec["id"])
                    if (since is None or ms / 1000 >= since) and (until is None or ms / 1000 < until):
                        yield rec
