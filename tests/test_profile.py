"""`lockdown profile` on the real stack: the bundle, its validation, attribution of samples
and statements to requests, loss accounting, and MariaDB settings put back whatever happens."""
import json
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import REPO, lockdown_argv, processes_mentioning, run_dir_of, wait_for_line
from lockdown.collectors.server_settings import WATCHED
from lockdown.harness.mariadb import DatabaseServer, PrivateMariaDB
from lockdown.harness.processes import ProcessGroup

def test_wordpress_bundle_validates(lockdown, wordpress_bundle):
    r, b1 = wordpress_bundle
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    v = lockdown("validate", b1, "--json")
    assert v.returncode == 0, v.stdout + v.stderr
    checks = {c["name"]: c for c in json.loads(v.stdout)["checks"]}
    assert set(checks) >= {"requests logged", "perf samples attributed", "PHP stacks per request",
                           "xhprof profiles", "statements attributed"}
    assert all(c["ok"] for c in checks.values()), checks

    manifest = json.loads((b1 / "manifest.json").read_text())
    requests = [json.loads(line) for line in (b1 / "requests.jsonl").read_text().splitlines()]
    assert len(requests) == 50 and manifest["requests"]["lost"] == 0
    assert {q["status"] for q in requests} == {200}
    assert all(q["end_ns"] > q["start_ns"] and q["cpu_us"] > 0 and q["peak_memory"] > 0
               for q in requests)
    # the request id travelled: driver header -> prepend -> log, and back in the response
    assert [q["id"] for q in requests] == [f"r{i:06d}" for i in range(50)]
    # perf samples on the request log's clock: inside-window samples name a real request
    ids = {q["id"]: q for q in requests}
    samples = [json.loads(line) for line in (b1 / "perf" / "samples.jsonl").read_text().splitlines()]
    attributed = [s for s in samples if s["request"]]
    assert len(attributed) > 100
    for s in attributed:
        q = ids[s["request"]]
        assert q["pid"] == s["pid"] and q["start_ns"] <= s["time_ns"] <= q["end_ns"]
    assert any(f[1] == "execute_ex" for s in samples for f in s["frames"])
    assert json.loads((b1 / "perf" / "buildids.json").read_text())
    # Excimer stacks are PHP frames of WordPress
    excimer = [json.loads(line) for line in (b1 / "excimer.jsonl").read_text().splitlines()]
    assert any("WP::main" in stack for p in excimer for stack in p["stacks"])
    # xhprof: the standard array for each instrumented request, and only for those
    instrumented = [q["id"] for q in requests if q["instrumented"]]
    assert instrumented and sorted(p.stem for p in (b1 / "xhprof").glob("*.json")) == sorted(instrumented)
    # ... sent after the timed ones, one at a time, and not counted in the timed pass's rps
    timed = [q for q in requests if not q["instrumented"]]
    assert max(q["end_ns"] for q in timed) < min(ids[i]["start_ns"] for i in instrumented)
    assert manifest["driver"]["requests"] == len(timed)
    assert manifest["driver"]["instrumented"]["requests"] == len(instrumented)
    # the bookkeeping ran after the response (the marker query before it)
    assert all(q["capture_us"] >= q["capture_blocking_us"] > 0 for q in requests)
    profile = json.loads((b1 / "xhprof" / f"{instrumented[0]}.json").read_text())
    assert "main()" in profile and any("==>" in k for k in profile)
    assert all({"ct", "wt"} <= set(v) for v in profile.values())
    # user functions too (the profiler is loaded at its php-fpm master's startup: PHP 8's
    # observer API ignores an extension loaded per pool)
    assert any(k.endswith("==>WP::main") for k in profile), sorted(profile)[:20]
    # statements: every one tied to a request at concurrency 1, lockdown's own left out
    statements = [json.loads(line) for line in (b1 / "statements.jsonl").read_text().splitlines()]
    assert len(statements) > 50 * 10
    assert all(s["request"] in ids for s in statements)
    assert not any("lockdown-capture" in s["sql"] or "lockdown-admin" in s["sql"] for s in statements)
    assert any("wp_posts" in s["sql"] for s in statements)
    # the server's log settings are as they were before the capture
    run_dir = Path(manifest["run_dir"])
    before = (run_dir / "settings-before.tsv").read_text()
    assert "long_query_time\t10" in before
    assert before == (run_dir / "settings-after.tsv").read_text()
    assert processes_mentioning(str(run_dir)) == []

    # analysis of the same bundle: shares add up, budgets reconcile, digest counts everything
    a = lockdown("analyze", b1, "--json")
    assert a.returncode == 0, a.stderr
    analysis = json.loads(a.stdout)
    assert abs(sum(analysis["subsystems"]["overall"].values()) - 100) <= 0.5
    assert analysis["subsystems"]["overall"]["vm"] > 10
    # each URL's shares come with the samples they rest on, which add up to the total
    sub = analysis["subsystems"]
    assert set(sub["samples_by_url"]) == set(sub["by_url"]) and sum(sub["samples_by_url"].values()) == sub["samples"]
    # the statements' client side beyond the server's time, which db wait leaves out
    trip = analysis["db_round_trip"]
    assert trip["calls"] > 0 and trip["client_us"] > trip["server_us"] > 0 and trip["per_call_us"] > 0
    # the round trip applied to a timed request is bounded by its own time (round_trip.applied):
    # never more than the measured one, and the measured one itself where no request was capped
    # (the figures are means over requests, rounded to 2 decimals)
    measured = trip["measured_per_call_us"] * trip["statements_per_request"]
    assert trip["us_per_request"] <= measured * 1.01 + 1
    if trip["capped_requests"] == 0:
        assert abs(trip["us_per_request"] - measured) <= 0.01 * measured + 1
    ident = analysis["subsystems"]["symbols"]
    assert ident["leaf_unknown_pct"] < 5 < 100 * ident["leaf_unknown_before"] / ident["samples"]
    for b in [*analysis["budget_by_url"].values(), analysis["budget_overall"]]:
        parts = b["cpu_us"] + b["db_wait_us"] + b["other_wait_us"] + b["residual_us"]
        assert abs(parts - b["wall_us"]) < 1 and b["db_wait_us"] > 0
    timed = [r for r in analysis["by_request"] if not r["instrumented"]]
    assert len(analysis["by_request"]) == 50 and timed
    for r in timed:     # every request's parts reconcile with its measured wall time
        assert abs(r["residual_us"]) <= 0.10 * r["wall_us"], r
        # switches are recorded, possibly none: a worker preempted by the server it queried finds
        # each reply waiting and never blocks (CI saw a request with 0 voluntary switches)
        assert 0 <= r["cpu_queue_us"] <= r["other_wait_us"] and r["sched"]["voluntary_switches"] >= 0, r
        assert abs(sum(r["cpu_by_subsystem_us"].values()) - r["cpu_us"]) < 1 or not r["cpu_by_subsystem_us"]
    one = timed[0]
    a1 = json.loads(lockdown("analyze", b1, "--request", one["id"], "--json").stdout)
    assert a1["requests"] == 1 and a1["by_request"][0]["wall_us"] == one["wall_us"]
    assert [s["sql"] for s in a1["queries"]["in_order"]] == [
        s["sql"] for s in sorted(statements, key=lambda s: s["seq"]) if s["request"] == one["id"]]
    bad = lockdown("analyze", b1, "--request", "r999999")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "no request 'r999999'" in bad.stderr
    assert analysis["queries"]["statements"] == len(statements)
    # the server's own counters over the timed pass: every page reads pages and builds a temporary table
    server = analysis["database_status"]
    assert server["private"] and server["requests"] == manifest["driver"]["requests"] == len(timed)
    assert server["per_request"]["Com_select"] >= 20 and server["per_request"]["Created_tmp_tables"] >= 1
    assert server["buffer_pool_hit_pct"] > 99 and server["per_request"]["Connections"] >= 1
    assert analysis["php_functions"]["top"][0]["self_samples"] > 0
    builtins = {b["name"]: b for b in analysis["builtins"]["top"]}
    assert builtins and all(b["calls"] > 0 for b in builtins.values())
    assert not any(n.startswith(("WP_", "wpdb")) for n in builtins)    # user code is not builtin
    assert lockdown("analyze", b1).stdout.startswith(f"analysis of {b1}")


