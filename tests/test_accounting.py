"""Time accounting (lockdown/analyzers/accounting.py, docs/analysis.md "Time accounting"): the
share of the timed requests' sampled time the findings explain, each sample counted once however
many findings own it, and the top unexplained hotspots. On synthetic samples whose expected
values are worked out by hand from the rules, then on the committed golden bundles
(fixtures/golden/) with the findings of the detect step, as `lockdown analyze` computes them.
No server is started."""
from __future__ import annotations

import json
import math
import signal
from pathlib import Path

import pytest
from click.testing import CliRunner

from lockdown.analyzers import accounting as A
from lockdown.analyzers.findings import Finding
from lockdown.analyzers.sql_text import fp_of
from lockdown.bundle.model import ExcimerProfile, PerfSample, Statement
from lockdown.bundle.store import open_bundle
from lockdown.reports.analysis_text import accounting_lines

GOLDEN = Path(__file__).resolve().parent.parent / "fixtures" / "golden"
MS = 1_000_000
US = 10_000.0           # one sample of the synthetic profiles: 10 ms


def finding(id, key=None, severity="medium", share=5.0, urls=("/a",), **details) -> Finding:
    return Finding(id=id, title=f"{id} title", severity=severity, share_pct=share, summary="",
                   urls=list(urls), details=details, key=key or id)


def sl(request, *stack, us=US, native=None, on_cpu=None):
    return A.Slice(request, us, ("index.php", *stack), native, on_cpu)


def invariant(part) -> None:
    """explained + unexplained = the sampled time, and the two shares add up to 100%."""
    assert math.isclose(part.explained_us + part.unexplained_us, part.total_us, rel_tol=1e-9, abs_tol=1e-6)
    if part.total_us:
        assert math.isclose(part.explained_pct + part.unexplained_pct, 100.0, abs_tol=1e-9)
        j = part.to_json()
        assert abs(j["explained_pct"] + j["unexplained_pct"] - 100.0) <= 0.01 + 1e-9


def check_all(acc: A.Accounting) -> None:
    invariant(acc.overall)
    for u in acc.urls:
        invariant(u)
    assert math.isclose(sum(u.total_us for u in acc.urls), acc.overall.total_us, abs_tol=1e-6)
    assert math.isclose(sum(u.explained_us for u in acc.urls), acc.overall.explained_us, abs_tol=1e-6)


URLS = {"r1": "/a", "r2": "/a", "r3": "/b", "r4": "/c"}


# -- PHP-function findings: nested, overlapping, none ------------------------------------------

def nested_slices():
    return [
        sl("r1", "page", "outer"),                       # outer only
        sl("r1", "page", "outer", "inner"),              # outer and the nested inner: counted once
        sl("r1", "page", "outer", "inner", "leaf"),      # both again
        sl("r1", "page", "render"),                      # nobody's
        sl("r2", "page", "scan", "scan", "scan"),        # the walker, recursive
        sl("r2", "page", "render", "helper"),            # nobody's
        sl("r3", "page", "render", "helper"),            # nobody's, another URL
        sl("r3", "page", "render"),                      # nobody's
    ]


def nested_findings():
    return [finding("repeated-call", function="outer", nested=[]),
            finding("repeated-call", key="repeated-call-2", function="inner", nested=[]),
            finding("fs-scan", walker="scan", share=12.5),
            finding("hot-builtins", severity="info", share=None)]


def test_nested_findings_are_counted_once():
    acc = A.account(nested_slices(), URLS, nested_findings(), requests=["r1", "r2", "r3", "r4"])
    check_all(acc)
    o = acc.overall
    assert o.total_us == 8 * US
    assert o.explained_us == 4 * US          # outer x3 (two of them inner's too), the walker x1
    assert o.unexplained_us == 4 * US
    own = {f.key: f.owned_us for f in acc.findings}
    assert own == {"repeated-call": 3 * US, "repeated-call-2": 2 * US, "fs-scan": 1 * US}
    assert acc.overlap_us == 2 * US          # the two samples both repeated-call findings own
    assert acc.informational == ["hot-builtins"]
    assert [f.key for f in acc.findings] == ["repeated-call", "repeated-call-2", "fs-scan"]


