"""Adding a detector is one module, registered in one place: these tests fail when a module of
lockdown/analyzers/detectors/ that is a detector (it has an `ID` or a `detect`) is not in
`DETECTORS`, has no section in thresholds.toml, or does not say what tells its findings apart
(`SUBJECT`: the details key `verify` matches a finding by across captures, findings.SUBJECT_KEYS;
None for a detector that reports one finding at most)."""
from __future__ import annotations

import ast
import importlib
import json
import tomllib
from collections import defaultdict
from pathlib import Path

import pytest

from lockdown.analyzers import detectors
from lockdown.analyzers.findings import SUBJECT_KEYS, Finding

PACKAGE = Path(detectors.__file__).parent
GOLDEN = Path(__file__).resolve().parent.parent / "fixtures" / "golden"


def module_names() -> list[str]:
    return sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")


def defines(name: str) -> set[str]:
    """Top-level names a module of the package binds (read from its source, not imported)."""
    tree = ast.parse((PACKAGE / f"{name}.py").read_text())
    out = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out |= {t.id for t in targets if isinstance(t, ast.Name)}
    return out


def detector_modules() -> list[str]:
    return [n for n in module_names() if {"ID", "detect"} & defines(n)]


def test_every_detector_module_is_registered_and_every_registration_is_a_detector():
    found = set(detector_modules())
    assert found == set(detectors.DETECTORS), (
        f"not in DETECTORS: {sorted(found - set(detectors.DETECTORS))}; "
        f"in DETECTORS but no detector module: {sorted(set(detectors.DETECTORS) - found)}")
    assert len(detectors.DETECTORS) == len(set(detectors.DETECTORS))
    for mod in detectors.modules():
        assert isinstance(mod.ID, str) and callable(mod.detect), mod.__name__


def test_ids_are_unique_and_every_detector_has_a_thresholds_section():
    ids = [mod.ID for mod in detectors.modules()]
    assert len(ids) == len(set(ids)), ids
    sections = tomllib.loads(detectors.THRESHOLDS.read_text())
    assert set(ids) - set(sections) == set(), f"no [section] in thresholds.toml: {sorted(set(ids) - set(sections))}"
    assert set(sections) - set(ids) == set(), f"thresholds.toml sections of no detector: {sorted(set(sections) - set(ids))}"


def test_every_detector_declares_what_tells_its_findings_apart():
    for mod in detectors.modules():
        assert hasattr(mod, "SUBJECT"), f"{mod.__name__}: no SUBJECT (the details key of its findings' subject, or None)"
        assert mod.SUBJECT is None or mod.SUBJECT in SUBJECT_KEYS, (
            f"{mod.__name__}: SUBJECT {mod.SUBJECT!r} is not one of findings.SUBJECT_KEYS {SUBJECT_KEYS}: "
            "add it there, or verify cannot tell its findings apart")


def test_subject_is_the_declared_key():
    """Finding.subject takes the first of SUBJECT_KEYS a finding's details has: an earlier key
    in a detector's details would shadow the one it declares."""
    by_id = {mod.ID: mod for mod in detectors.modules()}
    f = Finding(id="n-plus-one", title="", severity="low", share_pct=1.0, summary="",
                details={"fingerprint": "select ? from t", "table": "t"})
    assert f.subject == "n-plus-one:select ? from t" and by_id["n-plus-one"].SUBJECT == "fingerprint"
    for finding in golden_findings():
        mod = by_id[finding.id]
        if mod.SUBJECT is not None and finding.details.get(mod.SUBJECT):
            assert finding.subject == f"{finding.id}:{finding.details[mod.SUBJECT]}", finding.key


def golden_findings() -> list[Finding]:
    out = []
    for path in sorted(GOLDEN.glob("*/findings.json")):
        out += [Finding.from_json(d) for d in json.loads(path.read_text())]
    return out


def test_several_findings_of_one_detector_have_different_subjects():
    """On every golden capture: a detector that reports several findings declares a SUBJECT, and
    their subjects differ (as `verify` needs to say which one is gone)."""
    by_id = {mod.ID: mod for mod in detectors.modules()}
    findings = golden_findings()
    assert findings
    for path in sorted(GOLDEN.glob("*/findings.json")):
        per_id = defaultdict(list)
        for d in json.loads(path.read_text()):
            per_id[d["id"]].append(Finding.from_json(d))
        for fid, fs in per_id.items():
            if len(fs) > 1:
                assert by_id[fid].SUBJECT is not None, f"{path}: {fid} reports {len(fs)} findings, SUBJECT None"
                assert len({f.subject for f in fs}) == len(fs), (path, fid, [f.subject for f in fs])


@pytest.mark.parametrize("name", detectors.DETECTORS)
def test_each_detector_is_importable_on_its_own(name):
    mod = importlib.import_module(f"lockdown.analyzers.detectors.{name}")
    assert mod.ID in tomllib.loads(detectors.THRESHOLDS.read_text())
