"""Which findings come with a remediation, per target: `lockdown run` on each target given (or
reads run directories already made), then, with --verify, `lockdown verify DIR --all`, and
prints one row per target: the defect findings reported, how many have a remediation (by
origin: recipe, generated, engine; shared: one fix proposed for two findings), which have none
and why (the finding's `no_patch`, shortened), and verify's change with its 95% CI, the
findings gone and the pages unchanged.

It is how the remediation coverage of a release is read off the built-in targets and off
targets made with `lockdown init` from apps nobody here wrote.

    python3 bench/remediation_coverage.py TARGET ... [--out DIR] [--verify] [--runs 2]
    python3 bench/remediation_coverage.py --dirs RUN_DIR ...     (tabulate runs already made)
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN_ARGS = ("--duration", "2", "--warmup-duration", "1", "--requests", "60")


def lockdown(*args: str, timeout: int = 3600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lockdown", *map(str, args)], cwd=ROOT, text=True,
                          capture_output=True, timeout=timeout)


def coverage(run_dir: Path) -> dict:
    """The defect findings of a run and their remediations, from its findings.json."""
    doc = json.loads((run_dir / "findings.json").read_text())
    defects = [f for f in doc["findings"] if f.get("severity") != "info"]
    origins: Counter = Counter()
    missing = []
    for f in defects:
        rems = f.get("remediations") or []
        if rems:
            shared = (f.get("details") or {}).get("same_fix_as")
            origins["shared" if shared else rems[0].get("origin") or "recipe"] += 1
        else:
            why = ((f.get("details") or {}).get("no_patch") or "no reason given").split(". Where:")[0]
            missing.append(f"{f['id']} ({why[:90]})")
    return {"target": doc.get("target", {}).get("name", run_dir.name) if isinstance(doc.get("target"), dict)
            else doc.get("target", run_dir.name),
            "defects": len(defects), "with": sum(origins.values()), "origins": dict(origins), "missing": missing}


def verified(run_dir: Path) -> str:
    """`verify --all`'s verify.json in the run (RUN/verify/all), in words ("" when there is none)."""
    p = run_dir / "verify" / "all" / "verify.json"
    if not p.is_file():
        return ""
    v = json.loads(p.read_text())
    c = v["bench"]["change"]
    lo, hi = c["ci95_pct"]
    gone = v["reprofile"].get("gone_by_finding") or {}
    pages = v["responses"]
    return (f"{c['change_pct']:+.1f}% ({lo:+.1f}..{hi:+.1f}, {c.get('pairs', '?')} pairs)"
            f"{', confirmed' if v.get('confirmed') else ''}; {sum(map(bool, gone.values()))} of {len(gone)} gone; "
            f"{pages['same']} of {pages['urls']} pages same")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("targets", nargs="*")
    ap.add_argument("--dirs", nargs="*", type=Path, default=[], help="run directories already made")
    ap.add_argument("--out", type=Path, default=Path("/var/tmp/lockdown-coverage"))
    ap.add_argument("--runs", default="2")
    ap.add_argument("--verify", action="store_true", help="also `lockdown verify DIR --all` on each")
    args = ap.parse_args()
    dirs = list(args.dirs)
    for t in args.targets:
        out = args.out / Path(t).name
        r = lockdown("run", t, "-o", out, "--runs", args.runs, *RUN_ARGS)
        if r.returncode != 0:
            print(f"{t}: run failed (exit {r.returncode}): {(r.stderr or r.stdout).strip().splitlines()[-1:]}")
            continue
        dirs.append(out)
    print("| target | defect findings | with a remediation (origin) | without (why) | verify --all |")
    print("|---|---|---|---|---|")
    for d in dirs:
        c = coverage(d)
        if args.verify and c["with"]:
            lockdown("verify", d, "--all", "--runs", "5", "--duration", "3")
        origins = ", ".join(f"{n} {k}" for k, n in sorted(c["origins"].items())) or "-"
        print(f"| {c['target']} | {c['defects']} | {c['with']} ({origins}) | {'; '.join(c['missing']) or '-'} "
              f"| {verified(d) or '-'} |")


if __name__ == "__main__":
    main()
