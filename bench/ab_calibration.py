"""Does the A/B verdict keep its 5% error on this host? A/A comparisons: `lockdown compare
TARGET --with memory_limit=...` with a setting that changes nothing the pages cost, K times;
each 95% CI that excludes zero is a false "significant". Prints the rate for the verdict's
estimate (host capacity taken out) and the plain paired one, each with a 95% binomial
interval (Wilson), the same for the paired change in the servers' CPU per request
(`bench.change_server_cpu`), and the mean smallest change the pairs resolved (80% power): the
calibration check behind `verify`'s and `compare`'s intervals (docs/verify.md).

    python3 bench/ab_calibration.py [--target hello] [--times 20] [--runs 5] [--duration 1]
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

from _run import scratch_dir

ROOT = Path(__file__).resolve().parent.parent


def wilson(hits: int, n: int) -> tuple[float, float]:
    """95% interval of a proportion (Wilson score)."""
    if n == 0:
        return (0.0, 1.0)
    z, p = 1.96, hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def compare(target: str, runs: int, duration: int, i: int) -> dict:
    with scratch_dir("lockdown-aa-") as tmp:
        out = Path(tmp) / "cmp"
        # 128M is PHP's default; 129M + i MB changes nothing a small page costs
        proc = subprocess.run([sys.executable, "-m", "lockdown", "compare", target,
                               "--with", f"memory_limit={129 + i}M", "--runs", str(runs),
                               "--duration", str(duration), "--warmup-duration", "1", "--run-dir", str(out)],
                              cwd=ROOT, text=True, capture_output=True)
        if proc.returncode != 0:
            sys.exit(f"lockdown compare failed: {proc.stderr.strip()[-500:]}")
        return json.loads((out / "compare.json").read_text())["bench"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="hello")
    ap.add_argument("--times", type=int, default=20)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--duration", type=int, default=1)
    args = ap.parse_args()
    verdict = paired = cpu_hits = 0
    smallest = []
    print(f"{'#':>3} {'verdict change':>15} {'95% CI':>20} {'paired':>9} {'cpu/req':>9} {'resolves':>9}")
    for i in range(args.times):
        b = compare(args.target, args.runs, args.duration, i)
        c, p = b["change"], b["change_paired"]
        verdict += bool(c["significant"])
        paired += bool(p["significant"])
        cpu = b.get("change_server_cpu") or {}
        cpu_hits += bool(cpu.get("significant"))
        smallest.append(c.get("resolvable_pct") or math.nan)
        lo, hi = c["ci95_pct"]
        print(f"{i + 1:3d} {c['change_pct']:+14.1f}% {f'{lo:+.1f} .. {hi:+.1f}%':>20} "
              f"{p['change_pct']:+8.1f}% {cpu.get('change_pct', math.nan):+8.1f}% "
              f"{c.get('resolvable_pct', math.nan):8.1f}%"
              + ("  significant" if c["significant"] else ""), flush=True)
    n = args.times
    for name, hits in (("verdict (host capacity taken out)", verdict), ("paired ratios alone", paired),
                       ("servers' CPU per request", cpu_hits)):
        lo, hi = wilson(hits, n)
        print(f"{name}: {hits} of {n} A/A comparisons significant = {100 * hits / n:.1f}% "
              f"(95% interval {100 * lo:.1f} .. {100 * hi:.1f}%; nominal 5%)")
    print(f"mean smallest change resolved (80% power): {statistics.fmean(smallest):.1f}% "
          f"({args.runs} pairs of {args.duration} s)")


if __name__ == "__main__":
    main()
