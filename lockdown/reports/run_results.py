"""What a `lockdown run` directory holds, read once for the write-ups: bench.json,
findings.json, accounting.json, the bundle's manifest and every verify/KEY/verify.json, through
rundir/store.py's `open_run`, the one reader of run directories.

Reading only: numbers are taken as the stages wrote them (a report never computes a
statistic). A damaged file is one clear error naming it.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path

import jinja2

from ..analyzers.findings import Finding, remediation_names
from ..remediation.base import describe
from ..errors import LockdownError
from ..rundir.model import BenchResult, DocumentError, RunDocument, TimeAccounting, Verification
from ..rundir.store import REDO_RUN, RunDirError, bundle_path, open_run


@contextlib.contextmanager
def reading(path: Path, redo: str):
    """A file whose JSON parses but does not have the shape lockdown reads (a string where a
    number was, a missing key a template needs) becomes one line naming it, instead of a
    traceback from deep inside a report or a write-up."""
    try:
        yield
    except LockdownError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, ArithmeticError, StopIteration,
            jinja2.TemplateError) as e:
        raise RunDirError(f"{path}: unexpected content ({type(e).__name__}: {e}); it was not "
                          f"written by this lockdown or is damaged; {redo}") from None


def run_bundle(run_dir: Path, findings: dict) -> Path:
    """The run's bundle: DIR/bundle, else where findings.json (`findings`, its JSON) says it
    was captured (rundir/store.py bundle_path)."""
    return bundle_path(run_dir, findings.get("bundle"))


def findings_of(data: dict, path: Path) -> list[Finding]:
    """The Finding objects of a findings.json's JSON, checked (rundir/model.py)."""
    try:
        return RunDocument.from_json(data).findings
    except DocumentError as e:
        raise RunDirError(f"{path}: {e}; {REDO_RUN}") from None


@dataclass
class RunResults:
    directory: Path
    target: str
    findings: list[Finding]
    bench: BenchResult | None           # bench.json, None with `lockdown run --no-bench`
    manifest: dict                      # the bundle's manifest.json ({} when the bundle is gone)
    bundle: Path
    verified: dict[str, Verification] = field(default_factory=dict)    # finding key -> verify.json
    run: dict = field(default_factory=dict)     # findings.json's run block (how the run was made)
    accounting: TimeAccounting | None = None    # accounting.json, None in a run written before it

    def verification(self, key: str) -> Verification | None:
        return self.verified.get(key)


def load_results(directory: Path) -> RunResults:
    """The run directory as the write-ups read it (rundir/store.py open_run): every
    verification, bench.json and the bundle's manifest when they are there."""
    run = open_run(directory)
    doc, bench, accounted = run.document, run.bench(), run.accounting()
    return RunResults(run.directory, doc.target, doc.findings, bench, run.manifest(),
                      run.bundle_dir, run.verifications(),
                      doc.run.to_json() if doc.run else {}, accounted)


def base_text(run: dict | None) -> str | None:
    """What a run started from (findings.json run.base, `lockdown run --on-top-of`), in words;
    None for a run of the target as it ships."""
    base = (run or {}).get("base") if isinstance(run, dict) else None
    if not isinstance(base, dict):
        return None
    rems = [r for r in base.get("remediations") or [] if isinstance(r, dict)]
    return (f"{describe(base.get('source'), rems)} ({remediation_names(rems)}), applied to every copy this run "
            f"served, and to both arms of its verifications")

