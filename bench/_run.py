"""Shared by the bench scripts: run `lockdown bench` or `lockdown profile` and return its JSON."""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path


def _lockdown(command: str, target: str, args: tuple, output: str, result: str) -> dict:
    """Run `lockdown COMMAND TARGET ARGS OUTPUT-OPTION tmp/out`; return tmp/out/RESULT as JSON
    (RESULT empty: the output file itself)."""
    with tempfile.TemporaryDirectory(prefix="lockdown-bench-") as tmp:
        out = Path(tmp) / "out"
        cmd = [sys.executable, "-m", "lockdown", command, target, *args, output, str(out)]
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            sys.exit(f"lockdown {command} failed: {proc.stderr.strip()}")
        return json.loads((out / result if result else out).read_text())


def lockdown_bench(target: str, *args: str) -> dict:
    return _lockdown("bench", target, args, "--json", "")


def lockdown_profile(target: str, *args: str) -> dict:
    """Run `lockdown profile` into a throw-away bundle; return its manifest."""
    return _lockdown("profile", target, args, "-o", "manifest.json")
