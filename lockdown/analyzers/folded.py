"""Folded stacks (`root;...;leaf COUNT`) from perf samples and Excimer profiles.

Why: folded stacks are what FlameGraph, inferno and speedscope read, and people compare ours with
what `perf script | stackcollapse-perf.pl` gives them. So `fold_perf` reproduces
stackcollapse-perf.pl (brendangregg/FlameGraph master, with the period weighting of PR #250,
merged 2022-09) on the same `perf script` text, quirks included. It works on parsed samples: each
sample's header and frame lines are re-rendered the way perf prints them
(`comm %5d/%-5d %5d.%09d: %10d event: ` and `\\t%16x sym+0xoff (dso)`) and put through the
script's own patterns, so odd process or symbol names fold as they would there.

The rules (option names of stackcollapse-perf.pl in brackets):

Root frame (the process name)
- The header's comm is the shortest text at the line start that is followed by whitespace,
  digits, optional `/digits` and whitespace: `^(\\S.+?)\\s+(\\d+)/*(\\d+)*\\s+`. A comm with a
  space-separated number in it is cut there ("worker 2 42/43 ..." gives comm "worker", and "2" is
  taken as the TID). The comm is 2+ characters: a 1-character one takes the padding space
  before a 4-digit PID ("a_"), or runs on into the time field.
- With `PID/TID`, PID and TID are those numbers; with one number, or a TID of "0" (Perl false,
  e.g. swapper `0/0`), the TID is that number and the PID is `?`.
- Root = comm; `comm-PID` [--pid]; `comm-PID/TID` [--tid, which wins over --pid]. Then every space
  becomes `_` (only spaces: tabs stay). A header the pattern does not match drops the sample.

Weight
- A header ending `: PERIOD EVENT:` adds PERIOD to its stack (PR #250); no period, or a period of
  0, adds 1. `counts=True` adds 1 per sample: the script before PR #250 (and the `--counts`
  option proposed in PR #297, not merged). With cpu-clock the period is nanoseconds of CPU.
- Only samples of one event are folded: `event_filter` [--event-filter], by default the first
  event seen. Bundle records carry no event name and are not filtered.
- A sample with no frames still counts, as its root alone. A comm starting with "#" makes the
  header a comment line to the script: the sample is dropped.

Frames (leaf first in perf, root first in the output)
- A frame line is split as `^\\s*(\\w+)\\s*(.+) \\((.*)\\)`: the symbol is everything up to the
  last " (" that a ")" follows, the DSO what lies between. Lines that don't match are skipped.
- A trailing `+0x<lowercase hex>` offset is stripped from the symbol.
- A symbol starting with "(" is dropped (meant for process names; it also drops C++
  `(anonymous namespace)::f` frames).
- The symbol is split on "->" (perf's inline chains; also C++ `operator->`), trailing empty parts
  dropped as Perl's split does; each part is a frame, all parts after the first get `_[i]`
  (unless they already contain it). No addr2line un-inlining [--inline, --context: not offered;
  lockdown runs perf script with --no-inline].
- `[unknown]`: `[DSO basename]` (text after the last "/"), or `[unknown]` when the DSO is
  `[unknown]` too; with [--addrs] `[DSO basename <PC>]` / `[unknown <PC>]`, PC as perf printed it
  (hex without 0x).
- Generic tidying, always on: `;` becomes `:`; unless the name looks like a Go method
  (`.(...).`), everything from the first "(" not opening "(anonymous namespace)" is cut (C++
  argument lists, `const`, Java signatures); `"` and `'` are deleted. `<>` and spaces are kept.
- Java: when the root starts with "java", a leading "L" is dropped from names containing "/".
- Annotations, on the first part of a frame only, kernel before JIT: `_[k]` [--kernel] when the
  DSO starts with "[" or ends with "vmlinux" and does not contain "unknown" (so `[vdso]` and
  `[kernel.kallsyms]` count, `[unknown]` does not); `_[j]` [--jit] when the DSO contains
  `/tmp/perf-<digits>.map` (PHP's opcache JIT writes these) and the name has no `_[j]` yet.
- --srcline (source lines interleaved in the input) is not offered: not our perf script fields.

Output: stacks joined with ";", sorted by code point (Perl `cmp`), `stack count` per line.

Speed: `fold_perf_bytes` folds a whole `perf script` text with the native folder (native/, Rust
through PyO3, module `lockdown_native`, built by `make setup` when cargo is present) and with
`fold_perf_text`, the pure-Python reference, when it is not built; the tests hold the two to the
same output (docs/analysis.md, "Folding perf script text").
"""
from __future__ import annotations

