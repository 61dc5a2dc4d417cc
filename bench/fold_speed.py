"""Folding throughput: lockdown's perf script folder against inferno-collapse-perf and
stackcollapse-perf.pl, on one real capture made now, in the same run, each timed best-of-N.

The input is the `perf script` text of a capture made at bench time (`lockdown profile TARGET
--collect perf --perf-freq HZ`, WordPress by default: a diverse native profile of about 45
samples a request at 999 Hz, so the default 1,600 requests give some 70,000 samples), or a perf
script given with --script (then it says so). Every tool's output is compared with lockdown's,
so a ratio is printed only for equal results; throughput ratios are lockdown's over the tool's
(above 1: lockdown is faster). Wall times are best of N; CPU times (user+sys of the process, its
threads added up) are printed beside them, as they move less on a busy host. lockdown's folder
is the native one (native/, one thread per core, as inferno's default) when `make setup` built
it, with rows for it on one thread and for the pure-Python reference.

    python3 bench/fold_speed.py [--requests 1600] [--perf-freq 999] [--repeat 3]
    python3 bench/fold_speed.py --script perf-script.txt[.gz]
    INFERNO_COLLAPSE_PERF=/path/to/inferno-collapse-perf  (`cargo install inferno`)
    STACKCOLLAPSE_PERF=/path/to/stackcollapse-perf.pl  (brendangregg/FlameGraph; not in Debian 12)
"""
from __future__ import annotations

import argparse
import gzip
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _run import scratch_dir  # noqa: E402
from lockdown.analyzers import folded as folded_module  # noqa: E402
from lockdown.analyzers.folded import NATIVE, fold_perf_bytes, format_folded  # noqa: E402


def capture(target: str, requests: int, freq: int, tmp: Path) -> Path:
    """A real capture's perf script: the run directory keeps perf/script.txt."""
    cmd = [sys.executable, "-m", "lockdown", "profile", target, "-o", str(tmp / "bundle"), "--run-dir",
           str(tmp / "run"), "--collect", "perf", "--perf-freq", str(freq), "--requests", str(requests),
           "--concurrency", "2", "--xhprof-every", "0", "--no-overhead-check", "--warmup-requests", "5"]
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(f"lockdown profile failed: {proc.stderr.strip()[-2000:]}")
    return tmp / "run" / "perf" / "script.txt"


def best_of(repeat: int, fn) -> tuple[float, float, bytes]:
    """(best wall seconds, CPU seconds of that run, output)."""
    best, cpu, out = float("inf"), 0.0, b""
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        out, child_cpu = fn()
        wall = time.perf_counter() - t
        if wall < best:
            best, cpu = wall, (time.process_time() - c) + child_cpu
    return best, cpu, out


def lockdown_fold(path: Path, native: bool, threads: int = 0) -> tuple[bytes, float]:
    """What a caller does: read the text, fold it, write the folded lines (as bytes)."""
    data = path.read_bytes()
    folded = folded_module._native.fold_perf(data, threads=threads) if threads else fold_perf_bytes(data, native=native)
    return format_folded(folded).encode(), 0.0


def external(argv: list[str], path: Path) -> tuple[bytes, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([*argv, str(path)], capture_output=True, check=True).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return out, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def tools() -> dict[str, list[str] | str]:
    """name -> argv, or the line that says why it is skipped."""
    inferno = os.environ.get("INFERNO_COLLAPSE_PERF") or shutil.which("inferno-collapse-perf")
    if not inferno:
        cargo_bin = Path.home() / ".cargo" / "bin" / "inferno-collapse-perf"
        inferno = str(cargo_bin) if cargo_bin.is_file() else None
    script = os.environ.get("STACKCOLLAPSE_PERF") or shutil.which("stackcollapse-perf.pl")
    missing_inferno = "skipped: inferno-collapse-perf not found (`cargo install inferno`, or INFERNO_COLLAPSE_PERF)"
    missing_script = ("skipped: stackcollapse-perf.pl not found (brendangregg/FlameGraph, not packaged in "
                      "Debian 12; set STACKCOLLAPSE_PERF)")
    return {
        "inferno-collapse-perf": [inferno] if inferno else missing_inferno,
        "inferno-collapse-perf -n 1": [inferno, "-n", "1"] if inferno else missing_inferno,
        "stackcollapse-perf.pl": (["perl", script] if script and os.path.isfile(script) and shutil.which("perl")
                                  else missing_script),
    }


def describe(data: bytes, made: str) -> None:
    lines = data.split(b"\n")
    samples = sum(1 for line in lines if line[:1] not in (b"", b"\t", b" ", b"#"))
    print(f"input: {len(data) / 1e6:.1f} MB of perf script, {len(lines):,} lines, {samples:,} samples ({made})")
    if samples < 50_000:
        print(f"note: {samples:,} samples, fewer than the 50,000 the comparison is meant for")


def row(name: str, wall: float, cpu: float, size_mb: float, base: float | None, same: str) -> None:
    ratio = f"  lockdown's throughput {wall / base:5.2f}x this one's" if base else ""
    print(f"{name:28} {wall:7.3f} s  {size_mb / wall:7.1f} MB/s  cpu {cpu:6.3f} s{ratio}  ({same})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="wordpress")
    ap.add_argument("--requests", type=int, default=1600)
    ap.add_argument("--perf-freq", type=int, default=999)
    ap.add_argument("--script", type=Path, help="fold this perf script instead of capturing one")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-python", action="store_true", help="leave out the pure-Python reference")
    args = ap.parse_args()
    with scratch_dir("lockdown-fold-") as tmp:
        if args.script:
            data = args.script.read_bytes()
            data = gzip.decompress(data) if args.script.suffix == ".gz" else data
            path = Path(tmp) / "script.txt"
            path.write_bytes(data)
            made = f"given: {args.script}"
        else:
            path = capture(args.target, args.requests, args.perf_freq, Path(tmp))
            data = path.read_bytes()
            made = f"captured now: {args.target}, {args.requests} requests at {args.perf_freq} Hz"
        describe(data, made)
        size_mb = len(data) / 1e6
        folder = "native" if NATIVE else "pure Python: native/ not built"
        base, cpu, ours = best_of(args.repeat, lambda: lockdown_fold(path, NATIVE))
        row("lockdown fold_perf_bytes", base, cpu, size_mb, None, f"{folder}; baseline")
        if NATIVE:
            t, c, out = best_of(args.repeat, lambda: lockdown_fold(path, True, threads=1))
            row("lockdown native, 1 thread", t, c, size_mb, None, "same output" if out == ours else "OUTPUT DIFFERS")
        if NATIVE and not args.no_python:
            t, c, out = best_of(args.repeat, lambda: lockdown_fold(path, False))
            row("lockdown pure Python", t, c, size_mb, None,
                "reference: same output" if out == ours else "reference: OUTPUT DIFFERS")
        for name, argv in tools().items():
            if isinstance(argv, str):
                print(f"{name:28} {argv}")
                continue
            t, c, out = best_of(args.repeat, lambda: external(argv, path))
            row(name, t, c, size_mb, base, "same output" if out == ours else "OUTPUT DIFFERS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
