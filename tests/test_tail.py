"""The tail of each URL: its slowest tenth against its middle half (analyzers/tail.py), from
synthetic requests and on the real stack."""
from __future__ import annotations

import json

import pytest

from conftest import one_page_target, processes_mentioning

from lockdown.analyzers.budget import request_budgets
from lockdown.analyzers.tail import tails
from lockdown.bundle.model import RequestRecord, Statement


def req(i, wall, cpu, url="/", delay=None, gc=(0, 0), memory=1_000_000, instrumented=False):
    return RequestRecord(id=f"r{i:06d}", pid=1, method="GET", uri=url, status=200, start_ns=0, end_ns=1,
                         start_unix=0, wall_us=wall, cpu_us=cpu, peak_memory=memory, instrumented=instrumented,
                         url=url, sched=None if delay is None else {"run_delay_us": delay},
                         engine={"gc_runs": gc[1], "gc_runs_at_start": gc[0]})


def stmt(seq, rid, sql, us):
    return Statement(seq, rid, "connection", 5, "db", sql, us, 0, 1, 1, 0, 0)


def test_the_slowest_tenth_against_the_middle_half_part_by_part():
    # 20 requests of /: 18 of 10 ms (cpu 6, 2 ms queued, 2 ms of one statement), 2 slow ones
    # of 60 ms: 40 ms more in a lock wait on the same statement, 4 ms more cpu, a GC run
    rs = [req(i, 10_000, 6_000, delay=2_000) for i in range(18)]
    rs += [req(18, 60_000, 10_000, delay=6_000, gc=(3, 4)), req(19, 59_000, 10_000, delay=5_000, gc=(3, 4))]
    rs += [req(20, 900_000, 900_000, instrumented=True)]          # xhprof on: never in a tail
    rs += [req(30 + i, 5_000, 5_000, url="/few") for i in range(9)]   # too few to tell a tail
    st = [stmt(i, r.id, "SELECT * FROM t WHERE id = 1", 2_000) for i, r in enumerate(rs[:18])]
    st += [stmt(18, "r000018", "SELECT * FROM t WHERE id = 2", 42_000),
           stmt(19, "r000019", "SELECT * FROM t WHERE id = 3", 41_000)]
    [t] = tails(rs, request_budgets(rs, st, []), st)
    assert (t.url, t.requests, t.tail.requests, t.middle.requests) == ("/", 20, 2, 10)
    assert t.slowest == ["r000018", "r000019"]
    assert (t.middle.wall_us, t.tail.wall_us, t.p50_wall_us) == (10_000, 59_500, 10_000)
    # the run-queue delay (2 and 5.5 ms) is no more than each request's db wait: none is surely queueing
    assert t.excess_us == {"db wait": 39_500, "other wait": 6_000, "cpu": 4_000, "waiting for a CPU": 0}
    assert list(t.excess_us) == ["db wait", "other wait", "cpu", "waiting for a CPU"]    # largest first
    assert (t.middle.gc_runs, t.tail.gc_runs, t.middle.compiles) == (0, 1, None)
    g = t.statement
    assert (g.fingerprint, g.tail_us, g.middle_us, g.tail_count, g.middle_count) == (
        "select * from t where id = ?", 41_500, 2_000, 1, 1)


def test_a_statement_is_named_only_when_it_explains_the_tail():
    rs = [req(i, 10_000, 8_000) for i in range(18)] + [req(18 + i, 50_000, 47_000) for i in range(2)]
    st = [stmt(i, r.id, "SELECT 1", 1_000) for i, r in enumerate(rs[:18])]
    st += [stmt(20 + i, r.id, "SELECT 1", 1_500) for i, r in enumerate(rs[18:])]   # +0.5 of +40 ms
    [t] = tails(rs, request_budgets(rs, st, []), st)
    assert t.statement is None and t.excess_us["cpu"] == 39_000
    assert set(t.excess_us) == {"cpu", "db wait", "other wait"}       # no run queue recorded: no such part


def test_urls_are_ordered_by_what_their_tail_adds():
    rs = [req(i, 10_000, 10_000, url="/a") for i in range(10)] + [req(10, 30_000, 30_000, url="/a")]
    rs += [req(20 + i, 100_000, 100_000, url="/b") for i in range(10)] + [req(30, 150_000, 150_000, url="/b")]
    assert [t.url for t in tails(rs, request_budgets(rs, [], []), [])] == ["/b", "/a"]
    assert tails(rs[:9], request_budgets(rs[:9], [], []), []) == []


