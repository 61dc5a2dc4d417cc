"""Record types of bundle format v1 (docs/bundle-format.md). JSON in, JSON out, nothing else.

`from_json` checks each field against its annotation and the nested shapes the analyzers index
into (perf frames, Excimer samples), so that a damaged record is one `RecordError` naming the
field, not a TypeError deep in whichever analyzer touches it first."""
from __future__ import annotations

import json
import math
import re
from dataclasses import MISSING, asdict, dataclass, field, fields
from functools import cache
from typing import Callable, Iterable, NamedTuple

FORMAT = "lockdown-bundle"
VERSION = 1
# The text of the capture's own ordering statement (collectors/php/prepend.php sends
# `SHOW /*lockdown-capture <request id>*/ PROCESSLIST`): attribution reads the request id from
# it, and the analyzers leave it out of the application's statements.
CAPTURE_MARKER = "lockdown-capture"

INT_MIN, INT_MAX = -(1 << 63), (1 << 63) - 1     # what a 64-bit reader (XHGui, perf) can hold
ATTRIBUTIONS = ("connection", "order", "ambiguous", "none")
LAST_UNIX = 253402300800                          # 10000-01-01: Python's dates end before it
_ABSENT = object()


class RecordError(ValueError):
    """A JSON value that does not have the shape its reader relies on."""


def _is_int(v) -> bool:
    return type(v) is int and INT_MIN <= v <= INT_MAX       # bool is not an int here


def _is_number(v) -> bool:
    return _is_int(v) or (type(v) is float and math.isfinite(v))


def _types(values) -> set:
    return set(map(type, values))


def ints_fit(values, low: int = INT_MIN, high: int = INT_MAX) -> bool:
    """All ints (not bools) from `low` to `high`, checked in C."""
    return _types(values) <= {int} and (not values or (min(values) >= low and max(values) <= high))


def numbers_fit(values, low: int = INT_MIN) -> bool:
    """All ints or finite floats (not bools) from `low` to INT_MAX, checked in C."""
    return (_types(values) <= {int, float} and (not values or low <= min(values) <= max(values) <= INT_MAX)
            and all(map(math.isfinite, values)))        # after the range: no int overflows here


class Check(NamedTuple):
    """A type's test of one JSON value, of all values of a list or object (in C where the type
    allows: records hold lists of hundreds of strings or numbers), and its name in messages."""
    test: Callable[[object], bool]
    test_all: Callable[[Iterable], bool]
    one: str
    many: str


def _of_type(kind: type, one: str, many: str) -> Check:
    return Check(lambda v: type(v) is kind, lambda vs: _types(vs) <= {kind}, one, many)


_SCALARS: dict[str, Check] = {
    "int": Check(_is_int, ints_fit, "an int", "ints"),
    "float": Check(_is_number, numbers_fit, "a number", "numbers"),    # an int is a number too
    "str": _of_type(str, "a string", "strings"),
    "bool": _of_type(bool, "true or false", "booleans"),
    "list": _of_type(list, "a list", "lists"),
    "dict": _of_type(dict, "an object", "objects"),
}


@cache
def checker(annotation: str) -> Check:
    """A type as annotations write it ("int | None", "list[str]", "dict[str, float]") -> its
    Check. Annotations are strings here (`from __future__ import annotations`): parsed."""
    text = annotation.strip()
    if text.endswith("| None"):
        inner = checker(text[:-len("| None")])

        def null_or_inner(v) -> bool:
            return v is None or inner.test(v)

        return Check(null_or_inner, lambda vs: all(map(null_or_inner, vs)), f"{inner.one} or null",
                     f"{inner.many} or nulls")
    if text.startswith("list[") and text.endswith("]"):
        inner = checker(text[len("list["):-1])

        def list_of_inner(v) -> bool:
            return type(v) is list and inner.test_all(v)

        return Check(list_of_inner, lambda vs: all(map(list_of_inner, vs)), f"a list of {inner.many}",
                     f"lists of {inner.many}")
    if text.startswith("dict[str,") and text.endswith("]"):
        inner = checker(text[len("dict[str,"):-1])

        def object_of_inner(v) -> bool:
            return type(v) is dict and inner.test_all(v.values())

        return Check(object_of_inner, lambda vs: all(map(object_of_inner, vs)), f"an object of {inner.many}",
                     f"objects of {inner.many}")
    return _SCALARS[text]


