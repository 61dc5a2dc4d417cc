"""Attach concrete remediations to findings: diffs from the recipe catalogue, fs-scan's SQL
from probing the registry, a generic per-request memo for a probed repeated call no recipe
knows, diffs generated from the evidence for the other kinds (generate.py), and the php.ini
lines engine detectors already carry. Recipes keep priority where they apply; each
remediation's `origin` says which it is."""
from __future__ import annotations

import shutil
from pathlib import Path

from ..analyzers.findings import Finding, Remediation
from ..errors import LockdownError
from ..bundle.model import Statement
from ..harness.prepare import prepare
from ..targets.config import Target
from . import generate, memoize, recipes, registry_probe, user_patch
from .base import Base, base_refused, patched_tree


def propose_all(findings: list[Finding], statements: list[Statement], target: Target, run_dir: Path,
                say=print, base: Base | None = None, called: dict[str, float] | None = None) -> list[Finding]:
    """`findings` with their remediations, made and checked against the prepared app tree, or
    against a copy of it with `base`'s diffs applied (`lockdown run --on-top-of`; removed
    when done). `called`: function -> calls per instrumented request (the capture's xhprof),
    which tells the generator which of several candidate functions ran."""
    app, tree = prepare(target, say=say).app, recipes.PREPARED_TREE
    if base is None:
        return _propose(findings, statements, target, run_dir, app, tree, say, called)
    try:
        patched = patched_tree(app, base.remediations, run_dir / "base-app", base_refused)
        return _propose(findings, statements, target, run_dir, patched, f"{tree} with the base's diffs applied", say,
                        called)
    finally:
        shutil.rmtree(run_dir / "base-app", ignore_errors=True)


def _propose(findings: list[Finding], statements: list[Statement], target: Target, run_dir: Path, app: Path,
             tree: str, say, called: dict[str, float] | None = None) -> list[Finding]:
    catalogue = recipes.load_recipes()
    for f in findings:
        if not f.is_defect:
            continue
        for r in f.remediations:          # what the detector carried: settings of the engine
            r.origin = r.origin or "engine"
        if f.id == "fs-scan" and f.details.get("walk") != "discovery":   # a registry miss: probe its lookups
            for r in registry_probe.propose(f, statements, target, run_dir / "probe", say):
                r.origin = r.origin or "generated"      # derived from probing the capture's lookups
                f.remediations.append(r)
        f.remediations.extend(recipes.propose(f, list(target.patchable), app, catalogue, tree))
        if f.id == "repeated-call" and not f.remediations:
            f.remediations.extend(memoize.propose(f, list(target.patchable), app, tree))
        if f.id == "php-warning" and not f.remediations:
            f.remediations.extend(registry_repair(f, target, say))
        if not f.remediations:
            made = generate.propose(f, target.patchable, app, called, tree)
            if made:
                say(f"[remedy] {f.id}: generated {made[0].kind} of {made[0].file} (no recipe applies)")
            f.remediations.extend(made)
    return share_loader_fix(findings)


def share_loader_fix(findings: list[Finding]) -> list[Finding]:
    """A failed-lookups finding whose function is an autoload finding's loader (ledger's
    `ledger_autoload` testing 9 include-path entries per class) is that loader's probing: the
    class map in front of it removes both, so the failed-lookups finding gets the same
    remediation (the same object: verify applies it once) and says so, rather than a cache of
    what a function that returns nothing resolved, which cannot be generated."""
    loaders = {f.details.get("function"): f for f in findings
               if f.id == "autoload" and f.remediations and f.details.get("function")}
    for f in findings:
        loader = loaders.get(f.details.get("function")) if f.id == "failed-lookups" else None
        if loader is None or f.remediations:
            continue
        f.remediations = list(loader.remediations)
        f.details.pop("no_patch", None)
        f.details["same_fix_as"] = loader.key or loader.id
        f.summary += (f" These lookups are the autoloader's search for class files: the class map proposed for "
                      f"the autoload finding ({f.details['same_fix_as']}) removes them too.")
    return findings


def registry_repair(f: Finding, target: Target, say) -> list[Remediation]:
    """php-warning naming a missing file that a registry table lists: the DELETE the detector
    derived (details.registry.repair), checked on a copy of the prepared database."""
    registry = f.details.get("registry") or {}
    repair = registry.get("repair")
    if not repair or not target.database:
        return []
    rem = Remediation(kind="sql", content=f"-- drop the registry entry naming the missing file\n{repair};\n",
                      origin="generated",
                      description=(f"the registry entry naming the missing file removed from "
                                   f"`{registry.get('table')}` (the lookup that reads it: "
                                   f"`{registry.get('statement')}`), so the file is no longer "
                                   f"looked for and the warning is no longer raised"))
    try:
        return user_patch.check_sql(prepare(target, say=say), [rem], say=say)
    except LockdownError as e:
        f.details["no_patch"] = f"the registry repair does not run on a copy of the database: {e}"
        return []
