"""Runs the host disturbed, judged by the host probe alone (harness/steady_runs.py), and how
the bench result and table carry them."""
from __future__ import annotations

import pytest

from lockdown.harness.bench import BenchOptions, keep_runs
from lockdown.harness.steady_runs import needs_more, select
from lockdown.reports.bench_table import format_bench


def test_a_run_off_the_median_capacity_is_set_aside_whatever_its_rps():
    # reading 3 of 2026-11-22: the fifth run's probe saw the host 12.5% slower
    caps = [73.2, 72.5, 76.7, 77.5, 64.0]
    s = select(caps, 5, 0.10)           # only 4 in band: all five kept if no more runs were allowed
    assert (s.median, s.in_band, s.kept, s.aside, s.unsteady) == (73.2, 4, [0, 1, 2, 3, 4], {}, True)
    assert needs_more(caps, 5, 0.10)
    s = select(caps + [74.0], 5, 0.10)                         # one more run, in band: five kept
    assert (s.kept, s.aside, s.unsteady) == ([0, 1, 2, 3, 5], {4: "host capacity -13.0% off the runs' median"}, False)
    assert not needs_more(caps + [74.0], 5, 0.10)
    assert select([80.0, 100.0, 81.0], 3, tolerance=None).kept == [0, 1, 2]     # --keep-disturbed
    assert select([80.0, None, 81.0], 3, 0.10).kept == [0, 1, 2]          # a run without a probe: keep all
    assert not needs_more([80.0, None, 81.0], 3, 0.10)


def test_a_host_that_never_holds_still_keeps_the_runs_closest_to_its_median():
    caps = [60.0, 70.0, 80.0, 90.0, 100.0, 110.0]        # drifting: 2 of 6 within 10% of 85
    s = select(caps, 3, 0.10)
    assert (s.median, s.in_band, s.unsteady) == (85.0, 2, True)
    assert s.kept == [1, 2, 3] and sorted(s.aside) == [0, 4, 5]
    assert s.aside[5] == "host capacity +29.4% off the runs' median"


def test_more_runs_in_band_than_asked_for_keep_the_first():
    s = select([100.0, 70.0, 101.0, 99.0, 100.0], 3, 0.10)
    assert s.kept == [0, 2, 3] and s.aside == {1: "host capacity -30.0% off the runs' median",
                                                4: "more runs in band than the 3 asked for"}


def run(rps, speed):
    return {"rps": rps, "latency_ms": {"p50": 1.0, "p90": 2.0, "p99": 3.0, "max": 4.0}, "errors": 0,
            "status_counts": {"200": 10}, "host_speed": {"speed": speed}, "host_cpu": {"busy_pct": 99.0,
                                                                                    "steal_pct": 0.0}}


def test_the_result_keeps_the_steady_runs_and_lists_the_others():
    measured = [run(35.5, 73.2), run(37.4, 72.5), run(37.2, 76.7), run(37.2, 77.5), run(27.5, 64.0),
                run(36.8, 74.0)]
    result = {"target": "wordpress", "canonical": True, "config": {"load": "wrk", "concurrency": 4, "workers": 4,
                                                                   "runs": 5, "duration": 10}}
    keep_runs(result, measured, BenchOptions(host_tolerance=10))
    assert [r["run"] for r in result["runs"]] == [1, 2, 3, 4, 6]
    assert [(r["run"], r["rps"]) for r in result["set_aside"]] == [(5, 27.5)]
    s = result["summary"]
    assert (s["runs"], s["runs_measured"], s["runs_set_aside"], s["host_unsteady"]) == (5, 6, 1, False)
    assert s["rps_mean"] == pytest.approx((35.5 + 37.4 + 37.2 + 37.2 + 36.8) / 5)
    assert s["rps_cv_all_runs"] > 2 * s["rps_cv"]
    text = format_bench(result)
    assert "\n   6      36.8" in text
    assert "set aside: run 5 (27.5 req/s): host capacity -13.0% off the runs' median" in text
    assert "measured 6 runs; CV over all of them" in text and "did not hold still" not in text
    keep_runs(result, measured, BenchOptions(rerun_disturbed=False))
    assert len(result["runs"]) == 6 and result["set_aside"] == [] and result["summary"]["host_tolerance"] is None
    assert "set aside" not in format_bench(result)


def test_keeping_every_run_is_not_canonical_and_says_so():
    from lockdown.reports.bench_table import canonical_text
    opts = BenchOptions(rerun_disturbed=False)
    assert opts.non_default() == ["rerun_disturbed"] and BenchOptions().tolerance() == 0.05
    assert canonical_text({"canonical": False, "non_default_options": opts.non_default(),
                           "config": {"rerun_disturbed": False}}) == "no: every run kept (--keep-disturbed)"