TAILS_PHP = """<?php
$counter = __DIR__ . '/count.txt';
$n = (int) @file_get_contents($counter) + 1;
file_put_contents($counter, (string) $n);
$x = 0;
for ($i = 0; $i < 100000; $i++) { $x = ($x + $i * 7) % 1000003; }
if ($n % 5 === 0) {
    usleep(30000);
    $garbage = [];
    for ($i = 0; $i < 20000; $i++) {
        $a = new stdClass(); $b = new stdClass(); $a->b = $b; $b->a = $a; $garbage[] = $a;
    }
    unset($garbage, $a, $b);
    gc_collect_cycles();
}
echo 'tail ok ', $x;
"""


def test_the_tail_of_a_real_page_is_its_sleeping_requests(lockdown, home, tmp_path):
    """Every fifth request of a real page sleeps 30 ms and builds 40,000 objects in cycles for
    the collector: its tail is those requests, grown by the sleep (other wait outside the run
    queue: a sleeping worker is not runnable, however busy the host), with collector runs and
    memory the middle ones do not have."""
    target = one_page_target(tmp_path, "tails", "Every fifth request sleeps 30 ms and collects cycles",
                             TAILS_PHP, "tail ok")
    out = tmp_path / "b"
    r = lockdown("profile", target, "-o", out, "--collect", "none", "-n", "40", "--no-overhead-check",
                 "--warmup-requests", "10")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    a = json.loads(lockdown("analyze", out, "--json").stdout)
    [t] = a["tail"]
    walls = {x["id"]: x["wall_us"] for x in a["by_request"]}
    sleepers = {rid for rid, w in walls.items() if w >= 30_000}
    # 8 sleep; a loaded host can make another request as slow (CI once saw a 58.9 ms first request)
    assert len(sleepers) >= 8 and set(t["slowest"]) <= sleepers and len(t["slowest"]) == 4, walls
    assert t["ratio"] > 5 and t["excess_us"]["other wait"] >= 20_000, t
    assert t["tail"]["gc_runs"] >= 1 > t["middle"]["gc_runs"]
    assert t["tail"]["peak_memory"] > 4 * t["middle"]["peak_memory"]
    text = lockdown("analyze", out).stdout
    assert "/: 4 requests at" in text and "cycle-collector runs per request:" in text
    assert processes_mentioning(str(home)) == [] and processes_mentioning(str(target)) == []


def test_the_text_names_the_parts_that_moved_and_the_calm_urls():
    from lockdown.reports.analysis_text import tail_lines
    group = {"requests": 10, "wall_us": 68_300, "statements": 36.0, "gc_runs": 0.0, "compiles": 0.0,
             "peak_memory": 3_000_000}
    long = {"url": "/?p=243", "requests": 11, "p50_wall_us": 68_000, "p90_wall_us": 84_200, "ratio": 1.29,
            "middle": group, "tail": {**group, "requests": 2, "wall_us": 88_400},
            "excess_us": {"cpu": 19_400, "db wait": 1_300, "other wait": -200, "waiting for a CPU": -300},
            "slowest": ["r000057", "r000041"], "statement": None}
    calm = {**long, "url": "/", "ratio": 1.2}
    assert tail_lines([long, calm]) == [
        "", "tail latency (URLs with at least 10 timed requests: the slowest tenth against the middle half by the "
            "worker's wall time, mean ms):",
        "  /?p=243: 2 requests at 88.4 against 68.3 (1.29x; p50 68.0, p90 84.2): +19.4 cpu, +1.3 db wait",
        "    slowest: r000057 r000041",
        "  1 other URL: the slowest tenth within 1.25x of the middle half"]
    assert tail_lines([calm])[-1] == "  no slowest tenth beyond 1.25x its middle half (1 URL compared)"
    assert tail_lines([]) == tail_lines(None) == []


def rec(i, wall, cpu=0, url="/p", uri=None, delay=None, statements_=0, memory=1_000_000, engine=None, sched=None):
    """A timed request with every field the tail reads set explicitly."""
    return RequestRecord(id=f"r{i:06d}", pid=1, method="GET", uri=uri or url, status=200, start_ns=0, end_ns=1,
                         start_unix=0, wall_us=wall, cpu_us=cpu, peak_memory=memory, instrumented=False, url=url,
                         sched=sched if sched is not None else None if delay is None else {"run_delay_us": delay},
                         engine=engine)


