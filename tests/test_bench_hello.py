"""The harness end to end on the `hello` target: real nginx, php-fpm and load generators."""
import json
import os
import re
import statistics
import subprocess
import sys

import pytest

from conftest import one_page_target, processes_mentioning, run_dir_of
from lockdown.errors import LockdownError
from lockdown.harness.phpfpm import build_php_config, check_ini, fpm_env
from lockdown.harness.toolchain import tool

SHORT = ("--runs", "2", "--duration", "1", "--warmup-duration", "1", "--warmup-requests", "5")


def check_result_shape(data, runs):
    assert data["target"] == "hello"
    assert len(data["runs"]) == runs
    for run in data["runs"]:
        assert run["rps"] > 0
        assert set(run["latency_ms"]) == {"p50", "p90", "p99", "max"}
        assert run["latency_ms"]["p50"] <= run["latency_ms"]["p99"] <= run["latency_ms"]["max"]
        assert run["bytes"] > 0
        assert isinstance(run["errors"], int)
        assert run["latency_resolution_ms"] == {"wrk": 0.001, "siege": 10, "ab": 1}[run["tool"]]
        assert 0 < run["host_cpu"]["busy_pct"] <= 100 and run["host_cpu"]["steal_pct"] >= 0
        # the host-speed probe ran through the run (about 10 probes a second)
        speed = run["host_speed"]
        assert speed["speed"] > 0 and speed["samples"] >= 5 * data["config"]["duration"]
        # each probe's speed, in order: the mean is theirs (rounded to 0.1 each)
        assert len(speed["series"]) == speed["samples"] and min(speed["series"]) > 0
        assert statistics.fmean(speed["series"]) == pytest.approx(speed["speed"], abs=0.06)
        assert speed["cpus"] == len(os.sched_getaffinity(0))     # one pinned probe per CPU
        # the servers' CPU time per request, each server's apart (hello has no database)
        cpu = run["server_cpu"]
        assert set(cpu["by_server"]) == {"php-fpm", "nginx"} and cpu["ms_per_request"] > 0
        assert sum(cpu["by_server"].values()) == pytest.approx(cpu["ms_per_request"], abs=0.01)
        # wall-clock bounds: as long as the run, and one run after the other
        assert run["ended_at"] - run["started_at"] >= 0.9 * data["config"]["duration"]
    assert all(a["ended_at"] <= b["started_at"] for a, b in zip(data["runs"], data["runs"][1:]))
    s = data["summary"]
    assert s["rps_mean"] == pytest.approx(sum(r["rps"] for r in data["runs"]) / runs)
    lo, hi = s["rps_ci95"]
    assert lo <= s["rps_mean"] <= hi
    assert s["server_cpu_ms_mean"] == pytest.approx(sum(r["server_cpu"]["ms_per_request"] for r in data["runs"]) / runs)
    assert s["host_speed_mean"] == pytest.approx(sum(r["host_speed"]["speed"] for r in data["runs"]) / runs)
    # runs the host disturbed are set aside with their reason and numbered as measured
    aside = data["set_aside"]
    assert s["runs_measured"] == runs + len(aside) == runs + s["runs_set_aside"] <= 2 * runs
    assert sorted(r["run"] for r in data["runs"] + aside) == list(range(1, s["runs_measured"] + 1))
    assert all("off the runs' median" in r["set_aside"] or "asked for" in r["set_aside"] for r in aside)
    assert [p["name"] for p in data["phases"]] == ["start", "sanity", "warmup-single",
                                                    "warmup-concurrent", "measure", "stop"]