def truth_of(sql: str) -> str | None:
    m = re.search(r"/\*sqltag (\S+) \d+\*/", sql)
    return m.group(1) if m else None


def test_statements_under_concurrency_are_right_or_ambiguous(lockdown, tmp_path):
    """sqltag's statements name the request that sent them; with four requests at a time each
    statement is tied to the right request or marked ambiguous, never to a wrong one."""
    b = tmp_path / "b"
    r = lockdown("profile", "sqltag", "--requests", "120", "-c", "4", "-o", b,
                 "--collect", "queries", "--no-overhead-check")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    # the prepend asks its sockets for their ports through FFI, enabled in the capture's pool only
    assert json.loads((b / "manifest.json").read_text())["php"]["pool"]["ffi.enable"] == "true"
    statements = [json.loads(line) for line in (b / "statements.jsonl").read_text().splitlines()]
    tagged = [s for s in statements if truth_of(s["sql"])]
    assert len(tagged) == len(statements) > 120 * 5
    right = [s for s in tagged if s["request"] == truth_of(s["sql"])]
    rest = [s for s in tagged if s["request"] != truth_of(s["sql"])]
    assert len(right) >= 0.99 * len(tagged)
    assert all(s["attribution"] == "ambiguous" and s["request"] is None
               and truth_of(s["sql"]) in s["candidates"] for s in rest)


