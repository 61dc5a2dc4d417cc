"""Engine events counted per request, alongside perf's samples: PCRE compiling a pattern, and
file lookups that fail. A second `perf record` on the same workers, no call graph, one record
per event (docs/profile.md, "Engine events"):

- `pcre2_compile`: a uprobe on `pcre2_compile_8` in the libpcre2-8 the workers have mapped.
  PHP calls it only when a pattern is not in its per-process compiled-regex cache (4096
  entries), so each hit is one pattern compiled; a pattern kept by the cache costs none.
  The probe is defined as `lockdown_<pid>:pcre2_compile_<pid>` for the capture and deleted after it
  (a stale group of a killed lockdown is deleted by the next capture); a defined probe that no
  perf session enables does not hook the library.
- failed lookups: the exits of access/faccessat(2), stat/lstat/newfstatat/statx and
  open/openat(2) that return ENOENT or ENOTDIR (perf's tracepoint filter, in the kernel:
  nothing is recorded for a lookup that succeeds). `file_exists()` is one access(), `is_file()`
  one newfstatat, an `include` of a missing file several (PHP resolves the path first).

Each event is tied to the request its worker was running at that instant (the request log's
window on CLOCK_MONOTONIC, as perf samples are); the bundle holds one record per request of a
watched worker, with the counts by event, zeros left out (`perf/events.jsonl`)."""
from __future__ import annotations

import bisect
import os
import re
from collections import Counter, defaultdict
from pathlib import Path

from ..bundle.model import EngineEvents, RequestRecord
from ..bundle.store import BundleWriter
from ..errors import LockdownError, PhaseFailed
from ..formats import perf_events
from ..harness.logs import tail
from ..harness.processes import ProcessGroup
from ..harness.toolchain import tool
from .perf import PerfRecorder

FAILED = "ret == -2 || ret == -20"          # ENOENT, ENOTDIR
LOOKUP_SYSCALLS = ("access", "faccessat", "faccessat2", "newstat", "newlstat", "newfstatat", "statx",
                   "open", "openat", "openat2")
PCRE_EVENT = "pcre2_compile"
PCRE_SYMBOL = "pcre2_compile_8"
TRACEFS = (Path("/sys/kernel/tracing"), Path("/sys/kernel/debug/tracing"))
_GROUP = re.compile(r"^[pr]:lockdown_(\d+)/")


def tracefs() -> Path | None:
    for root in TRACEFS:
        if (root / "events" / "syscalls").is_dir():
            return root
    return None


def pcre_library(pids: list[int]) -> str | None:
    """The libpcre2-8 the first worker that has one mapped uses (None: PHP's bundled PCRE, or
    not readable)."""
    for pid in pids:
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            continue
        for line in maps.splitlines():
            path = line.split(None, 5)[-1] if line.count(" ") >= 5 else ""
            if "/libpcre2-8.so" in path and os.path.isfile(path):
                return path.strip()
    return None


