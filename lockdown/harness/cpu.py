"""Machine CPU use over an interval, from /proc/stat: how busy the cores were and how much
time the hypervisor stole. Recorded per measured run, so a noisy run can be explained."""
from __future__ import annotations

from pathlib import Path


def snapshot() -> list[int]:
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except (OSError, IndexError):
        return []
    return [int(x) for x in fields]


def usage(before: list[int], after: list[int]) -> dict:
    """`{"busy_pct", "steal_pct", "iowait_pct"}` between two snapshots (empty if unknown)."""
    if not before or not after:
        return {}
    d = [b - a for a, b in zip(before, after)]
    total = sum(d[:8])  # user nice system idle iowait irq softirq steal (guest is inside user)
    if total <= 0:
        return {}
    idle, iowait, steal = d[3], d[4], d[7] if len(d) > 7 else 0
    return {"busy_pct": round(100.0 * (total - idle - iowait - steal) / total, 1),
            "steal_pct": round(100.0 * steal / total, 1),
            "iowait_pct": round(100.0 * iowait / total, 1)}
