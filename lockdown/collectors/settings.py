"""What a capture collects and how: the options of `lockdown profile`, checked once."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import LockdownError

COLLECTORS = ("perf", "excimer", "xhprof", "queries")
DEFAULT_COLLECT = COLLECTORS

# tideways_xhprof flag names accepted by --xhprof-flags (TIDEWAYS_XHPROF_FLAGS_<NAME>).
XHPROF_FLAGS = {"memory": 6, "memory_mu": 2, "memory_pmu": 4, "cpu": 1, "no_builtins": 8,
                "memory_alloc": 16, "memory_alloc_as_mu": 48}

# Extensions each collector needs loaded in php-fpm. tideways_xhprof hooks every function call
# even when it is not profiling (about 5% of a WordPress request's CPU, measured with perf), so
# it is loaded only in a separate one-worker pool that serves the instrumented requests.
EXTENSIONS = {"excimer": "excimer"}
INSTRUMENTED_EXTENSION = "tideways_xhprof"


@dataclass(frozen=True)
class CaptureSettings:
    collect: frozenset = frozenset(DEFAULT_COLLECT)
    perf_freq: int = 99                 # Hz; DWARF call graphs; a few percent at 99 Hz
    # None: chosen from the warmup's latency (auto_excimer_period), see below
    excimer_period_ms: float | None = None
    excimer_clock: str = "wall"         # wall shows waits on MySQL too; cpu matches perf
    xhprof_every: int = 50              # 1 in K requests instrumented (2x slower each)
    xhprof_flags: tuple = ()

    @property
    def xhprof_flag_value(self) -> int:
        value = 0
        for name in self.xhprof_flags:
            value |= XHPROF_FLAGS[name]
        return value

    def extensions(self) -> frozenset:
        return frozenset(EXTENSIONS[c] for c in self.collect if c in EXTENSIONS)

    def instrumented_extension(self) -> str | None:
        return INSTRUMENTED_EXTENSION if "xhprof" in self.collect and self.xhprof_every > 0 else None

    def to_json(self) -> dict:
        return {"collect": sorted(self.collect), "perf_freq": self.perf_freq,
                "excimer_period_ms": self.excimer_period_ms, "excimer_clock": self.excimer_clock,
                "xhprof_every": self.xhprof_every, "xhprof_flags": list(self.xhprof_flags),
                "xhprof_flag_value": self.xhprof_flag_value}


# Excimer 1.0 (Debian's) arms a POSIX timer with SIGEV_THREAD: glibc starts a new thread for
# every sample (strace: 41 clone3 for 40 samples), about 150 us of CPU each on the 2-core test
# machine. At a fixed 2 ms period that was 5% of WordPress's throughput (bench/overhead.py);
# the cost follows the number of samples, so the period is set for about this many samples
# per typical request, within these bounds.
EXCIMER_SAMPLES_PER_REQUEST = 10
EXCIMER_PERIOD_BOUNDS_MS = (2.0, 20.0)


def auto_excimer_period(latencies_ms: list[float]) -> float:
    """The Excimer period for requests of these latencies (ms): the median over
    EXCIMER_SAMPLES_PER_REQUEST, within EXCIMER_PERIOD_BOUNDS_MS, to 0.5 ms."""
    low, high = EXCIMER_PERIOD_BOUNDS_MS
    if not latencies_ms:
        return low
    ordered = sorted(latencies_ms)
    median = ordered[len(ordered) // 2]
    return min(high, max(low, round(2 * median / EXCIMER_SAMPLES_PER_REQUEST) / 2))


def parse_collect(text: str) -> frozenset:
    """`perf,excimer` -> the set; `none` -> empty (the request log alone is not optional)."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == ["none"]:
        return frozenset()
    bad = [n for n in names if n not in COLLECTORS]
    if bad or not names:
        raise LockdownError(f"bad --collect {text!r}: choose from {','.join(COLLECTORS)} or none")
    return frozenset(names)


def parse_xhprof_flags(text: str) -> tuple:
    names = tuple(n.strip().lower() for n in text.split(",") if n.strip())
    bad = [n for n in names if n not in XHPROF_FLAGS]
    if bad:
        raise LockdownError(f"bad --xhprof-flags {text!r}: choose from {','.join(XHPROF_FLAGS)}")
    return names
