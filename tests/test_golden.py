"""Golden outputs of recorded bundles: `lockdown analyze BUNDLE --json`'s analysis (what `run`
writes to analysis.json), the detect step's findings (`detect(build_context(bundle,
thresholds))`, what `run` writes to findings.json before the argument probe and the patch
proposals, which need servers), and the report.html `lockdown report` renders from a run
directory holding them, recomputed from the bundles committed under fixtures/golden/ and
compared as text, byte for byte, with the outputs committed beside them.

Normalised: the bundle's absolute path (`analysis.json` "bundle", and anywhere else it would
appear), written as "<bundle>": it depends on where the repository is checked out. Nothing
else is volatile: analysis and detection are pure functions of the bundle.

After a change meant to alter these outputs, record them again and review the diff:
    LOCKDOWN_GOLDEN_UPDATE=1 python3 -m pytest -q tests/test_golden.py
A new golden bundle: fixtures/golden/record.py (fixtures/golden/README.md)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lockdown.analyzers.analysis import analyze
from lockdown.analyzers.detectors import build_context, detect, load_thresholds
from lockdown.bundle.store import open_bundle

GOLDEN = Path(__file__).resolve().parent.parent / "fixtures" / "golden"
CASES = sorted(p.name for p in GOLDEN.iterdir() if (p / "bundle" / "manifest.json").is_file())
UPDATE = os.environ.get("LOCKDOWN_GOLDEN_UPDATE") == "1"


def as_text(data, bundle: Path) -> str:
    """JSON as `lockdown run` writes it (reports/output.write_json_atomic), the bundle's path
    normalised."""
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    return text.replace(json.dumps(str(bundle))[1:-1], "<bundle>")


def outputs(case: str) -> dict[str, str]:
    root = GOLDEN / case / "bundle"
    bundle = open_bundle(root)
    findings = detect(build_context(bundle, load_thresholds()))
    return {"analysis.json": as_text(analyze(bundle), root),
            "findings.json": as_text([f.to_json() for f in findings], root)}


def report_text(case: str, tmp: Path) -> str:
    """report.html of a run directory holding the golden bundle, analysis and findings (what
    `lockdown report DIR` writes for them), with the run's directory written as "<run>"."""
    from lockdown.reports.html_report import report_html
    run = tmp / f"run-{case}"
    run.mkdir()
    (run / "bundle").symlink_to(GOLDEN / case / "bundle")
    (run / "analysis.json").write_text((GOLDEN / case / "analysis.json").read_text())
    findings = json.loads((GOLDEN / case / "findings.json").read_text())
    (run / "findings.json").write_text(json.dumps({
        "format": 1, "target": case, "bundle": str(run / "bundle"), "findings": findings, "dismissed": [],
        "run": {"target_dir": f"/targets/{case}", "php_ini": {}, "requests": 120, "xhprof_every": 10,
                "thresholds": load_thresholds()}}))
    return report_html(run).replace(str(run), "<run>")


def test_golden_cases_exist():
    assert {"minicms", "minicms-engine-off", "sortspill"} <= set(CASES)


@pytest.mark.parametrize("case", CASES)
def test_outputs_unchanged(case, tmp_path):
    for name, text in {**outputs(case), "report.html": report_text(case, tmp_path)}.items():
        path = GOLDEN / case / name
        if UPDATE:
            path.write_text(text)
            continue
        assert path.is_file(), f"{path}: missing; record it with LOCKDOWN_GOLDEN_UPDATE=1"
        want = path.read_text()
        if text != want:
            got = tmp_path / name
            got.write_text(text)
            pytest.fail(f"{case}/{name} differs from the recorded output: diff -u {path} {got}")


def test_samples_are_symbolized_once_per_bundle(monkeypatch):
    """`run` analyzes a bundle, builds the detectors' Context and draws the native flame graph
    from the same Bundle: the perf samples are named once (analysis.symbolized), not once for each."""
    from lockdown.analyzers import analysis
    calls = []
    real = analysis.symbolize
    monkeypatch.setattr(analysis, "symbolize", lambda *a, **k: calls.append(1) or real(*a, **k))
    bundle = open_bundle(GOLDEN / "minicms" / "bundle")
    analyze(bundle)
    ctx = build_context(bundle, load_thresholds())
    from lockdown.analyzers import stacks           # and the native flame graph of a `run` too
    assert stacks.native_stacks(bundle, stacks.request_ids(bundle))
    assert len(calls) == 1 and ctx.native
    assert analysis.symbolized(bundle)[0] is analysis.symbolized(bundle)[0]
    analyze(open_bundle(GOLDEN / "minicms" / "bundle"))        # another Bundle: named again
    assert len(calls) == 2
