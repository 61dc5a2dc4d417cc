"""Folded stacks -> a speedscope file (one "sampled" profile).

Why: speedscope opens large profiles in a browser with left-heavy and sandwich views that a flame
graph SVG lacks; its JSON format (src/lib/file-format-spec.ts in jlfwong/speedscope) takes
folded stacks almost as they are: each distinct stack becomes one sample, its count the weight.
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping

SCHEMA = "https://www.speedscope.app/file-format-schema.json"
VERSION = "0.7.1"    # file format revision we follow (speedscope loads by $schema)
UNITS = frozenset({"none", "nanoseconds", "microseconds", "milliseconds", "seconds", "bytes"})


def to_speedscope(folded: Mapping[str, int | float], name: str, unit: str = "none") -> dict:
    """Stacks in sorted order; frames indexed in order of first use; samples root..leaf."""
    if unit not in UNITS:
        raise ValueError(f"speedscope unit must be one of {sorted(UNITS)}, not {unit!r}")
    index: dict[str, int] = {}
    samples: list[list[int]] = []
    weights: list[int | float] = []
    for stack in sorted(folded):
        samples.append([index.setdefault(frame, len(index)) for frame in stack.split(";")])
        weights.append(folded[stack])
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


def write_speedscope(folded: Mapping[str, int | float], path: str | os.PathLike, name: str,
                     unit: str = "none") -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(to_speedscope(folded, name, unit), f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