def brief(value) -> str:
    """A value as JSON, cut short, to show in a message what was found instead."""
    text = json.dumps(value, default=repr)
    return text if len(text) <= 40 else text[:37] + "..."


@cache
def _fields_of(cls: type) -> tuple[tuple[str, Callable[[object], bool], str, bool], ...]:
    """(name, test, what it should be, required) of each field, worked out once per type."""
    return tuple((f.name, checker(f.type).test, checker(f.type).one,
                  f.default is MISSING and f.default_factory is MISSING) for f in fields(cls))


class _Record:
    @classmethod
    def from_json(cls, data: dict):
        """The record of one JSON object; RecordError when a field is missing or of the wrong
        type, or a nested shape is wrong (`problem`). Unknown fields are ignored (newer
        writers may add fields without a version change)."""
        if type(data) is not dict:
            raise RecordError(f"not a JSON object ({brief(data)})")
        kw = {}
        for name, test, what, required in _fields_of(cls):
            v = data.get(name, _ABSENT)
            if v is _ABSENT:
                if required:
                    raise RecordError(f"field {name} is missing")
            elif test(v):
                kw[name] = v
            else:
                raise RecordError(f"field {name} is not {what} ({brief(v)})")
        record = cls(**kw)
        why = record.problem()
        if why:
            raise RecordError(why)
        return record

    def problem(self) -> str | None:
        """What is wrong beyond the fields' own types, or None."""
        return None

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class RequestRecord(_Record):
    """One request as the prepend logged it, joined with what the driver saw."""
    id: str
    pid: int
    method: str
    uri: str
    status: int
    start_ns: int            # CLOCK_MONOTONIC, same clock as perf samples and the driver
    end_ns: int
    start_unix: float
    wall_us: int
    cpu_us: int
    peak_memory: int
    instrumented: bool       # xhprof was on: leave out of timing analysis
    seq: int | None = None
    url: str | None = None   # the path the driver asked for
    client_start_ns: int | None = None
    client_end_ns: int | None = None
    client_status: int | None = None
    db_threads: list[int] | None = None
    capture_us: int | None = None   # time the prepend spent after the request, writing the capture
    capture_blocking_us: int | None = None  # the part of it before the response was released
    engine: dict[str, int] | None = None    # the engine's caches as the request left them (prepend.php)
    sched: dict[str, int] | None = None     # the scheduler's view: run-queue wait, context switches
    uncached_scripts: list[str] | None = None   # included files OPcache did not hold, when it missed
    uncached_young: list[str] | None = None     # of those, modified within file_update_protection
    # warnings, notices, deprecations PHP raised: type, message, file, line, function, count
    php_errors: list[dict] | None = None
    released_early: bool | None = None      # the app released the response itself (fastcgi_finish_request)
    after_release_statements: int | None = None  # then: statements its shutdown functions sent (mysqlnd's counts)

    def problem(self) -> str | None:
        if not 0 <= self.start_unix < LAST_UNIX:          # exports format it as a date
            return f"field start_unix is not a time in seconds since 1970 ({brief(self.start_unix)})"
        return None


@dataclass
class Statement(_Record):
    """One SQL statement from the slow log, with the request it belongs to.

    attribution: "connection" (the request's own connection, exact), "order" (one request at a
    time, placed by the request markers in the log), "ambiguous" (several requests possible:
    `candidates`), "none" (no request could have sent it).
    """
    seq: int
    request: str | None
    attribution: str
    thread_id: int
    schema: str
    sql: str
    duration_us: int
    lock_us: int
    rows_sent: int
    rows_examined: int
    rows_affected: int | None
    timestamp: int | None
    candidates: list[str] = field(default_factory=list)
    plan: list[str] | None = None   # the server's plan flags (slow log query_plan): full_scan, tmp_table, ...

    def problem(self) -> str | None:
        if self.attribution not in ATTRIBUTIONS:
            return f"field attribution is {brief(self.attribution)}, not one of {', '.join(ATTRIBUTIONS)}"
        return None


@dataclass
class PerfSample(_Record):
    """One native sample of a php-fpm worker; frames leaf first as [addr hex, symbol, offset, dso]."""
    time_ns: int
    pid: int
    tid: int
    comm: str
    period: int
    request: str | None
    frames: list

    def problem(self) -> str | None:
        return frames_problem(self.frames)