import io
import math
import os
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from lockdown.bundle.model import ExcimerProfile, PerfSample
from lockdown.formats.perf_script import Frame, Sample

Number = int | float

try:                        # native/: the same rules in Rust; absent when cargo was not there
    import lockdown_native as _native
except ImportError:
    _native = None
NATIVE = _native is not None

# stackcollapse-perf.pl's patterns. re.ASCII: Perl's \s \d \w on undecoded input are ASCII.
_HEADER = re.compile(r"^(\S.+?)\s+(\d+)/*(\d+)*\s+", re.ASCII)
_PERIOD_EVENT = re.compile(r":\s*(\d+)*\s+(\S+):\s*$", re.ASCII)
_STACK_LINE = re.compile(r"^\s*(\w+)\s*(.+) \((.*)\)", re.ASCII)
_OFFSET = re.compile(r"\+0x[\da-f]+$", re.ASCII)
_GO_METHOD = re.compile(r"\.\(.*\)\.")
_ARGS = re.compile(r"\((?!anonymous namespace\)).*")
_KERNEL_DSO = re.compile(r"^\[|vmlinux$")
_JIT_DSO = re.compile(r"/tmp/perf-\d+\.map", re.ASCII)


def _perl_false(s: str | None) -> bool:
    return s is None or s == "" or s == "0"


@dataclass(frozen=True)
class _Options:
    include_pid: bool
    include_tid: bool
    annotate_kernel: bool
    annotate_jit: bool
    addrs: bool
    counts: bool


def _header_line(comm: str, pid: int, tid: int, time_ns: int, period: int, event: str | None) -> str:
    sec, nsec = divmod(time_ns, 1_000_000_000)
    return f"{comm} {pid:5d}/{tid:<5d} {sec:5d}.{nsec:09d}: {period:10d} {event or '-'}: "


def _frame_line(f: Frame) -> str:
    off = "" if f.offset is None else f"+0x{f.offset:x}"
    return f"\t{f.addr:16x} {f.symbol}{off} ({f.dso})"


def _root(line: str, o: _Options) -> str | None:
    m = _HEADER.match(line)
    if m is None:
        return None
    comm, pid, tid = m.groups()
    if _perl_false(tid):
        pid, tid = "?", pid
    if o.include_tid:
        root = f"{comm}-{pid}/{tid}"
    elif o.include_pid:
        root = f"{comm}-{pid}"
    else:
        root = comm
    return root.replace(" ", "_")


def _perl_split_arrow(s: str) -> list[str]:
    parts = s.split("->")
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def _frame_names(line: str, is_java: bool, o: _Options) -> list[str]:
    m = _STACK_LINE.match(line)
    if m is None:
        return []
    pc, rawfunc, mod = m.groups()
    rawfunc = _OFFSET.sub("", rawfunc, count=1)
    if rawfunc.startswith("("):
        return []
    names: list[str] = []
    for func in _perl_split_arrow(rawfunc):
        if func == "[unknown]":
            base = mod.rsplit("/", 1)[-1] if mod != "[unknown]" else "unknown"
            func = f"[{base} <{pc}>]" if o.addrs else f"[{base}]"
        func = func.replace(";", ":")
        if not _GO_METHOD.search(func):
            func = _ARGS.sub("", func, count=1)
        func = func.replace('"', "").replace("'", "")
        if is_java and "/" in func and func.startswith("L"):
            func = func[1:]
        if names:
            if "_[i]" not in func:
                func += "_[i]"
        elif o.annotate_kernel and _KERNEL_DSO.search(mod) and "unknown" not in mod:
            func += "_[k]"
        elif o.annotate_jit and _JIT_DSO.search(mod) and "_[j]" not in func:
            func += "_[j]"
        names.append(func)
    return names


