"""A user's MariaDB server (--mysql) is protected whatever LOCKDOWN_HOME is used, and its
password is kept out of everything lockdown writes (issue 29, points 2 and 3).

The "user's server" is a MariaDB started by the test (harness PrivateMariaDB) with an account
for lockdown and log settings of its own; two LOCKDOWN_HOMEs share it."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import REPO, _env, lockdown_argv, wait_for_line
from lockdown.collectors.server_settings import WATCHED
from lockdown.harness.mariadb import DatabaseServer, PrivateMariaDB, redact_dsn, redacted_argv
from lockdown.harness.processes import ProcessGroup

# every character an option file or a shell would misread, around a mark to grep for
MARK = "Zq7Kv9"
PASSWORD = MARK + "#a;b'c\"d e\\f"


@dataclass
class Server:
    admin: DatabaseServer
    port: int
    datadir: Path
    logs: Path            # the directory of the server's own slow log

    def dsn(self, password: str | None = PASSWORD) -> str:
        secret = "" if password is None else ":" + urllib.parse.quote(password, safe="")
        return f"mysql://owner{secret}@127.0.0.1:{self.port}/"

    def settings(self) -> dict:
        out = self.admin.sql("SHOW GLOBAL VARIABLES WHERE Variable_name IN "
                             f"({', '.join(repr(w) for w in WATCHED)});")
        return dict(line.split("\t", 1) for line in out.splitlines())

    def databases(self) -> list[str]:
        return self.admin.sql("SHOW DATABASES LIKE 'lockdown%';").split()

    def lock_free(self, name: str, timeout: float = 60) -> bool:
        """Whether the server's named lock is free (waiting while the server notices that a
        killed lockdown's connection ended)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.admin.sql(f"SELECT IS_FREE_LOCK('{name}');").strip() == "1":
                return True
            time.sleep(0.2)
        return False


def _their_log_dir(tmp_path: Path, datadir: Path) -> Path:
    """A directory the server's account writes its own slow log into."""
    logs = tmp_path / "theirlogs"
    logs.mkdir(exist_ok=True)
    st = datadir.stat()
    os.chown(logs, st.st_uid, st.st_gid)
    return logs


def _sql_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


@pytest.fixture
def server(tmp_path):
    theirs = tmp_path / "theirs"
    with ProcessGroup(theirs) as procs:
        PrivateMariaDB.initialize(procs, theirs / "data")
        mysql = PrivateMariaDB(procs, theirs / "mysql", theirs / "data")
        admin: DatabaseServer = mysql.start()
        logs = _their_log_dir(tmp_path, theirs / "data")
        admin.sql(f"CREATE USER 'owner'@'127.0.0.1' IDENTIFIED BY {_sql_string(PASSWORD)};"
                  "GRANT ALL ON *.* TO 'owner'@'127.0.0.1';"
                  "SET GLOBAL long_query_time = 2.5; SET GLOBAL slow_query_log = ON;"
                  f"SET GLOBAL slow_query_log_file = '{logs}/slow.log';")
        yield Server(admin, mysql.port, theirs / "data", logs)


@pytest.fixture
def homes(tmp_path):
    """Two LOCKDOWN_HOMEs: the environment of each."""
    out = []
    for name in ("home1", "home2"):
        (tmp_path / name).mkdir()
        out.append({**_env(tmp_path / name), "LOCKDOWN_SERVERS_DIR": str(tmp_path / "servers")})
    return out


def _run(env, *args, timeout=600):
    return subprocess.run(lockdown_argv(*args), capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=REPO)


def _profile_args(env, target, dsn, *extra):
    return ("profile", target, "-o", Path(env["LOCKDOWN_HOME"]) / f"b-{time.time_ns()}",
            "--collect", "queries", "--no-overhead-check", "--mysql", dsn, *extra)


def _start_capture(env, dsn):
    """A long `profile sqltag` capture, once its slow log is on."""
    proc = subprocess.Popen(lockdown_argv(*_profile_args(env, "sqltag", dsn, "--requests", "100000")),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=REPO)
    wait_for_line(proc, "[capture] slow log on", timeout=300)
    return proc


def _one_error_line(r) -> str:
    assert r.returncode != 0, r.stdout[-2000:] + r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lockdown: error: "), r.stderr
    return lines[0]


