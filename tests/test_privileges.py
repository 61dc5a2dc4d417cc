"""What another local account can reach while lockdown serves a target: nothing. The servers
run as the unprivileged account lockdown-run, MariaDB takes no password-less login over TCP and
writes files only inside the run, php-fpm's socket and the run directory are closed to others.
Checked as `nobody` on the real stack (tests/probes/privileges.py, run as a bench hook)."""
from __future__ import annotations

import json
import os
import pwd
import sys
from pathlib import Path

import pytest

from conftest import REPO, run_dir_of

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="privilege separation applies when lockdown runs as root")

PROBE = REPO / "tests" / "probes" / "privileges.py"


@pytest.fixture(scope="module")
def probed(home, tmp_path_factory):
    from conftest import lockdown_runner
    out = tmp_path_factory.mktemp("privileges") / "run"
    r = lockdown_runner(home)("bench", "minicms", "--runs", "1", "--duration", "3", "--warmup-duration", "1",
                              "--run-dir", out, "--exec-after-warmup",
                              f'{sys.executable} {PROBE} "$LOCKDOWN_RUN_DIR" > "$LOCKDOWN_RUN_DIR/privileges.json"')
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    run_dir = Path(run_dir_of(r.stdout))
    return json.loads((run_dir / "privileges.json").read_text()), run_dir


def refused(attempt: dict) -> bool:
    return attempt["rc"] != 0


def test_servers_run_as_the_unprivileged_account(probed):
    report, _ = probed
    uid = pwd.getpwnam("lockdown-run").pw_uid
    assert set(report["uids"]) == {"mariadbd", "php-fpm worker", "nginx worker"}, report["uids"]
    for name, uids in report["uids"].items():
        assert uids and all(u == uid for u in uids), (name, uids)


def test_nobody_cannot_log_in_to_the_private_mariadb(probed):
    report, _ = probed
    for attempt in ("tcp_root", "tcp_app_nopass", "tcp_app_oldpass", "socket_root"):
        assert refused(report[attempt]), (attempt, report[attempt])
    assert "Access denied" in report["tcp_app_oldpass"]["err"] or "not allowed" in report["tcp_app_oldpass"]["err"]
    # the app's account works with this run's password, kept in a file only root reads
    assert report["tcp_app_password"]["rc"] == 0, report["tcp_app_password"]
    assert "lockdown@127.0.0.1" in report["tcp_app_password"]["out"]
    assert report["app_password_mode"] == "0o600"


def test_into_outfile_outside_the_run_is_refused(probed):
    report, _ = probed
    assert report["outfile"]["rc"] != 0 and not report["outfile"]["created"], report["outfile"]
    assert "secure-file-priv" in report["outfile"]["err"], report["outfile"]


def test_php_fpm_socket_and_run_directory_are_closed_to_others(probed):
    report, run_dir = probed
    assert refused(report["fpm_connect"]) and "PermissionError" in report["fpm_connect"]["err"], report["fpm_connect"]
    assert refused(report["list_run_dir"]), report["list_run_dir"]
    st = run_dir.stat()
    assert st.st_mode & 0o007 == 0 and st.st_gid == pwd.getpwnam("lockdown-run").pw_gid


def test_a_run_directory_the_servers_cannot_reach_is_one_line(lockdown, tmp_path):
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    closed.chmod(0o700)
    r = lockdown("bench", "hello", "--runs", "1", "--duration", "1", "--run-dir", closed / "run")
    assert r.returncode != 0
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("lockdown: error: "), r.stderr
    assert f"lockdown-run, which cannot pass through {closed} (mode 700)" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
