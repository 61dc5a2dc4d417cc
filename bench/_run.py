"""Shared by the bench scripts: run `lockdown bench` or `lockdown profile` and return its JSON."""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path


@contextlib.contextmanager
def scratch_dir(prefix: str):
    """A temporary directory the servers' unprivileged account can pass through (o+x, not list):
    lockdown refuses a run directory below one it cannot reach, and mkdtemp makes them 0700."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        os.chmod(tmp, 0o711)
        yield tmp


def _lockdown(command: str, target: str, args: tuple, output: str, result: str) -> dict:
    """Run `lockdown COMMAND TARGET ARGS OUTPUT-OPTION tmp/out`; return tmp/out/RESULT as JSON
    (RESULT empty: the output file itself)."""
    with scratch_dir("lockdown-bench-") as tmp:
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
