"""A capture against a baseline capture (`lockdown analyze --baseline`, analyzers/versus.py)."""
from __future__ import annotations

import json
from types import SimpleNamespace

from conftest import one_page_target

from lockdown.analyzers.versus import query_rates, versus
from lockdown.reports.analysis_text import versus_lines


def budget(wall, cpu, db, requests=10):
    return {"wall_us": wall, "cpu_us": cpu, "db_wait_us": db, "other_wait_us": wall - cpu - db, "requests": requests}


def analysis(name, by_url, overall, statements, subsystems, functions):
    return {"bundle": name, "target": "site", "requests": 20, "budget_by_url": by_url, "budget_overall": overall,
            "by_request": [{"url": u, "instrumented": False, "statements": n} for u, n in statements],
            "subsystems": {"overall": subsystems}, "php_functions": {"samples": 200, "top": functions}}


def test_what_moved_per_url_subsystem_query_and_function():
    base = analysis("before", {"/": budget(100_000, 60_000, 30_000), "/old": budget(5_000, 5_000, 0)},
                    budget(100_000, 60_000, 30_000), [("/", 40), ("/", 42)], {"vm": 50.0, "compile": 50.0},
                    [{"name": "t", "self_samples": 60}, {"name": "render", "self_samples": 20},
                     {"name": "only_before", "self_samples": 10}])
    new = analysis("after", {"/": budget(50_000, 40_000, 3_000), "/new": budget(7_000, 7_000, 0)},
                   budget(50_000, 40_000, 3_000), [("/", 4)], {"vm": 90.0, "compile": 10.0},
                   [{"name": "t", "self_samples": 2}, {"name": "render", "self_samples": 40}])

    def query(fp, count, us):
        return SimpleNamespace(fingerprint=fp, count=count, time_total=us)

    b_q = query_rates([query("select * from l10n where k = ?", 800, 24_000), query("select 1", 20, 200)], 20)
    n_q = query_rates([query("select * from l10n", 20, 2_000), query("select 1", 20, 200)], 20)
    v = versus(base, new, b_q, n_q)
    assert v["overall"]["wall_us"] == {"before": 100_000, "after": 50_000, "change_pct": -50.0}
    [slash] = v["urls"]
    assert slash["url"] == "/" and slash["requests"] == [10, 10]
    assert slash["db_wait_us"]["change_pct"] == -90.0 and slash["statements"] == {"before": 41, "after": 4,
                                                                                   "change_pct": -90.2}
    assert (v["urls_only_in_baseline"], v["urls_only_here"]) == (["/old"], ["/new"])
    assert v["subsystems_ms"][0] == {"subsystem": "compile", "before": 30.0, "after": 4.0, "change_pct": -86.7}
    states = {r["fingerprint"]: (r["state"], r["count"]["before"], r["count"]["after"], r["ms"]["after"])
              for r in v["queries"]}
    assert states == {"select * from l10n where k = ?": ("gone", 40.0, 0.0, 0.0),
                      "select * from l10n": ("new", 0.0, 1.0, 0.1), "select 1": ("same count", 1.0, 1.0, 0.01)}
    assert [r["fingerprint"] for r in v["queries"]][0] == "select * from l10n where k = ?"   # most time moved
    # only functions both tops list: a function outside one side's top has no known share there
    assert v["functions_self_pct"] == [{"function": "t", "before": 30.0, "after": 1.0},
                                       {"function": "render", "before": 10.0, "after": 20.0}]
    text = "\n".join(versus_lines(v))
    assert "all URLs: wall 100.0 -> 50.0 (-50.0%), cpu 60.0 -> 40.0 (-33.3%)" in text
    assert "statements 41.0 -> 4.0" in text and "URLs only in the baseline: /old" in text
    assert "query gone         40.0 ->    0.0 a request,   1.20 ->   0.00 ms: select * from l10n where k = ?" in text


SPIN = """<?php
$x = 0;
for ($i = 0; $i < {n}; $i++) {{ $x = ($x + $i * 7) % 1000003; }}
echo 'spin ok ', $x;
"""


def test_a_change_to_the_page_shows_against_the_capture_before_it(lockdown, tmp_path):
    """The real stack: a page that computes, captured, changed to do a quarter of the work,
    captured again; the second capture against the first says the CPU fell by about three
    quarters."""
    before, after = tmp_path / "before", tmp_path / "after"
    for n, out, root in ((400_000, before, tmp_path / "a"), (100_000, after, tmp_path / "b")):
        target = one_page_target(root, "spin", "A page that computes", SPIN.format(n=n), "spin ok")
        r = lockdown("profile", target, "-o", out, "--collect", "none", "-n", "20", "--no-overhead-check",
                     "--warmup-requests", "3")
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    a = lockdown("analyze", after, "--baseline", before, "--json")
    assert a.returncode == 0, a.stderr
    v = json.loads(a.stdout)["baseline"]
    assert v["bundle"] == str(before) and -90 < v["overall"]["cpu_us"]["change_pct"] < -50, v["overall"]
    assert [u["url"] for u in v["urls"]] == ["/"] and v["queries"] == []
    text = lockdown("analyze", after, "--baseline", before).stdout
    assert f"against the baseline {before} (spin)" in text
    bad = lockdown("analyze", after, "--baseline", before, "--request", "r000001")
    assert bad.returncode == 2 and "not one request" in bad.stderr
    missing = lockdown("analyze", after, "--baseline", tmp_path / "nope")
    assert missing.returncode != 0 and missing.stderr.count("\n") == 1, missing.stderr


