"""`lockdown run` from Python (lockdown/pipeline/run.py): typed options, a progress callback,
and the finished run directory as the CLI leaves it; every input checked before anything
starts."""
from __future__ import annotations

import json

import pytest

from conftest import HELLO, SHARED_PREPARED
from lockdown.errors import LockdownError
from lockdown.pipeline.run import RunOptions, plan_run, run
from lockdown.rundir.store import open_run


@pytest.fixture
def lockdown_env(home, monkeypatch):
    monkeypatch.setenv("LOCKDOWN_HOME", str(home))
    monkeypatch.setenv("LOCKDOWN_PREPARED_DIR", str(SHARED_PREPARED))
    monkeypatch.delenv("LOCKDOWN_PHP_EXTENSION_DIR", raising=False)


def test_inputs_are_checked_before_anything_starts(lockdown_env, tmp_path):
    with pytest.raises(LockdownError, match="unknown target 'no-such-target'"):
        plan_run("no-such-target", tmp_path / "out", RunOptions())
    with pytest.raises(LockdownError, match="no verify.json"):
        plan_run("hello", tmp_path / "out", RunOptions(on_top_of=tmp_path))
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "incomplete.json").write_text("{}")
    with pytest.raises(LockdownError, match="did not finish"):
        plan_run("hello", tmp_path / "taken", RunOptions())
    # TARGET is recorded as it resolves again from anywhere: a path absolute, a name as it is
    assert plan_run("hello", tmp_path / "out", RunOptions()).target_arg == "hello"
    assert plan_run(str(HELLO), tmp_path / "out", RunOptions()).target_arg == str(HELLO)
    assert not (tmp_path / "out").exists()


@pytest.mark.server
def test_run_from_python(lockdown_env, tmp_path):
    lines = []
    outcome = run("hello", tmp_path / "out", RunOptions(bench=False, requests=12, probe=False,
                                                        recorded=["--no-bench", "--requests", "12"]),
                  say=lines.append)
    out = tmp_path / "out"
    assert outcome.directory == out and outcome.bench is None and outcome.report == out / "report.html"
    assert "== profile hello" in lines and "== report" in lines and not any(l.startswith("== bench") for l in lines)
    assert not (out / "incomplete.json").exists() and not (out / "bench.json").exists()
    assert json.loads((out / "findings.json").read_text()) == outcome.document.to_json()
    doc = open_run(out).document
    assert doc.target == "hello" and doc.settings.requests == 12 and doc.settings.options == ["--no-bench",
                                                                                              "--requests", "12"]
    assert outcome.bundle_dir == out / "bundle" and open_run(out).analysis().requests > 0