def test_per_url_parts_and_a_url_without_samples():
    acc = A.account(nested_slices(), URLS, nested_findings(), requests=["r1", "r2", "r3", "r4"])
    by = {u.url: u for u in acc.urls}
    assert list(by) == ["/a", "/b", "/c"]
    assert (by["/a"].total_us, by["/a"].explained_us, by["/a"].requests, by["/a"].sampled_requests) == \
        (6 * US, 4 * US, 2, 2)
    assert by["/a"].explained_pct == pytest.approx(100 * 4 / 6)
    assert (by["/b"].total_us, by["/b"].explained_us, by["/b"].unexplained_pct) == (2 * US, 0.0, 100.0)
    c = by["/c"]                             # a timed request, no sample
    assert (c.total_us, c.requests, c.sampled_requests, c.explained_pct, c.unexplained_pct) == (0.0, 1, 0, None, None)
    j = c.to_json()
    assert j["explained_pct"] is None and j["mean_us"] is None and j["top"] == []
    assert acc.overall.requests == 4 and acc.overall.sampled_requests == 3
    check_all(acc)


def test_no_findings_leaves_everything_unexplained():
    acc = A.account(nested_slices(), URLS, [])
    check_all(acc)
    assert acc.overall.explained_us == 0 and acc.overall.unexplained_pct == 100.0
    assert acc.findings == [] and acc.overlap_us == 0
    # the self hotspots partition the unexplained time: every slice has one leaf
    assert math.isclose(sum(h.us for h in acc.hotspots["self"]), acc.overall.unexplained_us)


def test_informational_findings_explain_nothing():
    acc = A.account(nested_slices(), URLS, [finding("blocking-wait", severity="info", function="render"),
                                            finding("hot-builtins", severity="info")])
    assert acc.overall.explained_us == 0
    assert acc.informational == ["blocking-wait", "hot-builtins"]
    render = next(h for h in acc.hotspots["inclusive"] if h.name == "render")
    assert render.noted_by == ["blocking-wait"]


# -- hotspots: ordering, call paths, requests ----------------------------------------------------

def test_hotspot_ordering_paths_and_requests():
    slices = [
        sl("r1", "page", "render", "helper"),
        sl("r1", "page", "render", "helper"),
        sl("r2", "page", "render", "helper", us=3 * US),
        sl("r3", "list", "render", "helper"),            # helper on another path, less of it
        sl("r3", "list", "fmt"),
        sl("r2", "page", "fmt", us=0.5 * US),
        sl("r1", "page", "outer", "helper"),            # explained: not a hotspot
        sl("r2", "page", "walk", "walk", "walk"),       # recursion counted once (inclusive)
    ]
    acc = A.account(slices, URLS, [finding("repeated-call", function="outer")], requests=["r1", "r2", "r3"])
    check_all(acc)
    self_ = acc.hotspots["self"]
    assert [h.name for h in self_] == ["helper", "fmt", "walk"]     # by time, most first
    h = self_[0]
    assert h.us == 6 * US and h.share_pct == pytest.approx(100 * 6 / 9.5)
    assert h.path == ["index.php", "page", "render", "helper"] and h.path_pct == pytest.approx(100 * 5 / 6)
    assert h.requests == ["r2", "r1", "r3"] and h.request_count == 3        # most of it first
    assert h.urls == ["/a", "/b"]
    assert h.us_per_request == pytest.approx(6 * US / 3)
    assert self_[1].us == 1.5 * US and self_[1].requests == ["r3", "r2"]
    incl = {x.name: x for x in acc.hotspots["inclusive"]}
    assert "index.php" not in incl                                    # the entry script holds everything
    assert incl["walk"].us == US                                      # once per sample, recursion or not
    assert incl["walk"].path == ["index.php", "page", "walk"]         # up to its outermost frame
    assert incl["render"].us == 6 * US and incl["page"].us == 6.5 * US
    assert [x.name for x in acc.hotspots["inclusive"]][:3] == ["page", "helper", "render"]   # a tie: by name
    assert acc.hotspots["builtin_family"] == [] and acc.hotspots["subsystem"] == []  # no perf
    # each URL's own top functions, self
    by = {u.url: u for u in acc.urls}
    assert [x.name for x in by["/a"].top] == ["helper", "walk", "fmt"]
    assert by["/a"].top[0].share_pct == pytest.approx(100 * 5 / 7.5)


