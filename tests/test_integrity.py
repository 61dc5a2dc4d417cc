"""Measurement integrity and faults on the real stack (issue 29, points 5, 6 and 9): a run whose
responses failed fails the command, naming the statuses and the URLs; `profile` percent-encodes
its URLs and fails when requests go unlogged; SIGTERM exits 143; a second capture to the same
-o is one line; what a kill -9 left (a capture's staging directory, an install command's
background children) is removed by the next command; `writeup` of a run without a database."""
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import (REPO, SHARED_PREPARED, lockdown_argv, one_page_target, processes_mentioning,
                      run_dir_of, wait_for_line)

ONE_RUN = ("--runs", "1", "--duration", "2", "--warmup-duration", "0", "--warmup-requests", "1")
PROFILE = ("--no-overhead-check", "--collect", "none")


def _one_line_error(r, status: int = 2) -> str:
    """The one line of an error; `status` 2 for a usage error, 1 for a failed run."""
    assert r.returncode == status, (r.stdout[-2000:], r.stderr[-2000:])
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("lockdown: error: "), r.stderr
    return lines[0]


@pytest.fixture
def missing_page(tmp_path) -> Path:
    """A target whose sanity URL (/) answers, but whose URL list is a file that is not there:
    nginx answers 404 without PHP."""
    target = one_page_target(tmp_path, "gone", "its URL is not served", "<?php echo 'here';", "here")
    toml = target / "target.toml"
    toml.write_text(toml.read_text().replace('[[urls]]\npath = "/"', '[[urls]]\npath = "/missing.php"'))
    return target


def test_bench_of_a_url_answering_404_fails_naming_the_status_and_url(lockdown, missing_page):
    """It measured 12,944 req/s of 404s and exited 0."""
    r = lockdown("bench", missing_page, *ONE_RUN)
    line = _one_line_error(r, 1)
    assert re.fullmatch(r"lockdown: error: run 1 of gone: 100% of [\d,]+ responses failed \(404 x[\d,]+\) "
                        r"at /missing\.php; the URL is not served: check the target's \[\[urls\]\]", line), line
    assert "req/s, p50" not in r.stdout and "mean " not in r.stdout     # no table of the failed run
    assert processes_mentioning(run_dir_of(r.stdout)) == []


def test_compare_stops_at_the_first_failed_run(lockdown, missing_page):
    r = lockdown("compare", missing_page, "--with", "memory_limit=100M", "--duration", "1",
                 "--warmup-duration", "0")
    line = _one_line_error(r, 1)
    assert line.startswith("lockdown: error: run 1 (before) of gone: 100% of ") and "(404 x" in line
    assert "at /missing.php" in line


def test_bench_of_an_overloaded_pool_fails_naming_the_statuses(lockdown, tmp_path):
    """One worker and 600 connections to a 20 ms page: more requests than php-fpm's backlog
    (511) holds, and nginx answers the rest 502 at once. `bench hello --concurrency 1024` had
    printed 'mean 12,998.9 req/s' of 97% 502s, exit 0."""
    target = one_page_target(tmp_path, "slow", "a 20 ms page", "<?php usleep(20000); echo 'slow page';", "slow page")
    r = lockdown("bench", target, *ONE_RUN, "--workers", "1", "--concurrency", "600")
    line = _one_line_error(r, 1)
    assert line.startswith("lockdown: error: run 1 of slow: "), line
    m = re.search(r"(\d+(?:\.\d)?)% of [\d,]+ (responses|requests) failed \((.*)\)", line)
    assert m and float(m.group(1)) > 1, line
    assert re.search(r"\b5\d\d x[\d,]+|socket error", m.group(3)), line       # the statuses named
    assert "lower --concurrency" in line
    assert processes_mentioning(run_dir_of(r.stdout)) == []


def test_a_run_that_served_nothing_fails(lockdown, tmp_path):
    """Zero throughput is a failure: a page slower than the run (`--concurrency 100000` had
    given 0.0 req/s and exit 0)."""
    target = one_page_target(tmp_path, "slower", "a 3 s page", "<?php sleep(3); echo 'slower page';", "slower page")
    r = lockdown("bench", target, "--runs", "1", "--duration", "1", "--warmup-duration", "0",
                 "--warmup-requests", "0", "--workers", "1", "--concurrency", "1")
    line = _one_line_error(r, 1)
    assert re.match(r"lockdown: error: run 1 of slower: no response at all in [\d.]+ s; "
                    r"the pages take longer than the run: raise --duration", line), line