def test_bench_hello_wrk(lockdown, tmp_path):
    """Also: --mysql on a target without a database (hello) is said to be unused and does not
    make the bench non-canonical (the DSN names a port nothing listens on: it is never dialled)."""
    out = tmp_path / "out.json"
    r = lockdown("bench", "hello", *SHORT, "--mysql", "mysql://nobody:x@127.0.0.1:1/", "--json", out)
    assert r.returncode == 0, r.stderr
    assert "[start] hello has no database: --mysql is not used" in r.stdout
    data = json.loads(out.read_text())
    check_result_shape(data, 2)
    for run in data["runs"]:
        assert set(run["status_counts"]) == {"200"}
        assert run["status_counts"]["200"] == run["requests"]
    assert data["canonical"] is False and "runs" in data["non_default_options"]
    assert "mysql" not in data["non_default_options"]
    # --json FILE is written beside the usual output (as hyperfine's --export-json): the phases,
    # the table, where the result is, and the file's name last
    assert "[measure] run 2/2" in r.stdout and "\n run     req/s" in r.stdout
    assert r.stdout.rstrip().endswith(f"JSON written to {out}")
    # the plain benchmark runs without lockdown's own profiler extensions
    assert "excimer" not in data["config"]["php_extensions"]
    assert "opcache" in " ".join(data["config"]["php_extensions"])
    run_dir = data["run_dir"]
    assert processes_mentioning(run_dir) == []
    assert (tmp_path / "out.json").exists() and not list(tmp_path.glob(".*.tmp"))


@pytest.mark.parametrize("tool", ["siege", "ab"])
def test_bench_hello_other_load_generators(lockdown, tmp_path, tool):
    """siege at one user: with more, siege 4.0 sometimes hangs after its run (JoeDog/siege#66),
    which costs the run plus 20 s each time before it is run again (tested with a stand-in
    siege in test_loadgen_retry.py); one clean-clone CI run lost 42 s to it here."""
    out = tmp_path / "out.json"
    one_user = ("--concurrency", "1") if tool == "siege" else ()
    r = lockdown("bench", "hello", *SHORT, "--load", tool, *one_user, "--json", out)
    assert r.returncode == 0, r.stderr
    data = json.loads(out.read_text())
    check_result_shape(data, 2)
    assert data["config"]["load"] == tool
    for run in data["runs"]:
        assert run["tool"] == tool and run["latency_resolution_ms"] == {"siege": 10, "ab": 1}[tool]
        ok = run["status_counts"].get("200", 0) + run["status_counts"].get("2xx", 0)
        assert ok == run["requests"] > 0
    assert processes_mentioning(data["run_dir"]) == []


def test_load_generator_versions_are_version_lines():
    """What bench.json and the write-ups print as the load generator: siege complains about its
    configuration file (a line with a number) before its version, and wrk's line ends in a
    copyright notice."""
    from lockdown.harness.bench import load_version
    assert re.fullmatch(r"wrk \S*\d\S* \[\w+\]", load_version("wrk"))
    assert re.fullmatch(r"SIEGE \d+(\.\d+)+", load_version("siege"))
    assert load_version("ab").startswith("This is ApacheBench, Version 2")


def test_php_ini_override_reaches_workers_and_hooks_run(lockdown, tmp_path):
    """--php-ini is applied in php-fpm (seen by a hook that fetches the page between phases)."""
    seen = tmp_path / "seen"
    fetch = (f"{sys.executable} -c \"import os,urllib.request;"
             f"open('{seen}','a').write(os.environ['LOCKDOWN_PHASE']+' '+"
             f"urllib.request.urlopen(os.environ['LOCKDOWN_BASE_URL']+'/').read().decode()+chr(10))\"")
    out = tmp_path / "off.json"
    r = lockdown("bench", "hello", *SHORT, "--php-ini", "opcache.enable=0",
                 "--php-ini", "memory_limit=77M", "--exec-before-warmup", fetch,
                 "--exec-after-warmup", fetch, "--exec-after-benchmark", fetch, "--json", out)
    assert r.returncode == 0, r.stderr
    lines = seen.read_text().splitlines()
    assert [line.split()[0] for line in lines] == ["before-warmup", "after-warmup", "after-benchmark"]
    assert all("opcache=off memory_limit=77M sapi=fpm-fcgi" in line for line in lines)
    data = json.loads(out.read_text())
    assert data["canonical"] is False
    assert data["config"]["php_ini"] == {"opcache.enable": "0", "memory_limit": "77M"}

    r = lockdown("bench", "hello", *SHORT, "--exec-after-warmup", fetch)
    assert r.returncode == 0, r.stderr
    assert "opcache=on" in seen.read_text().splitlines()[-1]


def test_failing_hook_stops_everything(lockdown):
    r = lockdown("bench", "hello", *SHORT, "--exec-after-warmup", "exit 3")
    assert r.returncode == 1
    assert "hook after-warmup ('exit 3') failed with exit 3" in r.stderr
    assert processes_mentioning(run_dir_of(r.stdout)) == []