def test_groups_percentiles_and_parts_of_requests_that_all_differ():
    # 20 requests of /p (each its own query string), 10..29 ms; cpu 4 ms; no SQL, so the whole
    # run-queue delay (0..19 ms) is waiting for a CPU and the rest of other wait is 6 ms each
    rs = [rec(i, 10_000 + 1_000 * i, 4_000, uri=f"/p?x={i}", delay=1_000 * i, memory=1_000_000 + 1_000 * i)
          for i in range(20)]
    st = [stmt(100 + 10 * i + j, f"r{i:06d}", "SELECT 1", 0) for i in range(20) for j in range(i % 3)]
    [t] = tails(rs, request_budgets(rs, st, []), st)
    assert (t.url, t.requests, t.tail.requests, t.middle.requests) == ("/p", 20, 2, 10)   # grouped by url
    assert t.slowest == ["r000019", "r000018"]
    assert (t.middle.wall_us, t.tail.wall_us) == (19_500, 28_500)        # requests 5..14 against 18, 19
    assert t.ratio == pytest.approx(28_500 / 19_500)
    assert t.p50_wall_us == 19_500 and t.p90_wall_us == pytest.approx(27_100)    # interpolated: rank 17.1
    assert t.middle.parts_us == {"cpu": 4_000, "db wait": 0, "waiting for a CPU": 9_500, "other wait": 6_000}
    assert t.tail.parts_us == {"cpu": 4_000, "db wait": 0, "waiting for a CPU": 18_500, "other wait": 6_000}
    assert t.excess_us == {"waiting for a CPU": 9_000, "cpu": 0, "db wait": 0, "other wait": 0}
    # statements: i % 3 of them each (middle 2,0,1,2,0,1,2,0,1,2; tail 0,1); memory grows 1 KB a request
    assert (t.middle.statements, t.tail.statements) == (pytest.approx(1.1), 0.5)
    assert (t.middle.peak_memory, t.tail.peak_memory) == (1_009_500, 1_018_500)
    assert t.statement is None                         # statements of 0 us: no growth to name


def test_a_url_without_a_path_of_its_own_is_grouped_by_its_uri():
    rs = [rec(i, 1_000 * (i + 1), url=None, uri="/q") for i in range(10)]
    assert [t.url for t in tails(rs, request_budgets(rs, [], []), [])] == ["/q"]


def test_ten_requests_make_a_tail_of_one_and_eleven_of_two():
    rs = [rec(i, 1_000 * (i + 1)) for i in range(10)]          # 1..10 ms
    [t] = tails(rs, request_budgets(rs, [], []), [])
    assert (t.requests, t.tail.requests, t.middle.requests, t.slowest) == (10, 1, 5, ["r000009"])
    assert (t.middle.wall_us, t.tail.wall_us, t.ratio) == (5_000, 10_000, 2.0)       # requests 2..6 against 9
    assert t.p50_wall_us == 5_500 and t.p90_wall_us == pytest.approx(9_100)          # rank 8.1 of 0..9
    rs.append(rec(10, 11_000))
    [t] = tails(rs, request_budgets(rs, [], []), [])
    assert (t.tail.requests, t.middle.requests, t.slowest) == (2, 6, ["r000010", "r000009"])   # ceil(1.1); 2..7


def test_a_middle_of_no_time_gives_a_ratio_of_zero():
    rs = [rec(i, 0) for i in range(9)] + [rec(9, 5_000)]
    [t] = tails(rs, request_budgets(rs, [], []), [])
    assert (t.middle.wall_us, t.tail.wall_us, t.ratio) == (0, 5_000, 0.0)


def test_engine_counters_are_a_mean_only_when_every_request_of_the_group_has_them():
    both = {"gc_runs": 3, "gc_runs_at_start": 1, "opcache_misses": 5, "opcache_misses_at_start": 2}
    engines = [both] * 10
    engines[2] = {"gc_runs": 3, "opcache_misses": 5, "opcache_misses_at_start": 2}           # no start
    engines[3] = {"gc_runs_at_start": 1, "opcache_misses": 5, "opcache_misses_at_start": 2}  # no end
    engines[9] = None                                                                        # none at all
    rs = [rec(i, 1_000 * (i + 1), engine=e) for i, e in enumerate(engines)]
    [t] = tails(rs, request_budgets(rs, [], []), [])
    assert (t.middle.gc_runs, t.middle.compiles, t.tail.gc_runs, t.tail.compiles) == (None, 3.0, None, None)
    rs[2], rs[3] = rec(2, 3_000, engine=both), rec(3, 4_000, engine=both)
    [t] = tails(rs, request_budgets(rs, [], []), [])
    assert (t.middle.gc_runs, t.middle.compiles) == (2.0, 3.0)