def test_top_limits_the_rows():
    acc = A.account(nested_slices(), URLS, [], top=1)
    assert all(len(v) <= 1 for v in acc.hotspots.values())


# -- native frames: a sample owned by two findings, builtin families, subsystems --------------------

def frame(symbol, dso="/usr/sbin/php-fpm8.2"):
    return ("0", symbol, 0, dso)


VM = frame("execute_ex")
COMPILE = (frame("zend_hash_add"), frame("zend_compile_top_stmt"), frame("compile_file"), VM)
PREG = (frame("pcre2_match_8", "/usr/lib/libpcre2-8.so"), frame("php_pcre_match_impl"), frame("zif_preg_match"), VM)
CALLBACK = (frame("ZEND_ADD_SPEC_HANDLER"), VM, frame("zend_call_function"), frame("zif_array_map"), VM)
STAT = (frame("__x64_sys_newfstatat", "[kernel.kallsyms]"), frame("tsrm_realpath_r"), frame("virtual_file_ex"), VM)


def test_a_sample_owned_by_two_findings_counts_once():
    slices = [
        sl("r1", "page", "outer", us=4000, native=COMPILE, on_cpu=True),    # compiling inside outer: both own it
        sl("r1", "page", "outer", us=6000, on_cpu=False),                   # outer, off the CPU
        sl("r1", "page", "render", us=4000, native=COMPILE, on_cpu=True),   # opcache alone
        sl("r1", "page", "render", us=3000, native=PREG, on_cpu=True),      # nobody's (no pcre finding)
        sl("r1", "page", "render", us=3000, on_cpu=False),
    ]
    found = [finding("repeated-call", function="outer"), finding("opcache", case="disabled")]
    acc = A.account(slices, URLS, found)
    check_all(acc)
    assert acc.overall.total_us == 20000
    assert acc.overall.explained_us == 14000
    own = {f.key: f.owned_us for f in acc.findings}
    assert own == {"repeated-call": 10000, "opcache": 8000}
    assert acc.overlap_us == 4000
    fam = acc.hotspots["builtin_family"]
    assert [(h.name, h.members, h.us) for h in fam] == [("regex", ["preg_match"], 3000)]
    assert fam[0].path == ["index.php", "page", "render", "preg_match"]
    sub = {h.name: h.us for h in acc.hotspots["subsystem"]}
    assert sub == {"regex": 3000, A.OFF_CPU: 3000}


@pytest.mark.parametrize("found,frames,owned", [
    (finding("pcre-jit-off"), PREG, True),
    (finding("pcre-jit-off"), COMPILE, False),
    (finding("stat-storm"), STAT, True),
    (finding("stat-storm"), (frame("php_stat"), frame("zif_file_exists"), VM), False),   # the app's own stat
    (finding("debug-extension", extension="xdebug", names=["xdebug"]),
     (frame("xdebug_execute_ex", "/usr/lib/php/20220829/xdebug.so"), VM), True),
    (finding("debug-extension", extension="xdebug", names=["xdebug"]), PREG, False),
])
def test_native_findings_own_their_frames(found, frames, owned):
    acc = A.account([sl("r1", "page", us=1000, native=frames, on_cpu=True)], URLS, [found])
    assert acc.overall.explained_us == (1000 if owned else 0)


def test_builtin_of_stops_at_the_vm():
    assert A.builtin_of(PREG) == "preg_match"
    assert A.builtin_of(CALLBACK) is None                 # PHP code array_map called back
    assert A.builtin_of((frame("memcpy", "/lib/libc.so.6"), frame("zim_::format"), VM)) == "::format"
    assert A.builtin_of((frame("mysqlnd.so+0x10", "/usr/lib/php/20220829/mysqlnd.so"), VM)) == "mysqlnd.so"
    assert [A.family_of(b) for b in ("preg_replace", "json_decode", "is_dir", "fread", "str_replace",
                                     "array_merge", "::format", "mysqli::query", "zzz")] == \
        ["regex", "json/serialize", "filesystem", "file i/o", "string", "array", "methods", "database", "other"]