@pytest.mark.parametrize("args, said", [
    (("--concurrency", "100000"), "--concurrency 100000 is more than "),
    (("--workers", "1000"), "--workers 1000 is more than 256 php-fpm workers"),
    (("--duration", "99999999999999999999"), "--duration 99999999999999999999 is more than 86,400 s"),
])
def test_options_out_of_bounds_are_one_usage_line(lockdown, args, said):
    r = lockdown("bench", "hello", *args)
    line = _one_line_error(r)
    assert said in line and line.endswith("(see `lockdown bench --help`)"), line
    assert r.stdout == ""                                 # nothing started


@pytest.mark.parametrize("url, sent", [("/a b", "/a%20b"), ("/caf\u00e9", "/caf%C3%A9")])
def test_profile_percent_encodes_its_urls_and_logs_every_request(lockdown, tmp_path, url, sent):
    """'/a b' gave '0 logged of 5 sent' and exit 0; a non-ASCII URL crashed the driver's
    threads with tracebacks."""
    b = tmp_path / "b"
    r = lockdown("profile", "hello", "--url", url, "--requests", "5", "-o", b, *PROFILE)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    m = json.loads((b / "manifest.json").read_text())
    assert m["requests"]["sent"] == m["requests"]["logged"] == 5 and m["requests"]["lost"] == 0
    assert m["driver"]["urls"] == [sent]
    records = [json.loads(line) for line in (b / "requests.jsonl").read_text().splitlines()]
    assert {(r["url"], r["uri"], r["status"]) for r in records} == {(sent, sent, 200)}


def test_profile_fails_when_requests_are_not_logged_naming_the_status(lockdown, tmp_path):
    b = tmp_path / "b"
    r = lockdown("profile", "hello", "--url", "/missing.php", "--requests", "5", "-o", b, *PROFILE)
    line = _one_line_error(r, 1)
    assert line.startswith("lockdown: error: 5 of 5 requests were not logged: the server answered 404 x5 "
                           "at /missing.php; check --url"), line
    assert not b.exists() and not list(tmp_path.glob(".b.partial-*"))


def _start(env, *args):
    return subprocess.Popen(lockdown_argv(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=REPO)


def test_sigterm_exits_143_and_a_second_capture_to_the_same_output_is_one_line(env, lockdown, tmp_path):
    """SIGTERM exited 130, as Ctrl-C does; a shell reports 128 + 15. Two `profile -o b` at
    once: the second's final rename failed with a traceback."""
    b = tmp_path / "b"
    first = _start(env, "profile", "hello", "--requests", "1000000", "-o", b, *PROFILE)
    try:
        run_dir = run_dir_of(wait_for_line(first, "[start] run directory"))
        second = lockdown("profile", "hello", "--requests", "5", "-o", b, *PROFILE)
        assert _one_line_error(second) == (f"lockdown: error: {b} is being written by another lockdown "
                                           f"(pid {first.pid}); wait for it to finish, or choose another -o")
        wait_for_line(first, "[warmup]")
    finally:
        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=120)
    assert first.returncode == 143, err
    assert err.strip().endswith("lockdown: terminated; everything started was stopped"), err
    assert processes_mentioning(run_dir) == []
    assert not b.exists() and not list(tmp_path.glob(".b.partial-*"))


