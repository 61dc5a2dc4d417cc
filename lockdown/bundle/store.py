"""Writing and reading bundles, so that nothing half-written is ever taken for a bundle.

A bundle is built in a hidden staging directory next to its destination and renamed into
place only when complete, with `manifest.json` listing every file's size and SHA-256. Readers
check the format name, the version, the manifest's shape and each listed file's size; each file
as it is read: UTF-8, strict JSON (no NaN, no number that overflows), records of the right
shape (model.py). Any problem is one BundleError line naming the file (and line).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
from itertools import chain
from pathlib import Path, PurePosixPath
from typing import Iterable, Iterator

from .. import paths
from ..errors import LockdownError, UsageError, write_failed
from .model import (FORMAT, VERSION, EngineEvents, ExcimerProfile, PerfSample, RecordError, RequestRecord,
                    Statement, brief, checker, numbers_fit)

AGAIN = "the bundle is damaged, capture it again"


class BundleError(LockdownError):
    """A bundle that cannot be read: missing, damaged, truncated or of another version."""


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number")


def _finite_float(text: str) -> float:
    v = float(text)
    if math.isinf(v):
        raise ValueError(f"number {text[:20]} is too large")
    return v


# Python's json takes NaN and Infinity, and turns 1e999 into inf: no bundle writer produces
# them, and every sum, mean and SVG coordinate downstream would go non-finite.
_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite_float)


# JSON may escape half of a UTF-16 pair alone ("\ud800"): Python reads it into a string no
# UTF-8 output (a report, an export, the terminal) can hold
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def lone_surrogate(text: str, value) -> bool:
    """Whether JSON `text`, decoded into `value`, holds a string with half a character."""
    if not _SURROGATE_ESCAPE.search(text):          # the common case: no such escape at all
        return False
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def strict_json(data: bytes):
    """One bundle file or JSONL line: UTF-8, JSON without NaN, Infinity or overflowing floats,
    or half a character (a lone surrogate escape). Raises ValueError (UnicodeDecodeError and
    JSONDecodeError are ValueErrors) or RecursionError."""
    text = data.decode("utf-8")
    value = _DECODER.decode(text)
    if lone_surrogate(text, value):
        raise ValueError("a \\u escape of half a character, not text")
    return value


def _why(e: Exception) -> str:
    """An error of `strict_json` in a few words."""
    if isinstance(e, UnicodeDecodeError):
        return f"not UTF-8 text (byte 0x{e.object[e.start]:02x} at column {e.start + 1})"
    if isinstance(e, json.JSONDecodeError):
        return f"damaged JSON ({e.msg}, column {e.colno})"
    if isinstance(e, RecursionError):
        return "damaged JSON (nested too deeply)"
    return f"damaged JSON ({str(e).split('; use sys.')[0]})"      # not Python's advice on an int's digits


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class BundleWriter:
    def __init__(self, dest: Path):
        self.dest = Path(dest)
        if self.dest.exists():
            raise UsageError(f"{self.dest} already exists; choose another -o or remove it")
        if not self.dest.parent.is_dir():
            raise UsageError(f"cannot write {self.dest}: directory {self.dest.parent} does not exist")
        self.staging = self.dest.parent / f".{self.dest.name}.partial-{os.getpid()}"
        shutil.rmtree(self.staging, ignore_errors=True)
        # a bundle a killed capture of the same -o was staging
        paths.remove_abandoned(self.dest.parent, re.escape(f".{self.dest.name}.partial-") + r"(?P<pid>\d+)")
        try:
            self.staging.mkdir()
        except OSError as e:
            raise write_failed(self.dest, e) from None

    def path(self, rel: str) -> Path:
        p = self.staging / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def write_jsonl(self, rel: str, records: Iterable) -> int:
        n = 0
        with open(self.path(rel), "w") as f:
            for r in records:
                f.write(json.dumps(r.to_json() if hasattr(r, "to_json") else r,
                                   separators=(",", ":")) + "\n")
                n += 1
        return n

    def write_json(self, rel: str, data) -> None:
        self.path(rel).write_text(json.dumps(data, indent=1) + "\n")

    def finish(self, manifest: dict) -> Path:
        files = {}
        for p in sorted(self.staging.rglob("*")):
            if p.is_file():
                files[str(p.relative_to(self.staging))] = {"bytes": p.stat().st_size,
                                                           "sha256": sha256_of(p)}
        manifest = {"format": FORMAT, "version": VERSION, **manifest, "files": files}
        (self.staging / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        self.staging.rename(self.dest)
        return self.dest

    def abandon(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)


class Bundle:
    """A bundle opened for reading; records load lazily, each file checked as it is read."""

    def __init__(self, root: Path, manifest: dict):
        self.root = root
        self.manifest = manifest

    @property
    def files(self) -> dict:
        return self.manifest["files"]

    def has(self, rel: str) -> bool:
        return rel in self.files

    def _read(self, rel: str, what: str) -> bytes:
        path = self.root / rel
        try:
            return path.read_bytes()
        except OSError as e:
            raise BundleError(f"{path}: cannot read {what} ({e.strerror or e})")

    def _json(self, rel: str, what: str):
        """A whole JSON file of the bundle, strictly parsed; BundleError naming it."""
        try:
            return strict_json(self._read(rel, what))
        except (ValueError, RecursionError) as e:
            raise BundleError(f"{self.root / rel}: cannot read {what} ({_why(e)}); {AGAIN}")

    def _jsonl(self, rel: str) -> Iterator[tuple[int, object]]:
        """(line number, parsed line) of a JSONL file; nothing when the bundle has no such file.
        Read as bytes so that a bad byte is reported on its own line."""
        if not self.has(rel):
            return
        path = self.root / rel
        try:
            f = open(path, "rb")
        except OSError as e:
            raise BundleError(f"{path}: cannot read it ({e.strerror or e})")
        with f:
            for n, line in enumerate(f, 1):
                try:
                    d = strict_json(line)
                except (ValueError, RecursionError) as e:
                    raise BundleError(f"{path} line {n}: {_why(e)}; {AGAIN}")
                yield n, d

    def _records(self, rel: str, kind: type) -> Iterator:
        """The records of a JSONL file, each checked (model.py); BundleError naming the line."""
        for n, d in self._jsonl(rel):
            try:
                yield kind.from_json(d)
            except RecordError as e:
                raise BundleError(f"{self.root / rel} line {n}: {e}; {AGAIN}")

    def requests(self) -> list[RequestRecord]:
        return list(self._records("requests.jsonl", RequestRecord))

    def statements(self) -> list[Statement]:
        return list(self._records("statements.jsonl", Statement))

    def perf_samples(self) -> Iterator[PerfSample]:
        return self._records("perf/samples.jsonl", PerfSample)

    def engine_events(self) -> list[EngineEvents]:
        """Engine events per request (collectors/engine_events.py); [] when not collected."""
        return list(self._records("perf/events.jsonl", EngineEvents))

    def build_ids(self) -> dict[str, str]:
        """DSO path -> GNU build id of every DSO the perf samples touch ({} without perf)."""
        if "perf/buildids.json" not in self.files:
            return {}
        ids = self._json("perf/buildids.json", "the build ids")
        if not checker("dict[str, str]").test(ids):
            raise BundleError(f"{self.root / 'perf/buildids.json'}: not an object of DSO path -> "
                              f"build id strings ({brief(ids)}); {AGAIN}")
        return ids

    def excimer(self) -> list[ExcimerProfile]:
        return list(self._records("excimer.jsonl", ExcimerProfile))

    def xhprof_ids(self) -> list[str]:
        return sorted(Path(rel).stem for rel in self.files if rel.startswith("xhprof/"))

    def xhprof(self, request_id: str) -> dict:
        """One xhprof array: {"caller==>callee" or "function": {metric: number}}."""
        rel = f"xhprof/{request_id}.json"
        profile = self._json(rel, "the xhprof profile")
        why = xhprof_problem(profile)
        if why:
            raise BundleError(f"{self.root / rel}: cannot read the xhprof profile ({why}); {AGAIN}")
        return profile or {}


def xhprof_problem(profile) -> str | None:
    """What the xhprof readers (builtins.py, call_graph.py, the export) cannot take, or None.
    PHP's json_encode writes an empty array as [], so [] is an empty profile."""
    if profile == []:
        return None
    if type(profile) is not dict:
        return f"not an object ({brief(profile)})"
    if set(map(type, profile.values())) <= {dict}:    # the common case, in C: 5,000 entries is usual
        metrics = list(chain.from_iterable(map(dict.values, profile.values())))
        if numbers_fit(metrics):
            return None
    number = checker("float").test
    for key, values in profile.items():
        if type(values) is not dict:
            return f"entry {key!r} has no metrics ({brief(values)})"
        bad = next((k for k, v in values.items() if not number(v)), None)
        if bad is not None:
            return f"entry {key!r}: {bad} is not a number ({brief(values[bad])})"
    return None