# -- slices from Excimer and perf -----------------------------------------------------------------

def perf(pid, t_ms, frames, tid=None, period=10 * MS):
    return PerfSample(time_ns=round(t_ms * MS), pid=pid, tid=pid if tid is None else tid, comm="php-fpm",
                      period=period, request="r1", frames=[list(f) for f in frames])


def profile(request, pid, samples, start_ms=None):
    stacks = sorted({s for _, _, s in samples})
    return ExcimerProfile(request, pid, stacks, [[round(t * MS), w, stacks.index(s)] for t, w, s in samples],
                          start_ns=None if start_ms is None else round(start_ms * MS))


def test_excimer_slices_tile_each_sample_with_perfs_cpu_and_the_rest():
    p = profile("r1", 7, [(10, 1, "/app/index.php;a"), (20, 1, "/app/index.php;b"), (50, 3, "/app/index.php;c")],
                start_ms=0)
    samples = [perf(7, 16, PREG), perf(7, 19, COMPILE),              # b's interval (10, 20]: near its end
               perf(7, 12, STAT),                                      # ... near its start: a's stack
               perf(7, 25, PREG), perf(7, 45, PREG),                   # c (late): its own stack, both
               perf(7, 5, PREG, tid=8),                                # Excimer's timer thread: left out
               perf(9, 15, PREG)]                                      # another worker
    out = A.excimer_slices([p], 10.0, samples, run_dir="/")
    assert math.isclose(sum(s.us for s in out), 50_000)
    stacks = [(s.stack[-1], s.on_cpu, round(s.us)) for s in out]
    assert stacks == [("a", False, 10000),
                      ("a", True, 3333), ("b", True, 3333), ("b", True, 3333),
                      ("c", True, 10000), ("c", True, 10000), ("c", False, 10000)]
    assert out[0].stack == ("index.php", "a")                            # named relative to the app tree
    assert [s.on_cpu for s in A.excimer_slices([p], 10.0, None)] == [None, None, None]
    assert [s.us for s in A.excimer_slices([p], 10.0, None)] == [10000, 10000, 30000]


def test_perf_basis_without_excimer():
    out = A.perf_slices([perf(7, 1, PREG), perf(7, 2, COMPILE, tid=8), perf(7, 3, COMPILE)])
    assert [(s.us, s.stack, s.on_cpu) for s in out] == [(10000.0, (), True)] * 2
    acc = A.account(out, URLS, [finding("pcre-jit-off"), finding("repeated-call", function="x")], basis="perf-cpu")
    assert acc.overall.explained_us == 10000
    assert acc.hotspots["self"][0].name == A.NO_STACK and acc.hotspots["subsystem"][0].name == "hashtable"
    assert any("repeated-call" in n for n in acc.notes)                 # placed on no sample


# -- statement findings ----------------------------------------------------------------------

def stmt(request, seq, sql, us):
    return Statement(seq=seq, request=request, attribution="connection", thread_id=1, schema="app", sql=sql,
                     duration_us=us, lock_us=0, rows_sent=1, rows_examined=1, rows_affected=None, timestamp=None)


LOOKUP = "SELECT v FROM cache WHERE k = 'x'"
UPDATE = "UPDATE pages SET views = views + 1 WHERE id = 1"
PAGE = "SELECT * FROM pages WHERE id = 1"


