"""Where PHP waited off the CPU (analyzers/off_cpu.py): Excimer's wall-clock samples less perf's
on-CPU samples, by PHP function. Exact figures on synthetic samples; on the real stack, a page
whose function sleeps 30 ms is named with that wait."""
from __future__ import annotations

import json

from conftest import one_page_target
from lockdown.analyzers.off_cpu import off_cpu, off_cpu_stacks, significant, sql_senders
from lockdown.bundle.model import ExcimerProfile, PerfSample
from lockdown.reports.analysis_text import off_cpu_lines

MS = 1_000_000
PERIOD = 10 * MS        # perf's sample period in these tests: one sample per 10 ms of CPU


def perf(pid, t_ms, tid=None):
    return PerfSample(time_ns=int(t_ms * MS), pid=pid, tid=pid if tid is None else tid, comm="php-fpm",
                      period=PERIOD, request=None, frames=[])


def profile(request, pid, samples, start_ms=None):
    """samples: (time ms, weight, stack)."""
    stacks = sorted({s for _, _, s in samples})
    return ExcimerProfile(request, pid, stacks, [[int(t * MS), w, stacks.index(s)] for t, w, s in samples],
                          start_ns=None if start_ms is None else int(start_ms * MS))


# Excimer's timer fires every 5 ms (at 5, 10, 15 ... ms); a sample 10 us after a fire was taken
# promptly, in PHP code; one taken later was held up in a builtin of its function.
COMPUTE_40_MS = [(5 * k + 0.01, 1, "main;compute") for k in range(1, 9)]      # 0 .. 40.01 ms
CPU_40_MS = [9, 19, 29, 39]                                                  # perf: 10 ms of CPU each


def test_each_sample_stands_for_the_time_since_the_one_before_less_the_cpu_perf_saw():
    # computing from the profiler's start to 40.01 ms; a sleep in fetch until 102.3 ms, whose
    # sample comes 2.3 ms after the fire at 100 (late: the sleep spanned 12 fires); a 2 ms
    # sleep between fires (102.5-104.5) ends in compute's prompt sample at 105.01: off the CPU,
    # but no function's blocked time; the request ends at 110 ms
    a = profile("a", 1, [*COMPUTE_40_MS, (102.3, 12, "main;fetch"), (105.01, 1, "main;compute")], start_ms=0)
    cpu = [perf(1, t) for t in CPU_40_MS]
    cpu += [perf(1, 70, tid=2)]                      # Excimer's timer thread: not the request's
    cpu += [perf(2, 70)]                             # another worker
    o = off_cpu([a], cpu, 5.0, senders=set(), ends={"a": 110 * MS})
    # the totals take in the 4.99 ms after the last sample
    assert (o.requests, o.wall_us, o.cpu_us, o.off_cpu_us, o.perf_period_us) == (1, 110_000, 40_000, 70_000, 10_000)
    by = {f.name: f for f in o.functions}
    assert [f.name for f in o.functions] == ["fetch", "compute"]
    assert (by["fetch"].wall_us, by["fetch"].cpu_us, by["fetch"].off_cpu_us, by["fetch"].blocked_us) == (
        62_290, 0, 62_290, 62_290)
    assert (by["compute"].wall_us, by["compute"].cpu_us, by["compute"].off_cpu_us, by["compute"].blocked_us) == (
        42_720, 40_000, 2_720, 0)
    assert by["fetch"].error_us == 10_000                       # sqrt(0 + 1) perf periods
    assert by["compute"].error_us == 10_000 * 5 ** 0.5
    assert by["fetch"].stack == "main;fetch" and not by["fetch"].sql
    assert [f.name for f in significant(o.functions)] == ["fetch"]
    # without the profiler's start (older bundles), the first sample stands for its weight in
    # periods: from 0.01 ms on
    assert off_cpu([profile("a", 1, COMPUTE_40_MS)], cpu, 5.0, set()).wall_us == 40_000


