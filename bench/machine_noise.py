#!/usr/bin/env python3
"""The machine's own run-to-run noise: the floor under any benchmark's precision.

Runs a fixed PHP CPU loop on every core at once, N times, and prints the coefficient of
variation of the total work done per run. If this is 10%, no harness can give an RPS
CV far below 10% on this machine while it keeps every core busy.

    python3 bench/machine_noise.py [--runs 10] [--seconds 3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess

LOOP = ("$t = microtime(true); $n = 0; while (microtime(true) - $t < {s}) "
        "{{ for ($j = 0; $j < 10000; $j++) {{ $n++; }} }} echo $n;")


def one_run(cores: int, seconds: float) -> int:
    procs = [subprocess.Popen(["php", "-n", "-r", LOOP.format(s=seconds)], stdout=subprocess.PIPE,
                              text=True) for _ in range(cores)]
    return sum(int(p.communicate()[0]) for p in procs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    a = ap.parse_args()
    for cores in sorted({1, a.cores}):
        work = [one_run(cores, a.seconds) for _ in range(a.runs)]
        mean = statistics.fmean(work)
        print(f"{cores} core(s) busy: {a.runs} runs of {a.seconds:g} s, work per run "
              f"min/mean/max {min(work) / mean:.3f}/1.000/{max(work) / mean:.3f}, "
              f"cv {100 * statistics.stdev(work) / mean:.2f}%")


if __name__ == "__main__":
    main()
