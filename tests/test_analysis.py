"""Analysis of bundles: engine subsystems from native frames, and the time budget."""
import pytest

from lockdown.analyzers.analysis import SelectionError, select
from lockdown.analyzers.budget import request_budgets
from lockdown.analyzers.subsystems import CATEGORIES, categorise, load_rules
from lockdown.bundle.model import PerfSample, RequestRecord, Statement

PHP = "/usr/sbin/php-fpm8.2"
LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"
K = "[kernel.kallsyms]"


def f(symbol, dso=PHP):
    return ["0", symbol, 0, dso]


def test_rules_file_loads_and_uses_known_categories():
    rules = load_rules()
    assert rules.rules and rules.passthrough
    assert {r.category for r in rules.rules} <= set(CATEGORIES)


def test_first_categorised_frame_from_the_leaf():
    assert categorise([f("zend_hash_find"), f("execute_ex")]) == "hashtable"
    assert categorise([f("[unknown]"), f("zend_hash_find"), f("execute_ex")]) == "hashtable"
    assert categorise([f("execute_ex"), f("zend_hash_find")]) == "vm"
    assert categorise([f("php_pcre_match_impl"), f("zif_preg_match"), f("execute_ex")]) == "regex"
    assert categorise([f("pcre2_match_8", "/usr/lib/x86_64-linux-gnu/libpcre2-8.so.0.11.2")]) == "regex"
    assert categorise([f("zif_str_replace"), f("execute_ex")]) == "builtin"
    assert categorise([f("tracing_enter", "/usr/lib/php/20220829/tideways_xhprof.so")]) == "profiler-ext"


def test_libc_and_kernel_frames_belong_to_their_callers():
    # malloc called by the memory manager is memory; a read() under mysqlnd is net-io
    assert categorise([f("_int_malloc", LIBC), f("malloc", LIBC), f("zend_mm_alloc_huge"),
                       f("execute_ex")]) == "memory"
    assert categorise([f("tcp_recvmsg", K), f("__libc_recv", LIBC),
                       f("php_mysqlnd_net_receive", "/usr/lib/php/20220829/mysqlnd.so")]) == "net-io"
    assert categorise([f("ext4_file_read_iter", K), f("read", LIBC), f("php_stdiop_read"),
                       f("execute_ex")]) == "fs-io"
    # PCRE JIT code (anonymous memory) under the PCRE layer is regex, not vm
    assert categorise([f("[unknown]", "//anon"), f("pcre2_jit_match_8", "/usr/lib/x86_64-linux-gnu/libpcre2-8.so.0"),
                       f("php_pcre_match_impl")]) == "regex"
    # with no categorised caller, the first passthrough's fallback
    assert categorise([f("clear_page_erms", K), f("asm_exc_page_fault", K)]) == "kernel"
    assert categorise([f("memcpy", LIBC)]) == "other"
    # anonymous executable memory (JIT code) alone is the VM; a DSO is matched by its file name
    assert categorise([f("[unknown]", "//anon")]) == "vm"


def test_a_rules_file_with_an_unknown_category_is_refused(tmp_path):
    bad = tmp_path / "rules.toml"
    bad.write_text('[[rule]]\nsymbol = "^zend_hash"\ncategory = "hashes"\n')
    with pytest.raises(ValueError, match="unknown category 'hashes'"):
        load_rules(bad)


MYSQLND = "/usr/lib/php/20220829/mysqlnd.so"


