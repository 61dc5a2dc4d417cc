"""DIR/incomplete.json: a `lockdown run` directory that is not finished.

`lockdown run -o DIR` writes DIR over minutes (bench.json, the bundle, analysis.json,
findings.json, the write-ups, the flame graphs, report.html). It claims DIR first by creating
this file, and removes it only after the report is written. A run that was interrupted,
failed or is still going leaves it, so `verify`, `report` and `writeup` refuse DIR with one
line saying which (an interrupted run at '== report' had left findings.json without its
flame graphs or report, and was taken for a finished one), and a second `lockdown run` with
the same -o cannot write into DIR while the first does (the claim is O_EXCL).
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from .errors import UsageError
from .owner import owner_alive, owner_record
from .redact import redacted_argv

MARKER = "incomplete.json"


def _read(directory: Path) -> dict | None:
    path = Path(directory) / MARKER
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):        # damaged: still unfinished, its owner unknown
        return {}
    return data if isinstance(data, dict) else {}


def claim(directory: Path, option: str = "-o") -> Path:
    """Mark `directory` as being written by this process; refused when another run has it."""
    path = Path(directory) / MARKER
    data = {**owner_record(), "command": redacted_argv(), "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "note": "lockdown run has not finished writing this directory: it is still running, or it "
                    "was interrupted or failed. Run it again into an empty directory."}
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise UsageError(unfinished(directory, option) or f"{directory} is taken; choose another {option}")
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror or e}; choose another {option}")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2)
    return path


def finished(directory: Path) -> None:
    (Path(directory) / MARKER).unlink(missing_ok=True)


def unfinished(directory: Path, option: str | None = None) -> str | None:
    """What is wrong with `directory` when a run has not finished it (None when it has, or
    when this process is the run writing it): for a new run's -o (`option` given), or for a
    command reading it."""
    data = _read(directory)
    if data is None:
        return None
    if data.get("owner") == os.getpid() and owner_alive(data):
        return None
    if owner_alive(data):
        what = f"is being written by a lockdown run still going (pid {data['owner']})"
        todo = f"wait for it to finish, or choose another {option}" if option else "wait for it to finish"
    else:
        what = f"holds a lockdown run that did not finish (interrupted or failed; {MARKER})"
        todo = (f"remove it or choose another {option}" if option else
                "run `lockdown run TARGET -o DIR` again into an empty directory")
    return f"{directory} {what}; {todo}"
