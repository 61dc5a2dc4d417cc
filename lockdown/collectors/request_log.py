"""The PHP side of a capture: the auto_prepend_file that logs each request and takes its
Excimer stacks and xhprof profile, installed into the run directory (never into the app).

The prepend reads `config.json` next to itself and writes to `out/`: `requests.jsonl` and
`excimer.jsonl` (one line per request, appended under a lock) and `xhprof/<request>.json`.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ..harness import service_account
from .settings import CaptureSettings, auto_excimer_period

PREPEND_SOURCE = Path(__file__).with_name("php") / "prepend.php"


@dataclass(frozen=True)
class CaptureDir:
    root: Path

    @property
    def prepend(self) -> Path:
        return self.root / "prepend.php"

    @property
    def out(self) -> Path:
        return self.root / "out"


def _php_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def install(root: Path, chain_prepend: str | None = None) -> CaptureDir:
    """Write the prepend and the output directories. Until `write_config` has run, the prepend
    finds no config and captures nothing."""
    cap = CaptureDir(root)
    (cap.out / "xhprof").mkdir(parents=True, exist_ok=True)
    service_account.give(cap.out, service_account.account(), recursive=True)   # the workers write it
    write_prepend(cap.prepend, chained(PREPEND_SOURCE.read_text(), chain_prepend))
    return cap


# OPcache does not cache a file modified less than opcache.file_update_protection (2) seconds
# before it is compiled: a prepend written just before a short capture was compiled again on
# every request (one miss per request in the engine state), a cost the app does not have.
BACKDATE_S = 60


def write_prepend(path: Path, source: str) -> None:
    """Write a prepend file with its mtime in the past, so OPcache caches it at once."""
    path.write_text(source)
    then = time.time() - BACKDATE_S
    os.utime(path, (then, then))


def chained(source: str, chain_prepend: str | None) -> str:
    """A prepend file's source that also runs the target's own auto_prepend_file, after it."""
    return source + f"\ninclude {_php_string(chain_prepend)};\n" if chain_prepend else source


def pool_ini(cap: CaptureDir, resolve_ports: bool) -> dict[str, str]:
    """The pool's php_admin_values for a capture: the prepend, and, when overlapping requests
    must find their own database connections by port, FFI, through which the prepend asks its
    sockets for their ports (microseconds) instead of reading /proc/self/net/tcp (milliseconds
    a request with many connections in TIME_WAIT). FFI changes nothing the application runs."""
    ini = {"auto_prepend_file": str(cap.prepend)}
    if resolve_ports:
        ini["ffi.enable"] = "true"
    return ini


def write_config(cap: CaptureDir, settings: CaptureSettings, db: dict | None) -> None:
    """What the prepend collects; `db` is how it reaches the server for its marker query
    ({host, port, socket, user, password, resolve_ports})."""
    config: dict = {}
    if "excimer" in settings.collect:
        # before the warmup has chosen the period (auto_excimer_period), its floor
        period_ms = settings.excimer_period_ms or auto_excimer_period([])
        config["excimer"] = {"period_s": period_ms / 1000.0,
                             "clock": settings.excimer_clock}
    if "xhprof" in settings.collect:
        config["xhprof"] = {"flags": settings.xhprof_flag_value}
    if db is not None:
        config["db"] = db
    path = cap.root / "config.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    acct = service_account.account()
    if acct is not None:          # the workers read it (it holds their marker query's login)
        os.fchown(fd, acct.uid, acct.gid)
    with os.fdopen(fd, "w") as f:
        json.dump(config, f)


def read_jsonl(path: Path) -> Iterator[dict]:
    """Lines the workers wrote; a line cut short (a worker killed mid-write) is skipped.
    Only a regular file is read (the path may have been replaced, e.g. by /dev/full)."""
    if not path.is_file():
        return
    try:
        f = open(path, errors="replace")
    except OSError:
        return
    with f:
        for line in f:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict):
                yield record


def settle(cap: CaptureDir, expected: int, timeout: float = 10.0, quiet: float = 0.5) -> int:
    """Wait until the request log holds `expected` lines, or has stopped growing for `quiet`
    seconds (lost lines never come), at most `timeout` s: the prepend writes a request's
    capture after its response has gone (see prepend.php), so the last ones may still be
    writing when the driver is done. Returns the lines seen."""
    path = cap.out / "requests.jsonl"
    deadline = time.monotonic() + timeout
    seen, changed = -1, time.monotonic()
    while True:
        lines = 0
        if path.is_file():      # not /dev/full or a directory put in its place
            try:
                with open(path, "rb") as f:
                    lines = sum(1 for _ in f)
            except OSError:
                pass
        now = time.monotonic()
        if lines != seen:
            seen, changed = lines, now
        if seen >= expected or now - changed >= quiet or now >= deadline:
            return seen
        time.sleep(0.02)