def test_second_capture_from_another_home_is_refused(server, homes):
    """One capture per server, enforced on the server: the second home's capture is refused
    before it changes anything, and so is its claim on the same database; afterwards every
    setting lockdown watches is back as it was."""
    home1, home2 = homes
    before = server.settings()
    assert before["long_query_time"] == "2.500000" and before["slow_query_log"] == "ON"
    first = _start_capture(home1, server.dsn())
    try:
        during = server.settings()
        assert during["long_query_time"] == "0.000000"
        # the same target: its database is the first one's
        same = _run(home2, *_profile_args(home2, "sqltag", server.dsn(), "--requests", "5"))
        line = _one_error_line(same)
        assert f"database lockdown_sqltag on 127.0.0.1:{server.port} is in use by another lockdown" in line
        # another target: its database is its own, the capture is refused
        other = _run(home2, *_profile_args(home2, "sortspill", server.dsn(), "--requests", "5"))
        line = _one_error_line(other)
        assert f"another lockdown is capturing statements on MariaDB at 127.0.0.1:{server.port}" in line
        assert server.settings() == during           # the refused ones changed nothing
        assert "lockdown_sortspill" not in server.databases()
        assert "lockdown_sqltag" in server.databases()   # the first one's, left in place
    finally:
        first.send_signal(signal.SIGINT)
        _, err = first.communicate(timeout=120)
    assert first.returncode == 130, err
    assert server.settings() == before
    assert server.databases() == []
    # now the second home captures, and puts back the same settings
    r = _run(home2, *_profile_args(home2, "sqltag", server.dsn(), "--requests", "20"))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert server.settings() == before
    assert server.databases() == []
    for env in homes:
        again = _run(env, "restore")
        assert again.returncode == 0 and again.stdout.strip() == "nothing to restore", again.stderr


def test_kill_9_then_other_home_then_restore(server, homes):
    """A capture killed outright leaves its settings and its database on the server. The next
    command of another home puts both back before it starts (the records of users' servers are
    one place for every LOCKDOWN_HOME, paths.servers_dir), then captures with the server's own
    settings and puts those back; `lockdown restore` in the killed one's home has nothing left.
    Killed again: `lockdown restore` puts back the settings and drops the database."""
    home1, home2 = homes
    before = server.settings()
    first = _start_capture(home1, server.dsn())
    first.kill()
    first.wait()
    assert server.settings()["long_query_time"] == "0.000000"
    assert "lockdown_sqltag" in server.databases()
    assert server.lock_free("lockdown_capture") and server.lock_free("lockdown_db:lockdown_sqltag")

    r = _run(home2, *_profile_args(home2, "sqltag", server.dsn(), "--requests", "20"))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert f"restored MariaDB settings on 127.0.0.1:{server.port} left changed by an interrupted capture" in r.stderr
    assert "still has the settings of an interrupted lockdown capture" not in r.stderr
    assert server.settings() == before

    r = _run(home1, "restore")
    out = r.stdout + r.stderr
    assert r.returncode == 0 and r.stdout.strip() == "nothing to restore", out

    # killed again, and nothing in between: restore drops the database it left
    first = _start_capture(home1, server.dsn())
    first.kill()
    first.wait()
    assert server.lock_free("lockdown_capture")
    r = _run(home1, "restore")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert f"dropped database lockdown_sqltag on 127.0.0.1:{server.port}" in out
    assert server.settings() == before
    assert server.databases() == []
    for env in homes:
        again = _run(env, "restore")
        assert again.returncode == 0 and again.stdout.strip() == "nothing to restore", again.stderr
        assert again.stderr == ""
    assert not list((Path(home1["LOCKDOWN_HOME"]) / "active").rglob("*.json"))
    assert not list(Path(home1["LOCKDOWN_SERVERS_DIR"]).rglob("*.json"))


def test_slow_log_directory_gone_falls_back_to_default(server, homes):
    """The server's own slow log directory removed during a capture: that one setting cannot
    be put back; the server's default is set instead, said in one line, and nothing is left to
    restore. The same after a kill -9 and `lockdown restore`."""
    home1, _ = homes
    before = server.settings()
    first = _start_capture(home1, server.dsn())
    shutil.rmtree(server.logs)
    first.send_signal(signal.SIGINT)
    _, err = first.communicate(timeout=120)
    assert first.returncode == 130, err
    warned = [line for line in err.splitlines() if "not put back as they were" in line]
    assert len(warned) == 1 and f"slow_query_log_file={server.logs}/slow.log refused" in warned[0], err
    now = server.settings()
    assert now["slow_query_log_file"] != before["slow_query_log_file"]
    assert "lockdown-slowlog-" not in now["slow_query_log_file"]
    assert {k: v for k, v in now.items() if k != "slow_query_log_file"} == \
        {k: v for k, v in before.items() if k != "slow_query_log_file"}
    r = _run(home1, "restore")
    assert r.returncode == 0 and r.stdout.strip() == "nothing to restore" and r.stderr == "", r.stderr

    # again, killed outright: `lockdown restore` falls back the same way, once
    _their_log_dir(server.logs.parent, server.datadir)
    server.admin.sql(f"SET GLOBAL slow_query_log_file = '{server.logs}/slow.log';")
    before = server.settings()
    first = _start_capture(home1, server.dsn())
    first.kill()
    first.wait()
    shutil.rmtree(server.logs)
    r = _run(home1, "restore")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert f"slow_query_log_file={server.logs}/slow.log refused" in out
    assert server.settings()["long_query_time"] == before["long_query_time"]
    assert "lockdown-slowlog-" not in server.settings()["slow_query_log_file"]
    r = _run(home1, "restore")
    assert r.returncode == 0 and r.stdout.strip() == "nothing to restore" and r.stderr == "", r.stderr