def test_stream_io_under_mysqlnd_is_network_not_file_system():
    # a WordPress sample as perf recorded it: mysqli -> mysqlnd -> PHP's stream layer -> the
    # static php_sockop_write (named by .eh_frame) -> send(); the file system was never touched
    send = [f("tcp_sendmsg", K), f("__send", LIBC), f("php-fpm8.2+0x2abba0"), f("php-fpm8.2+0x29ec10"),
            f("_php_stream_write"), f("[unknown]", MYSQLND), f("[unknown]", MYSQLND),
            f("[unknown]", "/usr/lib/php/20220829/mysqli.so"), f("execute_ex")]
    assert categorise(send) == "net-io"
    assert categorise([f("_php_stream_fill_read_buffer"), f("_php_stream_read"),
                       f("[unknown]", MYSQLND), f("execute_ex")]) == "net-io"
    # the same stream calls under a file builtin stay file I/O
    assert categorise([f("__GI___readdir64", LIBC), f("php-fpm8.2+0x2a62e0"), f("_php_stream_read"),
                       f("_php_stream_readdir"), f("php-fpm8.2+0x1ef4c0"), f("execute_ex")]) == "fs-io"


def test_file_system_builtins_calling_libc_are_fs_io():
    # zif_glob named from the engine's function table: glob() and getdents are file I/O
    assert categorise([f("iterate_dir", K), f("__GI___getdents64", LIBC), f("glob64", LIBC),
                       f("zif_glob"), f("execute_ex")]) == "fs-io"
    assert categorise([f("do_unlinkat", K), f("unlink", LIBC), f("php-fpm8.2+0x2a7c10"),
                       f("zif_unlink"), f("execute_ex")]) == "fs-io"
    assert categorise([f("memcpy", LIBC), f("zif_array_merge"), f("execute_ex")]) == "builtin"


def test_socket_work_in_the_kernel_is_network():
    # the FastCGI response to nginx: php_output_write -> (static) fcgi write -> write()
    assert categorise([f("alloc_pages_noprof", K), f("sock_alloc_send_pskb", K), f("unix_stream_sendmsg", K),
                       f("sock_write_iter", K), f("vfs_write", K), f("__GI___libc_write", LIBC),
                       f("php-fpm8.2+0x3dcab0"), f("php_output_write"), f("execute_ex")]) == "net-io"
    # the file system through the same write() stays with its caller
    assert categorise([f("ext4_buffered_write_iter", K), f("vfs_write", K), f("__GI___libc_write", LIBC),
                       f("php-fpm8.2+0x2a58c0"), f("_php_stream_write"), f("zif_fwrite"), f("execute_ex")]) == "fs-io"
    assert categorise([f("clear_page_erms", K), f("asm_exc_page_fault", K), f("_emalloc")]) == "memory"


def test_compile_time_and_container_frames():
    # pass_two gives each opcode its handler: compile work, although the name says zend_vm_
    assert categorise([f("zend_vm_set_opcode_handler"), f("pass_two"), f("php-fpm8.2+0x2d0b00"),
                       f("compile_file"), f("compile_filename"), f("execute_ex")]) == "compile"
    # generic containers take their caller's category instead of the `zend_` catch-all `builtin`
    assert categorise([f("zend_stack_push"), f("php-fpm8.2+0x2d4800"), f("zendparse"),
                       f("compile_file")]) == "compile"
    assert categorise([f("zend_llist_apply"), f("execute_ex")]) == "vm"
    assert categorise([f("zend_memnstr_ex"), f("zif_strpos"), f("execute_ex")]) == "string"
    assert categorise([f("zend_parse_method_parameters"), f("zim_::format"), f("execute_ex")]) == "vm"


def test_stream_functions_are_not_strings():
    # `php_str`/`zend_str` prefixes of the string rule once caught php_stream_*/zend_stream_*
    for name in ("php_stream_open_for_zend_ex", "zend_stream_fixup", "zend_stream_open",
                 "php_stream_read_to_str", "php_stream_locate_url_wrapper"):
        assert categorise([f(name), f("execute_ex")]) == "fs-io", name
    for name in ("zend_string_tolower_ex", "php_strtolower", "php_str_to_str", "zend_str_tolower"):
        assert categorise([f(name), f("execute_ex")]) == "string", name