def test_urls_most_improved_first_with_their_statements_from_timed_requests_only():
    def by_url(walls):
        return {u: budget(w, w // 2, w // 4) for u, w in walls.items()}

    ties = {f"/t{i}": 5_000 for i in (4, 2, 5, 1, 3)}                    # no change: in the order of their URL
    base = analysis("b", by_url({"/a": 100_000, "/b": 10_000, "/c": 40_000, **ties}),
                    budget(50_000, 25_000, 12_500), [("/a", 10), ("/a", 20), ("/b", 3)], {}, [])
    base["by_request"].append({"url": "/a", "instrumented": True, "statements": 900})       # xhprof: left out
    new = analysis("n", by_url({"/a": 50_000, "/b": 12_000, "/c": 30_000, **ties}),
                   budget(40_000, 20_000, 10_000), [("/a", 12), ("/c", 7)], {}, [])
    v = versus(base, new, {}, {})
    assert [u["url"] for u in v["urls"]] == ["/a", "/c", "/t1", "/t2", "/t3", "/t4", "/t5", "/b"]
    a, c, b = v["urls"][0], v["urls"][1], v["urls"][-1]
    assert a["statements"] == {"before": 15, "after": 12, "change_pct": -20.0}
    assert b["statements"] == {"before": 3, "after": None, "change_pct": None}      # /b sent none after
    assert c["statements"] == {"before": None, "after": 7, "change_pct": None}
    lines = versus_lines(v)
    assert lines[3:6] == [
        "  /a                                       wall   100.0 ->    50.0 (-50.0%), cpu 50.0 -> 25.0, db 25.0 -> 12.5"
        ", statements 15.0 -> 12.0",
        "  /c                                       wall    40.0 ->    30.0 (-25.0%), cpu 20.0 -> 15.0, db 10.0 -> 7.5",
        "  /t1                                      wall     5.0 ->     5.0 (+0.0%), cpu 2.5 -> 2.5, db 1.2 -> 1.2"]
    assert lines[-1] == ("  /b                                       wall    10.0 ->    12.0 (+20.0%), cpu 5.0 -> 6.0, "
                         "db 2.5 -> 3.0")


def test_the_text_of_a_baseline_rounds_each_figure_and_cuts_long_names():
    long = "/" + "x" * 50

    def url_row(url, before, after):
        return {"url": url, "requests": [3, 3], "wall_us": {"before": before, "after": after, "change_pct": None},
                "cpu_us": {"before": 123_456, "after": 234_567}, "db_wait_us": {"before": 345_678, "after": 456_789},
                "statements": {"before": None, "after": 4.0}}

    v = {"bundle": "b1", "target": "wp",
         "overall": {"wall_us": {"before": 123_456, "after": 234_567, "change_pct": 90.0},
                     "db_wait_us": {"before": 0, "after": 1_000, "change_pct": None}},
         "urls": [url_row(long, 123_456, 234_567)] + [url_row(f"/{i}", 1_000, 1_000) for i in range(10)],
         "urls_only_in_baseline": [f"/o{i}" for i in range(9)], "urls_only_here": [],
         "subsystems_ms": [{"subsystem": "vm", "before": 1.25, "after": 2.0}],
         "queries": [{"fingerprint": "select " + "y" * 80, "state": "changed", "count": {"before": 1.0, "after": 2.0},
                      "ms": {"before": 0.5, "after": 0.25}}],
         "functions_self_pct": [{"function": f"f{i}", "before": 1.0 * i, "after": 2.0} for i in range(8)]}
    assert versus_lines(v) == [
        "", "against the baseline b1 (wp): means per timed request, ms, before -> after",
        "  all URLs: wall 123.5 -> 234.6 (+90.0%), db wait 0.0 -> 1.0",
        f"  {long[:40]} wall   123.5 ->   234.6, cpu 123.5 -> 234.6, db 345.7 -> 456.8",
        *[f"  /{i:<39} wall     1.0 ->     1.0, cpu 123.5 -> 234.6, db 345.7 -> 456.8" for i in range(9)],
        "  URLs only in the baseline: /o0, /o1, /o2, /o3, /o4, /o5, /o6, /o7",
        "  engine subsystems, CPU ms per request: vm 1.2 -> 2.0",
        f"  query changed       1.0 ->    2.0 a request,   0.50 ->   0.25 ms: select {'y' * 63}",
        "  PHP functions, self % of samples: f0 0.0 -> 2.0, f1 1.0 -> 2.0, f2 2.0 -> 2.0, f3 3.0 -> 2.0, "
        "f4 4.0 -> 2.0, f5 5.0 -> 2.0"]
    bare = versus_lines({**v, "urls": [], "urls_only_in_baseline": [], "subsystems_ms": [], "queries": [],
                         "functions_self_pct": []})
    assert bare == versus_lines(v)[:3] and versus_lines(None) == versus_lines({}) == []


def test_query_classes_changed_from_a_twentieth_of_an_execution_a_request_largest_move_first():
    b = {"q1": (0.05, 10.0), "q2": (1.0, 1.0), "q3": (2.0, 0.6), **{f"z{i}": (1.0, 0.0) for i in range(8)}}
    n = {"q1": (0.1, 10.5), "q2": (1.048, 4.0), "q3": (1.0, 0.0), **{f"z{i}": (1.0, 0.0) for i in range(8)}}
    rows = versus(analysis("b", {}, budget(1, 1, 0), [], {}, []), analysis("n", {}, budget(1, 1, 0), [], {}, []),
                  b, n)["queries"]
    assert len(rows) == 8
    # q2's time moved 3 ms, q3's 0.6 (to nothing), q1's 0.5 (from 10 ms): 0.05 more executions is "changed"
    assert [(r["fingerprint"], r["state"]) for r in rows[:3]] == [
        ("q2", "same count"), ("q3", "changed"), ("q1", "changed")]
    assert rows[0]["ms"] == {"before": 1.0, "after": 4.0, "change_pct": 300.0}
    one = SimpleNamespace(fingerprint="q", count=6, time_total=3_000)
    assert query_rates([one], 0) == {"q": (6.0, 3.0)} and query_rates([one], 3) == {"q": (2.0, 1.0)}


def test_subsystems_and_functions_keep_the_eight_that_moved_most():
    subs_b = {f"s{i}": 10.0 for i in range(10)}
    subs_n = {**{f"s{i}": 10.0 + i for i in range(10)}}
    funcs_b = [{"name": f"f{i}", "self_samples": 10} for i in range(9)] + [{"name": "big", "self_samples": 100}]
    funcs_n = [{"name": f"f{i}", "self_samples": 10 + 2 * i} for i in range(9)] + [{"name": "big", "self_samples": 89}]
    base = analysis("b", {}, budget(100_000, 100_000, 0), [], subs_b, funcs_b)
    new = analysis("n", {}, budget(100_000, 100_000, 0), [], subs_n, funcs_n)
    v = versus(base, new, {}, {})
    # 10% of 100 ms of CPU is 10 ms; s9 moved 9 ms, s2 2 ms
    assert [r["subsystem"] for r in v["subsystems_ms"]] == [f"s{i}" for i in range(9, 1, -1)]
    assert v["subsystems_ms"][0] == {"subsystem": "s9", "before": 10.0, "after": 19.0, "change_pct": 90.0}
    # of 200 samples: big fell 5.5 points, f8 rose 8: the largest move first, whichever way
    assert [r["function"] for r in v["functions_self_pct"]] == ["f8", "f7", "f6", "big", "f5", "f4", "f3", "f2"]
    assert v["functions_self_pct"][3] == {"function": "big", "before": 50.0, "after": 44.5}


def test_a_capture_without_samples_or_profiles_compares_its_budgets_only():
    def only(*urls):
        return {u: budget(1, 1, 0) for u in urls}

    base = analysis("b", {"/": budget(10_000, 5_000, 0), **only("/z", "/y", "/v", "/t", "/u")},
                    budget(10_000, 5_000, 0), [], {"vm": 100.0}, [{"name": "f", "self_samples": 200}])
    new = {k: v for k, v in analysis("n", {"/": budget(8_000, 4_000, 0), **only("/x", "/w", "/s", "/q", "/r")},
                                      budget(8_000, 4_000, 0), [], {}, []).items()
           if k not in ("subsystems", "php_functions", "by_request")}
    v = versus(base, new, {}, {})
    assert v["subsystems_ms"] == [{"subsystem": "vm", "before": 5.0, "after": 0.0, "change_pct": -100.0}]
    assert v["functions_self_pct"] == [] and v["urls"][0]["statements"]["before"] is None
    assert v["urls_only_in_baseline"] == ["/t", "/u", "/v", "/y", "/z"]
    assert v["urls_only_here"] == ["/q", "/r", "/s", "/w", "/x"]
    assert versus(new, new, {}, {})["subsystems_ms"] == []
