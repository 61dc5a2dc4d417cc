"""Writing and reading bundles, so that nothing half-written is ever taken for a bundle.

A bundle is built in a hidden staging directory next to its destination and renamed into
place only when complete, with `manifest.json` listing every file's size and SHA-256. Readers
check the format name, the version and each listed file's size, and report any problem as one
line naming the file.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Iterable, Iterator

from ..errors import LockdownError
from .model import FORMAT, VERSION, ExcimerProfile, PerfSample, RequestRecord, Statement


class BundleError(LockdownError):
    """A bundle that cannot be read: missing, damaged, truncated or of another version."""


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
            raise LockdownError(f"{self.dest} already exists; choose another -o or remove it")
        if not self.dest.parent.is_dir():
            raise LockdownError(f"cannot write {self.dest}: directory {self.dest.parent} does not exist")
        self.staging = self.dest.parent / f".{self.dest.name}.partial-{os.getpid()}"
        shutil.rmtree(self.staging, ignore_errors=True)
        self.staging.mkdir()

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

    def _jsonl(self, rel: str) -> Iterator[dict]:
        if not self.has(rel):
            return
        path = self.root / rel
        with open(path) as f:
            for n, line in enumerate(f, 1):
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as e:
                    raise BundleError(f"{path} line {n}: damaged JSON ({e.msg}); the bundle is "
                                      f"corrupt, capture it again")

    def requests(self) -> list[RequestRecord]:
        return [RequestRecord.from_json(d) for d in self._jsonl("requests.jsonl")]

    def statements(self) -> list[Statement]:
        return [Statement.from_json(d) for d in self._jsonl("statements.jsonl")]

    def perf_samples(self) -> Iterator[PerfSample]:
        return (PerfSample.from_json(d) for d in self._jsonl("perf/samples.jsonl"))

    def build_ids(self) -> dict[str, str]:
        """DSO path -> GNU build id of every DSO the perf samples touch ({} without perf)."""
        path = self.root / "perf" / "buildids.json"
        if "perf/buildids.json" not in self.files:
            return {}
        try:
            return json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise BundleError(f"{path}: cannot read the build ids ({e})")

    def excimer(self) -> list[ExcimerProfile]:
        return [ExcimerProfile.from_json(d) for d in self._jsonl("excimer.jsonl")]

    def xhprof_ids(self) -> list[str]:
        return sorted(Path(rel).stem for rel in self.files if rel.startswith("xhprof/"))

    def xhprof(self, request_id: str) -> dict:
        path = self.root / "xhprof" / f"{request_id}.json"
        try:
            return json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise BundleError(f"{path}: cannot read the xhprof profile ({e})")


def open_bundle(path: Path) -> Bundle:
    root = Path(path)
    if not root.is_dir():
        raise BundleError(f"{root}: no such bundle directory; give the -o of `lockdown profile`")
    mpath = root / "manifest.json"
    try:
        manifest = json.loads(mpath.read_text())
    except FileNotFoundError:
        raise BundleError(f"{mpath}: missing; {root} is not a lockdown bundle or was not finished")
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BundleError(f"{mpath}: damaged ({e}); capture the bundle again")
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BundleError(f"{mpath}: not a lockdown bundle manifest (format is "
                          f"{manifest.get('format') if isinstance(manifest, dict) else None!r})")
    if manifest.get("version") != VERSION:
        raise BundleError(f"{mpath}: bundle format version {manifest.get('version')!r} is not "
                          f"supported (this lockdown reads version {VERSION})")
    if not isinstance(manifest.get("files"), dict):
        raise BundleError(f"{mpath}: has no file list")
    for rel, meta in manifest["files"].items():
        p = root / rel
        if not p.is_file():
            raise BundleError(f"{p}: missing from the bundle (listed in manifest.json)")
        size = p.stat().st_size
        if size != meta.get("bytes"):
            raise BundleError(f"{p}: {size} bytes, manifest says {meta.get('bytes')}; the file is "
                              f"truncated or damaged")
    return Bundle(root, manifest)