def test_staging_left_by_a_killed_capture_is_removed_by_any_next_command(env, tmp_path):
    b = tmp_path / "b"
    proc = _start(env, "profile", "hello", "--requests", "1000000", "-o", b, *PROFILE)
    wait_for_line(proc, "[warmup]")
    proc.kill()
    proc.wait()
    assert (tmp_path / f".b.partial-{proc.pid}").is_dir()
    r = subprocess.run(lockdown_argv("targets"), capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert not list(tmp_path.glob(".b.partial-*"))


def _processes_with(fragment: str) -> list[int]:
    return [int(p.split(":", 1)[0]) for p in processes_mentioning(fragment)]


def test_background_child_of_an_install_command_is_stopped_after_kill_9(env, tmp_path):
    """`sleep 300 &` in a target's [install] command survived a kill -9 of lockdown and every
    later sweep: its command line names no run directory. It carries the run's marker in its
    environment, which the next command's sweep finds."""
    name = f"sleeper{os.getpid()}"
    tag = f"{300 + (time.time_ns() % 1000) / 1000:.3f}"          # a sleep nobody else runs
    target = one_page_target(tmp_path, name, "an install that leaves a child behind", "<?php echo 'z';", "z")
    with open(target / "target.toml", "a") as f:
        f.write(f'\n[install]\ncommand = ["sh", "-c", "sleep {tag} & sleep {tag}"]\n')
    proc = _start(env, "bench", target, *ONE_RUN)
    try:
        deadline = time.monotonic() + 120
        while not _processes_with(f"sleep {tag}") and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        assert _processes_with(f"sleep {tag}")
        proc.kill()
        proc.wait()
        r = subprocess.run(lockdown_argv("targets"), capture_output=True, text=True, env=env, timeout=60)
        assert r.returncode == 0, r.stderr
        deadline = time.monotonic() + 15
        while _processes_with(f"sleep {tag}") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _processes_with(f"sleep {tag}") == []
    finally:
        for pid in _processes_with(f"sleep {tag}"):
            os.kill(pid, signal.SIGKILL)
        for leftover in SHARED_PREPARED.glob(f".{name}-*"):       # the killed build's staging
            shutil.rmtree(leftover, ignore_errors=True)
        (SHARED_PREPARED / f"{name}.lock").unlink(missing_ok=True)


def test_writeup_of_a_run_without_a_database(lockdown, tmp_path):
    """'dict object' has no attribute 'mariadb': every run of a target without a database."""
    out = tmp_path / "out"
    r = lockdown("run", "hello", "-o", out, "--runs", "2", "--duration", "1", "--warmup-duration", "1",
                 "--requests", "20", "--no-probe")
    assert r.returncode == 0, r.stderr[-3000:]
    w = lockdown("writeup", out, "-o", out / "issues")
    assert w.returncode == 0, w.stderr
    summary = (out / "issues" / "SUMMARY.md").read_text()
    assert "MariaDB none;" in summary


# -- the rules without a stack --------------------------------------------------------------

def test_quote_path_encodes_what_http_cannot_carry_and_only_that():
    from lockdown.harness.driver import quote_path
    assert quote_path("/a b") == "/a%20b" and quote_path("/caf\u00e9") == "/caf%C3%A9"
    assert quote_path("/?name=lockdown&x=[1]") == "/?name=lockdown&x=[1]"
    assert quote_path("/a%20b") == "/a%20b" and quote_path("/100%") == "/100%25"     # escapes kept
    assert quote_path('/"\\\n#') == "/%22%5C%0A%23"
    assert all(quote_path(quote_path(p)) == quote_path(p) for p in ("/a b", "/caf\u00e9", "/100%", "/%zz"))


def _result(statuses, errors=0, detail=None, requests=None, tool="wrk"):
    from lockdown.harness.loadgen import LoadResult
    return LoadResult(rps=0.0, latency_ms={}, status_counts=statuses, errors=errors, bytes=0,
                      requests=sum(statuses.values()) if requests is None else requests,
                      duration_s=2.0, tool=tool, error_detail=detail or {})


def test_throughput_is_the_successful_responses_and_the_share_rule(tmp_path):
    from lockdown.errors import PhaseFailed
    from lockdown.harness.loadgen import MAX_FAILED_SHARE, check_run
    r = _result({"200": 900, "301": 100, "404": 10})
    assert (r.ok, r.failed, r.rps) == (1000, 10, 500.0)
    check_run(r, "run 1 of t", ["/"])                                 # 10 of 1,010: within 1%
    assert MAX_FAILED_SHARE == 0.01
    log = tmp_path / "access.log"
    log.write_text('127.0.0.1 - - [x] "GET /warm HTTP/1.1" 502 0 "-" "-"\n')
    since = log.stat().st_size
    log.write_text(log.read_text() + '127.0.0.1 - - [x] "GET /a%20b HTTP/1.1" 502 0 "-" "-"\n' * 3
                   + '127.0.0.1 - - [x] "GET / HTTP/1.1" 499 0 "-" "-"\n'
                   + '127.0.0.1 - - [x] "GET / HTTP/1.1" 200 5 "-" "-"\n')
    with pytest.raises(PhaseFailed) as e:
        check_run(_result({"200": 97, "502": 3}), "run 2 of t", ["/", "/a b"], access_log=log, since=since,
                  logs=Path("/run/logs"))
    assert str(e.value) == ("run 2 of t: 3.0% of 100 responses failed (502 x3) at /a b; the pool is overloaded: "
                            "lower --concurrency (or raise --workers); logs in /run/logs")
    with pytest.raises(PhaseFailed, match=r"^run 1 of t: 100% of 80,005 requests failed \(80,005 socket errors "
                                          r"\(connect 80,000, timeout 5\)\); the server refused connections"):
        check_run(_result({}, 80_005, {"connect": 80_000, "read": 0, "write": 0, "status": 0, "timeout": 5}),
                  "run 1 of t", ["/"])
    with pytest.raises(PhaseFailed, match=r"^run 1 of t: no response at all in 2 s"):
        check_run(_result({}), "run 1 of t", ["/"])
    # a target that declares 404 successful (a future target.toml key) measures its 404s
    declared = frozenset({"200", "404"})
    from lockdown.harness.loadgen import status_ok
    assert status_ok("404", declared) and not status_ok("302", declared)
    assert status_ok("2xx") and not status_ok("non-2xx") and status_ok("304") and not status_ok("500")
