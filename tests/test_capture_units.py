"""Pure parts of capture: the perf script and slow log parsers, attribution of samples and
statements to requests, and the driver's choice of instrumented requests."""
import json
import subprocess
from pathlib import Path

import pytest

import lockdown
from lockdown.bundle.model import RequestRecord
from lockdown.collectors.attribution import MARKER, attribute_samples, attribute_statements
from lockdown.formats import perf_script, slowlog
from lockdown.collectors.settings import auto_excimer_period
from lockdown.harness.driver import DriveResult, SentRequest, instrumented_paths, xhprof_selected
from lockdown.harness.toolchain import tool

PERF_TEXT = """\
php-fpm8.2 4242/4242  2418.477823457:   10101010 cpu-clock:pppH:
\t          36e794 execute_ex+0x1bb4 (/usr/sbin/php-fpm8.2)
\t          357814 [unknown] (/usr/sbin/php-fpm8.2)
\tffffffff81a0b2c5 entry_SYSCALL_64_after_hwframe+0x6e ([kernel.kallsyms])

php-fpm: pool x 4243/4250  2418.500000001:   10101010 cpu-clock:pppH:
\t           27249 operator new(unsigned long)+0x79 (/usr/lib/x86_64-linux-gnu/libstdc++.so.6)
"""


def test_perf_script_parse():
    a, b = perf_script.parse(PERF_TEXT.splitlines(True))
    assert (a.comm, a.pid, a.tid, a.time_ns, a.period) == ("php-fpm8.2", 4242, 4242, 2418477823457, 10101010)
    assert [f.symbol for f in a.frames] == ["execute_ex", "[unknown]", "entry_SYSCALL_64_after_hwframe"]
    assert a.frames[0].addr == 0x36e794 and a.frames[0].offset == 0x1bb4
    assert a.frames[1].offset is None and a.frames[2].dso == "[kernel.kallsyms]"
    assert (b.comm, b.pid, b.tid, b.time_ns) == ("php-fpm: pool x", 4243, 4250, 2418500000001)
    assert b.frames[0].symbol == "operator new(unsigned long)"


def test_perf_script_samples_without_blank_lines_between_and_short_times():
    # a header right after a frame starts the next sample; blank lines in a row end one sample;
    # a time printed with fewer than nine decimals (perf script without --ns) is still in ns
    text = ["php 1/1 5.25: 7 cpu-clock:\n", "\t1 a+0x1 (/x)\n", "php 2/2 6.000001: 9 cpu-clock:\n",
            "\t2 b (/x)\n", "\n", "\n", "\n", "php 3/3 7.123456789: 1 cpu-clock:\n"]
    got = list(perf_script.parse(text))
    assert [(x.pid, x.time_ns, x.period, [f.symbol for f in x.frames]) for x in got] == \
        [(1, 5_250_000_000, 7, ["a"]), (2, 6_000_001_000, 9, ["b"]), (3, 7_123_456_789, 1, [])]


def test_perf_script_rejects_other_text():
    with pytest.raises(perf_script.PerfScriptError, match="line 2: not a call-chain frame"):
        list(perf_script.parse(["php 1/1 1.000000001: 1 cpu-clock:\n", "\tgarbage\n"]))
    with pytest.raises(perf_script.PerfScriptError, match="line 2: not a sample header"):
        list(perf_script.parse(["# a header comment\n", "this is not perf script output\n"]))


SLOW = """\
/usr/sbin/mariadbd, Version: 10.11.19-MariaDB-0+deb12u1 (Debian 12). started with:
Tcp port: 3306  Unix socket: /run/mysqld/mysqld.sock
Time\t\t    Id Command\tArgument
# Time: 261121 17:18:31
# User@Host: wp[wp] @ localhost [127.0.0.1]
# Thread_id: 7  Schema: wordpress  QC_hit: No
# Query_time: 0.000104  Lock_time: 0.000010  Rows_sent: 1  Rows_examined: 3
# Rows_affected: 0  Bytes_sent: 58
use wordpress;
SET timestamp=1795281511;
SELECT option_value
FROM wp_options WHERE option_name = 'siteurl';
# User@Host: wp[wp] @ localhost [127.0.0.1]
# Thread_id: 8  Schema: wordpress  QC_hit: No
# Query_time: 0.010177  Lock_time: 0.000000  Rows_sent: 0  Rows_examined: 0
# Rows_affected: 1  Bytes_sent: 11
SET timestamp=1795281512;
UPDATE t SET n = n + 1;
"""


