"""Units of the hot native functions and the hot builtins' callers, and of what prints them
(analyze's text, `analyze --baseline`, verify's terminal lines) and of validate's Excimer
check: pure inputs, no stack. Written against the mutants the other tests left alive."""
from __future__ import annotations

import copy
import dataclasses
from collections import Counter

import pytest

from contexts import context, request
from lockdown.analyzers.builtins import CALLERS, hot_builtins, top_callers
from lockdown.analyzers.detectors import hot_builtins as detector
from lockdown.analyzers.native_functions import _key, _most, hot_native
from lockdown.analyzers.versus import _functions
from lockdown.bundle.model import ExcimerProfile, PerfSample, RequestRecord
from lockdown.bundle.validate import _ran_us, coverage_checks
from lockdown.reports.analysis_text import callers_text, native_lines, versus_lines
from lockdown.reports.verify_text import format_verify, new_findings
from test_report_numbers import VERIFY_ALL

PHP = "/usr/sbin/php-fpm8.2"
LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"


def sample(*frames):
    """A perf sample whose stack is `frames` (symbol, dso), leaf first."""
    return PerfSample(1, 7, 7, "php-fpm8.2", 1, "r1", [["0", sym, 0, dso] for sym, dso in frames])


def rows_of(samples, **kw):
    rows, total = hot_native(samples, **kw)
    return {(r.name, r.dso): (r.self_samples, r.inclusive_samples, r.subsystem) for r in rows}, total


# -- native_functions ---------------------------------------------------------------------------

def test_samples_given_as_an_iterator_are_read_once_for_both_passes():
    samples = [sample(("memcpy", LIBC), ("_emalloc", PHP)), sample(("zend_hash_find", PHP), ("execute_ex", PHP))]
    assert hot_native(iter(samples)) == hot_native(samples)
    assert hot_native(s for s in samples)[1] == 2


def test_twenty_rows_by_default_then_by_name_among_equals():
    samples = [sample((f"f{i:02d}", PHP)) for i in range(25)]
    rows, total = hot_native(samples)
    assert total == 25 and [r.name for r in rows] == [f"f{i:02d}" for i in range(20)]
    assert [r.name for r in hot_native(samples, top=3)[0]] == ["f00", "f01", "f02"]


def test_the_subsystem_is_the_most_frequent_one_not_the_first_by_name():
    # memcpy twice under the memory manager, once under a hash function: memory, though
    # hashtable comes first by name
    samples = [sample(("memcpy", LIBC), ("_emalloc", PHP)), sample(("memcpy", LIBC), ("zend_hash_find", PHP)),
               sample(("memcpy", LIBC), ("_emalloc", PHP))]
    rows, _ = rows_of(samples)
    assert rows[("memcpy", "libc.so.6")] == (3, 3, "memory")
    assert _most(Counter({"hashtable": 1, "memory": 2})) == "memory"
    assert _most(Counter({"vm": 2, "memory": 2, "regex": 1})) == "memory"


def test_a_recursive_function_takes_the_subsystem_of_its_leafmost_frame_once_per_sample():
    # memcpy under _emalloc (memory), which a memcpy under zend_hash_find (hashtable) called:
    # counted once, as memory; counting the deeper frame too would tie and give hashtable
    rows, _ = rows_of([sample(("memcpy", LIBC), ("_emalloc", PHP), ("memcpy", LIBC), ("zend_hash_find", PHP),
                              ("execute_ex", PHP))])
    assert rows[("memcpy", "libc.so.6")] == (1, 1, "memory")
    assert rows[("zend_hash_find", "php-fpm8.2")][:2] == (0, 1)


def test_an_unnamed_frame_in_a_named_file_is_a_function_only_as_the_leaf():
    # `[unknown]` in php-fpm: a leaf once (under a hash function), and twice the root where
    # unwinding ended: neither its inclusive count nor its subsystem take those roots
    samples = [sample(("[unknown]", PHP), ("zend_hash_find", PHP)),
               sample(("_emalloc", PHP), ("[unknown]", PHP)), sample(("_emalloc", PHP), ("[unknown]", PHP))]
    rows, total = rows_of(samples)
    assert total == 3
    assert rows[("[unknown]", "php-fpm8.2")] == (1, 1, "hashtable")
    assert rows[("_emalloc", "php-fpm8.2")] == (2, 2, "memory")
    assert rows[("zend_hash_find", "php-fpm8.2")] == (0, 1, "hashtable")


