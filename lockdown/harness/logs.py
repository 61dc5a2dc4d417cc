"""Read the ends of log files for error messages."""
from __future__ import annotations

from pathlib import Path


def tail(path: Path, lines: int = 15) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return f"({path} not found)"
    kept = text.splitlines()[-lines:]
    return "\n".join(kept) if kept else f"({path} is empty)"


def evidence(*logs: Path, lines: int = 15) -> str:
    return "\n".join(f"--- tail of {p} ---\n{tail(p, lines)}" for p in logs)
