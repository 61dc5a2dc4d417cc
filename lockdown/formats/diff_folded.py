"""Three-column differential folded stacks: `stack BEFORE AFTER` per line.

Why: it is what `difffolded.pl` (brendangregg/FlameGraph) and `inferno-diff-folded` write and
what `flamegraph.pl` and `inferno-flamegraph` draw as a differential flame graph (widths from
AFTER, red where a stack grew, blue where it shrank), so a diff made by either side opens in
the other.

The format, as those tools read and write it:
- One stack per line: the frames root first, `;`-separated, then the count of the first
  (BEFORE) profile and the count of the second (AFTER), each after whitespace; a stack absent
  from one profile has 0 there. flamegraph.pl finds the counts with `^(.*)\\s+?(\\d+(?:\\.\\d*)?)$`
  taken twice from the end: counts are digits with an optional fraction; nothing else follows.
- `difffolded.pl -n` (and inferno-diff-folded's --normalize) scale BEFORE to AFTER's total,
  each count truncated to an integer (Perl's `int`); without it the counts are as folded.
- Lines come in no particular order (difffolded.pl prints a hash); here, sorted by stack in
  code point order, as the two-column files are (analyzers/folded.py).
"""
from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping

Number = int | float

_COUNT = r"(\d+(?:\.\d*)?)"
_TWO = re.compile(rf"^(.*?)\s+{_COUNT}\s+{_COUNT}$", re.ASCII)
_ONE = re.compile(rf"^(.*?)\s+{_COUNT}$", re.ASCII)


def _number(text: str) -> Number:
    try:
        value: Number = float(text) if "." in text else int(text)
    except ValueError:          # more digits than int() takes
        value = math.inf
    return value


def _count_text(v: Number) -> str:
    # Perl prints integers exactly and other numbers with %.15g
    if isinstance(v, float) and v.is_integer() and abs(v) < 2 ** 53:
        return str(int(v))
    return str(v) if isinstance(v, int) else format(v, ".15g")


def is_diff_line(line: str) -> bool:
    """Whether a (non-empty) folded line carries two counts."""
    return _TWO.match(line.rstrip("\r\n")) is not None


def parse_diff_folded(lines: Iterable[str], name: str = "input") -> tuple[dict[str, Number], dict[str, Number]]:
    """Lines of a three-column file -> (BEFORE, AFTER), each {stack: count}; a stack given twice
    is summed, a count of 0 leaves the stack out of that side. Empty lines are skipped; a line
    without two counts, or counts that add up beyond a float, raises ValueError naming it."""
    before: dict[str, Number] = {}
    after: dict[str, Number] = {}
    totals = [0.0, 0.0]
    for n, raw in enumerate(lines, 1):
        line = raw.rstrip("\r\n")
        if line == "":
            continue
        m = _TWO.match(line)
        if m is None or m.group(1) == "":
            what = "one count (a two-column folded file)" if _ONE.match(line) else "not 'stack before after'"
            raise ValueError(f"{name} line {n}: {what}: {line[:80]!r}")
        stack = m.group(1)
        for side, (text, total) in enumerate(((m.group(2), before), (m.group(3), after))):
            value = _number(text)
            try:
                totals[side] += value
            except OverflowError:           # an int beyond the range of a float
                totals[side] = math.inf
            if not math.isfinite(totals[side]):
                raise ValueError(f"{name} line {n}: count {text[:20]} is too large (the counts must add "
                                 f"up to a finite number)")
            if value:
                total[stack] = total.get(stack, 0) + value
    return before, after


def read_diff_folded(path: str | os.PathLike) -> tuple[dict[str, Number], dict[str, Number]]:
    with open(path, encoding="utf-8") as f:
        return parse_diff_folded(f, str(path))


def looks_differential(path: str | os.PathLike) -> bool:
    """Whether the first non-empty line of the file at `path` has two counts."""
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.strip():
                return is_diff_line(line)
    return False


def normalized_before(before: Mapping[str, Number], after: Mapping[str, Number]) -> dict[str, Number]:
    """BEFORE scaled to AFTER's total, each count truncated to an integer: difffolded.pl -n."""
    t1, t2 = sum(before.values()), sum(after.values())
    if not t1 or t1 == t2:
        return dict(before)
    return {k: int(v * t2 / t1) for k, v in before.items()}


def format_diff_folded(before: Mapping[str, Number], after: Mapping[str, Number],
                       normalize: bool = False) -> str:
    """`stack BEFORE AFTER` lines for every stack of either side (0 where it is absent), sorted
    by stack; with `normalize`, BEFORE as `difffolded.pl -n` scales it."""
    if normalize:
        before = normalized_before(before, after)
    return "".join(f"{k} {_count_text(before.get(k, 0))} {_count_text(after.get(k, 0))}\n"
                   for k in sorted(set(before) | set(after)))