def test_file_sessions_stay_in_the_run_directory(tmp_path):
    """php-fpm's file sessions go to the run's php/sessions, not Debian's /var/lib/php/sessions
    (a bench of an app calling session_start() left one file there per request); a target's
    own session.save_path still wins."""
    def effective(overrides):
        php = build_php_config(tmp_path / "php", overrides)
        proc = subprocess.run([tool("php-fpm"), "-c", str(php.ini_file), "-i"], capture_output=True,
                              text=True, env=fpm_env(php), timeout=60)
        return re.search(r"^session\.save_path => (\S*) =>", proc.stdout, re.M).group(1)

    assert effective({}) == str(tmp_path / "php" / "sessions")
    assert (tmp_path / "php" / "sessions").is_dir()
    assert effective({"session.save_path": "/srv/x"}) == "/srv/x"


def test_php_settings_php_fpm_would_ignore_are_refused(tmp_path):
    """PHP ignores a setting it does not know and falls back on a value it rejects, with at most
    a startup warning: check_ini reads php-fpm -i on the generated configuration and names it."""
    def problem(overrides):
        php = build_php_config(tmp_path / "php", overrides)
        try:
            check_ini(php)
        except LockdownError as e:
            return str(e)
        return None

    assert problem({"opcache.enable": "0", "memory_limit": "96M", "pcre.jit": "0"}) is None
    assert "php-fpm knows no setting 'opcache.enabled' (misspelt" in problem({"opcache.enabled": "0"})
    assert problem({"opcache.jit": "bogus"}).startswith(
        'bad PHP setting (from the command line or the target\'s php_ini): opcache.jit=bogus: Invalid "opcache.jit" '
        'setting')
    assert "memory_limit=12Q: Invalid \"memory_limit\" setting" in problem({"memory_limit": "12Q"})
    assert "extension=nosuch: PHP Startup: Unable to load dynamic library 'nosuch'" in problem({"extension": "nosuch"})
    # the JIT asked for, but Debian's opcache.jit_buffer_size=0 keeps it off: two identical engines
    assert problem({"opcache.jit": "tracing"}).endswith(
        "opcache.jit=tracing has no effect: php-fpm reports the JIT off (opcache.jit_buffer_size is 0; "
        "add opcache.jit_buffer_size=64M)")
    assert problem({"opcache.jit": "tracing", "opcache.jit_buffer_size": "64M"}) is None
    # a buffer kept with the JIT off (a comparison's control arm), or OPcache off on purpose
    assert problem({"opcache.jit": "disable", "opcache.jit_buffer_size": "64M"}) is None
    assert problem({"opcache.enable": "0", "opcache.jit": "tracing", "opcache.jit_buffer_size": "64M"}) is None


CACHE_WRITER_PHP = """<?php
$cache = __DIR__ . '/cache.php';
if (!is_file($cache)) {
    file_put_contents($cache, '<?php return ' . var_export(array_fill(0, 50, 'entry'), true) . ';');
}
$entries = include $cache;
echo 'entries ', count($entries), ' cached ', opcache_is_script_cached($cache) ? 'yes' : 'no';
"""


def test_the_measured_runs_see_files_the_warmup_wrote_in_opcache(lockdown, tmp_path):
    """A PHP cache file the application writes on its first request is compiled on every
    request, not cached, until it is older than opcache.file_update_protection (2 s). A bench
    whose warmups end sooner waits that out and serves the page once more before measuring: by
    the after-warmup hook OPcache holds the file."""
    target = one_page_target(tmp_path, "writes-cache", "Writes a PHP cache on its first request",
                             CACHE_WRITER_PHP, "entries 50")
    seen = tmp_path / "seen"
    fetch = (f"{sys.executable} -c \"import os,urllib.request;"
             f"open('{seen}','a').write(urllib.request.urlopen(os.environ['LOCKDOWN_BASE_URL']+'/').read().decode())\"")
    out = tmp_path / "b.json"
    r = lockdown("bench", target, "--runs", "1", "--duration", "1", "--warmup-requests", "2",
                 "--warmup-duration", "0", "--exec-after-warmup", fetch, "--json", out)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert seen.read_text() == "entries 50 cached yes"
    assert 0 < json.loads(out.read_text())["opcache_settle_s"] <= 2.2
