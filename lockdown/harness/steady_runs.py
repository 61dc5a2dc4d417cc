"""Which measured runs the host disturbed, judged by the host probe alone, never by RPS.

On a shared VM the host's capacity (the probe's speed times the CPU share not stolen,
bench.capacities_of) drops by 10-25% for a minute at a time, and RPS follows it (docs/bench.md).
A benchmark that wants the application's spread, not the neighbours', measures again when
that happens, as a person at the console would: a run whose capacity is more than
`tolerance` off the median capacity of all runs so far is set aside and one more run is
made, up to as many extra runs as were asked for. The rule reads only the probe and steal
figures, so it cannot prefer runs for their RPS; every run set aside stays in the result
with its reason. When the budget runs out first, the runs closest to the median capacity are
kept and the result says the host did not hold still.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from ..options import HOST_TOLERANCE as TOLERANCE   # the rule and its reasons are there


@dataclass
class Selection:
    kept: list[int]                   # run indices, in time order
    aside: dict[int, str] = field(default_factory=dict)    # run index -> why it was set aside
    median: float | None = None       # the runs' median capacity
    in_band: int = 0                  # runs within the tolerance
    unsteady: bool = False            # the budget ran out before `wanted` runs were in band


def off_median(capacity: float, median: float) -> float:
    """How far a run's capacity is from the median, as a signed fraction."""
    return capacity / median - 1


def select(capacities: list[float | None], wanted: int, tolerance: float | None = TOLERANCE) -> Selection:
    """The runs to keep: the first `wanted` whose capacity is within `tolerance` of the median
    of all; else the `wanted` closest to it. Every run is kept when a capacity is missing
    (a probe that did not run) or `tolerance` is None."""
    n = len(capacities)
    if tolerance is None or not n or any(not c for c in capacities):
        return Selection(list(range(n)))
    median = statistics.median(capacities)
    dist = [abs(off_median(c, median)) for c in capacities]
    band = [i for i in range(n) if dist[i] <= tolerance]
    if len(band) >= wanted:
        kept = band[:wanted]
        unsteady = False
    else:
        kept = sorted(sorted(range(n), key=lambda i: (dist[i], i))[:wanted])
        unsteady = True
    aside = {}
    for i in range(n):
        if i not in kept:
            aside[i] = (f"host capacity {100 * off_median(capacities[i], median):+.1f}% off the runs' median"
                        if dist[i] > tolerance else f"more runs in band than the {wanted} asked for")
    return Selection(kept, aside, median, len(band), unsteady)


def needs_more(capacities: list[float | None], wanted: int, tolerance: float | None = TOLERANCE) -> bool:
    """Whether the runs so far (at least `wanted` of them) call for one more: fewer than
    `wanted` within the tolerance of their median capacity."""
    s = select(capacities, wanted, tolerance)
    return s.median is not None and s.in_band < wanted
