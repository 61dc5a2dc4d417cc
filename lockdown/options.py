"""The options of the commands that measure, and their defaults: what `bench`, `run`, `verify`
and `compare` take, and what the reports compare a recorded run with to say which options it
changed (reports/bench_table.py's "canonical", reports/reproduce.py's commands). Plain data,
no process and no file: the harness measures with these options, the reports only read them,
and neither has to import the other for it."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

DEFAULT_WORKERS = max(2, 2 * (os.cpu_count() or 1))
DEFAULT_WORKERS_TEXT = "twice the CPUs, at least 2"   # how --help names it, on any machine

# A run's capacity this far off the runs' median counts as disturbed (harness/steady_runs.py
# applies it). RPS moved 1 to 2 times as much as the capacity on this VM (docs/bench.md,
# elasticity), so runs spread evenly within +-5% leave a CV from the host of about
# 1.5 x 5% / sqrt(3) = 4.3%; at 10% it was 8.7%.
HOST_TOLERANCE = 0.05

DEFAULT_RUNS = 5       # per arm: `verify` and `compare` (cli/stack_options.ab_options)
DEFAULT_MAX_RUNS = 15  # `verify`: the most pairs its plan may take (harness/ab_bench.PairPlan)


@dataclass
class BenchOptions:
    """`lockdown bench`'s options (harness/bench.run_bench); its defaults make a canonical
    benchmark."""
    runs: int = 5
    duration: float = 10                # whole seconds: wrk, siege and ab take no fractions
    concurrency: int = DEFAULT_WORKERS
    workers: int = DEFAULT_WORKERS
    load: str = "wrk"
    warmup_requests: int = 20
    warmup_duration: float = 5
    php_ini: dict = field(default_factory=dict)
    port: int | None = None
    mysql: str | None = None
    hooks: dict = field(default_factory=dict)   # phase name -> shell command
    # runs the host disturbed (capacity more than host_tolerance % off the runs' median)
    # measured again, up to `runs` more (harness/steady_runs.py)
    rerun_disturbed: bool = True
    host_tolerance: float = 100 * HOST_TOLERANCE

    def tolerance(self) -> float | None:
        """The set-aside rule's bound as a fraction; None when every run is kept."""
        return self.host_tolerance / 100 if self.rerun_disturbed else None

    def non_default(self) -> list[str]:
        default = BenchOptions()
        return [k for k in ("runs", "duration", "concurrency", "workers", "load", "warmup_requests",
                            "warmup_duration", "php_ini", "mysql", "rerun_disturbed", "host_tolerance")
                if getattr(self, k) != getattr(default, k)]


# `lockdown run`'s defaults (lockdown/cli/run.py and pipeline/run.py RunOptions take them,
# through reports/reproduce.py, which names the options a run changed)
RUN_DEFAULTS = {"runs": 3, "duration": 10, "warmup_duration": BenchOptions.warmup_duration,
                "requests": 120, "xhprof_every": 10}
# `lockdown verify`'s A/B defaults (lockdown/cli/stack_options.py ab_options)
VERIFY_DEFAULTS = {"runs": DEFAULT_RUNS, "duration": BenchOptions.duration, "load": BenchOptions.load,
                   "warmup_duration": BenchOptions.warmup_duration}