def test_waiting_for_a_cpu_is_taken_out_in_proportion_to_each_functions_cpu():
    """On a busy host every function waits in the run queue for the CPU it asks for: with 20 ms
    of run-queue delay over 40 ms of CPU, computing 40 ms is expected to queue 20 ms, wherever
    its samples land, and only what a function's late samples waited beyond that is blocked."""
    # compute's samples, at each fire to 60.01 ms, are prompt, but their intervals hold 20 ms of
    # waiting (preempted); then a late sample after a 60 ms sleep (2 ms after the fire at 120),
    # and a late compute sample, held up until 2 ms after the fire at 150
    a = profile("a", 1, [*[(5 * k + 0.01, 1, "main;compute") for k in range(1, 13)],
                         (122.01, 12, "main;fetch"), (152.0, 6, "main;compute")], start_ms=0)
    cpu = [perf(1, t) for t in (5, 15, 35, 45)]
    o = off_cpu([a], cpu, 5.0, senders=set(), run_delay_us={"a": 20_000})
    assert o.queue_per_cpu == 0.5
    by = {f.name: f for f in o.functions}
    # compute: 60.01 + 29.99 ms of wall, 40 of CPU; its late interval (122.01-152] was off the
    # CPU 29.99 ms, less the 20 ms of queueing its CPU explains
    assert (by["compute"].off_cpu_us, by["compute"].queue_us, by["compute"].blocked_us) == (50_000, 20_000, 9_990)
    assert (by["fetch"].off_cpu_us, by["fetch"].queue_us, by["fetch"].blocked_us) == (62_000, 0, 62_000)
    assert by["compute"].error_us == 10_000 * 5 ** 0.5 * 1.5      # the queue's estimate rests on the same samples
    assert [f.name for f in o.functions] == ["fetch", "compute"]          # by blocked time
    assert [f.name for f in significant(o.functions)] == ["fetch"]       # compute's 10 ms is within its error
    # a request without the scheduler's figures: no queue is taken out
    assert off_cpu([a], cpu, 5.0, senders=set(), run_delay_us={}).queue_per_cpu == 0


def test_the_off_cpu_flame_graph_weighs_each_stack_by_its_wait_in_us():
    a = profile("a", 1, [(40, 4, "main;compute"), (20, 4, "main;compute"), (100, 11, "main;fetch")])
    b = profile("b", 1, [(210, 2, "main;fetch")])
    cpu = [perf(1, t) for t in (5, 15, 25, 35, 202, 204)]      # b's fetch: 20 ms of CPU in 10 ms
    assert off_cpu_stacks([a, b], cpu, 5.0) == {"main;fetch": 60_000 - 10_000}
    assert off_cpu_stacks([a, b], cpu, 5.0, exclude={"b"}) == {"main;fetch": 60_000}
    assert off_cpu_stacks([a], [], 5.0) == {}


def test_means_are_per_request_instrumented_ones_left_out_and_cpu_never_above_wall():
    a = profile("a", 1, [(10, 2, "f"), (20, 2, "g")])
    b = profile("b", 1, [(110, 2, "f"), (120, 2, "g")])
    x = profile("x", 1, [(210, 2, "f")])                         # instrumented
    # g's interval of b holds two perf samples (20 ms of CPU estimated in 10 ms of wall)
    cpu = [perf(1, 15), perf(1, 115), perf(1, 118), perf(1, 205)]
    o = off_cpu([a, b, x], cpu, 5.0, senders=None, exclude={"x"})
    assert o.requests == 2 and not o.sql_known
    g = next(f for f in o.functions if f.name == "g")
    assert (g.wall_us, g.cpu_us, g.off_cpu_us) == (10_000, 10_000, 0)     # clipped: never above wall
    f = next(f for f in o.functions if f.name == "f")
    assert (f.wall_us, f.off_cpu_us) == (10_000, 10_000)          # each first sample: 2 x 5 ms
    assert o.wall_us == 20_000 and o.cpu_us == 15_000             # the totals are not clipped per function


def test_nothing_to_say_without_profiles_perf_samples_or_a_period():
    a = profile("a", 1, [(10, 2, "f")])
    assert off_cpu([], [perf(1, 5)], 5.0, None) is None
    assert off_cpu([a], [], 5.0, None) is None
    assert off_cpu([a], [perf(1, 5)], None, None) is None
    assert off_cpu([a], [perf(1, 5, tid=9)], 5.0, None) is None    # only other threads' samples


