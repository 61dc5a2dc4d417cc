#!/usr/bin/env python3
"""Run-to-run precision of the harness: coefficient of variation of RPS over 10 runs, set
against the host's own capacity over the same runs (the speed of the probe thread of
harness/host_speed.py times the CPU share the hypervisor did not steal, both measured during
each run): no harness is steadier than the machine under it, so the ratio
says how much noise the harness adds. (A floor measured after the runs, with
bench/machine_noise.py, was tried: the host had calmed down by then, 4% against 14% during
the runs, so only a baseline taken at the same moments is a fair one.)

    python3 bench/harness_precision.py [--target wordpress] [--runs 10] [--duration 10]
"""
from __future__ import annotations

import argparse

from _run import lockdown_bench


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="wordpress")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--duration", type=int, default=10,
                    help="seconds per run (whole seconds, as `lockdown bench` takes)")
    a = ap.parse_args()
    data = lockdown_bench(a.target, "--runs", str(a.runs), "--duration", str(a.duration))
    rps = [r["rps"] for r in data["runs"]]
    s = data["summary"]
    print(f"target {a.target}: {a.runs} runs of {a.duration:g} s at concurrency "
          f"{data['config']['concurrency']} ({data['config']['load']})")
    print("rps per run: " + " ".join(f"{x:.1f}" for x in rps))
    print(f"mean {s['rps_mean']:.2f} req/s  stddev {s['rps_stddev']:.2f}  "
          f"95% CI [{s['rps_ci95'][0]:.2f}, {s['rps_ci95'][1]:.2f}]")
    print(f"rps_cv {100 * s['rps_cv']:.2f}%  (min/max ratio {min(rps) / max(rps):.3f})")
    aside = data.get("set_aside") or []
    if aside:       # runs the host disturbed, measured again (docs/bench.md)
        print(f"set aside: {len(aside)} of {s['runs_measured']} runs (" + ", ".join(
            f"run {r['run']} {r['rps']:.1f} req/s" for r in aside) + f"); rps_cv over every run "
            f"{100 * s['rps_cv_all_runs']:.2f}%")
    speeds = [r.get("host_speed", {}).get("speed") for r in data["runs"]]
    steals = [r.get("host_cpu", {}).get("steal_pct") for r in data["runs"]]
    if s.get("host_speed_cv") is not None:
        print("host speed per run: " + " ".join(f"{x:.1f}" for x in speeds))
        print("steal % per run: " + " ".join("?" if x is None else f"{x:.1f}" for x in steals))
        capacity_cv = s.get("host_capacity_cv") or s["host_speed_cv"]
        fitted = ("fewer than 4 runs: too few to take it out" if s.get("rps_cv_speed_adjusted") is None else
                  f"rps_cv with the capacity taken out {100 * s['rps_cv_speed_adjusted']:.2f}% "
                  f"(elasticity {s['speed_elasticity']:.2f})")
        print(f"host speed CV {100 * s['host_speed_cv']:.2f}%; host capacity (speed x CPU not stolen) "
              f"CV {100 * capacity_cv:.2f}%; {fitted}")
        if capacity_cv:
            print(f"rps_cv / host capacity CV: {s['rps_cv'] / capacity_cv:.2f} "
                  "(1 or below: the spread is the host's, not the harness's)")
    if s.get("server_cpu_cv") is not None:
        print(f"servers' CPU per request: mean {s['server_cpu_ms_mean']:.2f} ms, CV {100 * s['server_cpu_cv']:.2f}% "
              "(php-fpm, nginx, MariaDB; time the hypervisor stole is not counted in it)")


if __name__ == "__main__":
    main()
