"""What a `lockdown run` directory holds, read once for the write-ups and the report:
bench.json, findings.json, the bundle's manifest and every verify/KEY/verify.json.

Reading only: numbers are taken as the stages wrote them (a report never computes a
statistic). A damaged file is one clear error naming it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..analyzers.findings import Finding
from ..errors import LockdownError


def read_json(path: Path, what: str) -> dict:
    try:
        return json.loads(path.read_text())
    except OSError as e:
        raise LockdownError(f"{path}: cannot read {what} ({e.strerror})")
    except ValueError as e:
        raise LockdownError(f"{path}: damaged {what} ({e}); run the command that wrote it again")


@dataclass
class RunResults:
    directory: Path
    target: str
    findings: list[Finding]
    bench: dict | None                  # bench.json, None with `lockdown run --no-bench`
    manifest: dict                      # the bundle's manifest.json ({} when the bundle is gone)
    bundle: Path
    verified: dict[str, dict] = field(default_factory=dict)    # finding key -> verify.json

    def verification(self, key: str) -> dict | None:
        return self.verified.get(key)


def load_results(directory: Path) -> RunResults:
    directory = Path(directory)
    if not directory.is_dir():
        raise LockdownError(f"{directory}: no such run directory; give the -o directory of a `lockdown run`")
    path = directory / "findings.json"
    if not path.is_file():
        raise LockdownError(f"{directory} has no findings.json: give the -o directory of a `lockdown run`")
    data = read_json(path, "findings")
    try:
        findings = [Finding.from_json(f) for f in data["findings"]]
        target = data["target"]
    except (KeyError, TypeError) as e:
        raise LockdownError(f"{path}: damaged findings ({type(e).__name__}: {e}); run `lockdown run` again")
    bench = read_json(directory / "bench.json", "benchmark result") if (directory / "bench.json").is_file() else None
    bundle = Path(data.get("bundle") or directory / "bundle")
    manifest = read_json(bundle / "manifest.json", "bundle manifest") if (bundle / "manifest.json").is_file() else {}
    verified = {}
    vdir = directory / "verify"
    if vdir.is_dir():
        for p in sorted(vdir.glob("*/verify.json")):
            if p.parent.name.startswith("."):
                continue
            v = read_json(p, "verification result")
            key = v.get("finding", {}).get("key")
            if not key or "bench" not in v or "reprofile" not in v:
                raise LockdownError(f"{p}: damaged verification result (no finding key, bench or "
                                    f"reprofile); run `lockdown verify` again")
            verified[key] = v
    return RunResults(directory, target, findings, bench, manifest, bundle, verified)
