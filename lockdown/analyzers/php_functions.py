"""Hot PHP functions from Excimer's stacks: self time (the function was the leaf) and
inclusive time (the function was anywhere on the stack, counted once per sample)."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ..bundle.model import ExcimerProfile


@dataclass(frozen=True)
class HotFunction:
    name: str
    self_samples: int
    inclusive_samples: int


def hot_functions(profiles: list[ExcimerProfile],
                  exclude: set[str] = frozenset()) -> tuple[list[HotFunction], int, int]:
    """Functions by self weight, the total weight (timer periods) and the number of samples;
    `exclude` request ids (instrumented ones) are left out."""
    self_w: Counter = Counter()
    incl_w: Counter = Counter()
    total = count = 0
    for p in profiles:
        if p.request in exclude:
            continue
        count += len(p.samples)
        for stack, weight in p.folded().items():
            frames = stack.split(";")
            total += weight
            self_w[frames[-1]] += weight
            for name in set(frames):
                incl_w[name] += weight
    names = sorted(incl_w, key=lambda n: (-self_w[n], -incl_w[n], n))
    return [HotFunction(n, self_w[n], incl_w[n]) for n in names], total, count
