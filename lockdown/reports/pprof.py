"""Folded stacks as pprof profiles: profile.proto (google/pprof), gzipped, as `go tool pprof`,
Pyroscope and Grafana read them. Encoded by the protobuf library (profile_pb2.py, generated
from the .proto; see its header), not by hand.

A folded stack `root;...;leaf` becomes one sample whose locations run leaf first (the
proto's order), one location and one function per distinct frame name. Its values, by kind:

- php (Excimer): `samples/count`, the timer periods the stack was seen for (a late sample
  counts every period it covers, as the folded weights do), and `wall/nanoseconds` or
  `cpu/nanoseconds` (the capture's Excimer clock): periods x the period;
- native (perf): `samples/count`, perf's samples, and `cpu/nanoseconds`, the samples'
  periods summed (the folded weights: cpu-clock periods are nanoseconds of CPU);
- php-offcpu: `off_cpu/nanoseconds`, the folded microseconds x 1000;
- a folded file of unknown origin: `samples/count`, its counts.

The last sample type is the default one (pprof's convention when none is named; also named in
`default_sample_type`). Frames keep the folded names (`_[k]` kernel and `_[j]` JIT marks
included), so `go tool pprof -top` names the functions the flame graphs show.
"""
from __future__ import annotations

import gzip
from typing import Mapping

from .profile_pb2 import Profile

Number = int | float


def encode(stacks: Mapping[str, tuple[int, ...]], sample_types: list[tuple[str, str]],
           period: int = 0, comments: tuple[str, ...] = ()) -> bytes:
    """The gzipped profile.proto of `stacks` (folded stack -> one value per sample type)."""
    p = Profile()
    strings: dict[str, int] = {}

    def s(text: str) -> int:
        if text not in strings:
            strings[text] = len(strings)
            p.string_table.append(text)
        return strings[text]

    s("")                                            # string_table[0] must be ""
    for kind, unit in sample_types:
        vt = p.sample_type.add()
        vt.type, vt.unit = s(kind), s(unit)
    p.period_type.type, p.period_type.unit = s(sample_types[-1][0]), s(sample_types[-1][1])
    p.period = int(period)
    p.default_sample_type = s(sample_types[-1][0])
    mapping = p.mapping.add()
    mapping.id, mapping.filename, mapping.has_functions = 1, s("php"), True
    locations: dict[str, int] = {}
    for stack in sorted(stacks):
        sample = p.sample.add()
        for frame in reversed(stack.split(";")):
            if frame not in locations:
                locations[frame] = len(locations) + 1
                fn = p.function.add()
                fn.id, fn.name, fn.system_name = locations[frame], s(frame), s(frame)
                loc = p.location.add()
                loc.id, loc.mapping_id = locations[frame], 1
                loc.line.add(function_id=locations[frame])
            sample.location_id.append(locations[frame])
        sample.value.extend(int(v) for v in stacks[stack])
    p.comment.extend(s(c) for c in comments)
    return gzip.compress(p.SerializeToString(), mtime=0)


def from_weights(folded: Mapping[str, Number], sample_type: tuple[str, str], scale: float = 1,
                 comments: tuple[str, ...] = ()) -> bytes:
    """One sample type: each stack's weight x `scale`, rounded to an integer."""
    return encode({k: (round(v * scale),) for k, v in folded.items()}, [sample_type], comments=comments)


def php_profile(folded: Mapping[str, Number], clock: str, period_ms: float | None,
                comments: tuple[str, ...] = ()) -> bytes:
    """Excimer's stacks: periods and their nanoseconds on the capture's clock."""
    period_ns = round((period_ms or 0) * 1e6)
    if not period_ns:
        return from_weights(folded, ("samples", "count"), comments=comments)
    clock = "cpu" if clock == "cpu" else "wall"
    return encode({k: (round(v), round(v * period_ns)) for k, v in folded.items()},
                  [("samples", "count"), (clock, "nanoseconds")], period=period_ns, comments=comments)


