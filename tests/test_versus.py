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
    q = lambda fp, count, us: SimpleNamespace(fingerprint=fp, count=count, time_total=us)     # noqa: E731
    b_q = query_rates([q("select * from l10n where k = ?", 800, 24_000), q("select 1", 20, 200)], 20)
    n_q = query_rates([q("select * from l10n", 20, 2_000), q("select 1", 20, 200)], 20)
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