def test_connections_closed_early(lockdown, tmp_path):
    """A connection closed before the request ends cannot be named by the request: one request
    at a time the log order still places it exactly; overlapping, it is marked ambiguous."""
    urls = ("--url", "/?n=4&sleep=2000&close=1", "--url", "/?n=2")
    for concurrency in ("1", "4"):
        b = tmp_path / f"b{concurrency}"
        r = lockdown("profile", "sqltag", "--requests", "40", "-c", concurrency, "-o", b,
                     "--collect", "queries", "--no-overhead-check", *urls)
        assert r.returncode == 0, r.stderr[-2000:]
        statements = [json.loads(line) for line in (b / "statements.jsonl").read_text().splitlines()]
        assert len(statements) == 20 * 4 + 20 * 2
        for s in statements:
            if concurrency == "1":    # closed ones by order, open ones by connection: all exact
                assert s["request"] == truth_of(s["sql"]), s
                # a connection still closing at the marker may be named by the processlist
                assert s["attribution"] == "connection" or (
                    s["attribution"] == "order" and "close=1" in _url_of(b, s)), s
            else:
                assert s["request"] == truth_of(s["sql"]) or (
                    s["attribution"] == "ambiguous" and truth_of(s["sql"]) in s["candidates"])
        if concurrency == "4":
            assert {s["attribution"] for s in statements} >= {"connection", "ambiguous"}


def _url_of(bundle, statement) -> str:
    urls = {q["id"]: q["url"] for q in map(json.loads, (bundle / "requests.jsonl").read_text().splitlines())}
    return urls[statement["request"]]


def test_overhead_slices_pause_perf_and_the_slow_log_between_capture_slices(lockdown, tmp_path):
    """--overhead-slices 3: three capture slices between four uncollected ones, each compared
    with its neighbours. perf and the slow log are paused in the uncollected slices: otherwise
    their samples and statements (requests without a log line) would be left unattributed."""
    b = tmp_path / "b"
    r = lockdown("profile", "minicms", "--requests", "45", "--overhead-slices", "3", "-o", b,
                 "--xhprof-every", "0")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "nothing collected (4/4)" in r.stdout
    m = json.loads((b / "manifest.json").read_text())
    o = m["overhead"]
    assert len(o["slices"]) == 3 and len(o["baseline_slices_rps"]) == 4
    assert all(s["ratio"] > 0 and s["capture_host_speed"] and s["baseline_host_speed"] for s in o["slices"])
    # each side's capacity: its speed times the CPU share the hypervisor left it
    for s in o["slices"]:
        for side in ("capture", "baseline"):
            used = s[f"{side}_host_cpu"]
            share = used["busy_pct"] / (used["busy_pct"] + used["steal_pct"])
            assert s[f"{side}_host_capacity"] == pytest.approx(s[f"{side}_host_speed"] * share, abs=2e-3)
    product = 1.0
    for s in o["slices"]:
        product *= s["ratio"]
    assert o["ratio"] == pytest.approx(product ** (1 / 3), rel=1e-3)     # geometric mean
    assert m["baseline"]["requests"] == 4 * 15 and m["driver"]["requests"] == 45
    v = lockdown("validate", b)
    assert v.returncode == 0, v.stdout     # every statement tied to a request at concurrency 1
    perf = m["collected"]["perf"]
    # 60 uncollected requests against 45 captured: unpaused, they would outnumber these
    assert perf["outside_requests"] < 0.25 * perf["in_requests"], perf
    ids = [json.loads(line)["id"] for line in (b / "requests.jsonl").read_text().splitlines()]
    assert ids == [f"r{i:06d}" for i in range(45)]


