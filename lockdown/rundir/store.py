"""Reading and writing a `lockdown run` directory (DIR), so that every reader takes it the same
way: `open_run(DIR)` checks that DIR is a finished run (no DIR/incomplete.json:
lockdown/run_marker.py) and reads findings.json; bench.json, analysis.json, accounting.json, the
bundle and each verify/KEY/verify.json are read when first asked for, each checked against its
model (model.py). Whoever reads it, a file that is missing where it is needed, unreadable, damaged
JSON or of the wrong shape is one RunDirError line naming it and what to do about it.

Writers put each document in place whole (a temporary file renamed over it), as JSON indented
by two spaces, UTF-8 unescaped: the bytes every run directory has held.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

from .. import run_marker
from ..bundle.store import Bundle, lone_surrogate, open_bundle
from ..errors import LockdownError, write_failed
from .model import Analysis, BenchResult, DocumentError, RunDocument, TimeAccounting, Verification

FINDINGS = "findings.json"
BENCH = "bench.json"
ANALYSIS = "analysis.json"
ACCOUNTING = "accounting.json"
BUNDLE = "bundle"
VERIFY = "verify"
VERIFY_FILE = "verify.json"

REDO_RUN = "run `lockdown run TARGET -o DIR` again to rewrite it"


class RunDirError(LockdownError):
    """A run directory that cannot be read: missing, unfinished or damaged."""


def redo_verify(vdir: Path) -> str:
    """What to do about a damaged verify/KEY/verify.json."""
    return f"run `lockdown verify` for this finding again or remove {vdir}"


# ----------------------------------------------------------------------------- reading

def read_object(path: Path, redo: str, required: bool = True) -> dict | None:
    """A JSON object from `path`; missing (None unless `required`), unreadable, damaged or
    not an object is one line naming the file and `redo`, what to do about it."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if not required:
            return None
        raise RunDirError(f"{path}: missing; {path.parent} is not a finished `lockdown run` "
                          f"directory ({redo})")
    except (OSError, UnicodeDecodeError) as e:
        raise RunDirError(f"{path}: cannot read it ({e}); {redo}")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise RunDirError(f"{path}: damaged JSON ({e.msg}: line {e.lineno} column {e.colno}); "
                          f"{redo}")
    except (ValueError, RecursionError) as e:     # an int of 4,300+ digits; nesting too deep
        why = "nested too deeply" if isinstance(e, RecursionError) else str(e).split(";")[0]
        raise RunDirError(f"{path}: damaged JSON ({why}); {redo}")
    if not isinstance(data, dict):
        raise RunDirError(f"{path}: not a JSON object; {redo}")
    if lone_surrogate(text, data):          # no report or write-up could be written with it
        raise RunDirError(f"{path}: damaged JSON (a \\u escape of half a character, not text); {redo}")
    return data


def read_document(kind: type, path: Path, redo: str, required: bool = True):
    """The `kind` document (model.py) in `path`; None when it is not there and not `required`."""
    data = read_object(path, redo, required)
    if data is None:
        return None
    try:
        return kind.from_json(data)
    except DocumentError as e:
        raise RunDirError(f"{path}: {e}; {redo}") from None
    except RecursionError:          # (a list nested too deeply for the checks)
        raise RunDirError(f"{path}: damaged JSON (nested too deeply); {redo}") from None


def bundle_path(run_dir: Path, named) -> Path:
    """The run's bundle: DIR/bundle, else where findings.json says it was captured (`named`; a
    run directory copied elsewhere reads its own copy, not the original's)."""
    local = Path(run_dir) / BUNDLE
    if (local.is_dir() or not isinstance(named, str) or not named.startswith("/") or re.search(r"[\x00-\x1f]", named)
            or max(len(part.encode("utf-8", "surrogatepass")) for part in Path(named).parts) > 255):
        return local        # no path a run writes (an absolute one): the error names DIR/bundle
    return Path(named)


