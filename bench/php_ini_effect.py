#!/usr/bin/env python3
"""RPS of an engine configuration against the default one, measured in the same run.

    python3 bench/php_ini_effect.py [--target wordpress] [--ini opcache.enable=0] [--pairs 3]

Runs baseline and variant benchmarks alternately (ABAB...), so drift hits both alike, and
prints the ratio variant / baseline of the mean RPS.
"""
from __future__ import annotations

import argparse
import statistics

from _run import lockdown_bench


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="wordpress")
    ap.add_argument("--ini", action="append", default=None, metavar="KEY=VALUE")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--duration", type=int, default=10,
                    help="seconds per run (whole seconds, as `lockdown bench` takes)")
    a = ap.parse_args()
    ini = a.ini or ["opcache.enable=0"]
    variant_args = [x for kv in ini for x in ("--php-ini", kv)]
    common = ["--runs", "1", "--duration", str(a.duration)]
    base, var = [], []
    for i in range(a.pairs):
        base.append(lockdown_bench(a.target, *common)["summary"]["rps_mean"])
        var.append(lockdown_bench(a.target, *common, *variant_args)["summary"]["rps_mean"])
        print(f"pair {i + 1}: baseline {base[-1]:.1f} req/s, {' '.join(ini)} {var[-1]:.1f} req/s")
    b, v = statistics.fmean(base), statistics.fmean(var)
    print(f"{a.target}: baseline {b:.1f} req/s, {' '.join(ini)} {v:.1f} req/s, "
          f"ratio {v / b:.3f}")


if __name__ == "__main__":
    main()
