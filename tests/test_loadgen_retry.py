"""siege 4.0 sometimes hangs after its timed run ends: the harness throws that run away and
runs it again, and reports any other failure as it is. Real child processes stand in for a
hanging siege, since the real hang cannot be provoked on demand."""
import pytest

from lockdown.errors import PhaseFailed
from lockdown.harness import loadgen
from lockdown.harness.processes import ProcessGroup

HANG = "echo '** SIEGE 4.0.7'; echo 'Lifting the server siege...' >&2; exec sleep 60"
SUMMARY = "echo 'Transaction rate: 5.0 trans/sec' >&2; echo 'HTTP/1.1 200 0.01 secs: 5 bytes ==> GET /'"


@pytest.fixture
def quick(monkeypatch, tmp_path):
    monkeypatch.setenv("LOCKDOWN_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(loadgen, "_SIEGE_GRACE_S", 1.0)
    with ProcessGroup(tmp_path / "run") as procs:
        yield procs, tmp_path / "load"


def _siege(procs, workdir, script):
    workdir.mkdir(exist_ok=True)
    return loadgen._siege_until_it_exits(procs, ["sh", "-c", script], 0, workdir, "measure-1", None)


def test_a_hung_siege_run_is_run_again(quick, tmp_path):
    procs, workdir = quick
    count = tmp_path / "attempts"
    script = (f"echo x >> {count}; if [ $(wc -l < {count}) -lt 2 ]; then {HANG}; fi; {SUMMARY}")
    out = _siege(procs, workdir, script)
    assert "HTTP/1.1 200" in out
    assert count.read_text().count("x") == 2
    assert (workdir / "measure-1.hung-1.log").read_text().count("Lifting the server siege") == 1
    assert "Transaction rate" in (workdir / "measure-1.log").read_text()
    assert procs.children == []


def test_siege_that_always_hangs_fails_after_the_last_attempt(quick):
    procs, workdir = quick
    with pytest.raises(PhaseFailed, match="did not finish"):
        _siege(procs, workdir, HANG)
    hung = sorted(p.name for p in workdir.glob("*.hung-*.log"))
    assert hung == [f"measure-1.hung-{i}.log" for i in range(1, loadgen.SIEGE_ATTEMPTS)]


def test_other_siege_failures_are_not_retried(quick, tmp_path):
    procs, workdir = quick
    count = tmp_path / "attempts"
    with pytest.raises(PhaseFailed, match="exit 3"):
        _siege(procs, workdir, f"echo x >> {count}; exit 3")
    assert count.read_text().count("x") == 1