def test_rows_are_frozen_and_keys_name_the_file():
    [row], _ = hot_native([sample(("execute_ex", PHP))])
    assert (row.name, row.dso) == ("execute_ex", "php-fpm8.2")
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.self_samples = 0
    assert _key(["0", "[JIT]", 0, "/tmp/perf-123.map"]) == ("[JIT]", "perf-PID.map")
    assert _key(["0", "f", 0, "/tmp/perf-123.map.old"])[1] == "perf-123.map.old"


# -- builtins: callers --------------------------------------------------------------------------

def test_callers_rank_by_time_then_calls_then_name():
    by = {"b": Counter(inclusive_us=10, calls=1), "a": Counter(inclusive_us=10, calls=1),
          "c": Counter(inclusive_us=10, calls=5), "d": Counter(inclusive_us=50, calls=1),
          "e": Counter(inclusive_us=1, calls=100)}
    assert CALLERS == 3
    assert top_callers(by) == ({"name": "d", "calls": 1, "inclusive_us": 50},
                               {"name": "c", "calls": 5, "inclusive_us": 10},
                               {"name": "a", "calls": 1, "inclusive_us": 10})
    assert top_callers({}) == ()


def test_hot_builtins_callers_are_summed_over_profiles_and_name_only_callers():
    a = {"main()": {"ct": 1, "wt": 500}, "main()==>render": {"ct": 1, "wt": 400},
         "render==>strlen": {"ct": 3, "wt": 30}, "helper==>strlen": {"wt": 10},      # no count: 0 calls
         "strlen==>strlen@1": {"ct": 3, "wt": 1},                                   # tideways' copy
         "render==>helper": {"ct": 1, "wt": 50}, "helper==>helper@1": {"ct": 1, "wt": 5},
         "strlen": {"ct": 2, "wt": 5}}                                             # caller-less
    b = {"main()": {"ct": 1, "wt": 100}, "render==>strlen": {"ct": 4, "wt": 20}}
    [row] = [r for r in hot_builtins([a, b], ["strlen"], []) if r.name == "strlen"]
    named = [c for c in row.callers if c["name"] != "main()"]
    assert all(isinstance(c["name"], str) for c in row.callers)
    assert named == [{"name": "render", "calls": 7, "inclusive_us": 50},
                     {"name": "helper", "calls": 0, "inclusive_us": 10}]
    # a user function has no callers row (only builtins are listed)
    assert [r.name for r in hot_builtins([a, b], ["strlen"], [])] == ["strlen"]


def test_top_level_calls_are_main():
    prof = {"main()": {"ct": 1, "wt": 100}, "define": {"ct": 5, "wt": 50}, "main()==>render": {"ct": 1, "wt": 40},
            "render==>define": {"ct": 1, "wt": 10}}
    [row] = hot_builtins([prof], ["define"], [])
    assert (row.calls, row.inclusive_us) == (6, 60)
    assert row.callers == ({"name": "main()", "calls": 5, "inclusive_us": 50},
                           {"name": "render", "calls": 1, "inclusive_us": 10})


# -- the hot-builtins detector's callers ----------------------------------------------------------

def _php(internal):
    return {"ini": {}, "extensions": {}, "zend_extensions": ["Zend OPcache"], "internal_functions": list(internal),
            "internal_classes": []}


def _detect(profile, internal):
    ctx = context([request("r000001", instrumented=True)], xhprof={"r000001": profile}, php=_php(internal))
    [f] = detector.detect(ctx)
    return f, {r["name"]: r for r in f.details["builtins"]}


def _evidence(f, name):
    [e] = [e for e in f.evidence if e.what.startswith(f"{name}: ")]
    return e.what, e.value


