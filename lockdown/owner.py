"""Who owns a record (an orphan record, a claimed database, an unfinished run directory): this
process, identified by its pid and its start time, so that a recycled pid is not mistaken for
it. Pure reads of /proc, below every stage: the harness and the run directory's marker share it."""
from __future__ import annotations

import os
from pathlib import Path


def stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first, then ppid, pgrp, ...;
    the name may hold spaces and parentheses, so it is cut at the last ')'), or None when the
    process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2:].split()


def _start_time(pid: int) -> str | None:
    fields = stat_fields(pid)
    return fields[19] if fields else None


def owner_record() -> dict:
    """Who owns a record: this process, identified so that a recycled pid is not mistaken for it."""
    return {"owner": os.getpid(), "owner_start": _start_time(os.getpid())}


def owner_alive(record: dict) -> bool:
    owner = record.get("owner")
    return bool(owner) and _start_time(owner) is not None and _start_time(owner) == record.get("owner_start")