@pytest.mark.parametrize("sabotage", [
    'ln -s /dev/full "$LOCKDOWN_CAPTURE_DIR/requests.jsonl"',      # disk full
    'rm -rf "$LOCKDOWN_CAPTURE_DIR" && touch "$LOCKDOWN_CAPTURE_DIR"',  # not a writable directory
])
def test_lost_capture_never_breaks_requests(lockdown, tmp_path, sabotage):
    """The requests are served (200) whatever happens to the capture directory; the capture
    then fails in one line naming that cause (it exited 0 with a warning, and a bundle that
    `validate` refused)."""
    b = tmp_path / "b"
    r = lockdown("profile", "hello", "--requests", "30", "-o", b, "--collect", "xhprof",
                 "--xhprof-every", "2", "--no-overhead-check", "--exec-after-warmup", sabotage)
    assert r.returncode == 1, r.stderr[-2000:]
    # 1 in 2 instrumented: those follow the timed pass, which has the other half
    assert "[capture] 15 requests at concurrency 1" in r.stdout and "statuses {'200': 15}" in r.stdout
    assert r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("lockdown: error: 30 of 30 requests were not logged: 30 were served (200 x30) "
                               "but PHP did not log them: the capture directory was not writable, or the "
                               "disk is full; see "), r.stderr
    assert not b.exists()


@pytest.fixture
def users_server(tmp_path):
    """A MariaDB of 'the user's', with an account for lockdown and non-default log settings."""
    with ProcessGroup(tmp_path / "theirs") as procs:
        PrivateMariaDB.initialize(procs, tmp_path / "theirs" / "data")
        server = PrivateMariaDB(procs, tmp_path / "theirs" / "mysql", tmp_path / "theirs" / "data")
        admin: DatabaseServer = server.start()
        admin.sql("CREATE USER 'owner'@'127.0.0.1' IDENTIFIED BY 'secret';"
                  "GRANT ALL ON *.* TO 'owner'@'127.0.0.1';"
                  "SET GLOBAL long_query_time = 2.5; SET GLOBAL slow_query_log = ON;"
                  f"SET GLOBAL slow_query_log_file = '{server.server_dir}/their-slow.log';")  # its own directory
        yield admin, f"mysql://owner:secret@127.0.0.1:{server.port}/"


def server_settings(admin: DatabaseServer) -> dict:
    out = admin.sql(f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({', '.join(repr(w) for w in WATCHED)});")
    return dict(line.split("\t", 1) for line in out.splitlines())


def _start_profile(env, dsn, *extra):
    return subprocess.Popen(lockdown_argv("profile", "sqltag", "--requests", "100000", "-o",
                                          Path(env["LOCKDOWN_HOME"]) / f"b-{time.time_ns()}",
                                          "--collect", "queries", "--no-overhead-check",
                                          "--mysql", dsn, *extra),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)


def test_users_server_settings_restored_after_sigint_and_kill_9(env, lockdown, users_server):
    admin, dsn = users_server
    original = server_settings(admin)
    assert original["long_query_time"] == "2.500000" and original["slow_query_log"] == "ON"

    proc = _start_profile(env, dsn)
    run_dir = run_dir_of(wait_for_line(proc, "[start] run directory"))
    wait_for_line(proc, "[capture] slow log on")
    assert server_settings(admin)["long_query_time"] == "0.000000"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert server_settings(admin) == original
    assert processes_mentioning(run_dir) == []

    proc = _start_profile(env, dsn)
    wait_for_line(proc, "[capture] slow log on")
    during = server_settings(admin)
    assert during["long_query_time"] == "0.000000" and during["slow_query_log_file"] != original["slow_query_log_file"]
    proc.kill()
    proc.wait()
    r = lockdown("targets")
    assert r.returncode == 0
    assert "restored MariaDB settings on 127.0.0.1:" in r.stderr
    assert "long_query_time=2.500000" in r.stderr
    assert server_settings(admin) == original
    again = lockdown("restore")
    assert again.returncode == 0 and again.stdout.strip() == "nothing to restore"


def test_profile_usage_errors(lockdown, tmp_path):
    existing = tmp_path / "exists"
    existing.mkdir()
    cases = [
        (("hello", "-o", existing), f"{existing} already exists"),
        (("hello", "-o", tmp_path / "x", "--requests", "5", "--duration", "2"),
         "give --requests or --duration, not both"),
        (("hello", "-o", tmp_path / "x", "--collect", "perf,strace"), "bad --collect 'perf,strace'"),
        (("hello", "-o", tmp_path / "x", "--xhprof-flags", "cpu,bogus"), "bad --xhprof-flags"),
        (("hello", "-o", tmp_path / "x", "--url", "index.php"), "bad --url 'index.php'"),
        (("nosuchtarget", "-o", tmp_path / "x"), "nosuchtarget"),
    ]
    for args, message in cases:
        r = lockdown("profile", *args)
        assert r.returncode == 2, (args, r.stderr)
        assert r.stderr.count("\n") == 1 and message in r.stderr, (args, r.stderr)
        assert "Traceback" not in r.stderr
    assert not (tmp_path / "x").exists()
