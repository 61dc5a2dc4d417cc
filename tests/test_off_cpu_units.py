"""Unit tests of the off-CPU analysis on synthetic samples, no stack (analyzers/off_cpu.py, the
blocking-wait detector, their text lines and the scheduler's other-threads figure). Expected
values are worked out by hand from docs/analysis.md "Off the CPU, by PHP function" and the
module docstrings: a sample stands for the time since the one before it (the first for the time
since the profiler started), perf's main-thread samples in it are its CPU (one perf period
each), a sample weighing more than one timer fire ends a wait of its function (blocked), the
run-queue wait its CPU explains taken out."""
from __future__ import annotations

import math

from lockdown.analyzers.budget import request_budgets, scheduling
from lockdown.analyzers.detectors import blocking_wait
from lockdown.analyzers.detectors.context import Context
from lockdown.analyzers.findings import Evidence
from lockdown.analyzers.off_cpu import (OffCpuFunction, app_relative, off_cpu, off_cpu_stacks, significant,
                                        sql_senders)
from lockdown.bundle.model import ExcimerProfile, PerfSample, RequestRecord
from lockdown.reports.analysis_text import off_cpu_lines, scheduling_lines

MS = 1_000_000
PERIOD = 10 * MS            # perf's period in most tests: one sample per 10 ms of CPU


def ns(t_ms: float) -> int:
    return round(t_ms * MS)


def perf(pid, t_ms, tid=None, period=PERIOD):
    return PerfSample(time_ns=ns(t_ms), pid=pid, tid=pid if tid is None else tid, comm="php-fpm",
                      period=period, request=None, frames=[])


def profile(request, pid, samples, start_ms=None):
    """samples: (time ms, weight, stack)."""
    stacks = sorted({s for _, _, s in samples})
    return ExcimerProfile(request, pid, stacks, [[ns(t), w, stacks.index(s)] for t, w, s in samples],
                          start_ns=None if start_ms is None else ns(start_ms))


def by_name(o):
    return {f.name: f for f in o.functions}


# -- sql_senders --------------------------------------------------------------------------------

def test_senders_are_the_callers_of_a_database_builtin_matched_whole():
    xh = [{"Db::open==>mysqli_real_connect": {}, "Db::charset==>mysqli::set_charset": {},
           "Stmt::run==>mysqli_stmt::execute": {}, "Tx::begin==>PDO::beginTransaction": {},
           "Repo::find==>PDOStatement::execute": {},
           "Rows::next==>mysqli_fetch_assoc": {}, "Rows::all==>PDOStatement::fetchAll": {},
           "Odd::a==>mysqli_query_cached": {}, "Odd::b==>my_mysqli_query": {},
           "mysqli_query": {}, "main()": {}},
          {"Cache::miss==>PDO::query": {}}]
    assert sql_senders(xh) == {"Db::open", "Db::charset", "Stmt::run", "Tx::begin", "Repo::find", "Cache::miss"}
    assert sql_senders([]) == set()


# -- _intervals, through off_cpu ----------------------------------------------------------------

def test_no_answer_for_a_period_that_is_not_positive_but_any_positive_period_works():
    a = profile("a", 1, [(10, 4, "main;f")])            # no profiler start: its weight in periods
    cpu = [perf(1, 9)]
    assert off_cpu([a], cpu, -5.0, None) is None
    assert off_cpu([a], cpu, 0, None) is None
    assert off_cpu_stacks([a], cpu, -5.0) == {}
    o = off_cpu([a], cpu, 0.5, None)                     # 4 fires of 0.5 ms: from 8 to 10 ms
    assert (o.wall_us, o.cpu_us) == (2_000, 10_000)


def test_profiles_without_samples_are_no_requests():
    a = profile("a", 1, [(5, 1, "main;f")], start_ms=0)
    empty = ExcimerProfile("e", 1, [], [], start_ns=0)
    o = off_cpu([empty, a], [perf(1, 50)], 5.0, None)
    assert o.requests == 1 and o.wall_us == 5_000
    assert off_cpu_stacks([empty, a], [perf(1, 50)], 5.0) == {"main;f": 5_000}


def test_perf_samples_in_any_order_and_the_most_common_period():
    # f runs 0-20 ms (one prompt sample at 20: its interval starts at the profiler's start), then
    # g 20-40; perf's samples come unsorted, and one of them with another period (a 4 ms one,
    # first): the capture's period is the commonest, 10 ms
    a = profile("a", 1, [(20, 1, "main;f"), (40, 1, "main;g")], start_ms=0)
    cpu = [perf(1, 35, period=4 * MS), perf(1, 15), perf(1, 5), perf(1, 25)]
    cpu += [perf(1, 90, tid=2, period=4 * MS) for _ in range(3)]         # the timer thread's: not counted
    o = off_cpu([a], cpu, 5.0, None)
    assert o.perf_period_us == 10_000
    assert (by_name(o)["f"].cpu_us, by_name(o)["g"].cpu_us) == (20_000, 20_000)
    assert o.cpu_us == 40_000