def test_detector_names_three_callers_by_time_then_name_in_rows_and_evidence():
    prof = {"main()": {"ct": 1, "wt": 1}, "main()==>a": {"ct": 1, "wt": 500}, "a==>str_replace": {"ct": 1, "wt": 100},
            "d==>str_replace": {"ct": 1, "wt": 50}, "c==>str_replace": {"ct": 1, "wt": 50},
            "e==>str_replace": {"ct": 1, "wt": 10}}
    f, rows = _detect(prof, ["str_replace"])
    assert rows["str_replace"]["callers"] == [{"name": "a", "share_pct": 47.6}, {"name": "c", "share_pct": 23.8},
                                              {"name": "d", "share_pct": 23.8}]
    assert _evidence(f, "str_replace") == ("str_replace: calls per request, exclusive us per request; its callers, "
                                           "by share of its time", "4, 210; a 48%, c 24%, d 24%")


def test_detector_without_time_in_a_builtin_has_callers_without_shares_and_plain_evidence():
    prof = {"main()": {"ct": 1, "wt": 1}, "main()==>render": {"ct": 1, "wt": 100},
            "render==>strlen": {"ct": 5, "wt": 0}}
    f, rows = _detect(prof, ["strlen"])
    assert rows["strlen"]["callers"] == [{"name": "render", "share_pct": None}]
    assert _evidence(f, "strlen") == ("strlen: calls per request, exclusive us per request", "5, 0")


def test_detector_counts_a_top_level_call_once():
    prof = {"main()": {"ct": 1, "wt": 1}, "define": {"ct": 5, "wt": 50}, "main()==>render": {"ct": 1, "wt": 40},
            "render==>define": {"ct": 1, "wt": 10}}
    f, rows = _detect(prof, ["define"])
    assert rows["define"]["callers"] == [{"name": "main()", "share_pct": 83.3}, {"name": "render", "share_pct": 16.7}]
    assert rows["define"]["calls"] == 6


# -- analysis text ------------------------------------------------------------------------------

def test_callers_text_is_each_callers_share_of_the_builtins_time():
    b = {"inclusive_us": 200, "callers": [{"name": "f", "calls": 3, "inclusive_us": 150},
                                          {"name": "g", "calls": 1, "inclusive_us": 50}, "junk"]}
    assert callers_text(b) == "  <- f 75%, g 25%"
    for total in (0, None):
        assert callers_text({**b, "inclusive_us": total}) == ""
    assert callers_text({"inclusive_us": 200, "callers": []}) == callers_text({"inclusive_us": 200}) == ""


def _native(n, samples=100):
    return {"samples": samples, "top": [{"name": f"f{i:02d}", "dso": "php-fpm8.2", "subsystem": "vm",
                                         "self_samples": 1, "inclusive_samples": 2} for i in range(n)]}


def test_native_lines_fifteen_by_default_and_nothing_without_samples_or_rows():
    lines = native_lines(_native(16))
    assert lines[0] == "" and len(lines) == 2 + 15
    assert lines[-1] == "    1.0   2.0  vm           f14 [php-fpm8.2]"
    assert native_lines({**_native(2), "samples": 0}) == []
    assert native_lines({"samples": 5, "top": []}) == native_lines({"samples": 5}) == []


def test_versus_lines_print_six_native_functions():
    rows = [{"function": f"f{i} [libc.so.6]", "before": float(i), "after": 0.0} for i in range(7)]
    v = {"bundle": "b", "target": "t", "overall": {}, "urls": [], "urls_only_in_baseline": [], "urls_only_here": [],
         "subsystems_ms": [], "queries": [], "functions_self_pct": [], "native_self_pct": rows}
    last = versus_lines(v)[-1]
    assert last.startswith("  native functions, self % of samples: f0 [libc.so.6] 0.0 -> 0.0, ")
    assert last.endswith("f5 [libc.so.6] 5.0 -> 0.0") and "f6" not in last
    assert not any("native" in x for x in versus_lines({**v, "native_self_pct": []}))


# -- versus --------------------------------------------------------------------------------------

