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


def delta(before: list[int], after: list[int]) -> list[int]:
    """Jiffies per /proc/stat field between two snapshots (empty if either is unknown)."""
    if not before or not after:
        return []
    return [b - a for a, b in zip(before, after)]


def summed(deltas: list[list[int]]) -> list[int]:
    """Several intervals as one (e.g. the capture slices, without the uncollected ones between)."""
    known = [d for d in deltas if d]
    return [sum(col) for col in zip(*known)] if known else []


def summarize(d: list[int]) -> dict:
    """`{"busy_pct", "steal_pct", "iowait_pct"}` of an interval's jiffies (empty if unknown)."""
    total = sum(d[:8])  # user nice system idle iowait irq softirq steal (guest is inside user)
    if total <= 0:
        return {}
    idle, iowait, steal = d[3], d[4], d[7] if len(d) > 7 else 0
    return {"busy_pct": round(100.0 * (total - idle - iowait - steal) / total, 1),
            "steal_pct": round(100.0 * steal / total, 1),
            "iowait_pct": round(100.0 * iowait / total, 1)}


def unstolen_share(usage: dict | None) -> float | None:
    """Of the CPU time the machine wanted (busy + stolen), the share it got: 1 - steal / (busy
    + steal). On saturated cores that is 1 - steal; on a half-idle machine (a capture at
    concurrency 1) it is the busy core's loss, which machine-wide steal understates. None
    without figures or demand."""
    if not usage or usage.get("busy_pct") is None or usage.get("steal_pct") is None:
        return None
    wanted = usage["busy_pct"] + usage["steal_pct"]
    return usage["busy_pct"] / wanted if wanted > 0 else None


def usage(before: list[int], after: list[int]) -> dict:
    """`summarize` of the interval between two snapshots."""
    return summarize(delta(before, after))