def test_recorded_wordpress_sql_traffic_is_net_io():
    """On the recorded WordPress capture, every sample in PHP's stream layer under mysqlnd is
    network (21 of them; they were filed as file-system I/O)."""
    import gzip
    import json
    from pathlib import Path
    path = Path(__file__).resolve().parent.parent / "fixtures" / "perf" / "wordpress.samples.jsonl.gz"
    with gzip.open(path, "rt") as fh:
        stacks = [json.loads(line)["frames"] for line in fh]
    sql_streams = [fr for fr in stacks if any(x[3] == MYSQLND for x in fr)
                   and any("_php_stream_" in x[1] for x in fr)]
    assert len(sql_streams) >= 10
    assert {categorise(fr) for fr in sql_streams} == {"net-io"}


def test_budget_reconciles_with_wall_time():
    r = RequestRecord(id="a", pid=1, method="GET", uri="/", status=200, start_ns=0, end_ns=10,
                      start_unix=0, wall_us=100_000, cpu_us=60_000, peak_memory=1, instrumented=False)
    st = [Statement(i, "a", "order", 5, "db", "q", 10_000, 0, 1, 1, 0, 0) for i in range(3)]
    samples = [PerfSample(5, 1, 1, "php", 1, "a", [f("zend_hash_find")]),
               PerfSample(6, 1, 1, "php", 1, "a", [f("execute_ex")]),
               PerfSample(7, 1, 1, "php", 1, "a", [f("execute_ex")]),
               PerfSample(8, 1, 1, "php", 1, None, [f("execute_ex")])]
    b = request_budgets([r], st, samples)["a"]
    assert (b.cpu_us, b.db_wait_us, b.other_wait_us, b.residual_us) == (60_000, 30_000, 10_000, 0)
    assert b.cpu_by_subsystem_us == {"hashtable": 20_000, "vm": 40_000}
    over = request_budgets([r], st * 2, samples)["a"]     # 60 ms CPU + 60 ms of statements
    assert over.other_wait_us == 0 and over.residual_us == -20_000
    assert over.cpu_us + over.db_wait_us + over.other_wait_us + over.residual_us == over.wall_us


def test_xhprof_exclusive_time_and_builtins():
    from lockdown.analyzers.builtins import function_totals, hot_builtins
    profile = {"main()": {"ct": 1, "wt": 1000},
               "main()==>render": {"ct": 1, "wt": 700},
               "render==>str_replace": {"ct": 30, "wt": 200, "mem.na": 60},
               "render==>render@1": {"ct": 2, "wt": 100},
               "render@1==>str_replace": {"ct": 4, "wt": 50, "mem.na": 8},
               "main()==>PDO::query": {"ct": 3, "wt": 250}}
    t = function_totals(profile)
    assert t["render"] == {"calls": 3, "inclusive_us": 800, "exclusive_us": 450, "allocations": 0}
    assert t["main()"]["exclusive_us"] == 1000 - 700 - 250
    assert t["str_replace"]["calls"] == 34 and t["str_replace"]["allocations"] == 68
    # without allocation counts (mem.na) in the profile, allocations are unknown, not zero
    assert function_totals({"main()": {"ct": 1, "wt": 5}})["main()"]["allocations"] is None
    rows = hot_builtins([profile, profile], ["str_replace", "strlen"], ["PDO"])
    assert [(b.name, b.calls, b.exclusive_us, b.inclusive_us, b.allocations) for b in rows] == \
        [("str_replace", 68, 500, 500, 136), ("PDO::query", 6, 500, 500, 0)]
    # its callers by the time of their calls of it, over every profile; a recursion level is its function
    assert rows[0].callers == ({"name": "render", "calls": 68, "inclusive_us": 500},)
    assert rows[1].callers == ({"name": "main()", "calls": 6, "inclusive_us": 500},)
    many = {f"f{i}==>strlen": {"ct": 1, "wt": w} for i, w in enumerate((5, 40, 40, 9))}
    assert [c["name"] for c in hot_builtins([many], ["strlen"], [])[0].callers] == ["f1", "f2", "f3"]
    # allocations: summed over the profiles that count them, None when none does
    bare = {k: {m: x for m, x in v.items() if m != "mem.na"} for k, v in profile.items()}
    assert [b.allocations for b in hot_builtins([bare, profile], ["str_replace"], [])] == [68]
    assert [b.allocations for b in hot_builtins([bare], ["str_replace"], [])] == [None]
    # is_array is a call only where tideways_xhprof is loaded; elsewhere PHP compiles it to TYPE_CHECK
    rows = hot_builtins([{"main()==>is_array": {"ct": 9, "wt": 90}, **profile}], ["str_replace", "is_array"], [])
    assert {b.name: b.compiled_to_opcode for b in rows} == {"is_array": True, "str_replace": False}


