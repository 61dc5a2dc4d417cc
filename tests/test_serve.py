"""`lockdown serve`: the stack up until Ctrl-C, on the real servers."""
from __future__ import annotations

import json
import shlex
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import REPO, lockdown_argv, processes_mentioning, wait_for_line

pytestmark = pytest.mark.server


def _line(output: str, prefix: str) -> str:
    return next(line for line in output.splitlines() if line.startswith(prefix))[len(prefix):].strip()


def test_serve_serves_until_ctrl_c_then_stops_everything(env, tmp_path):
    run_dir = tmp_path / "served"
    proc = subprocess.Popen(lockdown_argv("serve", "catalog", "--run-dir", run_dir, "--workers", "2"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        out = wait_for_line(proc, "run directory:", timeout=300)
        url = _line(out, "serving").split()[0]
        assert url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(url, timeout=30) as resp:
            assert resp.status == 200 and "catalog ok" in resp.read().decode()
        assert processes_mentioning(str(run_dir)), "no server names the run directory"

        # the database client command, as printed, reaches the target's database; the password is
        # in the 0600 file it names, never in the output
        client = shlex.split(_line(out, "database:"))
        cnf = Path(next(a for a in client if a.startswith("--defaults-extra-file=")).split("=", 1)[1])
        assert cnf.stat().st_mode & 0o777 == 0o600
        password = cnf.read_text().split("password=", 1)[1].strip().strip('"')
        assert password and password not in out
        rows = subprocess.run(client + ["--batch", "--skip-column-names", "-e", "SELECT COUNT(*) FROM products"],
                              capture_output=True, text=True, timeout=60)
        assert rows.returncode == 0, rows.stderr
        assert int(rows.stdout) > 0

        # a request sent by hand with the printed headers lands in the capture's request log
        by_hand = _line(out, "a request through the capture:").split("  # then:")[0]
        assert subprocess.run(shlex.split(by_hand), timeout=60).returncode == 0
        records = Path(_line(out, "capture records:")) / "requests.jsonl"
        deadline = time.monotonic() + 10
        # the prepend writes the line after the response went out: wait for the whole line
        while not (records.exists() and records.read_text().endswith("\n")) and time.monotonic() < deadline:
            time.sleep(0.1)
        logged = [json.loads(line) for line in records.read_text().splitlines()]
        assert [r["id"] for r in logged] == ["by-hand-1"] and logged[0]["status"] == 200
        assert (records.parent / "xhprof" / "by-hand-1.json").is_file()

        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "stopped" in rest
    assert password not in out + rest + err
    assert processes_mentioning(str(run_dir)) == []
    assert not (run_dir / "app").exists() and not (run_dir / "mysql" / "data").exists()
    assert (run_dir / "logs" / "nginx-access.log").is_file()


def test_serve_on_sigterm_stops_everything_and_exits_143(env, tmp_path):
    run_dir = tmp_path / "served"
    proc = subprocess.Popen(lockdown_argv("serve", "hello", "--run-dir", run_dir, "--workers", "1"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        out = wait_for_line(proc, "run directory:", timeout=300)
        assert "database:" not in out                   # hello has none
        with urllib.request.urlopen(_line(out, "serving").split()[0], timeout=30) as resp:
            assert resp.status == 200
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143
    assert "terminated; everything started was stopped" in err
    assert processes_mentioning(str(run_dir)) == []
