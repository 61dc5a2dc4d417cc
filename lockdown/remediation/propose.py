"""Attach concrete remediations to findings: diffs from the recipe catalogue, fs-scan's SQL
from probing the registry, a generic per-request memo for a probed repeated call no recipe
knows, and the php.ini lines engine detectors already carry."""
from __future__ import annotations

from pathlib import Path

from ..analyzers.findings import Finding
from ..bundle.model import Statement
from ..harness.prepare import prepare
from ..targets.config import Target
from . import memoize, recipes, registry_probe


def propose_all(findings: list[Finding], statements: list[Statement], target: Target, run_dir: Path,
                say=print) -> list[Finding]:
    app = prepare(target, say=say).app
    catalogue = recipes.load_recipes()
    for f in findings:
        if not f.is_defect:
            continue
        if f.id == "fs-scan":
            f.remediations.extend(registry_probe.propose(f, statements, target, run_dir / "probe", say))
        f.remediations.extend(recipes.propose(f, list(target.patchable), app, catalogue))
        if f.id == "repeated-call" and not f.remediations:
            f.remediations.extend(memoize.propose(f, list(target.patchable), app))
    return findings