def test_undouble_adds_the_edges_it_makes_one():
    from lockdown.analyzers.builtins import undouble
    # f is internal and doubled: its callees under the copy f@1 join those under f
    profile = {"main()==>f": {"ct": 1, "wt": 10}, "f==>f@1": {"ct": 1, "wt": 9},
               "f==>h": {"ct": 1, "wt": 2}, "f@1==>h": {"ct": 2, "wt": 3, "mem.na": 4}}
    got, dropped = undouble(profile, lambda n: n == "f")
    assert dropped == 1
    assert got == {"main()==>f": {"ct": 1, "wt": 10}, "f==>h": {"ct": 3, "wt": 5, "mem.na": 4}}


def test_selection_errors_name_what_was_asked():
    rs = [RequestRecord(id=f"r{i}", pid=1, method="GET", uri=u, status=200, start_ns=0, end_ns=1, start_unix=0,
                        wall_us=1, cpu_us=1, peak_memory=1, instrumented=False, url=u)
          for i, u in enumerate(["/", "/a"])]
    assert select(rs, url="/a") == rs[1:] and select(rs, request="r0") == rs[:1]
    with pytest.raises(SelectionError, match=r"^B/requests.jsonl holds no requests; capture again$"):
        select([], source="B/requests.jsonl")
    with pytest.raises(SelectionError, match=r"^no request '' in this bundle \(it has e.g. r0, r1\)"):
        select(rs, request="")
    with pytest.raises(SelectionError, match=r"^no URL '' in this bundle \(it has e.g. /, /a\)"):
        select(rs, url="")
    with pytest.raises(SelectionError, match=r"^no request 'r0' for URL '/a' in this bundle"):
        select(rs, request="r0", url="/a")


def test_budget_by_url_is_the_mean_of_its_timed_requests():
    from lockdown.analyzers.budget import Budget, by_url, mean_budget

    def req(rid, url, wall, cpu, instrumented=False):
        return RequestRecord(id=rid, pid=1, method="GET", uri=url + "?x", status=200, start_ns=0, end_ns=1,
                             start_unix=0, wall_us=wall, cpu_us=cpu, peak_memory=1, instrumented=instrumented,
                             url=url)
    rs = [req("a", "/", 100_000, 60_000), req("b", "/", 300_000, 100_000), req("c", "/p", 50_000, 40_000),
          req("d", "/i", 900_000, 900_000, instrumented=True), req("e", "/q", 10, 10)]
    st = [Statement(1, "a", "order", 5, "db", "q", 20_000, 0, 1, 1, 0, 0),
          Statement(2, "b", "order", 5, "db", "q", 250_000, 0, 1, 1, 0, 0)]    # b: 50 ms counted twice
    samples = [PerfSample(5, 1, 1, "php", 1, "a", [f("zend_hash_find")]),
               PerfSample(6, 1, 1, "php", 1, "b", [f("execute_ex")])]
    budgets = request_budgets(rs, st, samples)
    assert budgets["c"].cpu_by_subsystem_us == {} and budgets["c"].requests == 1    # no samples: CPU not split
    del budgets["e"]                                       # a request without a budget is left out
    urls = by_url(rs, budgets)
    assert sorted(urls) == ["/", "/p"]                     # the instrumented request's URL alone is not one
    slash = urls["/"]
    assert (slash.requests, slash.wall_us, slash.cpu_us, slash.db_wait_us) == (2, 200_000, 80_000, 135_000)
    assert (slash.other_wait_us, slash.residual_us) == (10_000, -25_000)
    assert slash.cpu_by_subsystem_us == {"hashtable": 30_000, "vm": 50_000}
    assert (urls["/p"].requests, urls["/p"].wall_us, urls["/p"].other_wait_us) == (1, 50_000, 10_000)
    assert mean_budget([]) == Budget(0, 0, 0, 0, 0, {}, 0)