def growth_case(b_us, a_tail_us=5_500, middle_extra=()):
    """18 requests of 10 ms and 2 of 50 ms (the tail adds 40 ms): statement A (5 ms) in every
    request, a_tail_us in the slow ones; statement B only in the slow ones."""
    rs = [rec(i, 10_000, 1_000) for i in range(18)] + [rec(18, 50_000, 1_000), rec(19, 50_000, 1_000)]
    st = [stmt(i, r.id, "SELECT a FROM t WHERE id = 1", 5_000) for i, r in enumerate(rs[:18])]
    st += [stmt(20 + i, r.id, "SELECT a FROM t WHERE id = 2", a_tail_us) for i, r in enumerate(rs[18:])]
    if b_us:
        st += [stmt(30 + i, r.id, "SELECT b FROM u", b_us) for i, r in enumerate(rs[18:])]
    st += [stmt(40 + i, rid, "SELECT b FROM u", us) for i, (rid, us) in enumerate(middle_extra)]
    [t] = tails(rs, request_budgets(rs, st, []), st)
    return t


def test_the_class_named_is_the_one_that_grew_most_by_at_least_a_tenth_of_the_excess():
    t = growth_case(4_000)          # B grew 4 ms a request: exactly a tenth of the 40 ms the tail adds
    g = t.statement
    assert (g.fingerprint, g.tail_us, g.middle_us, g.tail_count, g.middle_count) == ("select b from u", 4_000, 0, 1, 0)
    assert growth_case(3_900).statement is None                       # 3.9 ms: under a tenth
    # A takes more time in the tail (5.5 ms) than B, but grew by 0.5 ms only: not named, whatever its total
    assert growth_case(0).statement is None
    g = growth_case(0, a_tail_us=9_000).statement                      # A grew 4 ms: named
    assert (g.fingerprint, g.tail_us, g.middle_us) == ("select a from t where id = ?", 9_000, 5_000)
    # B in one middle request (10 of them): 0.1 executions and 0.2 ms a request in the middle
    g = growth_case(4_500, middle_extra=[("r000005", 2_000)]).statement
    assert (g.fingerprint, g.tail_us, g.middle_us, g.tail_count, g.middle_count) == (
        "select b from u", 4_500, 200, 1, 0.1)


def test_a_class_is_named_only_when_it_grew_by_a_microsecond_a_request_or_more():
    # every request as slow as the others: the tail is the last two by id and adds nothing
    rs = [rec(i, 10_000) for i in range(20)]
    st = [stmt(i, r.id, "SELECT c", 1) for i, r in enumerate(rs[18:])]
    [t] = tails(rs, request_budgets(rs, st, []), st)
    assert (t.statement.fingerprint, t.statement.tail_us, t.statement.middle_us) == ("select c", 1.0, 0.0)
    st.append(stmt(9, "r000005", "SELECT c", 1))                     # one in the middle: it grew 0.9 us
    [t] = tails(rs, request_budgets(rs, st, []), st)
    assert t.statement is None


def test_urls_come_in_the_order_of_what_their_tail_adds_not_of_how_slow_they_are():
    rs = [rec(i, 10_000, url="/a") for i in range(9)] + [rec(9, 60_000, url="/a")]          # +50 ms
    rs += [rec(10 + i, 100_000, url="/b") for i in range(9)] + [rec(19, 120_000, url="/b")]  # +20 ms
    assert [t.url for t in tails(rs, request_budgets(rs, [], []), [])] == ["/a", "/b"]


def test_scheduling_means_round_the_queue_share_and_count_missing_switches_as_none():
    from lockdown.analyzers.budget import scheduling
    # no SQL: the whole run-queue delay (100 ms of 300) is waiting for a CPU; no switches recorded
    rs = [rec(0, 300_000, delay=100_000)]
    assert scheduling(rs, request_budgets(rs, [], [])) == {
        "requests": 1, "voluntary_switches": 0.0, "involuntary_switches": 0.0, "cpu_queue_us": 100_000,
        "cpu_queue_pct": 33.33, "run_delay_us": 100_000, "other_threads_cpu_us": None}
    instant = [rec(0, 0, delay=0, sched={"run_delay_us": 0, "voluntary_switches": 2, "involuntary_switches": 1})]
    s = scheduling(instant, request_budgets(instant, [], []))
    assert (s["cpu_queue_us"], s["cpu_queue_pct"], s["voluntary_switches"]) == (0.0, 0.0, 2.0)   # no wall time