def test_the_default_tolerance_sets_aside_what_ten_percent_let_through():
    # reading 4 of 2026-11-22 (23:24): capacities 73.7 .. 87.9 around 80.7, RPS 36.8 .. 45.7 (CV 8.7%)
    caps = [73.7, 77.5, 87.9, 80.7, 82.9]
    assert select(caps, 5, 0.10).in_band == 5
    s = select(caps, 5)
    assert s.in_band == 3 and needs_more(caps, 5)


def test_three_runs_name_the_host_but_fit_nothing():
    """Three runs leave one degree of freedom for the capacity fit: the table names the host's
    spread and says why nothing is taken out, instead of a noise elasticity."""
    result = {"target": "minicms", "canonical": False, "non_default_options": ["runs"],
              "config": {"load": "wrk", "concurrency": 4, "workers": 4, "runs": 3, "duration": 10}}
    keep_runs(result, [run(35.5, 73.2), run(37.4, 72.5), run(37.2, 76.7)], BenchOptions(runs=3))
    assert result["summary"]["rps_cv_speed_adjusted"] is None and result["summary"]["speed_elasticity"] is None
    assert format_bench(result).splitlines()[-1] == (
        "host speed varied 3.0% (CV) over the runs, steal took up to 0.0% of the CPU; "
        "3 runs are too few to take it out of the RPS CV (4 needed)")


def test_a_run_exactly_at_the_tolerance_is_in_band():
    from lockdown.harness.steady_runs import Selection
    s = select([100.0, 100.0, 100.0, 125.0, 75.0], 3, 0.25)          # 25% off either way: in band
    assert s == Selection([0, 1, 2], {3: "more runs in band than the 3 asked for",
                                      4: "more runs in band than the 3 asked for"}, 100.0, 5, False)
    assert not needs_more([100.0, 125.0, 75.0], 3, 0.25) and needs_more([100.0, 125.1, 75.0], 3, 0.25)


def test_keeping_every_run_sets_nothing_aside_and_calls_the_host_steady():
    from lockdown.harness.steady_runs import Selection
    assert select([80.0, 100.0, 81.0], 3, tolerance=None) == Selection([0, 1, 2], {}, None, 0, False)
    assert select([80.0, None], 3) == Selection([0, 1], {}, None, 0, False)
    assert select([], 3) == Selection([], {}, None, 0, False) and not needs_more([], 3)
    result = {"config": {}}
    keep_runs(result, [run(35.5, 73.2), run(27.5, 64.0), run(37.2, 76.7)], BenchOptions(runs=3, rerun_disturbed=False))
    assert (result["summary"]["host_unsteady"], result["summary"]["runs_set_aside"], result["set_aside"]) == (
        False, 0, [])
    from lockdown.reports.bench_table import set_aside_lines
    assert set_aside_lines(result) == []


def test_a_host_that_never_held_still_says_so_under_the_runs_set_aside():
    from lockdown.reports.bench_table import set_aside_lines
    # capacities 60, 75, 80, 92, 100 around 80: only 80 within 5%; the three closest are kept
    measured = [run(30.0, 60.0), run(31.0, 75.0), run(32.0, 80.0), run(33.0, 92.0), run(34.0, 100.0)]
    result = {"config": {}}
    keep_runs(result, measured, BenchOptions(runs=3))
    assert [r["run"] for r in result["runs"]] == [2, 3, 4] and result["summary"]["host_unsteady"]
    assert set_aside_lines(result) == [
        "set aside: run 1 (30.0 req/s): host capacity -25.0% off the runs' median",
        "set aside: run 5 (34.0 req/s): host capacity +25.0% off the runs' median",
        "measured 5 runs; CV over all of them 4.94% (--keep-disturbed keeps every run)",
        "the host did not hold still: fewer than 3 runs were within 5% of the median host capacity; "
        "kept the ones closest to it"]
    no_cv = {"runs": [], "summary": {"runs_measured": 2, "rps_cv_all_runs": None},
             "set_aside": [{"run": 2, "rps": 12.34, "set_aside": "why"}]}
    assert set_aside_lines(no_cv) == ["set aside: run 2 (12.3 req/s): why",
                                      "measured 2 runs; CV over all of them -% (--keep-disturbed keeps every run)"]


def test_a_fractional_tolerance_is_printed_as_given():
    from lockdown.reports.bench_table import set_aside_lines
    result = {"runs": [{}] * 5,
              "set_aside": [{"run": 6, "rps": 30.0, "set_aside": "host capacity -9.0% off the runs' median"}],
              "summary": {"runs_measured": 10, "rps_cv_all_runs": 0.05, "host_unsteady": True, "host_tolerance": 0.025}}
    assert set_aside_lines(result)[-1] == ("the host did not hold still: fewer than 5 runs were within 2.5% of the "
                                           "median host capacity; kept the ones closest to it")
