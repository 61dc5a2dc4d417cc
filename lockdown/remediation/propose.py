"""Attach concrete remediations to findings: diffs from the recipe catalogue, fs-scan's SQL
from probing the registry, a generic per-request memo for a probed repeated call no recipe
knows, and the php.ini lines engine detectors already carry."""
from __future__ import annotations

import shutil
from pathlib import Path

from ..analyzers.findings import Finding
from ..bundle.model import Statement
from ..harness.prepare import prepare
from ..targets.config import Target
from . import memoize, recipes, registry_probe
from .base import Base, base_refused, patched_tree


def propose_all(findings: list[Finding], statements: list[Statement], target: Target, run_dir: Path,
                say=print, base: Base | None = None) -> list[Finding]:
    """`findings` with their remediations, made and checked against the prepared app tree, or
    against a copy of it with `base`'s diffs applied (`lockdown run --on-top-of`; removed
    when done)."""
    app, tree = prepare(target, say=say).app, recipes.PREPARED_TREE
    if base is None:
        return _propose(findings, statements, target, run_dir, app, tree, say)
    try:
        patched = patched_tree(app, base.remediations, run_dir / "base-app", base_refused)
        return _propose(findings, statements, target, run_dir, patched, f"{tree} with the base's diffs applied", say)
    finally:
        shutil.rmtree(run_dir / "base-app", ignore_errors=True)


def _propose(findings: list[Finding], statements: list[Statement], target: Target, run_dir: Path, app: Path,
             tree: str, say) -> list[Finding]:
    catalogue = recipes.load_recipes()
    for f in findings:
        if not f.is_defect:
            continue
        if f.id == "fs-scan":
            f.remediations.extend(registry_probe.propose(f, statements, target, run_dir / "probe", say))
        f.remediations.extend(recipes.propose(f, list(target.patchable), app, catalogue, tree))
        if f.id == "repeated-call" and not f.remediations:
            f.remediations.extend(memoize.propose(f, list(target.patchable), app, tree))
    return findings