# What the readers take from manifest.json (validate, analysis, stacks, the detectors, the
# summary and the exports), by dotted path. A path whose parent is absent or null is not looked
# at; one that is absent is fine unless listed in _REQUIRED.
MANIFEST_SHAPE = {
    "target": "dict", "target.name": "str", "files": "dict", "run_dir": "str | None",
    "capture": "dict", "capture.collect": "list[str]", "capture.xhprof_every": "int",
    "capture.notes": "list[str]",
    "driver": "dict", "driver.concurrency": "int", "driver.rps": "float | None",
    "requests": "dict", "requests.sent": "int", "requests.logged": "int", "requests.lost": "int",
    "requests.instrumented": "int", "requests.status_counts": "dict[str, int]",
    "overhead": "dict | None", "overhead.capture_rps": "float", "overhead.baseline_rps": "float",
    "overhead.ratio": "float",
    "collected": "dict", "collected.perf": "dict", "collected.perf.samples": "int",
    "collected.perf.in_requests": "int", "collected.perf.outside_requests": "int",
    "collected.excimer": "dict", "collected.excimer.samples": "int",
    "collected.excimer.requests_with_samples": "int", "collected.xhprof": "dict",
    "collected.xhprof.profiles": "int", "collected.queries": "dict",
    "collected.queries.statements": "int", "collected.queries.attribution": "dict[str, int]",
    "versions": "dict | None", "versions.php": "str | None",
    "php": "dict", "php.internal_functions": "list[str] | None",
    "php.internal_classes": "list[str] | None", "php.extensions": "dict | None",
    "php.zend_extensions": "list[str] | None", "php.ini": "dict[str, str | None] | None",
    "php.overrides": "dict | None", "php.pool": "dict | None",
    "php.pool.instrumented_extension": "str | None",
    "host": "dict | None", "host_cpu": "dict | None",
}
# (a field whose parent is there: what every writer puts in it, and the summary prints)
_REQUIRED = ("target", "target.name", "files", "overhead.capture_rps", "overhead.baseline_rps", "overhead.ratio",
             "collected.perf.samples", "collected.perf.in_requests", "collected.perf.outside_requests",
             "collected.excimer.samples", "collected.excimer.requests_with_samples", "collected.xhprof.profiles",
             "collected.queries.statements", "collected.queries.attribution")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")        # no writer names a file so; a message would break


