"""How fast the machine's CPU ran during a measured run.

On a shared virtual machine the host's speed changes from second to second (noisy
neighbours, frequency changes) without showing as steal time: on the 2-core machine this was
written on, a fixed CPU-bound loop ran between 2,000 and 3,600 iterations per second of its own
CPU time within half a minute. Every throughput number moves with it. A probe thread runs a
fixed piece of work every `interval` seconds and times it on its own thread CPU clock (so
waiting for a core, which is the load's doing, is not counted): work per CPU microsecond is the
host's speed. About 1% of one core. (A memory-bandwidth probe, a 16 MB copy, was tried
beside it on WordPress and explained nothing the loop did not.)
"""
from __future__ import annotations

import statistics
import threading
import time

WORK = 20_000        # loop iterations per probe, about 1 ms


def probe_once() -> float:
    """Loop iterations per microsecond of this thread's CPU time."""
    started = time.thread_time_ns()
    for _ in range(WORK):
        pass
    spent = time.thread_time_ns() - started
    return WORK * 1000.0 / spent if spent > 0 else 0.0


class SpeedProbe:
    """`with SpeedProbe() as p: ...`; then `p.summary()`."""

    def __init__(self, interval: float = 0.1):
        self.interval = interval
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            speed = probe_once()
            if speed:
                self.samples.append(speed)

    def __enter__(self) -> "SpeedProbe":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict:
        """`{"speed", "cv", "samples", "series"}`: the mean speed over the run, its spread, how
        many probes ran, and each probe's speed in order (one every `interval` s from the run's
        start). The series is the evidence behind the mean: on 2026-11-23 it showed this host
        switching between two speeds, 86 and 48 (docs/bench.md, "Two speeds")."""
        if not self.samples:
            return {}
        mean = statistics.mean(self.samples)
        cv = statistics.pstdev(self.samples) / mean if len(self.samples) > 1 else 0.0
        return {"speed": round(mean, 3), "cv": round(cv, 3), "samples": len(self.samples),
                "series": [round(s, 1) for s in self.samples]}