def test_slow_log_parse():
    a, b = slowlog.parse(SLOW.splitlines(True))
    assert (a.thread_id, a.schema, a.query_time_us, a.lock_time_us, a.rows_sent, a.rows_examined) == \
        (7, "wordpress", 104, 10, 1, 3)
    assert a.sql == "SELECT option_value\nFROM wp_options WHERE option_name = 'siteurl'"
    assert a.timestamp == 1795281511 and a.line == 5
    assert (b.thread_id, b.rows_affected, b.query_time_us, b.sql) == (8, 1, 10177, "UPDATE t SET n = n + 1")


def test_slow_log_plan_flags():
    """log_slow_verbosity=query_plan (the capture sets it): the server's own plan flags, the Yes
    ones kept; an entry without plan lines has no plan (None, not "no flags")."""
    plan = ("# User@Host: wp[wp] @ localhost [127.0.0.1]\n# Thread_id: 9  Schema: wordpress  QC_hit: No\n"
            "# Query_time: 0.000489  Lock_time: 0.000056  Rows_sent: 32  Rows_examined: 858\n"
            "# Rows_affected: 0  Bytes_sent: 492\n"
            "# Tmp_tables: 1  Tmp_disk_tables: 0  Tmp_table_sizes: 1081280\n"
            "# Full_scan: Yes  Full_join: No  Tmp_table: Yes  Tmp_table_on_disk: No\n"
            "# Filesort: Yes  Filesort_on_disk: No  Merge_passes: 2  Priority_queue: No\n"
            "SET timestamp=1795380681;\nSELECT DISTINCT t.term_id FROM wp_terms t ORDER BY t.name;\n"
            "# User@Host: wp[wp] @ localhost [127.0.0.1]\n# Thread_id: 9  Schema: wordpress  QC_hit: No\n"
            "# Query_time: 0.000100  Lock_time: 0.000000  Rows_sent: 1  Rows_examined: 1\n"
            "# Full_scan: No  Full_join: No  Tmp_table: No  Tmp_table_on_disk: No\n"
            "# Filesort: No  Filesort_on_disk: No  Merge_passes: 0  Priority_queue: No\n"
            "SELECT 1;\n")
    a, b, c, d = slowlog.parse((SLOW + plan).splitlines(True))
    assert a.plan is None and b.plan is None
    # the server prints plan lines only when a flag is set: with query_plan on, none is none
    assert [e.plan for e in slowlog.parse(SLOW.splitlines(True), plans=True)] == [[], []]
    assert c.plan == ["full_scan", "tmp_table", "filesort", "merge_passes"]
    assert c.sql == "SELECT DISTINCT t.term_id FROM wp_terms t ORDER BY t.name"
    assert d.plan == []


def test_slow_log_entries_around_a_restart():
    # the server reopening the file (its banner) ends the entry before it; an entry without
    # Rows_affected has none; SQL without a closing ";" keeps its last character
    restart = "\n".join(SLOW.splitlines()[:3]) + "\n"
    third = ("# User@Host: wp[wp] @ localhost [127.0.0.1]\n# Thread_id: 9  Schema: wordpress  QC_hit: No\n"
             "# Query_time: 2.500000  Lock_time: 0.000000  Rows_sent: 0  Rows_examined: 0\nSELECT SLEEP(2.5)\n")
    a, b, c = slowlog.parse((SLOW + restart + third).splitlines(True))
    assert (b.thread_id, b.sql) == (8, "UPDATE t SET n = n + 1")
    assert (c.thread_id, c.query_time_us, c.rows_affected, c.timestamp, c.sql) == \
        (9, 2_500_000, None, None, "SELECT SLEEP(2.5)")
    assert list(slowlog.parse(restart.splitlines(True))) == [] and list(slowlog.parse([])) == []