def test_the_first_interval_starts_at_the_profilers_start_unless_that_is_after_the_first_sample():
    at_start = profile("a", 1, [(10, 2, "main;f"), (15, 1, "main;g")], start_ms=10)
    assert off_cpu([at_start], [perf(1, 1)], 5.0, None).wall_us == 5_000       # f's interval is empty
    late_start = profile("a", 1, [(10, 2, "main;f"), (15, 1, "main;g")], start_ms=12)
    o = off_cpu([late_start], [perf(1, 1)], 5.0, None)                           # a clock that cannot be:
    assert (o.wall_us, by_name(o)["f"].wall_us) == (15_000, 10_000)           # f weighs 2 periods


def test_the_totals_take_in_the_tail_after_the_last_sample_but_no_end_before_it():
    a = profile("a", 1, [(5, 1, "main;f")], start_ms=0)
    tail = off_cpu([a], [perf(1, 20)], 5.0, None, ends={"a": ns(30)})          # perf: 10 ms of CPU in the tail
    assert (tail.wall_us, tail.cpu_us, tail.off_cpu_us) == (30_000, 10_000, 20_000)
    assert (by_name(tail)["f"].wall_us, by_name(tail)["f"].cpu_us) == (5_000, 0)
    early = off_cpu([a], [perf(1, 3)], 5.0, None, ends={"a": ns(4)})          # ends before its last sample
    assert (early.wall_us, early.cpu_us) == (5_000, 10_000)
    assert early.off_cpu_us == 0                                               # never below 0


def test_a_sample_of_two_fires_is_late_and_one_of_one_fire_is_not():
    a = profile("a", 1, [(10, 2, "main;late"), (20, 1, "main;prompt")], start_ms=0)
    o = off_cpu([a], [perf(1, 50)], 5.0, None)
    assert (by_name(o)["late"].blocked_us, by_name(o)["late"].off_cpu_us) == (10_000, 10_000)
    assert (by_name(o)["prompt"].blocked_us, by_name(o)["prompt"].off_cpu_us) == (0, 10_000)


# -- off_cpu's rows -----------------------------------------------------------------------------

# one request from the profiler's start (0), Excimer every 5 ms, perf every 10 ms of CPU:
#   (0, 5.01]       main;p;q;r;s;wait   prompt                      5.01 ms off
#   (5.01, 35.01]   main;a;wait         6 fires, perf at 12 and 22  30 ms, 20 of CPU: 10 blocked
#   (35.01, 55.01]  main;b;wait         4 fires                     20 blocked
#   (55.01, 60.01]  main;g1;zeta        prompt                      5 off
#   (60.01, 65.01]  main;g2;zeta        prompt                      5 off
#   (65.01, 80.01]  r;s;t;u;v;deep      3 fires                     15 blocked
#   (80.01, 85.01]  main;alpha          prompt, perf at 83          CPU 10 estimated, 5 at most
STACKS_SAMPLES = [(5.01, 1, "main;p;q;r;s;wait"), (35.01, 6, "main;a;wait"), (55.01, 4, "main;b;wait"),
                  (60.01, 1, "main;g1;zeta"), (65.01, 1, "main;g2;zeta"), (80.01, 3, "r;s;t;u;v;deep"),
                  (85.01, 1, "main;alpha")]
STACKS_CPU = [12, 22, 83]


def test_blocked_is_the_late_intervals_off_cpu_time_and_the_stack_the_one_blocked_most():
    o = off_cpu([profile("a", 1, STACKS_SAMPLES, start_ms=0)], [perf(1, t) for t in STACKS_CPU], 5.0, set())
    assert [f.name for f in o.functions] == ["wait", "deep", "zeta", "alpha"]   # blocked, then off the CPU
    f = by_name(o)
    assert (f["wait"].wall_us, f["wait"].cpu_us, f["wait"].off_cpu_us, f["wait"].blocked_us) == (
        55_010, 20_000, 35_010, 30_000)
    # the prompt stack came first and the a-stack was late, but b waited longest
    assert f["wait"].stack == "main;b;wait"
    assert math.isclose(f["wait"].error_us, 10_000 * math.sqrt(3))             # sqrt(2 + 1) perf periods
    assert (f["deep"].blocked_us, f["deep"].stack) == (15_000, "t;u;v;deep")     # last four frames
    assert (f["zeta"].off_cpu_us, f["zeta"].blocked_us, f["zeta"].stack) == (10_000, 0, "main;g1;zeta")  # its first
    assert (f["alpha"].wall_us, f["alpha"].cpu_us, f["alpha"].off_cpu_us) == (5_000, 5_000, 0)
    assert (o.wall_us, o.cpu_us, o.off_cpu_us) == (85_010, 30_000, 55_010)
    assert all(r.sql is False for r in o.functions) and all(r.queue_us == 0 for r in o.functions)
    two = off_cpu([profile("a", 1, STACKS_SAMPLES, start_ms=0)], [perf(1, t) for t in STACKS_CPU], 5.0, set(),
                  frames_shown=2)
    assert by_name(two)["deep"].stack == "v;deep"


