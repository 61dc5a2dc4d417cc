"""The tail of each URL: its slowest tenth against its middle half (analyzers/tail.py), from
synthetic requests and on the real stack."""
from __future__ import annotations

import json

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
    for ($i = 0; $i < 20000; $i++) { $a = new stdClass(); $b = new stdClass(); $a->b = $b; $b->a = $a; $garbage[] = $a; }
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
                 "--warmup-requests", "3")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    a = json.loads(lockdown("analyze", out, "--json").stdout)
    [t] = a["tail"]
    walls = {x["id"]: x["wall_us"] for x in a["by_request"]}
    sleepers = {rid for rid, w in walls.items() if w >= 30_000}
    assert len(sleepers) == 8 and set(t["slowest"]) <= sleepers and len(t["slowest"]) == 4, walls
    assert t["ratio"] > 5 and t["excess_us"]["other wait"] >= 25_000, t
    assert t["tail"]["gc_runs"] >= 1 > t["middle"]["gc_runs"] and t["tail"]["peak_memory"] > 4 * t["middle"]["peak_memory"]
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