def query_case():
    slices = [sl("r1", "page", "get", "db_query"), sl("r1", "page", "get", "db_query"),   # under the sender
              sl("r1", "page", "db_query"),                                                # a database slice
              sl("r1", "page", "render")]                                                  # no SQL here
    statements = {"r1": [stmt("r1", 1, LOOKUP, 500), stmt("r1", 2, LOOKUP, 500), stmt("r1", 3, UPDATE, 1000),
                         stmt("r1", 4, LOOKUP, 500), stmt("r1", 5, LOOKUP, 500), stmt("r1", 6, PAGE, 3000),
                         stmt("r1", 7, UPDATE, 1000),
                         stmt("r1", 8, "SHOW /*lockdown-capture r1*/ PROCESSLIST", 50)]}
    found = [finding("db-static-cache", fingerprint=fp_of(LOOKUP), sender=None),
             finding("repeated-query", statement=LOOKUP, fingerprint=fp_of(LOOKUP), sender=None),
             finding("write-on-read", fingerprint=fp_of(UPDATE), sender=None)]
    return slices, statements, found


def test_statement_findings_own_the_senders_calls_and_the_database_slices():
    slices, statements, found = query_case()
    acc = A.account(slices, URLS, found, statements_of=statements, senders={"get": ("shape", fp_of(LOOKUP))},
                    db_functions={"db_query"})
    check_all(acc)
    # under `get`: all 4 lookups covered (db-static-cache all, repeated-query 3 of 4) -> 2 samples
    # elsewhere: the updates (2000 us of 5000) over one database slice (10000): 2000 / max(5000, 10000)
    assert acc.overall.explained_us == pytest.approx(2 * US + 0.2 * US)
    own = {f.key: f.owned_us for f in acc.findings}
    assert own == pytest.approx({"db-static-cache": 2 * US, "repeated-query": 1.5 * US, "write-on-read": 0.2 * US})
    assert acc.overlap_us == pytest.approx(1.5 * US)     # the repeats both query findings own
    render = next(h for h in acc.hotspots["self"] if h.name == "render")
    assert render.us == US                                # no statement time on a slice that sends none


def test_statement_time_is_bounded_by_the_statements_when_slices_are_few():
    slices, statements, found = query_case()
    statements["r1"][5] = stmt("r1", 6, PAGE, 38_000)     # rest: 40000 us of statements, one 10000 us slice
    acc = A.account(slices, URLS, found, statements_of=statements, senders={"get": ("shape", fp_of(LOOKUP))},
                    db_functions={"db_query"}, round_trip_us={"r1": 0.0})
    assert acc.overall.explained_us == pytest.approx(2 * US + US * 2000 / 40000)
    # the round trip applied to the request counts in each statement's cost
    acc = A.account(slices, URLS, found, statements_of=statements, senders={"get": ("shape", fp_of(LOOKUP))},
                    db_functions={"db_query"}, round_trip_us={"r1": 1000.0})
    assert acc.overall.explained_us == pytest.approx(2 * US + US * 4000 / 43000)     # 3 statements outside `get`


def test_statements_without_senders_or_a_call_graph():
    slices, statements, found = query_case()
    # no sender: every lookup, update and page select shares the two database slices of `get` and
    # the one outside; without a call graph (db_functions None) the render slice is one too
    acc = A.account(slices, URLS, found, statements_of=statements, db_functions={"db_query"})
    covered, all_ = 2000 + 2000, 2000 + 2000 + 3000
    assert acc.overall.explained_us == pytest.approx(3 * US * covered / max(all_, 3 * US))
    acc = A.account(slices, URLS, found, statements_of=statements, db_functions=None)
    assert acc.overall.explained_us == pytest.approx(4 * US * covered / max(all_, 4 * US))
    check_all(acc)


def test_statements_only_on_the_findings_urls():
    slices, statements, found = query_case()
    elsewhere = [Finding(**{**f.__dict__, "urls": ["/b"]}) for f in found]
    acc = A.account(slices, URLS, elsewhere, statements_of=statements, db_functions={"db_query"})
    assert acc.overall.explained_us == 0
    assert any("placed on no sample" in n for n in acc.notes)


def test_a_cpu_clock_profile_places_no_database_wait():
    slices, statements, found = query_case()
    acc = A.account(slices, URLS, found, statements_of=statements, senders={"get": ("shape", fp_of(LOOKUP))},
                    db_functions={"db_query"}, basis="excimer-cpu")
    assert acc.overall.explained_us == pytest.approx(2 * US)       # the senders' calls only
    assert any("CPU-clock" in n for n in acc.notes)


