"""Folding throughput: lockdown's perf-script folder against stackcollapse-perf.pl and
inferno-collapse-perf, on the same input, in the same run, each timed best-of-N.

The input is the committed WordPress perf script (fixtures/perf/wordpress.script.txt.gz)
repeated until it is about --mb megabytes. Every tool's output is compared with lockdown's,
so a ratio is only printed for equal results.

    python3 bench/fold_speed.py [--mb 100] [--repeat 3]
    STACKCOLLAPSE_PERF=/path/to/stackcollapse-perf.pl  (brendangregg/FlameGraph; not in Debian 12)
    INFERNO_COLLAPSE_PERF=/path/to/inferno-collapse-perf  (cargo install inferno)
"""
from __future__ import annotations

import argparse
import gzip
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from lockdown.analyzers.folded import fold_perf_text, format_folded  # noqa: E402

FIXTURE = REPO / "fixtures" / "perf" / "wordpress.script.txt.gz"


def best_of(repeat: int, fn) -> tuple[float, bytes]:
    best, out = float("inf"), b""
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def lockdown_fold(path: Path) -> bytes:
    with open(path, encoding="utf-8", newline="") as f:
        return format_folded(fold_perf_text(f)).encode()


def external(argv: list[str], path: Path) -> bytes:
    return subprocess.run([*argv, str(path)], capture_output=True, check=True).stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=100.0)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    chunk = gzip.decompress(FIXTURE.read_bytes())
    copies = max(1, round(args.mb * 1e6 / len(chunk)))
    with tempfile.TemporaryDirectory(prefix="lockdown-fold-") as tmp:
        path = Path(tmp) / "script.txt"
        path.write_bytes(chunk * copies)
        size_mb = path.stat().st_size / 1e6
        print(f"input: {size_mb:.1f} MB of perf script ({copies} copies of the WordPress fixture)")
        base, ours = best_of(args.repeat, lambda: lockdown_fold(path))
        print(f"{'lockdown fold_perf_text':28} {base:7.2f} s  {size_mb / base:7.1f} MB/s  (baseline)")
        tools = {
            "stackcollapse-perf.pl": (os.environ.get("STACKCOLLAPSE_PERF") or shutil.which("stackcollapse-perf.pl"),
                                      lambda p: ["perl", p]),
            "inferno-collapse-perf": (os.environ.get("INFERNO_COLLAPSE_PERF") or shutil.which("inferno-collapse-perf"),
                                      lambda p: [p]),
        }
        for name, (exe, argv) in tools.items():
            if not exe or not os.path.isfile(exe):
                print(f"{name:28} not found (see this script's docstring)")
                continue
            t, out = best_of(args.repeat, lambda: external(argv(exe), path))
            same = "same output" if out == ours else "OUTPUT DIFFERS"
            print(f"{name:28} {t:7.2f} s  {size_mb / t:7.1f} MB/s  {name}/lockdown time ratio {t / base:5.2f}  ({same})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
