"""What a `lockdown run` directory holds, read once for the write-ups and the report:
bench.json, findings.json, the bundle's manifest and every verify/KEY/verify.json.

Reading only: numbers are taken as the stages wrote them (a report never computes a
statistic). A damaged file is one clear error naming it.
"""
from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import jinja2

from ..analyzers.findings import Finding, remediation_names
from ..bundle.store import lone_surrogate
from ..remediation.base import describe
from ..errors import LockdownError
from .. import run_marker


FINDINGS_FORMAT = 1      # findings.json's format (lockdown run writes it)
REDO_RUN = "run `lockdown run TARGET -o DIR` again to rewrite it"


class RunDirError(LockdownError):
    """A run directory that cannot be read: missing, unfinished or damaged."""


def read_json(path: Path, redo: str, required: bool = True) -> dict | None:
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


@contextlib.contextmanager
def reading(path: Path, redo: str):
    """A file whose JSON parses but does not have the shape lockdown reads (a string where a
    number was, a missing key a template needs) becomes one line naming it, instead of a
    traceback from deep inside a report or a write-up."""
    try:
        yield
    except LockdownError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, ArithmeticError,
            jinja2.TemplateError) as e:
        raise RunDirError(f"{path}: unexpected content ({type(e).__name__}: {e}); it was not "
                          f"written by this lockdown or is damaged; {redo}") from None


def run_bundle(run_dir: Path, findings: dict) -> Path:
    """The run's bundle: DIR/bundle, else where findings.json says it was captured (a run
    directory copied elsewhere reads its own copy, not the original's)."""
    local = Path(run_dir) / "bundle"
    named = findings.get("bundle")
    if (local.is_dir() or not isinstance(named, str) or not named.startswith("/") or re.search(r"[\x00-\x1f]", named)
            or max(len(part.encode("utf-8", "surrogatepass")) for part in Path(named).parts) > 255):
        return local        # no path a run writes (an absolute one): the error names DIR/bundle
    return Path(named)


def read_findings_file(run_dir: Path) -> dict:
    """DIR/findings.json, checked to be a findings file of this format: the raw dict."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunDirError(f"{run_dir}: no such directory; give the -o directory of `lockdown run`")
    problem = run_marker.unfinished(run_dir)
    if problem:
        raise RunDirError(problem)
    path = run_dir / "findings.json"
    if not path.exists():
        raise RunDirError(f"{run_dir} has no findings.json: not a lockdown run directory; give "
                          f"the -o directory of a finished `lockdown run`")
    data = read_json(path, REDO_RUN)
    if data.get("format") != FINDINGS_FORMAT or not isinstance(data.get("findings"), list) \
            or not all(isinstance(f, dict) for f in data["findings"]):
        raise RunDirError(f"{path}: not a findings file of format {FINDINGS_FORMAT} (format is "
                          f"{data.get('format')!r}, findings a {type(data.get('findings')).__name__}); "
                          f"{REDO_RUN}")
    return data


def findings_of(data: dict, path: Path) -> list[Finding]:
    """The Finding objects of a checked findings.json dict."""
    try:
        return [Finding.from_json(f) for f in data["findings"]]
    except (KeyError, TypeError) as e:
        raise RunDirError(f"{path}: damaged findings ({type(e).__name__}: {e}); {REDO_RUN}")


@dataclass
class RunResults:
    directory: Path
    target: str
    findings: list[Finding]
    bench: dict | None                  # bench.json, None with `lockdown run --no-bench`
    manifest: dict                      # the bundle's manifest.json ({} when the bundle is gone)
    bundle: Path
    verified: dict[str, dict] = field(default_factory=dict)    # finding key -> verify.json
    run: dict = field(default_factory=dict)     # findings.json's run block (how the run was made)

    def verification(self, key: str) -> dict | None:
        return self.verified.get(key)


def load_results(directory: Path) -> RunResults:
    directory = Path(directory)
    data = read_findings_file(directory)
    findings = findings_of(data, directory / "findings.json")
    if not isinstance(data.get("target"), str):
        raise RunDirError(f"{directory / 'findings.json'}: no target name; {REDO_RUN}")
    bench = read_json(directory / "bench.json", REDO_RUN, required=False)
    bundle = run_bundle(directory, data)
    manifest = read_json(bundle / "manifest.json", REDO_RUN, required=False) or {}
    verified = {}
    vdir = directory / "verify"
    if vdir.is_dir():
        for p in sorted(vdir.glob("*/verify.json")):
            if p.parent.name.startswith("."):
                continue
            redo = f"run `lockdown verify` for this finding again or remove {p.parent}"
            v = read_json(p, redo)
            key = v.get("finding", {}).get("key")
            if not key or "bench" not in v or "reprofile" not in v:
                raise RunDirError(f"{p}: damaged verification result (no finding key, bench or "
                                  f"reprofile); {redo}")
            together = v.get("findings") or []
            if len(together) > 1 and not isinstance(v["reprofile"].get("gone_by_finding"), dict):
                raise RunDirError(f"{p}: damaged verification result ({len(together)} findings "
                                  f"fixed together, but no reprofile.gone_by_finding); {redo}")
            verified[key] = v
    run = data.get("run") if isinstance(data.get("run"), dict) else {}
    return RunResults(directory, data["target"], findings, bench, manifest, bundle, verified, run)


def base_text(run: dict | None) -> str | None:
    """What a run started from (findings.json run.base, `lockdown run --on-top-of`), in words;
    None for a run of the target as it ships."""
    base = (run or {}).get("base") if isinstance(run, dict) else None
    if not isinstance(base, dict):
        return None
    rems = [r for r in base.get("remediations") or [] if isinstance(r, dict)]
    return (f"{describe(base.get('source'), rems)} ({remediation_names(rems)}), applied to every copy this run "
            f"served, and to both arms of its verifications")

