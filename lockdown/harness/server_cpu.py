"""CPU time the servers spent in a measured run (php-fpm, nginx and MariaDB, each with its
workers and threads), from /proc: divided by the requests served, what one request costs in
CPU. The kernel leaves the time the hypervisor stole out of a task's CPU time, so unlike RPS
this does not follow steal; it still follows the host's speed (frequency, shared caches)."""
from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def _stat(pid: str) -> tuple[int, int] | None:
    """(parent pid, utime + stime + cutime + cstime in clock ticks) of a process, or None once
    it is gone. A reaped child's time is in its parent's cutime/cstime, a live one's in its own."""
    try:
        text = Path("/proc", pid, "stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()     # after the command name, which may hold spaces
    return int(fields[1]), sum(int(x) for x in fields[11:15])


def snapshot(servers: dict[str, int]) -> dict[str, int]:
    """Clock ticks used so far by each server (name -> its process id) with every descendant
    (live, or reaped into a parent's children's time): {name: ticks}. A server that is gone is
    left out."""
    parent, ticks = {}, {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            st = _stat(entry.name)
            if st is not None:
                parent[int(entry.name)], ticks[int(entry.name)] = st
    children = defaultdict(list)
    for pid, ppid in parent.items():
        children[ppid].append(pid)
    out = {}
    for name, root in servers.items():
        if root not in ticks:
            continue
        total, todo = 0, [root]
        while todo:
            pid = todo.pop()
            total += ticks.get(pid, 0)
            todo.extend(children.get(pid, ()))
        out[name] = total
    return out


def usage(before: dict[str, int], after: dict[str, int], requests: int) -> dict:
    """`{"seconds", "ms_per_request", "by_server": {name: ms per request}}` of the servers
    between two snapshots; empty when a server came or went in between (a restart: its time
    would be lost) or nothing was served."""
    if not before or before.keys() != after.keys() or requests <= 0:
        return {}
    used = {name: (after[name] - before[name]) / TICKS_PER_S for name in before}
    seconds = sum(used.values())
    return {"seconds": round(seconds, 2), "ms_per_request": round(1000.0 * seconds / requests, 3),
            "by_server": {name: round(1000.0 * s / requests, 3) for name, s in sorted(used.items())}}
