#!/usr/bin/env python3
"""Does the native attribution move the way the engine does? Subsystem shares of a baseline
capture beside captures with one engine setting changed each.

    python3 bench/attribution_effect.py [--target wordpress] [--ini opcache.enable=0 --ini pcre.jit=0]
    python3 bench/attribution_effect.py --bundle base/ --bundle variant/ ...   # existing bundles

Each change should raise its own subsystem (opcache.enable=0: compile; pcre.jit=0: regex;
zend.enable_gc=0: gc to ~0) and leave the others' CPU per request roughly where it was.
Printed per subsystem: % of the timed requests' on-CPU samples and ms of CPU per request (the
mean CPU time of the timed requests split in those proportions, as `lockdown analyze` does).
Captures run one after another, so host drift shows as every subsystem moving together.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from _run import scratch_dir


def capture(target: str, out: Path, ini: str | None) -> Path:
    cmd = [sys.executable, "-m", "lockdown", "profile", target, "-o", str(out), "--no-overhead-check"]
    if ini:
        cmd += ["--php-ini", ini]
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(f"lockdown profile failed: {proc.stderr.strip()}")
    return out


def shares(bundle: Path) -> tuple[dict, float, int]:
    """(subsystem -> % of samples, mean CPU ms per timed request, samples) of one bundle."""
    proc = subprocess.run([sys.executable, "-m", "lockdown", "analyze", str(bundle), "--json"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"lockdown analyze {bundle} failed: {proc.stderr.strip()}")
    a = json.loads(proc.stdout)
    sub = a.get("subsystems") or {}
    return sub.get("overall", {}), a["budget_overall"]["cpu_us"] / 1000.0, sub.get("samples", 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="wordpress")
    ap.add_argument("--ini", action="append", metavar="KEY=VALUE",
                    help="one variant per --ini (default: opcache.enable=0 and pcre.jit=0)")
    ap.add_argument("--bundle", action="append", type=Path,
                    help="compare these bundles instead of capturing (the first is the baseline)")
    a = ap.parse_args()
    with scratch_dir("lockdown-attr-") as tmp:
        if a.bundle:
            runs = [(b.name, b) for b in a.bundle]
        else:
            variants = a.ini or ["opcache.enable=0", "pcre.jit=0"]
            runs = [("baseline", capture(a.target, Path(tmp) / "base", None))]
            runs += [(v, capture(a.target, Path(tmp) / f"v{i}", v)) for i, v in enumerate(variants)]
        data = [(name, *shares(b)) for name, b in runs]
    cats = sorted({c for _, s, _, _ in data for c in s}, key=lambda c: -data[0][1].get(c, 0))
    print(f"{'':14}" + "".join(f"{name[:24]:>26}" for name, *_ in data))
    print(f"{'samples':14}" + "".join(f"{n:>26}" for *_, n in data))
    print(f"{'cpu ms/req':14}" + "".join(f"{cpu:>26.1f}" for _, _, cpu, _ in data))
    for c in cats:
        print(f"{c:14}" + "".join(f"{s.get(c, 0):>12.2f}% {s.get(c, 0) * cpu / 100:>8.1f} ms"
                                  for _, s, cpu, _ in data))


if __name__ == "__main__":
    main()
