"""A patched run's app tree: a full copy (`cp -a`, what verify did before) against hard links
with the patched file made the run's own (harness/app_tree.py, what it does now), for each
prepared target, in the same run, alternating, best and median of N. Removal is timed too:
a run's copy is deleted when its stack stops.

    python3 bench/app_copy.py [--repeat 3] [TARGET ...]   (default: every prepared target)

Prints seconds per strategy and the ratio full / linked. Prepared targets are found under
$LOCKDOWN_PREPARED_DIR or $LOCKDOWN_HOME/prepared (run a target once to prepare it).
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from lockdown import paths  # noqa: E402
from lockdown.harness import app_tree  # noqa: E402


def full(src: Path, dest: Path, rel: str) -> None:
    subprocess.run(["cp", "-a", str(src), str(dest)], check=True)
    (dest / rel).write_bytes((dest / rel).read_bytes() + b"\n")


def linked(src: Path, dest: Path, rel: str) -> None:
    app_tree.link_copy(src, dest)
    app_tree.own(dest, rel).write_bytes((dest / rel).read_bytes() + b"\n")


def timed(fn, *args) -> float:
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("targets", nargs="*")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    roots = sorted(p for p in paths.prepared_dir().glob("*-*") if (p / "prepared.json").is_file()
                   and (not a.targets or p.name.rsplit("-", 1)[0] in a.targets))
    if not roots:
        sys.exit(f"app_copy: no prepared target in {paths.prepared_dir()}; run `lockdown bench TARGET` once")
    print(f"{'target':<22}{'files':>7}  {'full s (med)':>13}{'linked s (med)':>15}"
          f"{'rm full':>9}{'rm linked':>10}{'full/linked':>12}")
    for root in roots:
        src = root / "app"
        files = [p for p in src.rglob("*") if p.is_file() and not p.is_symlink()]
        if not files:
            continue
        rel = str(max(files, key=lambda p: p.stat().st_size).relative_to(src))  # the file a patch writes
        times: dict[str, list[float]] = {"full": [], "linked": [], "rm full": [], "rm linked": []}
        with tempfile.TemporaryDirectory(prefix="lockdown-bench-copy-", dir=root.parent) as tmp:
            for i in range(a.repeat):
                for name, fn in (("full", full), ("linked", linked))[:: 1 if i % 2 == 0 else -1]:
                    dest = Path(tmp) / name
                    times[name].append(timed(fn, src, dest, rel))
                    times[f"rm {name}"].append(timed(shutil.rmtree, dest))
        med = {k: statistics.median(v) for k, v in times.items()}
        ratio = (med["full"] + med["rm full"]) / (med["linked"] + med["rm linked"])
        print(f"{root.name.rsplit('-', 1)[0]:<22}{len(files):>7}  {min(times['full']):6.2f} ({med['full']:4.1f})"
              f"{min(times['linked']):8.2f} ({med['linked']:4.1f}){med['rm full']:9.2f}{med['rm linked']:10.2f}"
              f"{ratio:11.1f}x")


if __name__ == "__main__":
    main()