def test_a_stack_that_was_never_late_gives_way_to_one_that_was():
    a = profile("a", 1, [(5, 1, "main;x;f"), (20, 3, "main;y;f")], start_ms=0)
    assert off_cpu([a], [perf(1, 50)], 5.0, None).functions[0].stack == "main;y;f"


def test_sql_marks_only_the_senders_and_is_false_otherwise():
    a = profile("a", 1, [(10, 2, "main;q"), (20, 2, "main;r")], start_ms=0)
    sent = by_name(off_cpu([a], [perf(1, 50)], 5.0, {"q"}))
    assert sent["q"].sql is True and sent["r"].sql is False
    assert all(r.sql is False for r in off_cpu([a], [perf(1, 50)], 5.0, set()).functions)
    assert all(r.sql is False for r in off_cpu([a], [perf(1, 50)], 5.0, None).functions)


# two requests alike: c prompt until 5.01 ms, then sleep's sample 4 fires late at 25.01 ms with perf
# at 15 (10 ms of CPU in its 20), the request ending at 30; the scheduler's run-queue delay 5 ms
# each: 10 ms over 40 ms of CPU, 0.25 ms per ms
def two_sleepers():
    profiles, cpu = [], []
    for rid, o in (("a", 0), ("b", 1000)):
        profiles.append(profile(rid, 1, [(o + 5.01, 1, "main;c"), (o + 25.01, 4, "main;sleep")], start_ms=o))
        cpu += [perf(1, o + 3), perf(1, o + 15)]
    return profiles, cpu


def test_means_per_request_of_queue_blocked_and_error_with_the_run_queue_taken_out():
    profiles, cpu = two_sleepers()
    o = off_cpu(profiles, cpu, 5.0, set(), run_delay_us={"a": 5_000, "b": 5_000},
                ends={"a": ns(30), "b": ns(1030)})
    assert (o.requests, o.wall_us, o.cpu_us, o.off_cpu_us, o.queue_per_cpu) == (2, 30_000, 20_000, 10_000, 0.25)
    s = by_name(o)["sleep"]
    # 20 ms of wall, 10 of CPU, 10 off; 10 x 0.25 = 2.5 queued; the late intervals' 10 off less that
    assert (s.wall_us, s.cpu_us, s.off_cpu_us, s.queue_us, s.blocked_us) == (20_000, 10_000, 10_000, 2_500, 7_500)
    assert math.isclose(s.error_us, math.sqrt(2 + 1) * 10_000 * 1.25 / 2)
    c = by_name(o)["c"]                                   # 10 ms of CPU seen in 5.01 ms: clipped to its wall
    assert (c.cpu_us, c.off_cpu_us, c.queue_us, c.blocked_us) == (5_010, 0, 0, 0)


def test_no_queue_is_taken_out_unless_every_request_has_its_delay_and_some_cpu_was_seen():
    profiles, cpu = two_sleepers()
    some = off_cpu(profiles, cpu, 5.0, set(), run_delay_us={"a": 5_000})
    assert some.queue_per_cpu == 0 and by_name(some)["sleep"].blocked_us == 10_000
    # perf saw the worker only outside the requests: no CPU to share the delay by
    idle = off_cpu(profiles, [perf(1, 500)], 5.0, set(), run_delay_us={"a": 5_000, "b": 5_000})
    assert idle.queue_per_cpu == 0 and idle.cpu_us == 0
    thirds = off_cpu(profiles, cpu, 5.0, set(), run_delay_us={"a": 5_000, "b": 8_333})
    assert thirds.queue_per_cpu == 0.3333                  # 13.333 ms over 40, to 4 places


# -- off_cpu_stacks ------------------------------------------------------------------------------

def test_the_flame_graph_weighs_in_whole_us_and_leaves_out_what_rounds_to_nothing_or_less():
    # one perf sample (10 ms of CPU) in each interval: 0.3, 1.0 and 1.6 us more wall than that;
    # then 5 ms with two samples (20 ms of CPU): below zero
    a = ExcimerProfile("a", 1, ["main;tiny", "main;one", "main;more", "main;busy"],
                       [[10_000_300, 1, 0], [20_001_300, 1, 1], [30_002_900, 1, 2], [35_002_900, 1, 3]],
                       start_ns=0)
    cpu = [perf(1, t) for t in (5, 15, 25, 31, 33)]
    assert off_cpu_stacks([a], cpu, 5.0) == {"main;one": 1, "main;more": 2}


