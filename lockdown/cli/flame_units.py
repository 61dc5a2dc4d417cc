"""What `lockdown flamegraph` writes besides the graph: the unit of its counts (in the file
name it picks for `-o DIR`, flamegraph.pl's `--countname`, the SVG's tooltips and the
speedscope profile's `unit`), time-ordered speedscope profiles of one request, and the
three-column differential folded files (lockdown/formats/diff_folded.py) read and written."""
from __future__ import annotations

from pathlib import Path

import click

from ..analyzers.folded import read_folded
from ..analyzers.stacks import stacks
from ..analyzers.timeline import native_timeline, php_timeline
from ..bundle.store import open_bundle
from ..errors import LockdownError
from ..formats.diff_folded import format_diff_folded, looks_differential, read_diff_folded
from ..reports.flamegraph import count_name
from ..reports.output import writes_through
from ..reports.speedscope import UNIT_OF_COUNT, to_speedscope

# what the counts are, said after a folded file is written (flamegraph.pl's --countname word)
MEANING = {"samples": "samples", "ns": "nanoseconds of CPU (perf's sample periods, as stackcollapse-perf.pl sums them)",
           "us": "microseconds off the CPU"}
SUFFIXES = {"svg": ".svg", "folded": ".folded", "speedscope": ".speedscope.json", "pprof": ".pb.gz"}


def differential(source: Path | None) -> bool:
    """Whether `source` is a three-column (differential) folded file."""
    if source is None or not source.is_file():
        return False
    try:
        return looks_differential(source)
    except OSError as e:
        raise LockdownError(f"cannot read {source}: {e.strerror or e}; give a bundle or a folded file")


def unit_of(source: Path | None, kind: str, counts: bool, given: str | None) -> str:
    """The --countname word of the counts: given, or the kind's (a bundle), or "samples" (a
    folded file says nothing of its unit)."""
    if given:
        return given
    return count_name(kind, counts) if source is None or source.is_dir() else "samples"


def default_name(kind: str, fmt: str, unit: str, diff: bool) -> str:
    """The file `-o DIR` gets: the kind, for folded stacks their unit (`native.ns.folded`), and
    `diff-` for a differential one."""
    stem = f"diff-{kind}" if diff else kind
    return f"{stem}.{unit}{SUFFIXES[fmt]}" if fmt == "folded" else stem + SUFFIXES[fmt]


def folded_of(source: Path, kind: str, request, url, counts: bool) -> tuple[dict, dict]:
    """A bundle directory or a two-column folded file -> (stacks, the bundle's php facts or {})."""
    if source.is_file():
        if differential(source):
            raise LockdownError(f"{source} is a three-column (differential) folded file: give it as "
                                f"BUNDLE alone, which draws it as a differential graph")
        try:
            return read_folded(source), {}
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise LockdownError(f"{source}: not a folded-stacks file ({e}); give a bundle or a .folded file")
    bundle = open_bundle(source)
    return stacks(bundle, kind, request, url, counts=counts), bundle.manifest.get("php", {})


def diff_pair(bundle: Path | None, diff: tuple[Path, Path] | None, kind: str, request, url,
              counts: bool) -> tuple[dict, dict, dict, str]:
    """(BEFORE, AFTER, the AFTER bundle's php facts or {}, how to name them) from --diff's two
    sources or one three-column file."""
    if diff:
        (before, _), (after, php) = (folded_of(p, kind, request, url, counts) for p in diff)
        return before, after, php, f"{diff[0].name} -> {diff[1].name}"
    try:
        before, after = read_diff_folded(bundle)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise LockdownError(f"{bundle}: not a three-column folded file ({e}); give `stack before after` lines")
    return before, after, {}, bundle.name


def diff_folded_text(before: dict, after: dict, normalize: bool) -> str:
    return format_diff_folded(before, after, normalize=normalize)


def speedscope_document(source: Path, folded: dict, kind: str, request: str | None, name: str,
                        unit: str) -> dict:
    """The speedscope file: one request's samples in the order taken (PHP weighing
    milliseconds, Excimer's periods x the period; native, perf's periods in ns), or the folded
    stacks in the unit of their counts ("none" when it is not one speedscope knows)."""
    if not source.is_dir() or kind == "php-offcpu":
        return to_speedscope(folded, name, UNIT_OF_COUNT.get(unit, "none"))
    bundle = open_bundle(source)
    if kind == "native":
        return to_speedscope(native_timeline(bundle, request) if request else folded, name, "nanoseconds")
    period = (bundle.manifest.get("capture") or {}).get("excimer_period_ms")
    order = php_timeline(bundle, request) if request else folded
    if not period:
        return to_speedscope(order, name, "none")
    return to_speedscope(order, name, "milliseconds", scale=period)


def say_unit(fmt: str, unit: str, out: Path) -> None:
    """For folded stacks written to a file, what their counts are and how to keep that in a
    renderer's labels (nothing after a pipe's: its reader has the document alone)."""
    if fmt == "folded" and not writes_through(out):
        click.echo(f"counts are {MEANING.get(unit, unit)}: flamegraph.pl --countname={unit} {out} > graph.svg")