def manifest_problem(manifest: dict) -> str | None:
    """The first field of MANIFEST_SHAPE that is missing or of the wrong type, as a phrase."""
    for path, annotation in MANIFEST_SHAPE.items():
        parent, _, key = path.rpartition(".")
        where = manifest
        for part in parent.split(".") if parent else ():
            where = where.get(part) if type(where) is dict else None
        if where is None or key not in where:
            if where is not None and path in _REQUIRED:
                return f"{path} is missing"
            continue
        check = checker(annotation)
        if not check.test(where[key]):
            return f"{path} is not {check.one} ({brief(where[key])})"
    for rel, meta in manifest["files"].items():
        parts = PurePosixPath(rel).parts
        if (not parts or rel.startswith("/") or ".." in parts or _CONTROL.search(rel)
                or max(len(part.encode("utf-8", "surrogatepass")) for part in parts) > 255):
            return f"files lists {rel!r}, not a path inside the bundle"
        if not (type(meta) is dict and type(meta.get("bytes")) is int and meta["bytes"] >= 0
                and type(meta.get("sha256")) is str):
            return f"files.{rel} is not {{\"bytes\": size, \"sha256\": hash}} ({brief(meta)})"
    return None


def open_bundle(path: Path) -> Bundle:
    root = Path(path)
    if not root.is_dir():
        raise BundleError(f"{root}: no such bundle directory; give the -o of `lockdown profile`")
    mpath = root / "manifest.json"
    try:
        manifest = strict_json(mpath.read_bytes())
    except FileNotFoundError:
        raise BundleError(f"{mpath}: missing; {root} is not a lockdown bundle or was not finished")
    except OSError as e:
        raise BundleError(f"{mpath}: cannot read it ({e.strerror or e})")
    except (ValueError, RecursionError) as e:
        raise BundleError(f"{mpath}: damaged ({_why(e)}); capture the bundle again")
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BundleError(f"{mpath}: not a lockdown bundle manifest (format is "
                          f"{manifest.get('format') if isinstance(manifest, dict) else None!r})")
    if type(manifest.get("version")) is not int and "version" in manifest:
        raise BundleError(f"{mpath}: version {brief(manifest['version'])} is not a number; the "
                          f"manifest is damaged, capture the bundle again")
    if manifest.get("version") != VERSION:
        raise BundleError(f"{mpath}: bundle format version {manifest.get('version')!r} is not "
                          f"supported (this lockdown reads version {VERSION})")
    if not isinstance(manifest.get("files"), dict):
        raise BundleError(f"{mpath}: has no file list")
    why = manifest_problem(manifest)
    if why:
        raise BundleError(f"{mpath}: {why}; the manifest is damaged, capture the bundle again")
    inside = root.resolve()
    for rel, meta in manifest["files"].items():
        p = root / rel
        try:
            if not p.is_file():
                raise BundleError(f"{p}: missing from the bundle (listed in manifest.json)")
            if inside not in p.resolve().parents:       # read, it would land in analyses and exports
                raise BundleError(f"{p}: leads out of the bundle (through a symlink, to {p.resolve()}); "
                                  f"a bundle holds its own files, capture it again")
            size = p.stat().st_size
        except OSError as e:                            # a directory it may not enter, say
            raise BundleError(f"{p}: cannot read it ({e.strerror or e})")
        if size != meta["bytes"]:
            raise BundleError(f"{p}: {size} bytes, manifest says {meta['bytes']}; the file is "
                              f"truncated or damaged")
    return Bundle(root, manifest)
