"""How fast the machine's CPU ran during a measured run.

On a shared virtual machine the host's speed changes from second to second (noisy
neighbours, frequency changes) without showing as steal time: on the 2-core machine this was
written on, a fixed CPU-bound loop ran between 2,000 and 3,600 iterations per second of its own
CPU time within half a minute. Every throughput number moves with it. A probe thread runs a
fixed piece of work every `interval` seconds and times it on its own thread CPU clock (so
waiting for a core, which is the load's doing, is not counted): work per CPU microsecond is the
host's speed. About 1% of each core. (A memory-bandwidth probe, a 16 MB copy, was tried
beside it on WordPress and explained nothing the loop did not.)

One probe thread per CPU, each pinned to its CPU, and the speed is their mean: the load runs on
every CPU, and this VM's CPUs do not run at one speed (2026-11-26: one unpinned probe followed
whichever CPU the scheduler gave it; over ten WordPress runs its speed correlated with the RPS
at r = 0.29, the pinned probes' mean at 0.89; docs/bench.md, "One probe per CPU").
"""
from __future__ import annotations

import os
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
        self.cpus = sorted(os.sched_getaffinity(0))     # the CPUs lockdown, and so the load, may use
        self._by_cpu: dict[int, list[float]] = {cpu: [] for cpu in self.cpus}
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(cpu,), daemon=True) for cpu in self.cpus]

    def _run(self, cpu: int) -> None:
        try:
            os.sched_setaffinity(0, {cpu})     # 0: this thread (Linux sets affinity per thread)
        except OSError:                        # the CPU was taken away: probe wherever we run
            pass
        while not self._stop.wait(self.interval):
            speed = probe_once()
            if speed:
                self._by_cpu[cpu].append(speed)

    @property
    def samples(self) -> list[float]:
        """The machine's speed at each probe tick: the mean over the CPUs of their probes, for
        as many ticks as every CPU has a probe of."""
        return [statistics.fmean(tick) for tick in zip(*self._by_cpu.values())]

    def __enter__(self) -> "SpeedProbe":
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def summary(self) -> dict:
        """`{"speed", "cv", "samples", "series", "cpus"}`: the mean speed over the run, its
        spread, how many probe ticks ran, each tick's speed in order (one every `interval` s
        from the run's start), and over how many CPUs each tick's mean was taken. The series
        is the evidence behind the mean: on 2026-11-23 it showed this host
        switching between two speeds, 86 and 48 (docs/bench.md, "Two speeds")."""
        samples = self.samples
        if not samples:
            return {}
        mean = statistics.mean(samples)
        cv = statistics.pstdev(samples) / mean if len(samples) > 1 else 0.0
        return {"speed": round(mean, 3), "cv": round(cv, 3), "samples": len(samples),
                "series": [round(s, 1) for s in samples], "cpus": len(self.cpus)}