@dataclass
class ExcimerProfile(_Record):
    """Excimer's PHP stacks for one request: `stacks` are distinct folded stacks
    ("root;...;leaf"), `samples` are [time ns, weight, index into stacks]."""
    request: str
    pid: int
    stacks: list[str]
    samples: list
    start_ns: int | None = None     # when the profiler started (CLOCK_MONOTONIC); older bundles lack it

    def problem(self) -> str | None:
        return samples_problem(self.samples, len(self.stacks))

    def folded(self) -> dict:
        """Folded stack -> total weight, for flame graphs."""
        out: dict = {}
        for _, weight, i in self.samples:
            out[self.stacks[i]] = out.get(self.stacks[i], 0) + weight
        return out



@dataclass
class EngineEvents(_Record):
    """Engine events of one request of a worker perf watched, by name (collectors/engine_events.py):
    `pcre2_compile` (patterns PCRE compiled), and lookups that failed with ENOENT/ENOTDIR by
    system call (`access`, `newfstatat`, `openat`, ...); a name the capture counted but this
    request never hit is left out (0)."""
    request: str
    pid: int
    counts: dict[str, int]

    def problem(self) -> str | None:
        if any(v < 0 for v in self.counts.values()):
            return "field counts has a negative count"
        return None

# Nested shapes. A capture has hundreds of thousands of frames and samples: the frame check is
# a plain loop (measured faster than column-wise builtins for perf's ~10 frames per sample),
# the sample check column-wise (an Excimer profile has hundreds of samples).
_HEXES = re.compile(r"[0-9a-fA-F]{1,16}(?: [0-9a-fA-F]{1,16})*")


def frames_problem(frames: list) -> str | None:
    """perf frames as symbolize.py and folded.py index them: [address hex, symbol, offset
    into the symbol or null, dso], the address parsed with int(addr, 16)."""
    try:
        for _, symbol, offset, dso in frames:     # TypeError or ValueError: not 4 long
            if (type(symbol) is not str or type(dso) is not str
                    or not (offset is None or (type(offset) is int and 0 <= offset <= INT_MAX))):
                return _first_bad("frames", frames, _frame_ok, FRAME)
        addresses = " ".join([f[0] for f in frames])        # one regex call for them all
        if not frames or (_HEXES.fullmatch(addresses) and addresses.count(" ") == len(frames) - 1):
            return None
    except (TypeError, ValueError):
        pass
    return _first_bad("frames", frames, _frame_ok, FRAME)


def samples_problem(samples: list, stacks: int) -> str | None:
    """Excimer samples as ExcimerProfile.folded reads them: [time ns, weight, index into the
    `stacks` stacks], the weight a finite number >= 0."""
    if not samples:
        return None
    if _types(samples) == {list} and set(map(len, samples)) == {3}:
        times, weights, index = zip(*samples)
        if ints_fit(times) and ints_fit(index, 0, stacks - 1) and numbers_fit(weights, 0):
            return None
    return _first_bad("samples", samples, lambda s: _sample_ok(s, stacks),
                      f"[time ns, weight >= 0, stack index < {stacks}]")


FRAME = "[address hex, symbol, offset or null, dso]"


def _frame_ok(f) -> bool:
    return (type(f) is list and len(f) == 4 and type(f[0]) is str and bool(_HEXES.fullmatch(f[0]))
            and " " not in f[0] and type(f[1]) is str and type(f[3]) is str
            and (f[2] is None or (_is_int(f[2]) and f[2] >= 0)))


def _sample_ok(s, stacks: int) -> bool:
    return (type(s) is list and len(s) == 3 and _is_int(s[0]) and _is_number(s[1])
            and 0 <= s[1] <= INT_MAX
            and type(s[2]) is int and 0 <= s[2] < stacks)


def _first_bad(name: str, items, ok: Callable[[object], bool], shape: str) -> str:
    """The message for the first item of a list field that `ok` rejects (the slow path, only
    taken once something is wrong)."""
    if type(items) is not list:
        return f"field {name} is not a list ({brief(items)})"
    i = next((i for i, x in enumerate(items) if not ok(x)), None)
    if i is None:                       # cannot happen: the fast check and `ok` agree
        return f"field {name} is not a list of {shape}"
    return f"field {name}: item {i} is not {shape} ({brief(items[i])})"
