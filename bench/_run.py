"""Shared by the bench scripts: run `lockdown bench` and return its JSON result."""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path


def lockdown_bench(target: str, *args: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="lockdown-bench-") as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", "lockdown", "bench", target, *args, "--json", str(out)]
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            sys.exit(f"lockdown bench failed: {proc.stderr.strip()}")
        return json.loads(out.read_text())


def lockdown_profile(target: str, *args: str) -> dict:
    """Run `lockdown profile` into a throw-away bundle; return its manifest."""
    with tempfile.TemporaryDirectory(prefix="lockdown-bench-") as tmp:
        bundle = Path(tmp) / "bundle"
        cmd = [sys.executable, "-m", "lockdown", "profile", target, *args, "-o", str(bundle)]
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            sys.exit(f"lockdown profile failed: {proc.stderr.strip()}")
        return json.loads((bundle / "manifest.json").read_text())