def _fold(samples: Iterable[tuple[str, int, int, int, int, str | None, Sequence[Frame]]],
          o: _Options, event_filter: str | None = None) -> dict[str, int]:
    """Shared by text and bundle input: (comm, pid, tid, time_ns, period, event, frames)."""
    out: dict[str, int] = {}
    cache: dict[tuple[Frame, bool], list[str]] = {}
    for comm, pid, tid, time_ns, period, event, frames in samples:
        line = _header_line(comm, pid, tid, time_ns, period, event)
        if line.startswith("#"):
            continue                  # the script skips it as a comment line
        weight = 1
        m = _PERIOD_EVENT.search(line)
        if m is not None:
            if event is not None:
                if event_filter is None:
                    event_filter = m.group(2)
                elif m.group(2) != event_filter:
                    continue
            if not o.counts and not _perl_false(m.group(1)):
                weight = int(m.group(1))
        root = _root(line, o)
        if root is None:
            continue
        is_java = root.startswith("java")
        stack = [root]
        for f in reversed(frames):
            key = (f, is_java)
            names = cache.get(key)
            if names is None:
                names = cache[key] = _frame_names(_frame_line(f), is_java, o)
            stack.extend(names)
        k = ";".join(stack)
        out[k] = out.get(k, 0) + weight
    return out


def fold_perf_text(lines: Iterable[str], *, include_pid: bool = False, include_tid: bool = False,
                   annotate_kernel: bool = False, annotate_jit: bool = False, addrs: bool = False,
                   counts: bool = False, event_filter: str | None = None) -> dict[str, int]:
    """`perf script` text lines -> {folded stack: weight}: stackcollapse-perf.pl's main loop line
    for line, state carried between lines exactly as the script carries it (a filtered header
    leaves the previous process name in place, a stack without a closing blank line is not
    counted). Frame lines repeat a lot, so each distinct one is tidied once. Pass lines as read
    with `newline=""` to keep a `\r` the way Perl's chomp does."""
    o = _Options(include_pid, include_tid, annotate_kernel, annotate_jit, addrs, counts)
    out: dict[str, int] = {}
    # Raw frame line -> its tidied names (";"-joined), per Java-ness of the process name. Only
    # lines that reached the frame branch are kept: what a line is depends on its text alone.
    caches: tuple[dict[str, str], dict[str, str]] = ({}, {})
    cache = caches[False]
    parts: list[str] = []          # tidied frame lines, leaf first as perf prints them
    pname: str | None = None
    period = 1
    for raw in lines:
        names = cache.get(raw)
        if names is not None:      # the common case: a frame line seen before
            if pname:
                parts.append(names)
            continue
        line = raw[:-1] if raw.endswith("\n") else raw
        if line.startswith("#"):
            continue
        if line == "":
            if not pname:
                continue           # a filtered sample (or none yet): its frames were skipped
            parts.append(pname)
            k = ";".join(reversed([p for p in parts if p]))
            out[k] = out.get(k, 0) + period
            parts = []
            pname = None
            continue
        m = None if line[0] in " \t\n\r\f\v" else _HEADER.match(line)
        if m is not None:
            weight = ""
            e = _PERIOD_EVENT.search(line)
            if e is not None:
                weight = e.group(1) or ""
                if event_filter is None:
                    event_filter = e.group(2)
                elif e.group(2) != event_filter:
                    continue
            period = 1 if o.counts or _perl_false(weight) else int(weight)
            pname = _root(line, o)
            cache = caches[bool(pname) and pname.startswith("java")]
            continue
        if not pname:
            continue
        names = cache[raw] = ";".join(_frame_names(line, pname.startswith("java"), o))
        if names:
            parts.append(names)
    return out


def fold_perf_bytes(data: bytes, *, include_pid: bool = False, include_tid: bool = False,
                    annotate_kernel: bool = False, annotate_jit: bool = False, addrs: bool = False,
                    counts: bool = False, event_filter: str | None = None,
                    native: bool | None = None) -> dict[str, int]:
    """A whole `perf script` text (UTF-8 bytes, lines split on "\\n" alone, as Perl reads them)
    -> {folded stack: weight}, by `fold_perf_text`'s rules. `native`: None uses the native folder
    when it is built, False the Python reference, True the native folder or an error. A count
    beyond the native folder's 128 bits goes to the reference."""
    opts = dict(include_pid=include_pid, include_tid=include_tid, annotate_kernel=annotate_kernel,
                annotate_jit=annotate_jit, addrs=addrs, counts=counts, event_filter=event_filter)
    if native and _native is None:
        raise RuntimeError("the native folder (lockdown_native) is not built: `make setup` builds it "
                           "when cargo is installed")
    if _native is not None and native is not False:
        try:
            return _native.fold_perf(data, **opts)
        except OverflowError:
            pass
    return fold_perf_text(io.StringIO(data.decode("utf-8"), newline="\n"), **opts)