def tail_row(url="/", ratio=1.5, tail_wall=15_000, middle_wall=10_000, excess=None, slowest=("r000001",),
             tail_group=None, middle_group=None, statement=None):
    group = {"requests": 10, "wall_us": middle_wall, "statements": 5.0, "gc_runs": 0.0, "compiles": 0.0,
             "peak_memory": 1_000_000}
    return {"url": url, "requests": 20, "p50_wall_us": 10_000, "p90_wall_us": 14_000, "ratio": ratio,
            "middle": {**group, **(middle_group or {})},
            "tail": {**group, "requests": 2, "wall_us": tail_wall, **(tail_group or {})},
            "excess_us": excess if excess is not None else {"cpu": tail_wall - middle_wall},
            "slowest": list(slowest), "statement": statement}


def test_tail_lines_show_five_long_tails_and_count_the_rest():
    from lockdown.reports.analysis_text import tail_lines
    six = [tail_row(url=f"/{i}") for i in range(6)]
    lines = tail_lines(six)
    assert [x for x in lines if x.startswith("  /")] == [
        f"  /{i}: 2 requests at 15.0 against 10.0 (1.50x; p50 10.0, p90 14.0): +5.0 cpu" for i in range(5)]
    assert lines[-1] == "  1 more with a long tail: analysis.json tail (or analyze --json)"
    assert tail_lines(six[:5])[-1] == "    slowest: r000001"          # five: no "more", and no calm URL
    assert len(tail_lines(six, top=2)) == 2 + 2 * 2 + 1 and tail_lines(six, top=2)[-1].startswith("  4 more ")
    # a tail of exactly 1.25x its middle is long; just under it, calm
    at = tail_lines([tail_row(ratio=1.25)])
    assert at[2].startswith("  /: 2 requests at 15.0 against 10.0 (1.25x;") and at[-1] == "    slowest: r000001"
    assert tail_lines([tail_row(ratio=1.2499)])[-1] == (
        "  no slowest tenth beyond 1.25x its middle half (1 URL compared)")


def test_a_tail_line_names_the_slowest_five_and_parts_that_fell():
    from lockdown.reports.analysis_text import tail_lines
    url = "/index.php?p=12345&lang=en&view=full&utm_source=x"
    t = tail_row(url=url, tail_wall=133_456, middle_wall=10_000,
                 excess={"cpu": 123_456, "db wait": -7_400, "other wait": 50},
                 slowest=[f"r{i:06d}" for i in range(6)], tail_group={"statements": 7.5})
    assert tail_lines([t])[2:] == [
        "  /index.php?p=12345&lang=en&view=full&utm: 2 requests at 133.5 against 10.0 (1.50x; p50 10.0, p90 14.0): "
        "+123.5 cpu, -7.4 db wait",
        "    statements per request: 7.5 against 5.0",
        "    slowest: r000000 r000001 r000002 r000003 r000004 ..."]
    five = tail_lines([{**t, "slowest": t["slowest"][:5]}])
    assert five[-1] == "    slowest: r000000 r000001 r000002 r000003 r000004"
    # nothing moved by 0.1 ms or more: the line says so
    small = tail_row(tail_wall=130, middle_wall=100, excess={"cpu": 20, "db wait": 10})
    assert tail_lines([small])[2].endswith("(1.50x; p50 10.0, p90 14.0): no part grew")


def test_tail_parts_name_what_moved_by_a_tenth_of_a_ms_and_a_twentieth_of_the_excess():
    from lockdown.reports.analysis_text import tail_parts
    # the tail adds 1 ms: the floor is 0.1 ms
    t = tail_row(tail_wall=11_000, middle_wall=10_000,
                 excess={"cpu": 800, "db wait": 100, "other wait": 95, "waiting for a CPU": -100})
    assert tail_parts(t) == [("cpu", 800), ("db wait", 100), ("waiting for a CPU", -100)]
    # the tail adds 40 ms: the floor is 2 ms
    t = tail_row(tail_wall=50_000, middle_wall=10_000,
                 excess={"cpu": 36_000, "db wait": 2_000, "other wait": 1_900, "waiting for a CPU": -2_000})
    assert tail_parts(t) == [("cpu", 36_000), ("db wait", 2_000), ("waiting for a CPU", -2_000)]
    # a tail faster than its middle: the floor is of the size of the difference
    t = tail_row(tail_wall=10_000, middle_wall=50_000, excess={"cpu": -38_000, "db wait": -1_900})
    assert tail_parts(t) == [("cpu", -38_000)]