def test_functions_that_call_a_database_builtin_send_sql():
    xh = [{"main()==>wpdb::query": {"ct": 1}, "wpdb::query==>wpdb::_do_query": {"ct": 3},
           "wpdb::_do_query==>mysqli_query": {"ct": 3}, "Db::run==>PDOStatement::execute": {"ct": 1},
           "Db::connect==>PDO::__construct": {"ct": 1}, "main()==>mysqli_fetch_array": {"ct": 9},
           "main()": {"ct": 1}}]
    assert sql_senders(xh) == {"wpdb::_do_query", "Db::run", "Db::connect"}
    a = profile("a", 1, [(10, 2, "main;wpdb::_do_query")])
    o = off_cpu([a], [perf(1, 1)], 5.0, sql_senders(xh))
    assert o.functions[0].sql and o.sql_known


def off_cpu_json(wall=40_000, rows=None, sql_known=True, queue_per_cpu=0.25):
    return {"requests": 10, "wall_us": wall, "cpu_us": 10_000, "off_cpu_us": wall - 10_000, "sql_known": sql_known,
            "queue_per_cpu": queue_per_cpu, "perf_period_us": 10_101.01, "excimer_period_ms": 4.0,
            "functions_sampled": 7, "functions": rows if rows is not None else [
                {"name": "wpdb::_do_query", "wall_us": 9_000, "cpu_us": 1_000, "off_cpu_us": 8_000,
                 "queue_us": 250, "blocked_us": 7_750, "error_us": 500, "sql": True, "stack": "main;wpdb::_do_query"},
                {"name": "Http::get", "wall_us": 5_000, "cpu_us": 100, "off_cpu_us": 4_900,
                 "queue_us": 25, "blocked_us": 4_875, "error_us": 300, "sql": False, "stack": "main;Http::get"}]}


def test_the_text_lists_the_rows_that_stand_out():
    o = off_cpu_json()
    lines = off_cpu_lines(o)
    assert lines[1].startswith("off the CPU, by PHP function (Excimer wall samples less perf's on-CPU samples, "
                               "10 requests): 30.0 of 40.0 ms a request; waiting for a CPU is taken as 0.25 ms per "
                               "ms of a function's CPU (the capture's run-queue delay) and taken out; blocked: waits "
                               "in one builtin call longer than the 4 ms Excimer period (a lower bound")
    assert lines[3] == "      7.75   0.50    0.25     86%  wpdb::_do_query [sends SQL]  <- main;wpdb::_do_query"
    assert lines[4] == "      4.88   0.30    0.03     98%  Http::get  <- main;Http::get"
    none = off_cpu_lines(off_cpu_json(rows=[], sql_known=False, queue_per_cpu=0.0))
    assert "(no xhprof: senders of SQL not marked)" in none[1] and "waiting for a CPU is taken" not in none[1]
    assert none[2] == "  none of the 7 functions sampled does"
    assert off_cpu_lines(None) == []


SLEEPER_PHP = """<?php
function remote_call() { usleep(30000); return 1; }
function compute() { $x = 0; for ($i = 0; $i < 200000; $i++) { $x = ($x + $i * 7) % 1000003; } return $x; }
function page() { return compute() + remote_call() + compute(); }
echo 'waits ok ', page();
"""


