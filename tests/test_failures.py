"""Bad situations give one clear line, a non-zero exit, and leave nothing running."""
import json
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from conftest import HELLO, REPO, lockdown_argv, processes_mentioning, run_dir_of, wait_for_line
from lockdown.harness import ports

SHORT = ("--runs", "1", "--duration", "1", "--warmup-duration", "0", "--warmup-requests", "1")


def test_port_in_use(lockdown):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = lockdown("bench", "hello", "--port", port, *SHORT)
    assert r.returncode == 2
    assert r.stderr.strip() == (f"lockdown: error: port {port} on 127.0.0.1 (for nginx) is already "
                                f"in use: pass another --port, or leave --port out to use a free port")


def test_malformed_mysql_dsn_is_a_usage_error_before_anything_is_made(lockdown, tmp_path):
    """A --mysql DSN of the wrong form (or with a port out of range, which urllib only finds when
    the port is read) is refused when the option is parsed: one line, exit 2, no run directory."""
    home = tmp_path / "home"
    for dsn in ("notadsn", "mysql://u:p@127.0.0.1:99999/", "postgres://u@127.0.0.1/"):
        r = lockdown("bench", "wordpress", "--mysql", dsn, *SHORT, extra_env={"LOCKDOWN_HOME": str(home)})
        assert r.returncode == 2 and r.stdout == ""
        shown = dsn.replace(":p@", ":***@")     # the password is never shown, also in a bad DSN
        assert r.stderr == (f"lockdown: error: Invalid value for '--mysql': {shown!r} is not a DSN: "
                            f"expected mysql://USER:PASSWORD@HOST[:PORT]/[?socket=PATH] "
                            f"(see `lockdown bench --help`)\n"), r.stderr
    assert not (home / "runs").exists()


def test_servers_get_ports_outside_the_ephemeral_range(monkeypatch):
    """A port from bind(0) is an ephemeral one, which an outgoing connection can take before
    nginx or MariaDB binds it (CI lost a run to that): servers get free ports below the range,
    taken ones skipped; bind(0) only when that range is too small."""
    low, _ = ports.ephemeral_range()
    picked = {ports.free_port() for _ in range(20)}
    assert all(ports.SERVER_PORTS_FROM <= p < low for p in picked) and len(picked) > 1
    taken = min(picked)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", taken))
        busy.listen()
        monkeypatch.setattr(ports, "SERVER_PORTS_FROM", taken)
        monkeypatch.setattr(ports, "ephemeral_range", lambda: (taken + 1000, 60999))
        assert taken not in {ports.free_port() for _ in range(200)}
    # too few ports below the range: the kernel's choice, from the range itself
    monkeypatch.setattr(ports, "ephemeral_range", lambda: (ports.SERVER_PORTS_FROM + 500, 60999))
    assert ports.free_port() >= low


def test_sanity_check_failure_shows_evidence(lockdown, tmp_path):
    target = tmp_path / "broken"
    shutil.copytree(HELLO, target)
    (target / "app" / "index.php").write_text("<?php\nhttp_response_code(500);\n"
                                              "error_log('lockdown-test: database is down');\n"
                                              "echo 'Service unavailable <b>today</b>';\n")
    r = lockdown("bench", target, *SHORT)
    assert r.returncode == 1                   # a runtime failure: the command line was right
    first = r.stderr.splitlines()[0]
    assert first.startswith("lockdown: error: sanity check failed for http://127.0.0.1:")
    assert "status 500" in first
    assert "--- response excerpt ---" in r.stderr
    assert "Service unavailable <b>today</b>" in r.stderr
    assert "lockdown-test: database is down" in r.stderr      # php-fpm error log tail
    assert "nginx-error.log" in r.stderr
    assert processes_mentioning(run_dir_of(r.stdout)) == []


def test_sanity_check_wrong_text(lockdown, tmp_path):
    target = tmp_path / "wrongtext"
    shutil.copytree(HELLO, target)
    toml = (target / "target.toml").read_text().replace('expect = "Hello from PHP"',
                                                         'expect = "Goodbye"')
    (target / "target.toml").write_text(toml)
    r = lockdown("bench", target, *SHORT)
    assert r.returncode == 1
    assert "expected text 'Goodbye' not found" in r.stderr.splitlines()[0]


def _start_bench(env, *extra):
    return subprocess.Popen(lockdown_argv("bench", "hello", "--runs", "5", "--duration", "5",
                                          "--warmup-duration", "0", "--warmup-requests", "1", *extra),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=REPO)


