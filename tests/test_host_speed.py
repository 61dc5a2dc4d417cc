"""The host-speed probe: one thread pinned to each CPU, each tick the CPUs' mean
(harness/host_speed.py; docs/bench.md "One probe per CPU")."""
import os
import statistics
import time

from lockdown.harness import host_speed
from lockdown.harness.host_speed import SpeedProbe


def test_each_probe_thread_runs_on_its_own_cpu_and_a_tick_is_their_mean(monkeypatch):
    """A stand-in for the timed loop reports the CPUs the calling thread may run on: each
    thread's probes say its one CPU, and each tick of the series is the mean over the CPUs."""
    def where_am_i() -> float:
        allowed = os.sched_getaffinity(0)
        return 10.0 + min(allowed) if len(allowed) == 1 else 1000.0    # 1000: not pinned
    monkeypatch.setattr(host_speed, "probe_once", where_am_i)
    cpus = sorted(os.sched_getaffinity(0))
    with SpeedProbe(interval=0.01) as probe:
        time.sleep(0.3)
    for cpu, speeds in probe._by_cpu.items():
        assert speeds and set(speeds) == {10.0 + cpu}
    ticks = min(len(s) for s in probe._by_cpu.values())
    want = statistics.fmean(10.0 + c for c in cpus)
    assert probe.samples == [want] * ticks
    s = probe.summary()
    assert (s["cpus"], s["samples"], s["cv"]) == (len(cpus), ticks, 0.0)
    assert s["speed"] == round(want, 3) and s["series"] == [round(want, 1)] * ticks
    # the caller's own thread keeps every CPU it had
    assert sorted(os.sched_getaffinity(0)) == cpus


def test_the_real_loop_gives_a_speed_per_tick_and_nothing_before_the_first():
    with SpeedProbe(interval=0.02) as probe:
        deadline = time.monotonic() + 5          # a loaded host may stall the pinned threads
        while len(probe.samples) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
    s = probe.summary()
    assert s["samples"] >= 3 and all(x > 0 for x in s["series"]) and s["speed"] > 0
    assert SpeedProbe().summary() == {}          # never started: no speed, not a zero