def test_a_function_that_sleeps_is_named_with_its_wait(lockdown, tmp_path):
    """A page computes, sleeps 30 ms in remote_call(), computes again: the analysis names
    remote_call first, with about 30 ms a request off the CPU, nearly all of its wall time, and
    `lockdown analyze` prints it."""
    target = one_page_target(tmp_path, "sleeper", "A page that waits 30 ms", SLEEPER_PHP, "waits ok")
    out = tmp_path / "b"
    r = lockdown("profile", target, "-o", out, "-n", "40", "--collect", "excimer,perf,xhprof", "--xhprof-every", "5",
                 "--no-overhead-check")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    a = lockdown("analyze", out, "--json")
    assert a.returncode == 0, a.stderr
    o = json.loads(a.stdout)["off_cpu"]
    first = o["functions"][0]
    assert first["name"] == "remote_call" and not first["sql"] and o["sql_known"], o
    assert 25_000 <= first["blocked_us"] <= first["off_cpu_us"] <= first["wall_us"], first
    assert first["blocked_us"] >= 0.8 * first["wall_us"], first
    assert first["stack"] == "index.php;page;remote_call"         # relative to the app tree
    text = lockdown("analyze", out).stdout
    assert "remote_call  <- index.php;page;remote_call" in text and "off the CPU, by PHP function" in text
    # the off-CPU flame graph: nearly all of its width is the sleep
    r = lockdown("flamegraph", out, "--kind", "php-offcpu", "-o", tmp_path / "off.folded")
    assert r.returncode == 0, r.stderr
    folded = dict(line.rsplit(" ", 1) for line in (tmp_path / "off.folded").read_text().splitlines())
    # (the rest is compute()'s run-queue waits, which grow with the other test worker's load)
    weights = {k: int(v) for k, v in folded.items()}
    assert max(weights, key=weights.get) == "index.php;page;remote_call", weights
    assert weights["index.php;page;remote_call"] >= 0.6 * sum(weights.values()), weights
    # the blocking-wait detector reports it, with the builtin it waited in (xhprof)
    from lockdown.analyzers.detectors import blocking_wait, build_context, load_thresholds
    from lockdown.bundle.store import open_bundle
    [f] = blocking_wait.detect(build_context(open_bundle(out), load_thresholds()))
    assert (f.id, f.severity, f.share_pct, f.details["function"]) == ("blocking-wait", "info", None, "remote_call")
    assert f.details["stack"] == "index.php;page;remote_call" and f.urls == ["/"]
    [usleep] = f.details["waited_in"]
    assert usleep["builtin"] == "usleep" and usleep["calls_per_request"] == 1
    assert usleep["wall_us_per_request"] >= 29_000
    assert 25_000 <= f.details["blocked_us"] and f.title.startswith("remote_call waits ")
    # raised thresholds: nothing to say
    quiet = {**load_thresholds(), "blocking-wait": {"min_share_pct": 99.0, "min_ms": 1.0, "max_findings": 3}}
    assert blocking_wait.detect(build_context(open_bundle(out), quiet)) == []


def test_recursion_levels_are_the_function_and_a_half_microsecond_is_no_frame():
    """xhprof names a function's nested levels f@1, f@2: they send SQL as f does. A stack whose
    off-CPU time rounds to no microsecond is no frame of the flame graph."""
    xh = [{"Tree::walk==>Tree::walk@1": {"ct": 1}, "Tree::walk@1==>mysqli_query": {"ct": 2}}]
    assert sql_senders(xh) == {"Tree::walk"}
    half = profile("h", 1, [(5.0005, 1, "main;half"), (5.0015, 1, "main;whole")], start_ms=5)
    assert off_cpu_stacks([half], [perf(1, 1)], 5.0) == {"main;whole": 1}      # 0.5 us rounds to 0


def test_no_off_cpu_view_without_a_wall_clock_profile_and_perf(lockdown, tmp_path):
    """Excimer on the CPU clock sees no waits, and without perf there is no CPU to take out:
    the off-CPU flame graph says which in one line and writes nothing; analyze leaves the view
    out."""
    cpu_clock, no_perf = tmp_path / "cpu", tmp_path / "noperf"
    for out, args in ((cpu_clock, ("--excimer-clock", "cpu")), (no_perf, ("--collect", "excimer"))):
        r = lockdown("profile", "hello", "-n", "20", "--no-overhead-check", "-o", out, *args)
        assert r.returncode == 0, r.stderr[-2000:]
    svg = tmp_path / "off.svg"
    r = lockdown("flamegraph", cpu_clock, "--kind", "php-offcpu", "-o", svg)
    assert r.returncode != 0 and r.stderr.strip().splitlines() == [
        f"lockdown: error: {cpu_clock}: Excimer sampled the CPU clock in this capture, which shows no waits; "
        f"capture again with --excimer-clock wall (the default)"]
    r = lockdown("flamegraph", no_perf, "--kind", "php-offcpu", "-o", svg)
    assert r.returncode != 0 and "were the excimer and perf collectors both on?" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not svg.exists()
    for bundle in (cpu_clock, no_perf):
        assert "off_cpu" not in json.loads(lockdown("analyze", bundle, "--json").stdout)