def native_profile(counts: Mapping[str, Number], periods: Mapping[str, Number], freq: int | None,
                   comments: tuple[str, ...] = ()) -> bytes:
    """perf's stacks: sample counts and their CPU nanoseconds (the same stacks, folded twice)."""
    if set(counts) != set(periods):
        raise ValueError("the counted and the weighted stacks differ")
    period = round(1e9 / freq) if freq else 0
    return encode({k: (round(counts[k]), round(periods[k])) for k in counts},
                  [("samples", "count"), ("cpu", "nanoseconds")], period=period, comments=comments)


def bundle_profile(bundle, kind: str, request: str | None = None, url: str | None = None) -> bytes:
    """The pprof profile of a bundle's `kind` stacks (analyzers.stacks: the whole capture's
    timed requests, one URL's, or one request), with the sample types above."""
    from ..analyzers.stacks import stacks
    capture = bundle.manifest.get("capture") or {}
    scope = f"request {request}" if request else f"URL {url}" if url else "all timed requests"
    comments = (f"lockdown: {kind} stacks of {bundle.root.name} ({scope})",)
    if kind == "native":
        return native_profile(stacks(bundle, kind, request, url, counts=True),
                              stacks(bundle, kind, request, url), capture.get("perf_freq"), comments)
    folded = stacks(bundle, kind, request, url)
    if kind == "php":
        return php_profile(folded, capture.get("excimer_clock", "wall"), capture.get("excimer_period_ms"), comments)
    return from_weights(folded, ("off_cpu", "nanoseconds"), 1000, comments)


def pprof_files(bundle, kind: str, request: str | None = None, url: str | None = None,
                group: str = "all") -> list:
    """`lockdown export --format pprof`: one `<kind>.<name>.pb.gz` per request (the timed ones
    with stacks, or --request's), per URL, or for all, and index.tsv (file, requests, URLs)."""
    from ..analyzers.stacks import request_ids
    from ..errors import LockdownError
    from .xhprof_export import ExportFile, safe_name
    chosen = request_ids(bundle, request, url)
    by_id = {r.id: r for r in bundle.requests() if r.id in chosen}
    if group == "request":
        parts = [(safe_name(i, "request"), dict(request=i), [i]) for i in sorted(by_id)]
    elif group == "url":
        urls: dict[str, list[str]] = {}
        for i in sorted(by_id):
            urls.setdefault(by_id[i].url or by_id[i].uri or "/", []).append(i)
        parts = [(f"url{n}", dict(request=request, url=u), ids) for n, (u, ids) in enumerate(urls.items(), 1)]
    else:
        parts = [("all", dict(request=request, url=url), sorted(by_id))]
    files, rows = [], ["file\trequests\turls\trequest_ids"]
    for name, scope, ids in parts:
        try:
            data = bundle_profile(bundle, kind, **scope)
        except LockdownError:
            if group == "all":
                raise
            continue                                  # a request or URL without such stacks
        files.append(ExportFile(f"{kind}.{name}.pb.gz", data))
        rows.append("\t".join((files[-1].name, str(len(ids)),
                               " ".join(sorted({by_id[i].url or by_id[i].uri or "/" for i in ids})), " ".join(ids))))
    if not files:
        raise LockdownError(f"{bundle.root}: no {kind} stacks in the chosen requests")
    return files + [ExportFile("index.tsv", ("\n".join(rows) + "\n").encode())]


def write_profile(path, data: bytes):
    """`data` into `path` whole (output.write_text_atomic's rules, for bytes): beside it, then
    renamed over it; /dev/stdout, a pipe or a device is written to in place."""
    import os
    from pathlib import Path

    from ..errors import write_failed
    from .output import writes_through
    path = Path(path)
    if writes_through(path):
        try:
            with open(path, "ab") as f:
                f.write(data)
        except BrokenPipeError:
            pass
        except OSError as e:
            raise write_failed(path, e) from None
        return path
    if path.is_symlink():
        path = Path(os.path.realpath(path))
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        tmp.replace(path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise write_failed(path, e) from None
    return path