def test_slow_log_malformed():
    broken = SLOW.replace("# Query_time: 0.010177  Lock_time: 0.000000  Rows_sent: 0  Rows_examined: 0\n", "")
    with pytest.raises(slowlog.SlowLogError, match="line 13: entry without Query_time"):
        list(slowlog.parse(broken.splitlines(True)))
    with pytest.raises(slowlog.SlowLogError, match="line 1: text outside any entry"):
        list(slowlog.parse(["hello\n"]))


def req(id, pid, start, end, threads=(), start_unix=100.0):
    return RequestRecord(id=id, pid=pid, method="GET", uri="/", status=200, start_ns=start, end_ns=end,
                         start_unix=start_unix, wall_us=(end - start) // 1000, cpu_us=1, peak_memory=1,
                         instrumented=False, db_threads=list(threads))


def test_samples_belong_to_the_request_running_on_their_worker():
    requests = [req("a", 1, 100, 200), req("b", 1, 300, 400), req("c", 2, 150, 350)]
    samples = [perf_script.Sample("php", pid, pid, t, 1, "cpu-clock")
               for pid, t in ((1, 150), (1, 250), (1, 300), (2, 300), (2, 360), (3, 150))]
    got = [s.request for s in attribute_samples(samples, requests)]
    assert got == ["a", None, "b", "c", None, None]


def entry(thread, sql, ts=100):
    return slowlog.SlowLogEntry(0, "", thread, "db", 5, 0, 1, 1, 0, ts, sql)


def marker(thread, rid):
    # the prepend's marker; older bundles have a SELECT on information_schema instead
    return entry(thread, f"SHOW /*lockdown-capture {rid}*/ PROCESSLIST")


def test_both_marker_forms_are_read():
    for sql in ("SHOW /*lockdown-capture r000007*/ PROCESSLIST",
                "SELECT /*lockdown-capture r000007*/ ID FROM information_schema.PROCESSLIST WHERE 0"):
        assert MARKER.match(sql).group(1) == "r000007"
    assert not MARKER.match("SELECT 1 /*lockdown-capture r000007*/")


def test_statements_by_connection_persistent_and_order():
    # r1 and r2 share persistent connection 5 on one worker; connection 9 is unnamed.
    requests = [req("r1", 1, 0, 10, threads=[5]), req("r2", 1, 20, 30, threads=[5])]
    entries = [entry(5, "q1"), entry(9, "q-unnamed"), marker(50, "r1"),
               entry(5, "q2"), entry(1, "SET GLOBAL x = 1 /*lockdown-admin*/"), entry(5, "q3"),
               marker(50, "r2")]
    out = attribute_statements(entries, requests, concurrency=1)
    assert [(s.sql, s.request, s.attribution, s.candidates) for s in out] == [
        ("q1", "r1", "connection", []), ("q-unnamed", "r1", "order", []),
        # q2 may be r1's last entry, written after r1's marker: not guessed
        ("q2", None, "ambiguous", ["r1", "r2"]), ("q3", "r2", "connection", [])]
    assert [s.seq for s in out] == [0, 1, 2, 3]


def test_entries_written_after_the_marker_are_never_misplaced():
    """The server logs a statement after answering it, so a request's last entry can follow
    its marker. One request at a time, a closed connection goes with its first entry."""
    requests = [req(r, 1, 0, 10) for r in ("r0", "r1", "r2")]
    entries = [marker(50, "r0"),
               entry(7, "a1"), marker(50, "r1"), entry(7, "a2"),    # a2 written late: r1's
               entry(10, "c1"), entry(10, "c2"), entry(8, "b1"),    # b1: one statement, late or not?
               marker(50, "r2")]
    out = attribute_statements(entries, requests, concurrency=1)
    assert [(s.sql, s.request, s.attribution, s.candidates) for s in out] == [
        ("a1", "r1", "order", []), ("a2", "r1", "order", []), ("c1", "r2", "order", []),
        ("c2", "r2", "order", []), ("b1", None, "ambiguous", ["r1", "r2"])]