# -- significant, app_relative ---------------------------------------------------------------------

def row(name, blocked_us, error_us):
    return OffCpuFunction(name, 0, 0, 0, 0, blocked_us, error_us, False, name)


def test_significant_rows_are_twice_their_error_and_the_minimum_inclusive():
    rows = [row("at-min", 100.0, 50.0), row("under-min", 99.9, 0.0), row("2.5-errors", 250.0, 100.0),
            row("1.5-errors", 150.0, 100.0), row("2-errors", 400.0, 200.0)]
    assert [r.name for r in significant(rows)] == ["at-min", "2.5-errors", "2-errors"]
    assert [r.name for r in significant(rows, min_us=300.0)] == ["2-errors"]


def test_app_relative_names_scripts_under_the_captures_app_tree():
    stack = "/srv/BOX/app/index.php;/srv/BOX/app/lib/a.php;f;/srv/BOX/apps/b.php"
    assert app_relative(stack, "/srv/BOX/") == "index.php;lib/a.php;f;/srv/BOX/apps/b.php"
    assert app_relative(stack, "/srv/BOX") == "index.php;lib/a.php;f;/srv/BOX/apps/b.php"
    assert app_relative(stack, None) == stack and app_relative(stack, "") == stack
    assert app_relative(stack, "/other/") == stack


# -- blocking-wait -------------------------------------------------------------------------------

APP = "/srv/BOX/app/"
WAIT = f"{APP}index.php;{APP}lib/net.php;page;fetch;remote_call"
COMPUTE = f"{APP}index.php;page;compute"
INTERNAL = {"internal_functions": ["usleep", "curl_exec", "strlen", "flock", "mysqli_query", "fopen"],
            "internal_classes": ["SplFileObject"]}


def record(rid, start_ms, end_ms, url, sched=None, instrumented=False):
    return RequestRecord(id=rid, pid=1, method="GET", uri=url, status=200, start_ns=ns(start_ms),
                         end_ns=ns(end_ms), start_unix=1.7e9, wall_us=round((end_ms - start_ms) * 1000), cpu_us=0,
                         peak_memory=1, instrumented=instrumented, url=url, sched=sched)


def context(requests, profiles, samples, xhprof=None, capture=None, thresholds=None, run_dir=None):
    return Context(requests=requests, statements=[], xhprof_profiles=xhprof or {}, excimer={}, native=samples,
                   manifest={"capture": {"excimer_period_ms": 5.0} if capture is None else capture,
                             "run_dir": run_dir, "php": INTERNAL},
                   thresholds={} if thresholds is None else thresholds, excimer_profiles=profiles)


def waiting_page(sched=lambda rid: {"run_delay_us": 10_000 if rid.startswith("w") else 20_000}):
    """Six requests that compute 40 ms (8 prompt samples, perf at 9, 19, 29, 39) then wait in
    remote_call until 92.01 ms (10 fires late, 10 ms of CPU at 45) and end at 100; two that
    compute 100 ms; one instrumented that waited long (not timed). Per timed request: 100 ms of
    wall, 500 ms of CPU in all. With the default delays (10 and 20 ms, 100 in all): 0.2 ms of
    queueing per ms of CPU."""
    requests, profiles, samples = [], [], []
    for k, (rid, url) in enumerate([("w1", "/a"), ("w2", "/a"), ("w3", "/a"), ("w4", "/b"), ("w5", "/b"),
                                    ("w6", "/b"), ("c1", "/c"), ("c2", "/c")]):
        o = 1000 * k
        requests.append(record(rid, o, o + 100, url, sched(rid)))
        if rid.startswith("w"):
            profiles.append(profile(rid, 1, [*[(o + 5 * j + 0.01, 1, COMPUTE) for j in range(1, 9)],
                                             (o + 92.01, 10, WAIT)], start_ms=o))
            samples += [perf(1, o + t) for t in (9, 19, 29, 39, 45)]
        else:
            profiles.append(profile(rid, 1, [(o + 5 * j, 1, COMPUTE) for j in range(1, 21)], start_ms=o))
            samples += [perf(1, o + 9.5 + 10 * j) for j in range(10)]
    requests.append(record("i1", 20_000, 20_600, "/d", {"run_delay_us": 0}, instrumented=True))
    profiles.append(profile("i1", 1, [(20_500, 99, WAIT)], start_ms=20_000))
    return requests, profiles[::-1], samples