def test_disk_spill_owns_the_spilling_executions():
    sql = "SELECT body, COUNT(*) FROM notes GROUP BY body"
    slices = [sl("r1", us=40000)]
    spilled = Statement(**{**stmt("r1", 1, sql, 20000).__dict__, "plan": ["tmp_table", "tmp_table_on_disk"]})
    kept = Statement(**{**stmt("r1", 2, sql, 10000).__dict__, "plan": ["tmp_table"]})
    acc = A.account(slices, URLS, [finding("disk-spill", fingerprint=fp_of(sql))],
                    statements_of={"r1": [spilled, kept]}, db_functions={"main()"})
    assert acc.overall.explained_us == pytest.approx(40000 * 20000 / 40000)


def test_findings_from_json():
    f = nested_findings()[0]
    assert A.findings_from_json({"format": 1, "findings": [f.to_json()]})[0].details == f.details
    assert A.findings_from_json([f.to_json()])[0].key == "repeated-call"
    for bad in ({"findings": 3}, [1], {"findings": [{"id": "x"}]}):
        with pytest.raises(ValueError):
            A.findings_from_json(bad)


def test_text_lines():
    acc = A.account(nested_slices(), URLS, nested_findings(), requests=["r1", "r2", "r3", "r4"])
    acc.findings_source = "given"
    text = "\n".join(accounting_lines(acc.to_json()))
    assert "the findings explain 50.0% of" in text and "50.0% is unexplained" in text
    assert "/c" in text and "fs-scan" in text and "(its estimate 12.5%)" in text
    assert "informational, explaining nothing: hot-builtins" in text
    assert "render  <- index.php > page > render" in text
    empty = A.account([], URLS, nested_findings(), requests=["r4"], basis="none")
    assert empty.notes == []                  # no sample at all: nothing to say of each finding
    assert "no samples of timed requests" in "\n".join(accounting_lines(empty.to_json()))
    none = A.account([], URLS, [], requests=[], basis="none")
    assert "no timed request in the selection" in "\n".join(accounting_lines(none.to_json()))


# -- the golden bundles, with the detect step's findings ---------------------------------------------

@pytest.fixture(scope="module")
def golden():
    """Each golden bundle's accounting, every hotspot kept (top: all of them)."""
    return {case: A.of_bundle(open_bundle(GOLDEN / case / "bundle"), top=10**6)
            for case in ("minicms", "minicms-engine-off", "sortspill")}


@pytest.mark.parametrize("case", ["minicms", "minicms-engine-off", "sortspill"])
def test_golden_invariant(golden, case):
    acc = golden[case]
    check_all(acc)
    assert acc.basis == "excimer-wall" and acc.overall.total_us > 0
    # the self hotspots partition the unexplained time, and so do the subsystems where perf ran
    assert math.isclose(sum(h.us for h in acc.hotspots["self"]), acc.overall.unexplained_us, rel_tol=1e-9)
    if acc.perf:
        assert math.isclose(sum(h.us for h in acc.hotspots["subsystem"]), acc.overall.unexplained_us, rel_tol=1e-9)
    # every finding the detect step made with a share is placed on samples
    assert not [n for n in acc.notes if "is placed on no sample" in n]
    j = acc.to_json()
    assert json.loads(json.dumps(j)) == j


def test_golden_minicms_explains_its_planted_pathologies(golden):
    acc = golden["minicms"]
    # fs-scan, db-static-cache, repeated-call, write-on-read, repeated-query x2, n-plus-one
    assert {f.key for f in acc.findings} >= {"fs-scan", "db-static-cache", "repeated-call", "n-plus-one"}
    assert acc.overall.explained_pct >= 85
    for u in acc.urls:
        assert u.explained_pct >= 75, u.url
    own = {f.key: f for f in acc.findings}
    assert own["fs-scan"].owned_pct == pytest.approx(own["fs-scan"].share_pct, abs=5)
    # what is left is what no detector covers: the module lookups, the page load, the connection
    planted = {"file_scan_directory", "drupal_system_listing", "theme_settings", "theme_read", "LCStoreDB::get"}
    assert not planted & {h.name for h in acc.hotspots["inclusive"]}
    assert acc.hotspots["self"][0].name == "db_query"
    assert acc.hotspots["self"][0].share_pct < 10
    assert acc.overlap_us / acc.overall.total_us < 0.02