def test_statements_overlapping_are_ambiguous_not_guessed():
    requests = [req("r1", 1, 0, 10, start_unix=100.0), req("r2", 2, 0, 10, start_unix=100.2),
                req("r3", 3, 0, 10, start_unix=500.0)]
    entries = [entry(9, "q", ts=100), marker(50, "r1"), marker(51, "r2")]
    (s,) = attribute_statements(entries, requests, concurrency=4)
    assert (s.request, s.attribution, s.candidates) == (None, "ambiguous", ["r1", "r2"])
    (s,) = attribute_statements([entry(9, "q", ts=900)], requests, concurrency=4)
    assert (s.request, s.attribution) == (None, "none")


def test_xhprof_selection_is_one_in_k_for_every_url():
    chosen = {(u, n) for u in range(3) for n in range(100) if xhprof_selected(u, n, 10)}
    assert len(chosen) == 30
    assert {u for u, _ in chosen} == {0, 1, 2}
    assert {n for u, n in chosen if u == 1} == {1, 11, 21, 31, 41, 51, 61, 71, 81, 91}
    assert not any(xhprof_selected(u, n, 0) for u in range(3) for n in range(10))


def test_instrumented_paths_follow_the_selection_over_the_url_cycle():
    paths = ["/a", "/b", "/c", "/a"]      # weighted: /a twice per cycle
    picked = instrumented_paths(paths, 40, 5)
    # 20 requests of /a, 10 of /b and /c; 1 in 5 of each URL
    assert sorted(picked) == ["/a"] * 4 + ["/b"] * 2 + ["/c"] * 2
    # staggered: URL u is picked at its occurrence u, so 3 cycles already cover 3 URLs (and
    # /a, sent 6 times, at its occurrences 0 and 5)
    assert instrumented_paths(paths, 12, 5) == ["/a", "/b", "/c", "/a"]
    assert instrumented_paths(paths, 40, 0) == []
    # a short capture of many URLs: each sent twice, 1 in 10 would pick two of six; every URL
    # sent gets one, while the instrumented stay at most half of the capture
    many = [f"/{k}" for k in range(6)]
    assert sorted(instrumented_paths(many, 12, 10)) == sorted(many)
    assert instrumented_paths(many, 4, 10) == ["/0", "/1"]
    assert len(instrumented_paths(many * 4, 10, 50)) == 5


def test_auto_excimer_period_aims_at_ten_samples_per_median_request():
    assert auto_excimer_period([100.0, 115.0, 300.0]) == 11.5       # WordPress: the median / 10
    assert auto_excimer_period([4.0, 3.5, 5.0]) == 2.0              # floor: short pages
    assert auto_excimer_period([900.0, 1000.0, 1200.0]) == 20.0     # ceiling: slow pages
    assert auto_excimer_period([31.0]) == 3.0 and auto_excimer_period([]) == 2.0


def test_drive_results_join_in_order():
    a = DriveResult([SentRequest(0, "r000000", "/", False, status=200)], 1.5)
    b = DriveResult([SentRequest(1, "r000001", "/b", False, error="x")], 0.5)
    j = DriveResult.joined([a, b])
    assert [r.id for r in j.requests] == ["r000000", "r000001"] and j.seconds == 2.0
    assert j.rps == 0.5 and j.status_counts() == {"200": 1, "error": 1}
    # only successful responses are throughput: a 404 or a 502 is not
    c = DriveResult([SentRequest(2, "r000002", "/", False, status=404),
                     SentRequest(3, "r000003", "/", False, status=302)], 1.0)
    assert c.rps == 1.0


def test_host_cpu_of_several_slices_sums_their_jiffies_only():
    """With --overhead-slices the capture's host CPU covers the capture slices, not the
    uncollected slices between them."""
    from lockdown.harness import cpu
    idle_between = cpu.delta([0] * 8, [0, 0, 0, 1000, 0, 0, 0, 0])
    s1 = cpu.delta([100, 0, 0, 100, 0, 0, 0, 0], [190, 0, 0, 110, 0, 0, 0, 0])   # 90 busy of 100
    s2 = cpu.delta([0] * 8, [50, 0, 20, 20, 5, 0, 0, 5])                          # 70 busy of 100
    assert cpu.summarize(cpu.summed([s1, s2])) == {"busy_pct": 80.0, "steal_pct": 2.5, "iowait_pct": 2.5}
    assert cpu.summarize(cpu.summed([s1, idle_between, s2]))["busy_pct"] < 20
    assert cpu.summed([[], s1]) == s1 and cpu.summarize(cpu.summed([[]])) == {}
    assert cpu.usage([100, 0, 0, 100, 0, 0, 0, 0], [190, 0, 0, 110, 0, 0, 0, 0])["busy_pct"] == 90.0