# xhprof of three instrumented requests, inserted out of order: remote_call calls usleep (3 calls,
# 96,001 us), curl_exec (2, 16,000), SplFileObject::fread (4, 2,000), strlen (10, 100) and a user
# function; usleep's own self-edge and another caller's usleep are not its calls
WAIT_XHPROF = {
    "x3": {"page==>remote_call": {"ct": 1, "wt": 140_000}, "remote_call==>usleep": {"ct": 1, "wt": 30_001},
           "remote_call==>curl_exec": {"ct": 2, "wt": 16_000}, "remote_call==>helper": {"ct": 1, "wt": 90_000},
           "usleep==>usleep@1": {"ct": 1, "wt": 30_001}},
    "i1": {"remote_call==>usleep": {"ct": 1, "wt": 34_000},
           "remote_call==>SplFileObject::fread": {"ct": 4, "wt": 2_000}},
    "x2": {"remote_call==>usleep": {"ct": 1, "wt": 32_000}, "remote_call==>strlen": {"ct": 10, "wt": 100},
           "other==>usleep": {"ct": 9, "wt": 99_000}},
}


def test_a_page_waiting_in_remote_call_is_one_finding_with_its_evidence():
    requests, profiles, samples = waiting_page()
    [f] = blocking_wait.detect(context(requests, profiles, samples, xhprof=WAIT_XHPROF, run_dir="/srv/BOX/"))
    # remote_call: 6 x 52 ms of wall, 6 x 10 of CPU; 252 ms off, 12 of it queued (60 x 0.2): 240
    # ms blocked over 8 requests, 30 a request, 30% of their 100 ms; error sqrt(6 + 1) x 10 ms x
    # 1.2 / 8; its wall 312 / 8 = 39 ms, queue 12 / 8 = 1.5 ms
    source = "Excimer wall samples less perf's on-CPU samples of 8 timed requests (analyzers/off_cpu.py)"
    # usleep 3 calls and 96,001 us over 3 profiles; curl_exec 2 and 16,000 (above a tenth of
    # usleep's); fread's 667 us a request and strlen's 33 are below a tenth
    xh = "xhprof of i1, x2, x3"
    assert (f.id, f.severity, f.share_pct, f.title) == ("blocking-wait", "info", None,
                                                       "remote_call waits 30.0 ms a request off the CPU")
    assert f.evidence == [
        Evidence("blocked off the CPU, ms a request (+- one standard error)", "30.00 +- 3.97", source),
        Evidence("share of the requests' wall time, %", 30.0, source),
        Evidence("its wall time as the leaf of the PHP stacks, ms a request", 39.0, source),
        Evidence("waiting for a CPU its own CPU explains, taken out, ms a request", 1.5,
                 "the requests' run-queue delay (requests.jsonl sched) per unit of CPU"),
        Evidence("the stack that waited most (last frames)", "lib/net.php;page;fetch;remote_call", "excimer.jsonl"),
        Evidence("usleep called by it, calls and wall ms a request", "1, 32.00", xh),
        Evidence("curl_exec called by it, calls and wall ms a request", "0.666667, 5.33", xh)]
    assert f.summary == (
        "remote_call waits 30.0 ms a request off the CPU, not for SQL (30% of the timed requests' wall time); "
        "in xhprof it spends that time in usleep, curl_exec. A request that waits on a remote service, a sleep, "
        "a lock or a slow read is as slow as what it waits for, and its php-fpm worker serves nobody else "
        "meanwhile. Look at what it waits for: cache a remote answer, move the call to a background job or a "
        "queue, give it a short timeout, hold the lock for less time.")
    assert (f.urls, f.requests) == (["/a", "/b"], ["w1", "w2", "w3", "w4", "w5"])   # timed ones, sorted
    assert f.details == {
        "function": "remote_call", "blocked_us": 30_000.0, "error_us": 3968.6, "queue_us": 1500.0,
        "wall_share_pct": 30.0, "stack": "lib/net.php;page;fetch;remote_call",
        "waited_in": [{"builtin": "usleep", "calls_per_request": 1.0, "wall_us_per_request": 32000.3},
                      {"builtin": "curl_exec", "calls_per_request": 2 / 3, "wall_us_per_request": 5333.3}]}


def test_without_the_schedulers_delay_for_every_request_nothing_is_taken_out():
    # 252 ms off the CPU over 8 requests: 31.5 blocked a request; error sqrt(7) x 10 / 8
    for sched in (lambda rid: None, lambda rid: {"voluntary_switches": 3},
                  lambda rid: None if rid == "w1" else {"voluntary_switches": 3} if rid == "w2"
                  else {"run_delay_us": 10_000}):
        requests, profiles, samples = waiting_page(sched)
        [f] = blocking_wait.detect(context(requests, profiles, samples))
        assert (f.details["blocked_us"], f.details["queue_us"], f.details["error_us"]) == (31_500.0, 0.0, 3307.2)
        assert f.details["stack"] == WAIT.split(";", 1)[1]               # no run directory: as Excimer named it
        assert f.details["waited_in"] == [] and "in xhprof" not in f.summary