def test_sigint_and_sigterm_stop_everything(env):
    # as a shell reports a death by the signal: 128 + its number
    for sig, code, word in ((signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")):
        proc = _start_bench(env)
        seen = wait_for_line(proc, "[measure]")
        run_dir = run_dir_of(seen)
        time.sleep(1.0)  # wrk is running now
        assert any("wrk" in p for p in processes_mentioning(run_dir))
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == code, err
        assert f"lockdown: {word}; everything started was stopped" in err
        assert processes_mentioning(run_dir) == []
        assert (Path(run_dir) / "logs" / "php-fpm.log").exists()     # logs are kept


def test_kill_9_is_cleaned_up_by_next_command(env, tmp_path):
    # a home deep enough that php-fpm's socket path is too long to bind: it lives in a /tmp
    # directory of its own, which the killed lockdown cannot remove and the next command must
    env = {**env, "LOCKDOWN_HOME": str(tmp_path / ("deep-home-" + "x" * 60))}
    proc = _start_bench(env)
    run_dir = run_dir_of(wait_for_line(proc, "[measure]"))
    sockets = ports.short_socket_dir(Path(run_dir) / "php")
    assert sockets.is_dir()
    proc.kill()
    proc.wait()
    time.sleep(0.5)
    # PR_SET_PDEATHSIG stops the direct children; whatever else is left, the next command stops.
    assert (Path(run_dir) / "app").is_dir()
    r = subprocess.run(lockdown_argv("targets"), capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0
    assert not sockets.exists()
    assert not (Path(run_dir) / "app").exists()           # the run's copy, as its end removes it
    assert (Path(run_dir) / "logs" / "php-fpm.log").exists()
    deadline = time.monotonic() + 15
    while processes_mentioning(run_dir) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_mentioning(run_dir) == []
    records = list((Path(env["LOCKDOWN_HOME"]) / "active").glob("*.json"))
    assert all(json.loads(p.read_text())["run_dir"] != run_dir for p in records)


def test_timeout_stops_everything(lockdown):
    r = lockdown("bench", "hello", "--runs", "3", "--duration", "5", "--warmup-duration", "0",
                 "--timeout", "4")
    assert r.returncode == 1
    assert r.stderr.startswith("lockdown: error: timed out after 4 s (--timeout)")
    assert processes_mentioning(run_dir_of(r.stdout)) == []


def test_unfinished_run_directory_is_marked_and_refused(env, lockdown, tmp_path):
    """`lockdown run -o DIR` claims DIR (DIR/incomplete.json) until its report is written. A
    second run with the same -o is refused while the first writes it (two runs had both
    written DIR/bench-run); once interrupted, DIR says so, and verify, report, writeup and a
    new run refuse it with one line instead of taking it for a finished run (interrupted at
    '== report', it had findings.json but not every flame graph, nor report.html)."""
    out = tmp_path / "out"
    first = subprocess.Popen(lockdown_argv("run", "hello", "-o", out, "--no-bench", "--requests", "5000"),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        wait_for_line(first, "[warmup]")
        assert (out / "incomplete.json").is_file()
        second = lockdown("run", "hello", "-o", out, "--no-bench")
        assert second.returncode == 2 and second.stderr.count("\n") == 1, second.stderr
        assert f"{out} is being written by a lockdown run still going (pid {first.pid}); wait for it " \
               f"to finish, or choose another -o" in second.stderr
    finally:
        first.send_signal(signal.SIGINT)
        _, err = first.communicate(timeout=60)
    assert first.returncode == 130, err
    assert (out / "incomplete.json").is_file()
    (out / "findings.json").write_text('{"format": 1, "target": "hello", "findings": []}\n')
    gone = f"{out} holds a lockdown run that did not finish (interrupted or failed; incomplete.json)"
    for args in (("verify", out, "--all"), ("report", out), ("writeup", out, "-o", tmp_path / "issues")):
        r = lockdown(*args)
        assert r.returncode == 2 and r.stderr == f"lockdown: error: {gone}; run `lockdown run TARGET -o DIR` " \
                                                 f"again into an empty directory\n", (args, r.stderr)
    r = lockdown("run", "hello", "-o", out)
    assert r.stderr == f"lockdown: error: {gone}; remove it or choose another -o\n"
    assert not (tmp_path / "issues").exists()


def test_run_dir_with_files_in_it_is_refused(lockdown, tmp_path):
    """bench and profile took any --run-dir and removed its app/ and mysql/data/ at the end,
    as if they were the run's copies: `--run-dir .` in a project deleted the project's app/."""
    mine = tmp_path / "project"
    (mine / "app").mkdir(parents=True)
    (mine / "app" / "index.php").write_text("<?php echo 'mine';\n")
    for args in (("bench", "hello", *SHORT), ("profile", "hello", "-o", tmp_path / "b", "--requests", "5")):
        r = lockdown(*args, "--run-dir", mine)
        assert r.returncode == 2 and r.stderr == (f"lockdown: error: {mine} is not empty; choose another "
                                                  f"--run-dir or remove it\n"), r.stderr
    assert (mine / "app" / "index.php").read_text() == "<?php echo 'mine';\n"
    assert sorted(p.name for p in mine.iterdir()) == ["app"] and not (tmp_path / "b").exists()