# Excimer samples the next function called after its timer fires: time at the end of the main
# script lands on the capture's own shutdown function. Fake log entries through the prepend's
# real stacks() show how such frames are named (php -n: no extension needed).
_STACKS_PHP = r"""
include $argv[1];
final class Entry {
    function __construct(private array $t, private int $n) {}
    function getTrace() { return $this->t; }
    function getTimestamp() { return 0.002; }
    function getEventCount() { return $this->n; }
}
final class Log { function getLog() { return [
    new Entry([['class' => 'Lockdown\\Capture\\Capture', 'function' => 'shutdown']], 3),
    new Entry([['function' => 'render'], ['file' => '/app/index.php']], 1),
    new Entry([['class' => 'Lockdown\\Capture\\Capture', 'function' => 'finish']], 1),
]; } }
$c = new ReflectionClass('Lockdown\\Capture\\Capture');
$c->setStaticPropertyValue('excimer', new Log());
$m = $c->getMethod('stacks');
$m->setAccessible(true);
echo json_encode($m->invoke(null));
"""


def test_excimer_stacks_name_the_end_of_the_request_not_the_capture(tmp_path):
    script = tmp_path / "stacks.php"
    script.write_text("<?php\n" + _STACKS_PHP)
    prepend = Path(lockdown.__file__).parent / "collectors" / "php" / "prepend.php"
    run = subprocess.run([tool("php"), "-n", str(script), str(prepend)],
                         capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stderr + run.stdout
    out = json.loads(run.stdout)
    assert out["stacks"] == ["[end of request]", "/app/index.php;render"]
    assert out["samples"] == [[2000000, 3, 0], [2000000, 1, 1], [2000000, 1, 0]]


_PORTS_PHP = r"""
require $argv[1];
$server = stream_socket_server('tcp://127.0.0.1:0');
$other = stream_socket_server('tcp://127.0.0.1:0');
$port = (int) substr(strrchr(stream_socket_get_name($server, false), ':'), 1);
$mine = [];
foreach ([$server, $server, $other] as $to) {
    $c = stream_socket_client('tcp://' . stream_socket_get_name($to, false));
    $GLOBALS['keep'][] = $c;
    if ($to === $server) {
        $mine[] = (int) substr(strrchr(stream_socket_get_name($c, false), ':'), 1);
    }
}
$m = new ReflectionMethod(\Lockdown\Capture\Capture::class, 'dbPorts');
$m->setAccessible(true);
$found = $m->invoke(null, $port);
sort($found);
sort($mine);
$calls = new ReflectionMethod(\Lockdown\Capture\Capture::class, 'socketCalls');
$calls->setAccessible(true);
echo json_encode(['found' => $found, 'expected' => $mine, 'ffi' => $calls->invoke(null) !== null]);
"""


@pytest.mark.parametrize("ffi", ["true", "preload"])
def test_the_prepend_finds_its_own_connections_ports_with_and_without_ffi(tmp_path, ffi):
    """Overlapping requests are told apart by the local ports of the worker's connections to
    the database: asked of the sockets through FFI where the pool enables it, else read from
    /proc/self/net/tcp. Both find exactly the connections to the server's port."""
    script = tmp_path / "ports.php"
    script.write_text("<?php\n" + _PORTS_PHP)
    prepend = Path(lockdown.__file__).parent / "collectors" / "php" / "prepend.php"
    run = subprocess.run([tool("php"), "-n", "-d", "extension=ffi", "-d", f"ffi.enable={ffi}",
                          str(script), str(prepend)], capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stderr + run.stdout
    out = json.loads(run.stdout)
    assert out["ffi"] is (ffi == "true")
    assert len(out["expected"]) == 2 and out["found"] == out["expected"]
