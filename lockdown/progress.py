"""Where a long command is: plain phase lines in logs and pipes, a live status line on a
terminal, nothing at all with `--json`.

The harness talks to a `Reporter` (called with a log line, like `print`) and wraps its long
waits in `timed()` (a load run of known length) or `counted()` (a known number of requests).
Plain callables are accepted everywhere a reporter is (`as_reporter`), so library users and
tests can keep passing `print`.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import sys
import threading
import time
from typing import Callable, Iterator, TextIO


def _ignore(done: int) -> None:
    pass


class Reporter:
    """Plain output: every log line, no live status (CI logs, pipes, files)."""

    def __init__(self, write: Callable[[str], None] | None = None):
        self._write = write or (lambda line: print(line, flush=True))

    def __call__(self, line: str) -> None:
        self._write(line)

    @contextlib.contextmanager
    def timed(self, label: str, seconds: float) -> Iterator[None]:
        """A wait of about `seconds` (a load run, a warmup)."""
        yield

    @contextlib.contextmanager
    def counted(self, label: str, total: int | None) -> Iterator[Callable[[int], None]]:
        """A loop over `total` items (None: unknown); the block reports `done` as it goes."""
        yield _ignore


class Quiet(Reporter):
    """`--json`: nothing but the document the command prints or writes."""

    def __init__(self):
        super().__init__(lambda line: None)


class Live(Reporter):
    """Log lines on stdout as usual, plus one status line on a terminal (stderr) that is
    redrawn a few times a second and erased before each log line and at the end."""

    REDRAW_S = 0.2

    def __init__(self, title: str, stream: TextIO | None = None):
        super().__init__()
        self._stream = stream or sys.stderr
        self._title = title
        self._lock = threading.RLock()
        self._status: Callable[[], str] | None = None
        self._shown = False
        self._started = time.monotonic()

    def __call__(self, line: str) -> None:
        with self._lock:
            self._erase()
            print(line, flush=True)
            self._draw()

    def _erase(self) -> None:
        if self._shown:
            self._stream.write("\r\x1b[K")
            self._stream.flush()
            self._shown = False

    def _draw(self) -> None:
        if self._status is None:
            return
        width = shutil.get_terminal_size((80, 24)).columns
        elapsed = clock(time.monotonic() - self._started)
        text = f"{self._title} {elapsed}  {self._status()}"
        self._stream.write("\r\x1b[K" + text[:max(10, width - 1)])
        self._stream.flush()
        self._shown = True

    @contextlib.contextmanager
    def _showing(self, status: Callable[[], str]) -> Iterator[None]:
        stop = threading.Event()

        def redraw():
            while not stop.wait(self.REDRAW_S):
                with self._lock:
                    self._draw()
        with self._lock:
            self._status = status
            self._draw()
        ticker = threading.Thread(target=redraw, daemon=True)
        ticker.start()
        try:
            yield
        finally:
            stop.set()
            ticker.join()
            with self._lock:
                self._status = None
                self._erase()

    @contextlib.contextmanager
    def timed(self, label: str, seconds: float) -> Iterator[None]:
        started = time.monotonic()

        def status() -> str:
            done = time.monotonic() - started
            return f"{label} {bar(done / seconds if seconds else 1)} {done:.0f}/{seconds:.0f} s"
        with self._showing(status):
            yield

    @contextlib.contextmanager
    def counted(self, label: str, total: int | None) -> Iterator[Callable[[int], None]]:
        progress = {"done": 0}
        started = time.monotonic()

        def update(done: int) -> None:
            progress["done"] = done

        def status() -> str:
            done = progress["done"]
            if total:
                return f"{label} {bar(done / total)} {done}/{total}"
            seconds = f"{time.monotonic() - started:.0f} s"
            return f"{label}: {done} so far, {seconds}" if done else f"{label}... {seconds}"
        with self._showing(status):
            yield update


def bar(fraction: float, width: int = 24) -> str:
    """A text progress bar: `[#########...............]`."""
    filled = round(max(0.0, min(1.0, fraction)) * width)
    return "[" + "#" * filled + "." * (width - filled) + "]"


def clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m // 60}:{m % 60:02d}:{s:02d}" if m >= 60 else f"{m}:{s:02d}"


def as_reporter(say: Callable[[str], None] | Reporter) -> Reporter:
    return say if isinstance(say, Reporter) else Reporter(say)


def for_command(title: str, json_mode: bool, stream: TextIO | None = None) -> Reporter:
    """The reporter a command uses: quiet with `--json`, live when stderr is a terminal."""
    stream = stream or sys.stderr
    if json_mode:
        return Quiet()
    if stream.isatty() and os.environ.get("TERM", "") != "dumb":
        return Live(title, stream)
    return Reporter()