class RunDir:
    """A finished run directory, opened (`open_run`): findings.json read, the rest on demand."""

    def __init__(self, directory: Path, document: RunDocument):
        self.directory = directory
        self.document = document
        self._bench: BenchResult | None = None
        self._analysis: Analysis | None = None
        self._verifications: dict[str, Verification] | None = None
        self._accounting: TimeAccounting | None = None
        self._bench_read = False
        self._accounting_read = False

    def path(self, name: str) -> Path:
        return self.directory / name

    @property
    def bundle_dir(self) -> Path:
        return bundle_path(self.directory, self.document.bundle)

    def bench(self) -> BenchResult | None:
        """bench.json; None after `lockdown run --no-bench`."""
        if not self._bench_read:
            self._bench = read_document(BenchResult, self.path(BENCH), REDO_RUN, required=False)
            self._bench_read = True
        return self._bench

    def accounting(self) -> TimeAccounting | None:
        """accounting.json; None in a run directory written before `lockdown run` wrote it."""
        if not self._accounting_read:
            self._accounting = read_document(TimeAccounting, self.path(ACCOUNTING), REDO_RUN, required=False)
            self._accounting_read = True
        return self._accounting

    def analysis(self) -> Analysis:
        if self._analysis is None:
            self._analysis = read_document(Analysis, self.path(ANALYSIS), REDO_RUN)
        return self._analysis

    def manifest(self) -> dict:
        """The bundle's manifest.json as it is ({} when the bundle is gone: the write-ups do
        without it)."""
        return read_object(self.bundle_dir / "manifest.json", REDO_RUN, required=False) or {}

    def open_bundle(self) -> Bundle:
        """The run's bundle, checked (bundle/store.py); one line when it is gone."""
        bundle = self.bundle_dir
        if not bundle.is_dir():
            raise RunDirError(f"{self.path(BUNDLE)}: missing; this needs the run's capture bundle ({REDO_RUN})")
        return open_bundle(bundle)

    def verification_path(self, key: str) -> Path:
        return self.directory / VERIFY / key / VERIFY_FILE

    def verifications(self) -> dict[str, Verification]:
        """Every verify/KEY/verify.json, by KEY (sorted). Hidden directories are `lockdown
        verify` runs in progress or abandoned; a directory without verify.json holds none."""
        if self._verifications is None:
            found = {}
            root = self.directory / VERIFY
            names = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")) \
                if root.is_dir() else []
            for key in names:
                path = self.verification_path(key)
                v = read_document(Verification, path, redo_verify(path.parent), required=False)
                if v is None:
                    continue
                if v.key != key:
                    raise RunDirError(f"{path}: the verification of {v.key!r}, in the directory of {key!r}; "
                                      f"{redo_verify(path.parent)}")
                found[key] = v
            self._verifications = found
        return self._verifications


def open_run(directory: Path) -> RunDir:
    """The finished `lockdown run` directory `directory`, its findings.json read and checked."""
    directory = Path(directory)
    if not directory.is_dir():
        raise RunDirError(f"{directory}: no such directory; give the -o directory of `lockdown run`")
    problem = run_marker.unfinished(directory)
    if problem:
        raise RunDirError(problem)
    path = directory / FINDINGS
    if not path.exists():
        raise RunDirError(f"{directory} has no {FINDINGS}: not a lockdown run directory; give "
                          f"the -o directory of a finished `lockdown run`")
    return RunDir(directory, read_document(RunDocument, path, REDO_RUN))


# ----------------------------------------------------------------------------- writing

def write_text_atomic(path: Path, text: str) -> Path:
    """`text` into `path` whole: written beside it, then renamed over it."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        tmp.replace(path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise write_failed(path, e) from None
    return path


def write_json_atomic(path: Path, data) -> Path:
    return write_text_atomic(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def write_document(directory: Path, name: str, document) -> Path:
    """A model's document (RunDocument, BenchResult, Analysis, TimeAccounting, Verification) as
    DIR/`name`."""
    return write_json_atomic(Path(directory) / name, document.to_json())
