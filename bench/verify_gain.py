"""What each fix buys: `lockdown run TARGET`, then `lockdown verify` on each finding (or the
ones named), printing per fix the RPS before and after, the after/before ratio with its 95%
CI (interleaved pairs, both arms measured in the same session), whether the re-capture
still shows the finding, and the ratio the finding's `share_pct` predicted (removing a share s
of the request time multiplies RPS by 1 / (1 - s)): a calibration check of the shares. Last,
all of them applied together (`lockdown verify --all`, or the named ones with `--finding`
repeated), beside the product of the single ratios: fixes that overlap give less than the
product, fixes that each unblock the other more.

    python3 bench/verify_gain.py [--target minicms] [--finding fs-scan ...] [--runs 5] [--duration 10]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from lockdown.analyzers.findings import predicted_ratio

ROOT = Path(__file__).resolve().parent.parent


def lockdown(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lockdown", *args], cwd=ROOT, text=True,
                          capture_output=True)


def predicted(share_pct: float | None) -> str:
    """The RPS ratio a fix removing `share_pct` of the request time would give."""
    ratio = predicted_ratio(share_pct)
    return "-" if ratio is None else f"{ratio:5.2f}x ({share_pct:.1f}%)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="minicms")
    ap.add_argument("--finding", action="append", default=[],
                    help="finding key (repeatable); default: every defect with a remediation")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--duration", type=int, default=10,
                    help="seconds per run (whole: the load generators take no fractions)")
    ap.add_argument("--keep", metavar="DIR", help="keep the run directory here")
    args = ap.parse_args()
    scratch = args.keep or tempfile.mkdtemp(prefix="lockdown-verify-gain-")
    os.chmod(scratch, 0o711)   # the servers' account passes through it (bench/_run.py scratch_dir)
    out = Path(scratch) / "run"
    r = lockdown("run", args.target, "-o", str(out), "--runs", "1", "--duration", "3")
    if r.returncode != 0:
        sys.exit(f"lockdown run failed:\n{r.stderr[-2000:]}")
    findings = json.loads((out / "findings.json").read_text())["findings"]
    keys = args.finding or [f["key"] for f in findings if f["severity"] != "info" and f["remediations"]]
    shares = {f["key"]: f["share_pct"] for f in findings}
    print(f"{'finding':22} {'before':>9} {'after':>9} {'ratio':>7}  {'95% CI of the change':>22}  gone  predicted")
    product = 1.0
    for key in keys:
        res = verified(out, key, ["--finding", key], args)
        if res is not None:
            product *= res["bench"]["change"]["ratio"]
            print(f"  {predicted(shares.get(key))}", flush=True)
    if len(keys) > 1:
        together = ["--all"] if not args.finding else [a for k in keys for a in ("--finding", k)]
        key = "all" if not args.finding else "+".join(keys)
        if verified(out, key, together, args) is not None:
            print(f"  product of the single ratios: {product:.2f}x", flush=True)
    print(f"run directory: {out}")


def verified(out: Path, key: str, which: list[str], args) -> dict | None:
    """`lockdown verify` of `which`; prints its row (without the line's end), returns verify.json."""
    v = lockdown("verify", str(out), *which, "--runs", str(args.runs), "--duration", str(args.duration))
    path = out / "verify" / key / "verify.json"
    label = "all together" if key == "all" else key
    if not path.is_file():
        print(f"{label:22} verify failed: {v.stderr.strip()[-300:]}")
        return None
    res = json.loads(path.read_text())
    b = res["bench"]
    lo, hi = b["change"]["ci95_pct"]
    print(f"{label:22} {b['before']['summary']['rps_mean']:9.1f} {b['after']['summary']['rps_mean']:9.1f} "
          f"{b['change']['ratio']:6.2f}x  {lo:+9.1f}% .. {hi:+7.1f}%  "
          f"{'yes' if res['reprofile']['gone'] else 'no ':4}", end="")
    return res


if __name__ == "__main__":
    main()
