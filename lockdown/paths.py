"""Where lockdown keeps its state: prepared targets, run directories, records of live runs.

Everything lives under `$LOCKDOWN_HOME` (default `~/.local/share/lockdown`), never under
/etc, /usr or /var/lib.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from .errors import LockdownError

REPO_ROOT = Path(__file__).resolve().parent.parent


def home() -> Path:
    env = os.environ.get("LOCKDOWN_HOME")
    if env:
        return Path(env).expanduser().resolve()
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "lockdown"


def active_dir() -> Path:
    return home() / "active"


def prepared_dir() -> Path:
    """Prepared targets; `LOCKDOWN_PREPARED_DIR` lets several homes share one cache."""
    env = os.environ.get("LOCKDOWN_PREPARED_DIR")
    return Path(env).expanduser().resolve() if env else home() / "prepared"


def runs_dir() -> Path:
    return home() / "runs"


def builtin_targets_dir() -> Path:
    return Path(os.environ.get("LOCKDOWN_TARGETS", REPO_ROOT / "fixtures" / "apps"))


def new_run_dir(target: str, command: str) -> Path:
    """A fresh, uniquely named run directory for one command on one target."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = runs_dir() / f"{stamp}-{command}-{target}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    path.mkdir(parents=True)
    return path


def empty_dir(path: Path, option: str) -> Path:
    """`path` resolved and made when missing, for a command to fill; one with files in it is
    refused (`option` names the flag to change), so two runs' outputs never mix."""
    path = path.resolve()
    if path.exists() and any(path.iterdir()):
        raise LockdownError(f"{path} is not empty; choose another {option} or remove it")
    path.mkdir(parents=True, exist_ok=True)
    return path