def test_nothing_without_wall_clock_samples_perf_samples_or_a_capture():
    requests, profiles, samples = waiting_page()
    assert blocking_wait.detect(context(requests, profiles, samples, capture={"excimer_clock": "cpu",
                                                                              "excimer_period_ms": 5.0})) == []
    assert len(blocking_wait.detect(context(requests, profiles, samples, capture={"excimer_clock": "wall",
                                                                                  "excimer_period_ms": 5.0}))) == 1
    assert blocking_wait.detect(context(requests, profiles, [])) == []
    assert blocking_wait.detect(context(requests, [], samples)) == []
    no_capture = context(requests, profiles, samples)
    no_capture.manifest["capture"] = None
    assert blocking_wait.detect(no_capture) == []


def test_the_evidence_is_rounded_as_it_is_shown():
    # one request 0-81 ms, Excimer every 5 ms, perf every 1 ms of CPU: compute runs 0-5 ms (5 perf
    # samples), remote_call's sample comes 7 fires late at 44.1232 ms with 10 perf samples in its
    # 39.1232 ms; run-queue delay 9.088 ms over 15 ms of CPU: 0.605867 a ms of CPU. remote_call:
    # queue 10 x 0.605867 = 6.058667 ms, blocked 29.1232 - 6.058667 = 23.064533 ms, 28.474733% of
    # 81 ms; error sqrt(10 + 1) x 1 ms x 1.605867 = 5.326057 ms
    requests = [record("r1", 0, 81, "/x", {"run_delay_us": 9_088})]
    profiles = [profile("r1", 1, [(5, 1, "main;compute"), (44.1232, 7, "main;remote_call")], start_ms=0)]
    samples = [perf(1, t + 0.5, period=MS) for t in (*range(5), *range(10, 20))]
    [f] = blocking_wait.detect(context(requests, profiles, samples))
    assert f.title == "remote_call waits 23.1 ms a request off the CPU"
    assert f.summary.startswith("remote_call waits 23.1 ms a request off the CPU, not for SQL (28% of the timed "
                                "requests' wall time). ")
    assert [e.value for e in f.evidence] == ["23.06 +- 5.33", 28.5, 39.12, 6.06, "main;remote_call"]
    assert f.details == {"function": "remote_call", "blocked_us": 23_064.5, "error_us": 5_326.1, "queue_us": 6_058.7,
                         "wall_share_pct": 28.47, "stack": "main;remote_call", "waited_in": []}


def test_a_scripts_top_level_code_that_waits_is_named_by_its_script():
    requests = [record("r1", 0, 50, "/top")]
    profiles = [profile("r1", 1, [(40.01, 8, f"{APP}index.php")], start_ms=0)]
    [f] = blocking_wait.detect(context(requests, profiles, [perf(1, 45)], run_dir="/srv/BOX"))
    assert (f.details["function"], f.details["stack"], f.requests, f.urls) == (f"{APP}index.php", "index.php",
                                                                               ["r1"], ["/top"])


# one request 0-200 ms, Excimer every 5 ms, perf every 2 ms of CPU (error: 2 ms a function with no
# perf sample): a waits 40.01 ms (8 fires), b 30, c 20, d 10, then e runs (perf at 103); shares
# of the 200 ms: 20.005%, 15%, 10%, 5%
def many_waits(end_ms=200):
    requests = [record("r1", 0, end_ms, "/many")]
    profiles = [profile("r1", 7, [(40.01, 8, "main;a"), (70.01, 6, "main;b"), (90.01, 4, "main;c"),
                                  (100.01, 2, "main;d"), (105.01, 1, "main;e")], start_ms=0)]
    return requests, profiles, [perf(7, 103, period=2 * MS)]


def titles(findings):
    return [f.title for f in findings]


def test_the_most_blocked_functions_first_up_to_the_limit_each_at_least_5_percent_and_1_ms():
    rq, pr, sa = many_waits()
    assert titles(blocking_wait.detect(context(rq, pr, sa))) == [
        "a waits 40.0 ms a request off the CPU", "b waits 30.0 ms a request off the CPU",
        "c waits 20.0 ms a request off the CPU"]

    def names(thresholds):
        return [f.details["function"] for f in blocking_wait.detect(context(rq, pr, sa, thresholds=thresholds))]
    assert names({"blocking-wait": {"max_findings": 4}}) == ["a", "b", "c", "d"]          # d: 5.0% exactly
    assert names({"blocking-wait": {"max_findings": 1}}) == ["a"]
    assert names({"blocking-wait": {"min_share_pct": 10.0, "max_findings": 9}}) == ["a", "b", "c"]
    assert names({"blocking-wait": {"min_share_pct": 10.01, "max_findings": 9}}) == ["a", "b"]
    assert names({"blocking-wait": {"min_ms": 20.0, "max_findings": 9}}) == ["a", "b", "c"]
    assert names({"blocking-wait": {"min_ms": 20.01, "max_findings": 9}}) == ["a", "b"]
    [a] = blocking_wait.detect(context(rq, pr, sa, thresholds={"blocking-wait": {"max_findings": 1}}))
    assert a.summary.startswith("a waits 40.0 ms a request off the CPU, not for SQL (20% of the timed requests' "
                                "wall time). A request that waits")
    assert (a.urls, a.requests, a.details["stack"]) == (["/many"], ["r1"], "main;a")
    rq, pr, sa = many_waits(end_ms=250)                  # d: 10 of 250 ms, 4%, under the default 5%
    assert names({"blocking-wait": {"max_findings": 9}}) == ["a", "b", "c"]


