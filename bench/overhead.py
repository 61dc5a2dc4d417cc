"""What capture costs: RPS with collectors on / RPS with nothing collected, per collector
alone and for the default set.

Each run is one `lockdown profile --duration D --overhead-slices K`: on the same running
stack, the driver alternates uncollected slices (no capture header: the prepend returns at
once; perf paused; the slow log off) and K capture slices of D/K seconds each, starting and
ending uncollected; each capture slice is compared with its two neighbours and the run's ratio
is the geometric mean. The host's CPU speed swings by tens of percent within a minute on a
shared VM (harness/host_speed.py): with one long capture pass between two baseline halves
(K=1) that drift made single ratios range from 0.75 to 1.17 on WordPress; slices of a few
seconds cancel most of it. Collector sets are rotated from run to run. Each slice also
records the host's speed and steal, and the ratios are also given at equal host capacity
(speed x CPU share not stolen, docs/bench.md "Steal time"): log ratio regressed on the log of
the passes' capacity ratio, one elasticity for all sets (stats.ratios_speed_adjusted).

    python3 bench/overhead.py [--target wordpress] [--runs 5] [--duration 10] [--concurrency 1]
                              [--slices 4] [--collect SET ...]
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _run import lockdown_profile  # noqa: E402
from lockdown.analyzers.stats import ratios_speed_adjusted, summarize  # noqa: E402

SETS = ["perf", "excimer", "xhprof", "queries", "perf,excimer,xhprof,queries"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="wordpress")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--duration", type=float, default=10)
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--slices", type=int, default=4,
                    help="capture slices per run, between uncollected ones (lockdown profile "
                         "--overhead-slices); 1 = one capture pass between two half baselines")
    ap.add_argument("--collect", action="append", choices=SETS, metavar="SET",
                    help=f"collector set to measure (repeatable; default all of: {'; '.join(SETS)})")
    args = ap.parse_args()
    sets = args.collect or SETS
    ratios: dict = {s: [] for s in sets}
    speeds: dict = {s: [] for s in sets}
    for run in range(args.runs):
        order = sets[run % len(sets):] + sets[:run % len(sets)]
        for collect in order:
            m = lockdown_profile(args.target, "--duration", str(args.duration), "-c",
                                 str(args.concurrency), "--collect", collect,
                                 "--warmup-requests", "60", "--overhead-slices", str(args.slices))
            o = m["overhead"]
            ratios[collect].append(o["ratio"])
            # the fit takes every slice: the host's speed and steal move within a run too; the
            # capacity (speed x CPU not stolen) where the capture recorded it, else the speed
            speeds[collect].extend(
                [(p["ratio"], p.get("capture_host_capacity") or p.get("capture_host_speed"),
                  p.get("baseline_host_capacity") or p.get("baseline_host_speed")) for p in o["slices"]]
                if o.get("slices") else
                [(o["ratio"], o.get("capture_host_speed"), o.get("baseline_host_speed"))])
            print(f"run {run + 1} {collect:30s} baseline {o['baseline_rps']:7.2f} req/s  "
                  f"collected {o['capture_rps']:7.2f} req/s  ratio {o['ratio']:.3f}", flush=True)
    print(f"\n{args.target}, concurrency {args.concurrency}, {args.runs} runs of "
          f"{args.duration:g} s per set in {args.slices} slice(s); ratio = collected / uncollected RPS")
    for collect in sets:
        s = summarize(ratios[collect])
        name = "default set" if collect == SETS[-1] else collect
        spread = (f", 95% CI {s['ci95'][0]:.3f}..{s['ci95'][1]:.3f}, cv {100 * s['cv']:.1f}%"
                  if s["cv"] is not None else "")
        print(f"  {name:12s} ratio {s['mean']:.3f}  (cost {100 * (1 - s['mean']):+.1f}%{spread})")
    fit = ratios_speed_adjusted(speeds)
    if fit is None:
        return
    print(f"at equal host capacity (speed and steal; elasticity {fit['elasticity']:.2f}, fitted over all sets, "
          f"one point per capture slice and its neighbours):")
    for collect in sets:
        g = fit["groups"][collect]
        name = "default set" if collect == SETS[-1] else collect
        print(f"  {name:12s} ratio {g['ratio']:.3f}  (cost {100 * (1 - g['ratio']):+.1f}%, 95% CI "
              f"{g['ci95'][0]:.3f}..{g['ci95'][1]:.3f})")


if __name__ == "__main__":
    main()