def sched_request(rid, wall, cpu, delay=None, vol=0, invol=0, instrumented=False):
    sched = None if delay is None and not (vol or invol) else {"voluntary_switches": vol, "involuntary_switches": invol}
    if delay is not None:
        sched["run_delay_us"] = delay
    return RequestRecord(id=rid, pid=1, method="GET", uri="/", status=200, start_ns=0, end_ns=1, start_unix=0,
                         wall_us=wall, cpu_us=cpu, peak_memory=1, instrumented=instrumented, url="/", sched=sched)


def test_the_run_queue_is_the_part_of_other_wait_spent_runnable():
    from lockdown.analyzers.budget import mean_budget
    # each with 10 ms of statements: a worker preempted by the server it woke waits in the run
    # queue while its statement runs, so only the delay beyond db wait is surely other wait
    rs = [sched_request("a", 100_000, 40_000, delay=30_000),     # 50 ms other wait, 20 of it queued
          sched_request("b", 100_000, 40_000, delay=70_000),     # more than other wait: capped
          sched_request("c", 100_000, 40_000, delay=8_000),      # less than db wait: none for sure
          sched_request("d", 100_000, 40_000)]                   # not recorded
    st = [Statement(i, r, "order", 5, "db", "q", 10_000, 0, 1, 1, 0, 0) for i, r in enumerate("abcd")]
    b = request_budgets(rs, st, [])
    assert (b["a"].other_wait_us, b["a"].cpu_queue_us) == (50_000, 20_000)
    assert (b["b"].other_wait_us, b["b"].cpu_queue_us) == (50_000, 50_000)
    assert (b["c"].cpu_queue_us, b["d"].cpu_queue_us) == (0, None)
    free = request_budgets([sched_request("e", 100_000, 40_000, delay=30_000)], [], [])["e"]
    assert free.cpu_queue_us == 30_000                           # no SQL: the whole delay
    assert mean_budget([b["a"], b["b"]]).cpu_queue_us == 35_000
    assert mean_budget([b["a"], b["d"]]).cpu_queue_us is None     # a mean of what some lack would mislead


def test_scheduling_summarizes_the_timed_requests():
    from lockdown.analyzers.budget import scheduling
    rs = [sched_request("a", 100_000, 40_000, delay=20_000, vol=10, invol=4),
          sched_request("b", 300_000, 40_000, delay=60_000, vol=30, invol=8),
          sched_request("i", 900_000, 40_000, delay=900_000, vol=99, invol=99, instrumented=True)]
    s = scheduling(rs, request_budgets(rs, [], []))
    assert s == {"requests": 2, "voluntary_switches": 20, "involuntary_switches": 6,
                 "cpu_queue_us": 40_000, "cpu_queue_pct": 20.0, "run_delay_us": 40_000,
                 "other_threads_cpu_us": None}
    switches_only = [sched_request("a", 100_000, 40_000, vol=3, invol=1)]
    s = scheduling(switches_only, request_budgets(switches_only, [], []))
    assert (s["voluntary_switches"], s["cpu_queue_us"], s["cpu_queue_pct"], s["run_delay_us"]) == (3, None, None, None)
    old = [sched_request("a", 100_000, 40_000)]                  # a bundle from before the scheduler's view
    assert scheduling(old, request_budgets(old, [], [])) is None