def test_tail_besides_say_what_the_slow_requests_did_that_the_middle_ones_did_not():
    from lockdown.reports.analysis_text import tail_besides
    assert tail_besides(tail_row()) == []
    t = tail_row(tail_group={"statements": 5.5, "gc_runs": 1.0, "compiles": 0.4, "peak_memory": 1_250_000},
                 middle_group={"statements": 5.0, "gc_runs": 0.0, "compiles": 0.0, "peak_memory": 1_000_000})
    assert tail_besides(t) == ["statements per request: 5.5 against 5.0",
                               "cycle-collector runs per request: 1.0 against 0.0",
                               "peak memory: 1.2 MB against 976.6 KB"]
    t = tail_row(tail_group={"statements": 5.45, "peak_memory": 1_240_000})          # under 0.5 and 1.25x
    assert tail_besides(t) == []
    # counters one group lacks compare with nothing
    for tl, md in ((None, 3.0), (3.0, None)):
        assert tail_besides(tail_row(tail_group={"gc_runs": tl, "compiles": tl},
                                     middle_group={"gc_runs": md, "compiles": md})) == []
    assert tail_besides(tail_row(middle_group={"peak_memory": 0})) == []             # no memory recorded
    fp = "select * from wp_options where option_name = ? and autoload = ? order by option_id limit ?, ?"
    t = tail_row(statement={"fingerprint": fp, "tail_us": 234_567, "middle_us": 123_456, "tail_count": 3.0,
                            "middle_count": 1.5})
    assert tail_besides(t) == [f"statement time grew most in: {fp[:90]} (234.6 ms in 3.0 executions against "
                               "123.5 ms in 1.5)"]


def test_the_scheduler_line_without_a_queue_or_a_setting():
    from lockdown.reports.analysis_text import scheduling_lines
    s = {"requests": 2, "voluntary_switches": 3, "involuntary_switches": 1.5, "cpu_queue_us": None,
         "cpu_queue_pct": None, "run_delay_us": None, "concurrency": None, "workers": None, "cpus": None}
    assert scheduling_lines(s) == ["  scheduler: 3.0 voluntary and 1.5 involuntary context switches a request"]
    assert scheduling_lines({**s, "workers": 4, "cpus": 1}) == [
        "  scheduler: 3.0 voluntary and 1.5 involuntary context switches a request (captured at 4 workers, 1 CPU)"]
    at_ten = scheduling_lines({**s, "cpu_queue_us": 123_456, "cpu_queue_pct": 10.0, "run_delay_us": 234_567})
    assert at_ten[0] == ("  scheduler: 123.5 ms a request waiting for a CPU beyond db wait (10.0% of the wall time; "
                         "234.6 ms in the run queue in all); 3.0 voluntary and 1.5 involuntary context switches a "
                         "request")
    assert len(at_ten) == 2 and at_ten[1].startswith("  the timings include that queueing")
    assert len(scheduling_lines({**s, "cpu_queue_us": 1_000, "cpu_queue_pct": 9.99, "run_delay_us": 1_000})) == 1


def test_notable_lines_name_the_longest_tail_and_a_queue_from_ten_percent():
    from lockdown.reports.analysis_text import notable_lines
    url = "/" + "x" * 70
    a = {"scheduling": {"cpu_queue_pct": 10.0, "concurrency": 6, "cpus": None},
         "tail": [{"url": url, "ratio": 1.25, "excess_us": {"db wait": 123_456, "cpu": 1}},
                  {"url": "/b", "ratio": 3.0, "excess_us": {"cpu": 5_000}}]}
    assert notable_lines(a) == [
        "  the timed requests spent 10.0% of their wall time waiting for a CPU: shares of request time are of a "
        "busy host",
        f"  longest tail: {url[:60]}, slowest tenth 1.25x its middle half (mostly db wait, +123.5 ms)"]
    assert notable_lines({"scheduling": {"cpu_queue_pct": 10.0, "cpus": 2}})[0].endswith("CPU: shares of request "
                                                                                       "time are of a busy host")
    assert notable_lines({"scheduling": {"cpu_queue_pct": None, "concurrency": 6, "cpus": 2}}) == []
    assert notable_lines({"scheduling": {"cpu_queue_pct": 9.99}, "tail": [{**a["tail"][0], "ratio": 1.2499}]}) == []