def test_a_function_that_sends_sql_is_left_to_the_query_detectors():
    rq, pr, sa = many_waits()
    xh = {p: {"a==>flock": {"ct": 1, "wt": 40_000}} for p in ("p4", "p1", "p3", "p2")}
    xh["p1"]["b==>mysqli_query"] = {"ct": 1, "wt": 30_000}
    found = blocking_wait.detect(context(rq, pr, sa, xhprof=xh))
    assert [f.details["function"] for f in found] == ["a", "c", "d"]
    assert found[0].evidence[-1] == Evidence("flock called by it, calls and wall ms a request", "1, 40.00",
                                             "xhprof of p1, p2, p3 ...")
    assert found[0].summary.startswith("a waits 40.0 ms a request off the CPU, not for SQL (20% of the timed "
                                       "requests' wall time); in xhprof it spends that time in flock. ")


def test_the_default_minimum_is_1_ms_a_request_inclusive():
    # Excimer every 0.1 ms, perf every 0.4: f waits 0.9 ms (9 fires), g 1.0 (10), the request
    # ends at 10 ms (perf at 5); both stand out of their 0.4 ms error and 5% of the wall time
    rq = [record("r1", 0, 10, "/")]
    pr = [profile("r1", 3, [(0.9, 9, "main;f"), (1.9, 10, "main;g")], start_ms=0)]
    ctx = context(rq, pr, [perf(3, 5, period=400_000)], capture={"excimer_period_ms": 0.1})
    assert [f.details["function"] for f in blocking_wait.detect(ctx)] == ["g"]


def test_the_builtins_a_function_waits_in_by_wall_time_a_profiled_request():
    xh = {"p1": {"remote_call==>usleep": {"ct": 1, "wt": 28_000},
                 "remote_call==>SplFileObject::fread": {"ct": 4, "wt": 6_000},
                 "remote_call==>fopen": {"ct": 3, "wt": 5_998}, "remote_call==>curl_exec": {"ct": 1, "wt": 0},
                 "remote_call==>helper": {"ct": 1, "wt": 90_000}, "other==>usleep": {"ct": 5, "wt": 50_000},
                 "quick==>strlen": {"ct": 3, "wt": 0}},
          "p2": {"remote_call==>usleep": {"ct": 1, "wt": 30_000}, "remote_call==>usleep@1": {"ct": 1, "wt": 2_000},
                 "remote_call==>curl_exec": {"wt": 9_000}, "remote_call==>fopen": {"ct": 1},
                 "usleep==>usleep@1": {"ct": 1, "wt": 30_000}}}
    ctx = context([], [], [], xhprof=xh)
    # means over the 2 profiles: usleep 1.5 calls and 30,000 us (its @1 marker taken off), curl_exec
    # 0.5 and 4,500, fread 2 and 3,000 (a tenth of usleep's: kept), fopen 2 and 2,999 (not)
    top = [("usleep", 1.5, 30_000), ("curl_exec", 0.5, 4_500), ("SplFileObject::fread", 2, 3_000)]
    assert blocking_wait._builtins_called(ctx, "remote_call") == top
    assert blocking_wait._builtins_called(ctx, "remote_call", top=4) == top
    assert blocking_wait._builtins_called(ctx, "remote_call", top=2) == top[:2]
    assert blocking_wait._builtins_called(ctx, "quick") == []          # no time in it: not where it waited
    assert blocking_wait._builtins_called(ctx, "nobody") == []
    # up to three by default, any with a tenth of the biggest one's time, however small
    many = context([], [], [], xhprof={"p1": {"g==>usleep": {"ct": 1, "wt": 10}, "g==>fopen": {"ct": 1, "wt": 9},
                                              "g==>flock": {"ct": 1, "wt": 8}, "g==>strlen": {"ct": 1, "wt": 1}}})
    assert blocking_wait._builtins_called(many, "g") == [("usleep", 1, 10), ("fopen", 1, 9), ("flock", 1, 8)]
    assert blocking_wait._builtins_called(many, "g", top=4)[3] == ("strlen", 1, 1)
    unknown = context([], [], [], xhprof=xh)
    unknown.manifest["php"] = {}                                         # no lists of builtins: none known
    assert blocking_wait._builtins_called(unknown, "remote_call") == []