def test_golden_without_statements_leaves_the_query_pathologies_unexplained(golden):
    """minicms-engine-off was captured without the queries collector: no query finding, so the
    localisation lookups (db-static-cache on minicms) are the top unexplained hotspot."""
    acc = golden["minicms-engine-off"]
    assert {f.id for f in acc.findings} == {"fs-scan", "repeated-call", "opcache", "pcre-jit-off"}
    incl = [h.name for h in acc.hotspots["inclusive"]]
    assert "LCStoreDB::get" in incl[:5] and "db_query" == incl[0]
    assert 50 <= acc.overall.explained_pct <= 85
    assert acc.hotspots["subsystem"][0].name == A.OFF_CPU       # waiting for the database


def test_golden_sortspill_per_url(golden):
    by = {u.url: u for u in golden["sortspill"].urls}
    assert by["/?p=control"].explained_pct == 0                 # in-memory sorts: no finding
    assert by["/?p=dupes"].explained_pct >= 90 and by["/?p=sorted"].explained_pct >= 85
    assert not golden["sortspill"].perf                           # captured without perf


def test_selection_of_one_url():
    acc = A.of_bundle(open_bundle(GOLDEN / "minicms" / "bundle"), url="/list")
    assert [u.url for u in acc.urls] == ["/list"]
    check_all(acc)


# -- `lockdown analyze` -----------------------------------------------------------------------------

def run_cli(*args, home):
    from lockdown.cli.main import main
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    try:
        r = CliRunner(env={"LOCKDOWN_HOME": str(home)}).invoke(main, [str(a) for a in args])
    finally:
        for s, h in saved.items():
            signal.signal(s, h)
    return r


def test_analyze_shows_the_time_accounting(tmp_path):
    bundle = GOLDEN / "minicms" / "bundle"
    r = run_cli("analyze", bundle, "--json", home=tmp_path)
    assert r.exit_code == 0, r.output
    t = json.loads(r.stdout)["time_accounting"]
    assert t["basis"] == "excimer-wall" and "detect step" in t["findings_source"]
    assert abs(t["explained_pct"] + t["unexplained_pct"] - 100) <= 0.01
    r = run_cli("analyze", bundle, home=tmp_path)
    assert r.exit_code == 0 and "time accounting (" in r.stdout and "the findings explain" in r.stdout
    # a run's findings instead (the golden findings.json is the detect step's list)
    r = run_cli("analyze", bundle, "--json", "--findings", GOLDEN / "minicms" / "findings.json", home=tmp_path)
    assert r.exit_code == 0, r.output
    t2 = json.loads(r.stdout)["time_accounting"]
    assert t2["findings_source"].endswith("findings.json") and t2["explained_pct"] == t["explained_pct"]
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    r = run_cli("analyze", bundle, "--findings", bad, home=tmp_path)
    assert r.exit_code == 2 and r.stderr.startswith("lockdown: error: ") and "bad.json" in r.stderr
    r = run_cli("analyze", bundle, "--findings", bad, "--thresholds", bad, home=tmp_path)
    assert r.exit_code == 2 and "--thresholds" in r.stderr


def test_db_callers_from_the_call_graph():
    xh = [{"main()==>mysqli_query": {"ct": 1}, "mysqli_query": {"ct": 1}, "db_query==>mysqli::query": {"ct": 3},
           "mysqli::query==>mysqli::query@1": {"ct": 3}, "render==>strlen": {"ct": 9},
           "PdoRepo::find==>PDOStatement::execute": {"ct": 1}, "PdoRepo::find==>pdo_helper": {"ct": 1}}]
    assert A.db_callers(xh) == {"main()", "db_query"}        # names alone: PdoRepo::find looks like PDO's
    internal = {"mysqli_query", "mysqli::query", "pdostatement::execute", "strlen"}
    assert A.db_callers(xh, lambda n: n.lower() in internal) == {"main()", "db_query", "PdoRepo::find"}