def test_the_cpu_of_the_workers_other_threads_is_summed_apart_from_the_requests():
    """cpu is the request thread's own (schedstat); the process's (getrusage) adds Excimer's
    timer thread, which the summary reports as lockdown's cost, and only when every timed
    request recorded it."""
    from lockdown.analyzers.budget import scheduling
    from lockdown.reports.analysis_text import scheduling_lines
    rs = [sched_request("a", 100_000, 40_000, delay=0), sched_request("b", 100_000, 60_000, delay=0)]
    rs[0].sched["process_cpu_us"] = 41_000
    rs[1].sched["process_cpu_us"] = 61_500
    s = scheduling(rs, request_budgets(rs, [], []))
    assert s["other_threads_cpu_us"] == 1_250
    assert scheduling_lines(s)[1] == ("  the worker's other threads (Excimer's timer) used 1.25 ms CPU a request, "
                                      "lockdown's cost: the cpu column is the request thread's alone")
    del rs[1].sched["process_cpu_us"]
    assert scheduling(rs, request_budgets(rs, [], []))["other_threads_cpu_us"] is None
    assert len(scheduling_lines({**s, "other_threads_cpu_us": 49})) == 1


def test_scheduling_lines_say_when_the_timings_include_queueing():
    from lockdown.reports.analysis_text import scheduling_lines
    s = {"requests": 2, "voluntary_switches": 20, "involuntary_switches": 6, "cpu_queue_us": 40_000,
         "cpu_queue_pct": 20.0, "run_delay_us": 43_000, "concurrency": 6, "workers": 4, "cpus": 2}
    lines = scheduling_lines(s)
    assert lines[0] == ("  scheduler: 40.0 ms a request waiting for a CPU beyond db wait (20.0% of the wall time; "
                        "43.0 ms in the run queue in all); 20.0 voluntary and 6.0 involuntary context switches a "
                        "request (captured at concurrency 6, 4 workers, 2 CPUs)")
    assert "the timings include that queueing" in lines[1]
    calm = scheduling_lines({**s, "cpu_queue_us": 900, "cpu_queue_pct": 0.9})
    assert len(calm) == 1 and "0.9 ms a request" in calm[0]
    assert scheduling_lines(None) == []


def test_run_says_what_is_notable_after_analysing():
    from lockdown.reports.analysis_text import notable_lines
    a = {"scheduling": {"cpu_queue_pct": 56.4, "concurrency": 6, "cpus": 2},
         "database_status": {"checks": [{"name": "buffer pool", "flagged": False},
                                        {"name": "temporary tables", "flagged": True},
                                        {"name": "sort merge passes", "flagged": True}]},
         "tail": [{"url": "/calm", "ratio": 1.1, "excess_us": {"cpu": 100}},
                  {"url": "/", "ratio": 1.84, "excess_us": {"waiting for a CPU": 82_130, "cpu": 4_590}}]}
    assert notable_lines(a) == [
        "  the timed requests spent 56.4% of their wall time waiting for a CPU (concurrency 6 on 2 CPUs): "
        "shares of request time are of a busy host",
        "  database server: temporary tables, sort merge passes (its counters over the capture)",
        "  longest tail: /, slowest tenth 1.84x its middle half (mostly waiting for a CPU, +82.1 ms)"]
    calm = {"scheduling": {"cpu_queue_pct": 2.0}, "database_status": {"checks": [{"name": "x", "flagged": False}]},
            "tail": [{"url": "/", "ratio": 1.2, "excess_us": {"cpu": 1}}]}
    assert notable_lines(calm) == notable_lines({}) == []
