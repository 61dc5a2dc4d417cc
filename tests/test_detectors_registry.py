"""Adding a detector is one module, registered in one place: these tests fail when a module of
lockdown/analyzers/detectors/ that is a detector (it has an `ID` or a `detect`) is not in
`DETECTORS`, has no section in thresholds.toml, or does not say what tells its findings apart
(`SUBJECT`: the details key `verify` matches a finding by across captures, findings.SUBJECT_KEYS;
None for a detector that reports one finding at most).

And the shape of every module of the package (issue 32): no function over 80 lines; a
detector decides on numbers (`decide`) and its describer turns them into prose (`describe`):
only describe* functions make findings, evidence and remediations, or hold string literals of
more than one sentence."""
from __future__ import annotations

import ast
import importlib
import json
import re
import tomllib
from collections import defaultdict
from pathlib import Path

import pytest

from lockdown.analyzers import detectors
from lockdown.analyzers.findings import SUBJECT_KEYS, Finding
from lockdown.bundle.store import open_bundle

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
    orphans = set(sections) - set(ids)
    assert orphans == set(), f"thresholds.toml sections of no detector: {sorted(orphans)}"


def test_every_detector_declares_what_tells_its_findings_apart():
    for mod in detectors.modules():
        assert hasattr(mod, "SUBJECT"), (
            f"{mod.__name__}: no SUBJECT (the details key of its findings' subject, or None)")
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


# -- decision apart from description ------------------------------------------------------------
# A detector decides on numbers (its case) and a describer turns the case into a finding's
# prose: title, summary, evidence, what a fix was checked against. Describers are the functions
# named describe* (or _describe*), with what they define inside them.

MAX_LINES = 80
SENTENCE_END = re.compile(r"[.!?][)\"'`]*\s+(?=[A-Z(`])")


def functions(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def literal_text(node: ast.AST) -> str | None:
    """A string literal's text, an f-string's with each placeholder as X; None otherwise."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "X" for v in node.values)
    return None


def prose_outside_describers(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, text) of the string literals of more than one sentence that are neither a
    docstring nor inside a describer."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and literal_text(first.value) is not None:
                skip.add(id(first.value))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.lstrip("_").startswith("describe"):
            skip |= {id(n) for n in ast.walk(node)}
        if isinstance(node, ast.JoinedStr):
            skip |= {id(v) for v in node.values}
    out = []
    for node in ast.walk(tree):
        text = literal_text(node)
        if text is not None and id(node) not in skip and SENTENCE_END.search(text.strip()):
            out.append((node.lineno, text))
    return out


@pytest.mark.parametrize("name", module_names())
def test_no_function_of_the_detectors_is_over_80_lines(name):
    tree = ast.parse((PACKAGE / f"{name}.py").read_text())
    long = [(f.name, f.end_lineno - f.lineno + 1) for f in functions(tree) if f.end_lineno - f.lineno + 1 > MAX_LINES]
    assert not long, f"{name}: functions over {MAX_LINES} lines: {long}"


@pytest.mark.parametrize("name", module_names())
def test_no_prose_outside_the_describers(name):
    found = prose_outside_describers(ast.parse((PACKAGE / f"{name}.py").read_text()))
    assert not found, f"{name}: prose of more than one sentence outside a describe* function: " + "; ".join(
        f"line {line}: {text[:70]!r}" for line, text in found)


@pytest.mark.parametrize("name", module_names())
def test_findings_and_their_evidence_are_made_by_describers(name):
    """The detectors decide; only describers make a Finding, an Evidence line or a Remediation."""
    tree = ast.parse((PACKAGE / f"{name}.py").read_text())
    inside = {id(n) for f in functions(tree) if f.name.lstrip("_").startswith("describe") for n in ast.walk(f)}
    made = [(n.lineno, n.func.id) for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
            and n.func.id in ("Finding", "Evidence", "Remediation") and id(n) not in inside]
    assert not made, f"{name}: made outside a describe* function: {made}"


def test_detectors_split_decision_from_description():
    """Every detector module has decide(ctx) (its cases: the numbers and the branch taken) and
    describe(case) (the finding); one reporting one finding at most (SUBJECT None) decides one
    case at most."""
    for mod in detectors.modules():
        assert callable(getattr(mod, "decide", None)) and callable(getattr(mod, "describe", None)), mod.__name__
    for path in sorted(GOLDEN.glob("*/bundle")):
        ctx = detectors.build_context(open_bundle(path), detectors.load_thresholds())
        for mod in detectors.modules():
            cases = mod.decide(ctx)
            assert isinstance(cases, list) and (mod.SUBJECT is not None or len(cases) <= 1), (path, mod.ID)
            assert [mod.describe(c).to_json() for c in cases] == [f.to_json() for f in mod.detect(ctx)]
