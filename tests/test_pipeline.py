"""`lockdown run` and `lockdown compare` from Python (lockdown/pipeline/): typed options, a
progress callback, and the finished directory as the CLI leaves it; every input checked before
anything starts."""
from __future__ import annotations

import json

import pytest

from conftest import HELLO, SHARED_PREPARED
from lockdown.errors import LockdownError
from lockdown.harness.bench import BenchOptions
from lockdown.pipeline.compare import CompareOptions, CompareOutcome, compare, plan_compare
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
    assert "== profile hello" in lines and "== report" in lines
    assert not any(line.startswith("== bench") for line in lines)
    assert not (out / "incomplete.json").exists() and not (out / "bench.json").exists()
    assert json.loads((out / "findings.json").read_text()) == outcome.document.to_json()
    doc = open_run(out).document
    assert doc.target == "hello" and doc.settings.requests == 12 and doc.settings.options == ["--no-bench",
                                                                                              "--requests", "12"]
    assert outcome.bundle_dir == out / "bundle" and open_run(out).analysis().requests > 0


def test_compare_inputs_are_checked_before_anything_starts(lockdown_env, tmp_path):
    with pytest.raises(LockdownError, match="nothing to compare"):
        plan_compare("hello", CompareOptions())
    with pytest.raises(LockdownError, match="both configurations would be the same"):
        plan_compare("hello", CompareOptions(with_ini={"opcache.enable": "0"}, php_ini={"opcache.enable": "0"}))
    with pytest.raises(LockdownError, match="unknown target"):
        plan_compare("no-such-target", CompareOptions(with_ini={"opcache.enable": "0"}))
    plan = plan_compare("hello", CompareOptions(with_ini={"memory_limit": "64M"}, run_dir=tmp_path / "cmp"))
    assert plan.target.name == "hello" and plan.change == {"memory_limit": "64M"} and plan.base == {}
    assert plan.plan is None and not (tmp_path / "cmp").exists()


@pytest.mark.server
def test_compare_from_python(lockdown_env, tmp_path):
    """A tiny change (memory_limit, which hello prints): both arms in interleaved pairs, and
    compare.json as the command writes it."""
    lines = []
    options = CompareOptions(with_ini={"memory_limit": "64M"}, php_ini={"memory_limit": "96M"},
                             bench=BenchOptions(runs=5, duration=1, warmup_duration=0), run_dir=tmp_path / "cmp")
    outcome = compare("hello", options, say=lines.append)
    assert isinstance(outcome, CompareOutcome) and outcome.directory == tmp_path / "cmp"
    assert outcome.path == tmp_path / "cmp" / "compare.json"
    assert json.loads(outcome.path.read_text()) == outcome.result
    result = outcome.result
    assert result["target"] == "hello" and result["run_dir"] == str(tmp_path / "cmp") and result["patches"] == []
    assert result["php_ini"] == {"both": {"memory_limit": "96M"}, "with": {"memory_limit": "64M"}}
    ab = result["bench"]
    assert len(ab["before"]["runs"]) == len(ab["after"]["runs"]) == 5
    assert ab["after"]["php_ini_effective_overrides"].get("memory_limit") == "64M"
    assert outcome.change is ab["change"] and outcome.change["pairs"] == 5 and len(outcome.change["ci95_pct"]) == 2
    assert result["responses"]["urls"] == 2 and result["responses"]["same"] == 0   # the page prints it
    assert lines and all(isinstance(line, str) for line in lines)