# -- text ------------------------------------------------------------------------------------------

def off_cpu_json(rows, queue_per_cpu=0.25, sql_known=True):
    return {"requests": 10, "wall_us": 400_000, "cpu_us": 100_000, "off_cpu_us": 300_000, "sql_known": sql_known,
            "queue_per_cpu": queue_per_cpu, "perf_period_us": 10_101.01, "excimer_period_ms": 4.0,
            "functions_sampled": 12, "functions": rows}


def text_row(name, blocked_us=77_500, wall_us=80_000, stack=None, sql=False):
    return {"name": name, "wall_us": wall_us, "cpu_us": 0, "off_cpu_us": 0, "queue_us": 20_000,
            "blocked_us": blocked_us, "error_us": 20_000, "sql": sql, "stack": stack or f"main;{name}"}


def test_the_off_cpu_text_in_full():
    stack = "root;" + "m" * 85 + ";leaf"                        # 95 characters: the last 90 shown
    rows = [text_row("Http::get"), text_row("leaf", stack=stack, sql=True), text_row("gone", wall_us=0)]
    rows += [text_row(f"f{i:02d}") for i in range(3, 11)]
    lines = off_cpu_lines(off_cpu_json(rows))
    assert lines[:4] == [
        "",
        "off the CPU, by PHP function (Excimer wall samples less perf's on-CPU samples, 10 requests): 300.0 of "
        "400.0 ms a request; waiting for a CPU is taken as 0.25 ms per ms of a function's CPU (the capture's "
        "run-queue delay) and taken out; blocked: waits in one builtin call longer than the 4 ms Excimer period "
        "(a lower bound; shorter waits count only in the total), listed where it stands out of its sampling error",
        "   blocked     +-  queued of wall  function (the stack that waited most, last frames), ms a request",
        "     77.50  20.00   20.00     97%  Http::get  <- main;Http::get"]
    assert lines[4] == "     77.50  20.00   20.00     97%  leaf [sends SQL]  <- " + "m" * 85 + ";leaf"
    assert lines[5] == "     77.50  20.00   20.00      0%  gone  <- main;gone"
    assert len(lines) == 3 + 10 and lines[-1].endswith("<- main;f09")               # the first ten rows
    none = off_cpu_lines(off_cpu_json([], queue_per_cpu=0.0, sql_known=False))
    assert none == [
        "",
        "off the CPU, by PHP function (Excimer wall samples less perf's on-CPU samples, 10 requests): 300.0 of "
        "400.0 ms a request; blocked: waits in one builtin call longer than the 4 ms Excimer period (a lower "
        "bound; shorter waits count only in the total), listed where it stands out of its sampling error (no "
        "xhprof: senders of SQL not marked)",
        "  none of the 12 functions sampled does"]


# -- the worker's other threads --------------------------------------------------------------------

def sched_request(rid, cpu_us, process_cpu_us):
    return RequestRecord(id=rid, pid=1, method="GET", uri="/", status=200, start_ns=0, end_ns=1, start_unix=0,
                         wall_us=100_000, cpu_us=cpu_us, peak_memory=1, instrumented=False, url="/",
                         sched={"voluntary_switches": 0, "involuntary_switches": 0, "process_cpu_us": process_cpu_us})


def test_the_other_threads_cpu_is_the_process_cpu_beyond_the_request_threads_never_below_zero():
    rs = [sched_request("a", 40_000, 39_000), sched_request("b", 60_000, 60_400)]      # -1,000 and +400
    assert scheduling(rs, request_budgets(rs, [], []))["other_threads_cpu_us"] == 0.0
    rs = [sched_request("a", 40_000, 43_000), sched_request("b", 60_000, 59_000)]      # +3,000 and -1,000
    assert scheduling(rs, request_budgets(rs, [], []))["other_threads_cpu_us"] == 1_000


def test_the_other_threads_line_is_printed_from_50_us():
    s = {"requests": 2, "voluntary_switches": 1, "involuntary_switches": 0, "cpu_queue_us": None,
         "cpu_queue_pct": None, "run_delay_us": None}
    assert scheduling_lines({**s, "other_threads_cpu_us": 50})[1:] == [
        "  the worker's other threads (Excimer's timer) used 0.05 ms CPU a request, lockdown's cost: the cpu column "
        "is the request thread's alone"]
    assert scheduling_lines({**s, "other_threads_cpu_us": 20_000})[1].startswith(
        "  the worker's other threads (Excimer's timer) used 20.00 ms CPU a request")
    assert len(scheduling_lines({**s, "other_threads_cpu_us": 49.9})) == 1
    assert len(scheduling_lines({**s, "other_threads_cpu_us": None})) == 1
