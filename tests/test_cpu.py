"""CPU accounting between two /proc/stat snapshots."""
from lockdown.harness.cpu import usage


def test_usage_splits_busy_idle_and_steal():
    before = [100, 0, 50, 800, 10, 0, 0, 40, 0, 0]
    after = [400, 0, 150, 1100, 10, 0, 0, 140, 0, 0]   # +300 user +100 sys +300 idle +100 steal
    assert usage(before, after) == {"busy_pct": 50.0, "steal_pct": 12.5, "iowait_pct": 0.0}


def test_usage_unknown_without_snapshots():
    assert usage([], [1, 2]) == {}
