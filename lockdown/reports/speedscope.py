"""Folded stacks -> a speedscope file (one "sampled" profile).

Why: speedscope opens large profiles in a browser with left-heavy and sandwich views that a flame
graph SVG lacks; its JSON format (src/lib/file-format-spec.ts in jlfwong/speedscope) takes
folded stacks almost as they are: each distinct stack becomes one sample, its count the weight.

The profile's `unit` is what its weights are (speedscope shows times in it and sums them on its
time axis): `nanoseconds` for perf's periods, `microseconds` for time off the CPU,
`milliseconds` for Excimer's timer periods times the period; `none` only for counts of unknown
meaning. speedscope's "Time Order" view draws the samples in the order of the file: folded
stacks (a mapping) come sorted, which is no time order; a sequence of (stack, weight) is kept
in its order, for one request's samples as they were taken (analyzers/timeline.py).
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence

SCHEMA = "https://www.speedscope.app/file-format-schema.json"
VERSION = "0.7.1"    # file format revision we follow (speedscope loads by $schema)
UNITS = frozenset({"none", "nanoseconds", "microseconds", "milliseconds", "seconds", "bytes"})


# flamegraph.pl --countname words -> speedscope units (reports/flamegraph.py COUNT_NAMES)
UNIT_OF_COUNT = {"ns": "nanoseconds", "us": "microseconds", "ms": "milliseconds", "s": "seconds",
                 "bytes": "bytes"}

Stacks = Mapping[str, int | float] | Sequence[tuple[str, int | float]]


def to_speedscope(folded: Stacks, name: str, unit: str = "none", scale: float = 1) -> dict:
    """Stacks in sorted order (a mapping) or in the order given (a sequence of (stack, weight):
    a timeline); frames indexed in order of first use; samples root..leaf; each weight times
    `scale` (Excimer's periods into milliseconds)."""
    if unit not in UNITS:
        raise ValueError(f"speedscope unit must be one of {sorted(UNITS)}, not {unit!r}")
    index: dict[str, int] = {}
    samples: list[list[int]] = []
    weights: list[int | float] = []
    pairs = ((stack, folded[stack]) for stack in sorted(folded)) if isinstance(folded, Mapping) else folded
    for stack, weight in pairs:
        samples.append([index.setdefault(frame, len(index)) for frame in stack.split(";")])
        weights.append(weight * scale if scale != 1 else weight)
    return {
        "$schema": SCHEMA,
        "version": VERSION,
        "exporter": "lockdown",
        "name": name,
        "activeProfileIndex": 0,
        "shared": {"frames": [{"name": frame} for frame in index]},
        "profiles": [{
            "type": "sampled",
            "name": name,
            "unit": unit,
            "startValue": 0,
            "endValue": sum(weights),
            "samples": samples,
            "weights": weights,
        }],
    }


def write_speedscope(folded: Stacks, path: str | os.PathLike, name: str, unit: str = "none") -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(to_speedscope(folded, name, unit), f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
