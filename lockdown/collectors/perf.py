"""Native samples of the php-fpm workers: `perf record` with DWARF call graphs on
CLOCK_MONOTONIC (the clock of the request log), then `perf script` text for the bundle.

Debian's PHP has no frame pointers, so only DWARF unwinding gives whole stacks
(docs/profile.md). perf's own output is kept: perf.data for re-symbolising later,
the script text for FlameGraph-style tools, build ids for matching binaries.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from ..errors import PhaseFailed
from ..formats.perf_script import SCRIPT_FIELDS
from ..harness.logs import tail
from ..harness.processes import Child, ProcessGroup
from ..harness.toolchain import tool


class PerfRecorder:
    NAME = "perf-record"           # the child's name and its log's

    def __init__(self, procs: ProcessGroup, out_dir: Path, freq: int):
        self.procs = procs
        self.out_dir = out_dir
        self.freq = freq
        self.data = out_dir / "perf.data"
        self.log = procs.run_dir / "logs" / f"{self.NAME}.out"
        self.child: Child | None = None
        self._ack: int | None = None          # read end of the ack FIFO (controlled mode)

    def start(self, pids: list[int], timeout: float = 20, controlled: bool = False) -> None:
        """Attach to `pids`. `controlled`: perf also listens on a FIFO so that `pause` and
        `resume` can switch sampling off and on (an interleaved overhead check)."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        argv = self.argv(pids)
        if controlled:
            ctl, ack = self._fifos()
            for fifo in (ctl, ack):
                fifo.unlink(missing_ok=True)
                os.mkfifo(fifo, 0o600)
            # perf opens the ack FIFO for writing, which blocks until a reader has it open
            self._ack = os.open(ack, os.O_RDONLY | os.O_NONBLOCK)
            argv += ["--control", f"fifo:{ctl},{ack}"]
        self.child = self.procs.spawn(self.NAME, argv, log=self.log)
        # perf writes the header (and the workers' synthesized mmaps) once it is attached.
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.child.alive():
                raise PhaseFailed("perf record exited at start; run `lockdown doctor`", tail(self.log, 10))
            if self.data.exists() and self.data.stat().st_size > 0:
                time.sleep(0.2)
                return
            time.sleep(0.05)
        raise PhaseFailed(f"perf record did not attach within {timeout:g} s", tail(self.log, 10))

    def argv(self, pids: list[int]) -> list[str]:
        """`perf record` of timed samples with DWARF call graphs (engine_events.py counts
        events instead)."""
        return [tool("perf"), "record", "-F", str(self.freq), "--call-graph", "dwarf",
                "-k", "CLOCK_MONOTONIC", "-p", ",".join(map(str, pids)), "-o", str(self.data)]

    def _fifos(self) -> tuple[Path, Path]:
        """This recorder's control and ack FIFOs, named after it: two recorders share the
        capture's perf directory (the sampler and engine_events'), and one pair each."""
        return self.out_dir / f"{self.NAME}.control.fifo", self.out_dir / f"{self.NAME}.ack.fifo"

    def _command(self, word: str, timeout: float = 10) -> None:
        ctl = self._fifos()[0]
        deadline = time.monotonic() + timeout
        fd = None
        while fd is None:
            try:
                fd = os.open(ctl, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:          # perf has not opened its end yet
                if time.monotonic() > deadline:
                    raise PhaseFailed(f"perf record does not read its control FIFO {ctl}",
                                      tail(self.log, 10))
                time.sleep(0.01)
        try:
            os.write(fd, f"{word}\n".encode())
        finally:
            os.close(fd)
        got = b""
        while b"ack" not in got:
            if time.monotonic() > deadline:
                raise PhaseFailed(f"perf record did not acknowledge {word!r}", tail(self.log, 10))
            try:
                got += os.read(self._ack, 64)
            except BlockingIOError:
                pass
            time.sleep(0.005)

    def pause(self) -> None:
        self._command("disable")

    def resume(self) -> None:
        self._command("enable")

    def stop(self) -> None:
        """SIGINT, as Ctrl-C in a terminal: perf finishes writing perf.data."""
        if self.child is None:
            return
        child, self.child = self.child, None
        if child.alive():
            child.popen.send_signal(signal.SIGINT)
            try:
                child.popen.wait(timeout=120)
            except subprocess.TimeoutExpired:
                pass
        self.procs.stop(child)
        if self._ack is not None:
            os.close(self._ack)
            self._ack = None
        if child.popen.returncode not in (0, -signal.SIGINT, 130):
            raise PhaseFailed(f"perf record failed (exit {child.popen.returncode})", tail(self.log, 10))


def script(procs: ProcessGroup, data: Path, dest: Path, timeout: float = 1800) -> None:
    """perf.data -> perf script text (SCRIPT_FIELDS, nanosecond times, no inline expansion)."""
    argv = [tool("perf"), "script", "-i", str(data), "--ns", "--no-inline", "-F", SCRIPT_FIELDS]
    result = procs.run("perf-script", argv, timeout=timeout, stdout_file=dest)
    if result.returncode != 0:
        raise PhaseFailed(f"perf script failed on {data} (exit {result.returncode})",
                          tail(procs.run_dir / "logs" / "perf-script.out", 10))


def build_ids(procs: ProcessGroup, data: Path) -> dict:
    """DSO path -> build id, for the objects that have samples."""
    argv = [tool("perf"), "buildid-list", "-i", str(data), "--with-hits"]
    result = procs.run("perf-buildid", argv, timeout=300, capture=True)
    ids = {}
    if result.returncode == 0:
        for line in result.stdout.splitlines():
            parts = line.split(None, 1)
            if len(parts) == 2 and all(c in "0123456789abcdef" for c in parts[0]):
                ids[parts[1].strip()] = parts[0]
    return ids