def _files_holding(root: Path, needles: list[bytes]) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            found += [f"{path}: {n!r}" for n in needles if n in data]
    return found


def _command_lines_holding(needle: str) -> list[str]:
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                cmd = Path(entry.path, "cmdline").read_bytes()
            except OSError:
                continue
            if needle.encode() in cmd:
                found.append(cmd.replace(b"\0", b" ").decode(errors="replace"))
    return found


def test_password_is_in_no_output(server, homes, tmp_path):
    """A --mysql bench and profile with a password holding # ; ' " \\ and a space connect,
    and neither their outputs, their run directories, LOCKDOWN_HOME, their stdout and stderr
    nor any process's command line holds the password (the profile takes it from
    $LOCKDOWN_MYSQL_PASSWORD, so that lockdown's own command line does not either)."""
    home1, _ = homes
    out = tmp_path / "out"
    out.mkdir()
    needles = [MARK.encode(), urllib.parse.quote(PASSWORD, safe="").encode()]
    bench = _run(home1, "bench", "sqltag", "--mysql", server.dsn(), "--runs", "1", "--duration", "1",
                 "--warmup-duration", "1", "--json", out / "bench.json")
    assert bench.returncode == 0, bench.stdout[-2000:] + bench.stderr[-2000:]
    config = json.loads((out / "bench.json").read_text())["config"]
    assert config["mysql"] == f"mysql://owner:***@127.0.0.1:{server.port}/"

    env = {**home1, "LOCKDOWN_MYSQL_PASSWORD": PASSWORD}
    proc = subprocess.Popen(lockdown_argv("profile", "sqltag", "-o", out / "bundle", "--requests", "30",
                                          "--collect", "queries,excimer,xhprof", "--mysql",
                                          server.dsn(password=None)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    seen = wait_for_line(proc, "[capture] slow log on", timeout=300)
    assert _command_lines_holding(MARK) == []        # while it runs, with its clients and servers
    rest, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, (seen + rest)[-2000:] + err[-2000:]
    manifest = json.loads((out / "bundle" / "manifest.json").read_text())
    assert f"mysql://owner@127.0.0.1:{server.port}/" in manifest["command"]
    assert manifest["collected"]["queries"]["statements"] > 0      # it connected, and captured

    assert MARK not in bench.stdout + bench.stderr
    assert MARK not in seen + rest + err
    assert _files_holding(out, needles) == []
    assert _files_holding(Path(home1["LOCKDOWN_HOME"]), needles) == []


def test_run_marker_records_no_password(tmp_path, monkeypatch):
    """A `lockdown run` directory's incomplete.json records the command line, redacted."""
    from lockdown import run_marker
    dsn = "mysql://owner:" + urllib.parse.quote(PASSWORD, safe="") + "@127.0.0.1:3306/"
    monkeypatch.setattr("sys.argv", ["lockdown", "run", "x", "--mysql", dsn])
    marker = run_marker.claim(tmp_path)
    assert json.loads(marker.read_text())["command"][-1] == "mysql://owner:***@127.0.0.1:3306/"
    assert MARK not in marker.read_text()


def test_redacted_forms():
    dsn = "mysql://owner:" + urllib.parse.quote(PASSWORD, safe="") + "@127.0.0.1:3306/?socket=/s"
    assert redact_dsn(dsn) == "mysql://owner:***@127.0.0.1:3306/?socket=/s"
    assert redact_dsn("mysql://owner@127.0.0.1/") == "mysql://owner@127.0.0.1/"
    assert redact_dsn("mysql://u:p@ss w@h:1/") == "mysql://u:***@h:1/"     # an unencoded @ and space
    assert redacted_argv(["lockdown", "bench", "x", "--mysql", dsn, "--mysql=" + dsn]) == \
        ["lockdown", "bench", "x", "--mysql", redact_dsn(dsn), "--mysql=" + redact_dsn(dsn)]