class EventRecorder(PerfRecorder):
    """`perf record` of the events above on the workers (pausable like the sampler)."""
    NAME = "perf-events"

    def __init__(self, procs: ProcessGroup, out_dir: Path):
        super().__init__(procs, out_dir, 0)
        self.data = out_dir / "events.data"
        self.group = f"lockdown_{os.getpid()}"
        self.events: list[str] = []         # the names counted (the bundle's keys)
        self.notes: list[str] = []          # what could not be counted, and why
        self._perf_events: list[str] = []   # perf's names, with their filters
        self._probe = False                 # the uprobe is defined (deleted on stop)
        self.library = ""

    def start(self, pids: list[int], timeout: float = 20, controlled: bool = False) -> None:
        root = tracefs()
        if root is None:
            self.notes.append("failed lookups not counted: no tracefs with syscall tracepoints")
        else:
            for name in LOOKUP_SYSCALLS:
                if (root / "events" / "syscalls" / f"sys_exit_{name}").is_dir():
                    self.events.append(name)
                    self._perf_events += ["-e", f"syscalls:sys_exit_{name}", "--filter", FAILED]
        self._add_probe(pids, root)
        if not self.events:
            return
        try:
            super().start(pids, timeout, controlled)
        except PhaseFailed as e:
            # perf may sample the workers but not trace them (perf_event_paranoid without root):
            # the capture goes on without the counts, and says so
            self.notes.append(f"engine events not counted: {e.args[0] if e.args else e}")
            self.events = []
            self.child = None
            self._delete_probe()

    def _add_probe(self, pids: list[int], root: Path | None) -> None:
        if root is not None:
            self._remove_stale(root)
        lib = pcre_library(pids)
        if lib is None:
            self.notes.append("PCRE compilations not counted: the workers map no libpcre2-8")
            return
        # perf probe refuses an event name another group already has (a concurrent capture's)
        event = f"{PCRE_EVENT}_{os.getpid()}"
        r = self.procs.run("perf-probe", [tool("perf"), "probe", "-q", "-x", lib, "-a",
                                          f"{self.group}:{event}={PCRE_SYMBOL}"], timeout=60)
        if r.returncode != 0:
            self.notes.append(f"PCRE compilations not counted: perf probe on {lib} failed (exit {r.returncode}; "
                              f"{tail(self.procs.run_dir / 'logs' / 'perf-probe.out', 1).strip() or 'no message'})")
            return
        self.events.append(PCRE_EVENT)
        self._perf_events += ["-e", f"{self.group}:{event}"]
        self.library = lib
        self._probe = True

    def _delete_probe(self) -> None:
        if self._probe:
            self._probe = False
            self.procs.run("perf-probe", [tool("perf"), "probe", "-q", "-d", f"{self.group}:*"], timeout=60)

    def _remove_stale(self, root: Path) -> None:
        """Probe groups of lockdown processes that are gone (killed before they deleted theirs)."""
        try:
            lines = (root / "uprobe_events").read_text().splitlines()
        except OSError:
            return
        for pid in sorted({int(m[1]) for m in map(_GROUP.match, lines) if m}):
            if pid != os.getpid() and not Path(f"/proc/{pid}").exists():
                self.procs.run("perf-probe", [tool("perf"), "probe", "-q", "-d", f"lockdown_{pid}:*"], timeout=60)

    def argv(self, pids: list[int]) -> list[str]:
        return [tool("perf"), "record", "-q", "-k", "CLOCK_MONOTONIC", *self._perf_events,
                "-p", ",".join(map(str, pids)), "-o", str(self.data)]

    def stop(self) -> None:
        try:
            super().stop()
        finally:
            self._delete_probe()

    def pause(self) -> None:
        if self.events:
            super().pause()

    def resume(self) -> None:
        if self.events:
            super().resume()

    def summary(self) -> dict:
        return {"events": list(self.events), "notes": list(self.notes),
                **({"pcre_library": self.library} if PCRE_EVENT in self.events else {})}


def script(procs: ProcessGroup, data: Path, dest: Path, timeout: float = 600) -> None:
    argv = [tool("perf"), "script", "-i", str(data), "--ns", "-F", perf_events.EVENT_FIELDS]
    result = procs.run("perf-events-script", argv, timeout=timeout, stdout_file=dest)
    if result.returncode != 0:
        raise PhaseFailed(f"perf script failed on {data} (exit {result.returncode})",
                          tail(procs.run_dir / "logs" / "perf-events-script.out", 10))


def event_key(perf_name: str) -> str:
    """perf's name -> the bundle's: `syscalls:sys_exit_access` -> `access`,
    `lockdown_123:pcre2_compile_123` -> `pcre2_compile`."""
    name = perf_name.partition(":")[2]
    if name.startswith(PCRE_EVENT):
        return PCRE_EVENT
    return name[len("sys_exit_"):] if name.startswith("sys_exit_") else name


def per_request(events, requests: list[RequestRecord], pids: set[int]) -> tuple[list[EngineEvents], int]:
    """(one record per request of a watched worker, the events outside every request)."""
    windows: dict[int, list[RequestRecord]] = defaultdict(list)
    for r in requests:
        if r.pid in pids:
            windows[r.pid].append(r)
    starts = {}
    for pid, rs in windows.items():
        rs.sort(key=lambda r: r.start_ns)
        starts[pid] = [r.start_ns for r in rs]
    counts: dict[str, Counter] = {r.id: Counter() for rs in windows.values() for r in rs}
    outside = 0
    for e in events:
        rs = windows.get(e.pid)
        i = bisect.bisect_right(starts[e.pid], e.time_ns) - 1 if rs else -1
        if i >= 0 and e.time_ns <= rs[i].end_ns:
            counts[rs[i].id][event_key(e.name)] += 1
        else:
            outside += 1
    out = [EngineEvents(r.id, r.pid, dict(sorted(counts[r.id].items())))
           for r in sorted((r for rs in windows.values() for r in rs), key=lambda r: r.seq)]
    return out, outside


def assemble(text: Path, recorder_summary: dict, pids: list[int], records: list[RequestRecord],
             writer: BundleWriter) -> dict:
    """The script text -> `perf/events.jsonl`; what the manifest records."""
    try:
        with open(text, errors="replace") as f:
            found, outside = per_request(perf_events.parse(f, str(text)), records, set(pids))
    except perf_events.PerfEventsError as e:
        raise LockdownError(f"{e}; perf script output is not in the expected shape")
    writer.write_jsonl("perf/events.jsonl", found)
    return {**recorder_summary, "requests": len(found), "in_requests": sum(sum(r.counts.values()) for r in found),
            "outside_requests": outside}