def fold_perf(samples: Iterable[Sample], *, include_pid: bool = False, include_tid: bool = False,
              annotate_kernel: bool = False, annotate_jit: bool = False, addrs: bool = False,
              counts: bool = False, event_filter: str | None = None) -> dict[str, int]:
    """Parsed `perf script` samples -> {folded stack: weight}, as stackcollapse-perf.pl."""
    o = _Options(include_pid, include_tid, annotate_kernel, annotate_jit, addrs, counts)
    return _fold(((s.comm, s.pid, s.tid, s.time_ns, s.period, s.event, s.frames) for s in samples),
                 o, event_filter)


def fold_perf_records(perf_samples: Iterable[PerfSample], *, include_pid: bool = False,
                      include_tid: bool = False, annotate_kernel: bool = False,
                      annotate_jit: bool = False, addrs: bool = False,
                      counts: bool = False) -> dict[str, int]:
    """Bundle `PerfSample` records -> folded stacks; same rules as `fold_perf` (records are all
    of the one event lockdown samples, so no event filtering)."""
    o = _Options(include_pid, include_tid, annotate_kernel, annotate_jit, addrs, counts)
    return _fold(((r.comm, r.pid, r.tid, r.time_ns, r.period, None,
                   [Frame.from_json(f) for f in r.frames]) for r in perf_samples), o)


def fold_excimer(profiles: Iterable[ExcimerProfile],
                 request_ids: Collection[str] | None = None) -> dict[str, Number]:
    """Excimer's PHP stacks of all (or the given) requests -> {stack: summed weight}."""
    wanted = None if request_ids is None else set(request_ids)
    out: dict[str, Number] = {}
    for p in profiles:
        if wanted is not None and p.request not in wanted:
            continue
        for stack, weight in p.folded().items():
            out[stack] = out.get(stack, 0) + weight
    return out


def _count_text(v: Number) -> str:
    # Perl prints integers exactly and other numbers with %.15g.
    return str(v) if isinstance(v, int) else format(v, ".15g")


def format_folded(folded: Mapping[str, Number]) -> str:
    """`stack count` lines sorted like stackcollapse output (code point order)."""
    return "".join(f"{k} {_count_text(folded[k])}\n" for k in sorted(folded))


def write_folded(folded: Mapping[str, Number], path: str | os.PathLike) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(format_folded(folded))


# A count as flamegraph.pl reads it; a stack that itself ends in " COUNT" is a differential line.
_FOLDED_LINE = re.compile(r"^(.+) (\d+(?:\.\d*)?)$", re.ASCII)
_TRAILING_COUNT = re.compile(r"\s\d+(?:\.\d*)?$", re.ASCII)


def read_folded(path: str | os.PathLike) -> dict[str, Number]:
    """Folded file -> {stack: count}; repeated stacks are summed, empty lines skipped. Anything
    else that is not `stack count` raises ValueError naming the line, and so does a count that
    would make the total overflow a float (the renderers work in floats)."""
    out: dict[str, Number] = {}
    total: Number = 0
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            line = raw.rstrip("\n")
            if line == "":
                continue
            m = _FOLDED_LINE.match(line)
            if m is None:
                raise ValueError(f"{path} line {n}: not 'stack count': {line[:80]!r}")
            stack, count = m.groups()
            if _TRAILING_COUNT.search(stack):
                raise ValueError(f"{path} line {n}: two counts (differential input): {line[:80]!r}")
            try:
                value: Number = float(count) if "." in count else int(count)
            except ValueError:                  # more digits than int() takes
                value = math.inf
            total += value
            if not _finite(total):
                raise ValueError(f"{path} line {n}: count {count[:20]}{'...' if len(count) > 20 else ''} "
                                 f"is too large (the counts must add up to a finite number)")
            out[stack] = out.get(stack, 0) + value
    return out


def _finite(v: Number) -> bool:
    try:
        return math.isfinite(v)
    except OverflowError:                       # an int beyond the range of a float
        return False