def test_native_shares_need_samples_rows_and_both_sides():
    row = {"name": "memcpy", "dso": "libc.so.6", "self_samples": 10}

    def side(native):
        return {"native_functions": native}

    with_rows = {"samples": 100, "top": [row, {"name": "only_here", "dso": "x", "self_samples": 5}]}
    assert _functions(side({"samples": 50, "top": [row]}), side(with_rows), "native_functions") == [
        {"function": "memcpy [libc.so.6]", "before": 20.0, "after": 10.0}]
    assert _functions(side({"samples": 0, "top": [row]}), side({"samples": 0, "top": [row]}), "native_functions") == []
    assert _functions(side({"top": [row]}), side({"top": [row]}), "native_functions") == []
    assert _functions(side({"samples": 10, "top": None}), side({"samples": 10, "top": None}), "native_functions") == []
    assert _functions({}, side(with_rows), "native_functions") == []


# -- validate: PHP stacks per request ----------------------------------------------------------

class _Bundle:
    def __init__(self, requests, with_stacks, period_ms=2):
        self.manifest = {"capture": {"collect": ["excimer"], "excimer_period_ms": period_ms}}
        self._r = requests
        self._e = [ExcimerProfile(request=rid, pid=7, stacks=["main"], samples=[[1, 1, 0]]) for rid in with_stacks]

    def requests(self):
        return self._r

    def excimer(self):
        return self._e


def _req(i, wall_us, sched=None):
    return RequestRecord(id=f"r{i}", pid=7, method="GET", uri="/", status=200, start_ns=0, end_ns=1, start_unix=1.7e9,
                         wall_us=wall_us, cpu_us=1, peak_memory=1, instrumented=False, sched=sched)


def _stacks_check(requests, with_stacks):
    [c] = [c for c in coverage_checks(_Bundle(requests, with_stacks)) if c.name == "PHP stacks per request"]
    return c


def test_ran_us_takes_out_the_run_queue_only_when_recorded():
    assert _ran_us(_req(1, 7_000)) == 7_000
    assert _ran_us(_req(1, 7_000, {"run_delay_us": None})) == 7_000
    assert _ran_us(_req(1, 7_000, {})) == 7_000
    assert _ran_us(_req(1, 7_000, {"run_delay_us": 5_500})) == 1_500


def test_a_short_request_with_stacks_is_not_counted_short_and_no_requests_fail():
    c = _stacks_check([_req(1, 1_000)], ["r1"])
    assert c.ok is True and c.detail == "1 of 1 requests have Excimer stacks"
    c = _stacks_check([], [])
    assert c.ok is False and c.detail == "0 of 0 requests have Excimer stacks"


def test_missing_stacks_name_the_first_five():
    c = _stacks_check([_req(i, 50_000) for i in range(1, 8)] + [_req(8, 100, {"run_delay_us": 50})], [])
    assert c.ok is False
    assert c.detail == ("0 of 8 requests have Excimer stacks (missing: r1, r2, r3, r4, r5); 1 shorter than three "
                        "2 ms sampling periods (their wait for a CPU not counted) have none, as can happen")


# -- verify's lines ------------------------------------------------------------------------------

def test_new_findings_take_titles_where_there_are_any():
    assert new_findings({}) == new_findings({"new": None, "findings": None}) == []
    assert new_findings({"new": ["a"]}) == [("a", "")]
    verify = {"new": ["a", "b"], "findings": [{"key": "a", "title": None}, "junk", {"key": "b", "title": "B's title"}]}
    assert new_findings(verify) == [("a", ""), ("b", "B's title")]


def test_format_verify_without_flame_graphs_and_with_a_new_untitled_finding():
    data = copy.deepcopy(VERIFY_ALL)
    data.pop("diff_svg")
    lines = format_verify(data).splitlines()
    assert not any("flame graph" in x or "new in the re-capture" in x for x in lines)
    data["diff_svg"] = None
    data["reprofile"]["new"] = ["repeated-call"]
    data["reprofile"]["findings"] = None
    lines = format_verify(data).splitlines()
    i = lines.index("  new in the re-capture (not in the run), by the re-capture's keys:")
    assert lines[i + 1] == "    repeated-call: " and not any("flame graph" in x for x in lines)
    data["diff_svg"] = {"native": "d.svg", "native_before_widths": "db.svg"}
    lines = format_verify(data).splitlines()
    assert lines[-2:] == ["  native differential flame graph, widths from after: d.svg",
                          "  native differential flame graph, widths from before (what the fix removed): db.svg"]
