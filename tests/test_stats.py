"""Summary statistics of repeated runs."""
import math

import pytest

from conftest import STOLEN, stolen_runs
from lockdown.harness.bench import capacities_of, speeds_of, summary_of
from lockdown.reports.bench_table import format_bench
from lockdown.analyzers.stats import (compare_paired, compare_speed_adjusted, ratios_speed_adjusted,
                                      speed_adjusted, summarize, t95)


def test_summary_of_three_runs():
    s = summarize([10.0, 12.0, 14.0])
    assert s["mean"] == 12.0
    assert s["stddev"] == pytest.approx(2.0)
    assert s["cv"] == pytest.approx(2.0 / 12.0)
    half = 4.303 * 2.0 / math.sqrt(3)
    assert s["ci95"] == pytest.approx([12.0 - half, 12.0 + half])


def test_single_run_has_no_spread():
    s = summarize([5.0])
    assert s["mean"] == 5.0 and s["stddev"] is None and s["ci95"] == [None, None]


def test_t_quantiles_fall_towards_normal():
    assert t95(4) == 2.776
    assert t95(35) == 2.021          # next tabulated df above, conservative
    assert t95(1000) == 1.960
    assert t95(9) > t95(10) > t95(30)


# -- host speed as a covariate --------------------------------------------------------------------

def test_speed_adjusted_recovers_the_elasticity_and_removes_the_host_noise():
    speeds = [64.4, 54.0, 52.1, 51.4, 57.4, 64.8, 65.2, 65.4, 62.1, 54.8]   # as measured here
    noise = [1.01, 0.99, 1.0, 1.02, 0.98, 1.0, 1.01, 0.99, 1.0, 1.0]
    rps = [800 * (s / 60) ** 1.8 * e for s, e in zip(speeds, noise)]
    raw = summarize(rps)["cv"]
    adj = speed_adjusted(rps, speeds)
    assert raw > 0.1                                   # the host swamps a 1% noise ...
    assert adj["elasticity"] == pytest.approx(1.8, abs=0.15)
    assert adj["cv"] < 0.015 and adj["runs"] == 10     # ... and is taken out
    # exactly proportional: no residual at all
    exact = speed_adjusted([10 * s ** 1.5 for s in speeds], speeds)
    assert exact["elasticity"] == pytest.approx(1.5) and exact["cv"] == pytest.approx(0, abs=1e-9)


def test_speed_adjusted_needs_a_speed_for_every_run_and_some_variation():
    assert speed_adjusted([100, 101, 99], [50, None, 51]) is None
    assert speed_adjusted([100, 101], [50, 51]) is None
    assert speed_adjusted([100, 101, 99], [50, 50, 50]) is None      # singular: speed never moved


def test_compare_speed_adjusted_finds_a_small_gain_the_host_hides():
    """A +3% fix measured while the host's speed swings by 25%: the paired ratios cannot see
    it, the covariate model can (and gets its size right)."""
    before_s = [64.0, 52.0, 60.0, 50.0, 63.0, 55.0]
    after_s = [51.0, 62.0, 53.0, 61.0, 52.0, 64.0]
    noise_b = [1.01, 0.99, 1.0, 1.005, 0.995, 1.0]
    noise_a = [0.99, 1.01, 1.0, 0.995, 1.005, 1.0]
    before = [500 * (s / 60) ** 1.7 * e for s, e in zip(before_s, noise_b)]
    after = [515 * (s / 60) ** 1.7 * e for s, e in zip(after_s, noise_a)]
    paired = compare_paired(before, after)
    assert not paired["significant"]
    c = compare_speed_adjusted(before, before_s, after, after_s)
    assert c["significant"] and c["ci95_pct"][0] > 0
    assert c["change_pct"] == pytest.approx(3.0, abs=1.0)
    assert c["elasticity"] == pytest.approx(1.7, abs=0.2) and c["runs"] == 12
    # no change: the interval straddles zero
    unchanged = [500 * (s / 60) ** 1.7 * e for s, e in zip(after_s, noise_a)]
    same = compare_speed_adjusted(before, before_s, unchanged, after_s)
    assert same["ci95_pct"][0] < 0 < same["ci95_pct"][1] and not same["significant"]
    # a run without a speed: no adjusted estimate (the caller keeps the paired one)
    assert compare_speed_adjusted(before, before_s[:-1] + [None], after, after_s) is None


def test_ratios_speed_adjusted_share_one_elasticity_across_groups():
    """Capture overhead per collector set, each pass at its own host speed: the ratio at equal
    speed is recovered for every set."""
    true = {"perf": 0.97, "all": 0.90}
    speed_pairs = [(60, 50), (50, 62), (55, 55), (64, 51), (52, 60)]
    noise = [1.005, 0.995, 1.0, 1.003, 0.997]
    groups = {name: [(r * (top / bottom) ** 1.6 * e, top, bottom)
                     for (top, bottom), e in zip(speed_pairs, noise)] for name, r in true.items()}
    fit = ratios_speed_adjusted(groups)
    assert fit["elasticity"] == pytest.approx(1.6, abs=0.1)
    for name, r in true.items():
        g = fit["groups"][name]
        assert g["ratio"] == pytest.approx(r, abs=0.01) and g["ci95"][0] < r < g["ci95"][1] and g["n"] == 5
    # the raw ratios swing with the host far more than the sets differ
    raw = [x[0] for x in groups["perf"]]
    assert max(raw) / min(raw) > 1.3
    assert ratios_speed_adjusted({"perf": [(0.9, 60, None)]}) is None


# -- steal time: the capacity the benchmark takes out -------------------------------------------

def test_capacity_is_the_speed_times_the_cpu_share_not_stolen():
    runs = stolen_runs()
    assert capacities_of(runs) == pytest.approx([s * (1 - t / 100) for _, s, t in STOLEN])
    # runs recorded before the CPU figures existed count their speed alone; no speed, no capacity
    assert capacities_of([{"rps": 1, "host_speed": {"speed": 40.0}}, {"rps": 1}]) == [40.0, None]
    # a half-idle machine (a capture at concurrency 1): steal is a share of the CPU it wanted
    half = {"rps": 1, "host_speed": {"speed": 40.0}, "host_cpu": {"busy_pct": 45.0, "steal_pct": 5.0}}
    assert capacities_of([half]) == [pytest.approx(36.0)]


def test_summary_takes_steal_out_where_the_speed_alone_cannot():
    runs = stolen_runs()
    s = summary_of(runs)
    speed_only = speed_adjusted([r["rps"] for r in runs], speeds_of(runs))
    assert s["rps_cv"] > 0.055 and speed_only["cv"] > 0.055          # the speed explains nothing
    assert s["rps_cv_speed_adjusted"] < 0.03                            # the capacity explains most
    assert s["speed_elasticity"] == pytest.approx(1.0, abs=0.2)         # RPS in proportion to it
    assert s["host_steal_pct_max"] == 17.0 and s["host_capacity_cv"] > s["host_speed_cv"]
    config = {"load": "wrk", "concurrency": 4, "workers": 4, "runs": 5, "duration": 10.0}
    line = format_bench({"target": "t", "canonical": True, "config": config, "runs": [], "summary": s})
    assert "steal took up to 17.0% of the CPU; RPS CV with both taken out: " in line



def test_a_speed_that_explains_nothing_is_not_taken_out():
    """2026-11-23 on WordPress: a faster host served no more (fitted elasticity -0.67), and the
    "CV with the speed taken out" came out above the raw one. The table and the report say the
    speed explains none of the spread instead of offering that number."""
    rps = [38.0, 34.8, 37.8, 39.3, 38.9]
    runs = [{"rps": r, "host_speed": {"speed": sp}, "host_cpu": {"busy_pct": 99.8, "steal_pct": 0.0}}
            for r, sp in zip(rps, [84.0, 88.1, 85.0, 82.9, 83.6])]
    s = summary_of(runs)
    # a slower host serving more is no physics: whatever the fit takes out is chance
    assert s["speed_elasticity"] < 0 and s["rps_cv_speed_adjusted"] is not None
    config = {"load": "wrk", "concurrency": 4, "workers": 4, "runs": 5, "duration": 10.0}
    table = format_bench({"target": "t", "canonical": True, "config": config, "runs": [], "summary": s})
    assert (f"it explains none of the RPS spread here (fitted elasticity {s['speed_elasticity']:.2f}: "
            "a faster host served no more), so the RPS CV stands as measured") in table
    assert "taken out:" not in table
    # one that does explain it keeps the adjusted CV
    assert "RPS CV with both taken out" in format_bench(
        {"target": "t", "canonical": True, "config": config, "runs": [], "summary": summary_of(stolen_runs())})


def test_the_servers_cpu_per_request_is_summed_per_server_and_tabulated():
    """Each run's server CPU (harness/server_cpu.py) in the summary: the mean, its CV, each
    server's mean; the table's column and line. A run without it leaves the summary without."""
    runs = [{"rps": 40.0 + i, "latency_ms": {"p50": 1, "p90": 2, "p99": 3, "max": 4}, "errors": 0,
             "status_counts": {"200": 400}, "run": i + 1,
             "server_cpu": {"seconds": 19.8, "ms_per_request": ms, "by_server": {"php-fpm": ms - 8, "mariadbd": 8.0}}}
            for i, ms in enumerate([48.0, 50.0, 52.0])]
    s = summary_of(runs)
    assert s["server_cpu_ms_mean"] == pytest.approx(50.0) and s["server_cpu_cv"] == pytest.approx(0.04)
    assert s["server_cpu_by_server_ms"] == {"mariadbd": 8.0, "php-fpm": 42.0}
    config = {"load": "wrk", "concurrency": 4, "workers": 4, "runs": 3, "duration": 10.0}
    table = format_bench({"target": "t", "canonical": True, "config": config, "runs": runs, "summary": s})
    assert "cpu ms/req" in table.splitlines()[1] and "     52.00 " in table.splitlines()[5]
    assert ("servers' CPU per request (stolen time not counted): mean 50.00 ms (mariadbd 8.00, php-fpm 42.00), "
            "CV 4.00%") in table
    older = summary_of([{k: v for k, v in r.items() if k != "server_cpu"} for r in runs])
    assert older["server_cpu_ms_mean"] is None and older["server_cpu_by_server_ms"] is None
    assert "servers' CPU" not in format_bench({"target": "t", "canonical": True, "config": config,
                                               "runs": runs, "summary": older})


def test_every_tabulated_t_quantile_is_the_975th_percentile():
    """Each _T95 entry against Student's t itself: Newton's method on the CDF (Simpson's rule
    over the density), to the table's three decimals."""
    from lockdown.analyzers.stats import _T95

    def quantile(df, q, n=4000):
        c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)

        def pdf(t: float) -> float:
            return c * (1 + t * t / df) ** (-(df + 1) / 2)

        for _ in range(5):
            h = q / n
            area = (pdf(0) + pdf(q) + sum((4 if i % 2 else 2) * pdf(i * h) for i in range(1, n))) * h / 3
            q -= (0.5 + area - 0.975) / pdf(q)
        return q
    assert len(_T95) == 33 and all(k in _T95 for k in range(1, 31))
    for df, q in _T95.items():
        assert t95(df) == q and abs(quantile(df, q) - q) < 0.0006, df
    # between tabulated degrees of freedom the next one above (a wider interval); none below 1
    assert t95(31) == t95(39) == _T95[40] and t95(41) == _T95[60] and t95(61) == t95(120) == _T95[120]
    assert t95(121) == 1.960 and math.isnan(t95(0)) and math.isnan(t95(-1))


def test_paired_change_interval_is_students_t_on_the_log_ratios():
    before, after = [100.0, 120.0, 90.0, 0.0, 110.0, 95.0], [104.0, 121.0, 95.0, 50.0, 113.0, 96.0]
    c = compare_paired(before, after)
    logs = [math.log(a / b) for b, a in zip(before, after) if b]      # the run of 0 RPS is no pair
    m = sum(logs) / 5
    half = 2.776 * math.sqrt(sum((x - m) ** 2 for x in logs) / 4) / math.sqrt(5)
    assert c["pairs"] == 5 and c["ratio"] == pytest.approx(math.exp(m))
    assert c["change_pct"] == pytest.approx(100 * (math.exp(m) - 1))
    assert c["ci95_pct"] == pytest.approx([100 * (math.exp(m - half) - 1), 100 * (math.exp(m + half) - 1)])
    assert 0 < c["ci95_pct"][0] < 1 and c["significant"]               # above zero, if by less than 1%
    down = compare_paired(after, before)
    assert -1 < down["ci95_pct"][1] < 0 and down["significant"]         # below zero, if by less than 1%
    assert compare_paired(before[:2], after[:2])["ci95_pct"][0] is not None       # two pairs: an interval
    _significant_only_off_zero(lambda f: compare_paired(before, [a * f for a in after]))
    one = compare_paired([100.0], [110.0])
    assert one["pairs"] == 1 and one["change_pct"] == pytest.approx(10.0)
    assert one["ci95_pct"] == [None, None] and not one["significant"]
    for nothing in (compare_paired([], []), compare_paired([0.0, 10.0], [5.0, 0.0])):
        assert nothing["pairs"] == 0 and nothing["ratio"] is None and nothing["ci95_pct"] == [None, None]
        assert not nothing["significant"]
    assert summarize([])["n"] == 0 and summarize([])["mean"] is None and summarize([7.0])["n"] == 1
    assert summarize([0.0, 0.0])["cv"] is None                          # no CV of a zero mean


def _significant_only_off_zero(change):
    """`change(f)`: the change with the after arm's RPS times f, which moves the interval by
    log f on the log scale. Moved to end 0.5% either side of zero, or to straddle it."""
    c = change(1.0)
    lo, hi = (math.log(1 + x / 100) for x in c["ci95_pct"])
    for target_lo, significant in ((0.005, True), (-0.005, False)):
        got = change(math.exp(math.log(1 + target_lo) - lo))
        assert got["ci95_pct"][0] == pytest.approx(100 * target_lo) and got["significant"] is significant
    for target_hi, significant in ((-0.005, True), (0.005, False)):
        got = change(math.exp(math.log(1 + target_hi) - hi))
        assert got["ci95_pct"][1] == pytest.approx(100 * target_hi) and got["significant"] is significant


def _fit3(rows, y):
    """Least squares with three coefficients by Cramer's rule: (beta, residual variance,
    diagonal of (X'X)^-1)."""
    def det(m):
        return (m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
                + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]))
    a = [[sum(r[i] * r[j] for r in rows) for j in range(3)] for i in range(3)]
    b = [sum(r[i] * v for r, v in zip(rows, y)) for i in range(3)]
    d = det(a)
    beta = [det([[b[i] if j == k else a[i][j] for j in range(3)] for i in range(3)]) / d for k in range(3)]
    minors = [det([[a[i][j] if (i != k and j != k) else float(i == j) for j in range(3)] for i in range(3)])
              for k in range(3)]
    sse = sum((v - sum(c * x for c, x in zip(beta, r))) ** 2 for r, v in zip(rows, y))
    return beta, sse / (len(rows) - 3), [mk / d for mk in minors]


def test_speed_adjusted_intervals_are_students_t_on_the_fitted_coefficients():
    before, before_s = [500.0, 430.0, 520.0, 470.0], [60.0, 52.0, 63.0, 55.0]
    after, after_s = [470.0, 540.0, 455.0, 560.0], [53.0, 61.0, 51.0, 64.0]
    c = compare_speed_adjusted(before, before_s, after, after_s)
    rows = [[1.0, arm, math.log(s)] for arm, ss in ((0.0, before_s), (1.0, after_s)) for s in ss]
    beta, var, diag = _fit3(rows, [math.log(r) for r in before + after])
    half = _T95_5 * math.sqrt(var * diag[1])
    assert c["runs"] == 8 and c["ratio"] == pytest.approx(math.exp(beta[1]))
    assert c["elasticity"] == pytest.approx(beta[2]) and c["change_pct"] == pytest.approx(100 * (math.exp(beta[1]) - 1))
    assert c["ci95_pct"] == pytest.approx([100 * (math.exp(beta[1] - half) - 1), 100 * (math.exp(beta[1] + half) - 1)])
    assert c["significant"] == (c["ci95_pct"][0] > 0 or c["ci95_pct"][1] < 0)
    _significant_only_off_zero(lambda f: compare_speed_adjusted(before, before_s, [a * f for a in after], after_s))
    # four runs are enough for three coefficients; one speed for all runs is not
    assert compare_speed_adjusted(before[:2], before_s[:2], after[:2], after_s[:2])["runs"] == 4
    assert compare_speed_adjusted(before, [60.0] * 4, after, [60.0] * 4) is None

    groups = {"perf": [(0.97, 60.0, 50.0), (0.93, 50.0, 62.0), (0.96, 55.0, 54.0)],
              "all": [(0.91, 64.0, 51.0), (0.86, 52.0, 60.0)]}
    fit = ratios_speed_adjusted(groups)
    rows = [[float(g == "perf"), float(g == "all"), math.log(t / b)] for g, xs in groups.items() for _, t, b in xs]
    beta, var, diag = _fit3(rows, [math.log(r) for xs in groups.values() for r, _, _ in xs])
    assert fit["elasticity"] == pytest.approx(beta[2])
    for i, name in enumerate(groups):
        half = t95(5 - 3) * math.sqrt(var * diag[i])
        g = fit["groups"][name]
        assert g["n"] == len(groups[name]) and g["ratio"] == pytest.approx(math.exp(beta[i]))
        assert g["ci95"] == pytest.approx([math.exp(beta[i] - half), math.exp(beta[i] + half)])
    # as many runs as coefficients leave nothing to estimate the spread from
    assert ratios_speed_adjusted({"perf": groups["perf"][:2]}) is None and ratios_speed_adjusted({}) is None
    # four runs for two coefficients (three would leave one degree of freedom: the fitted
    # elasticity is noise), unless one lacks a speed
    assert speed_adjusted([100, 90, 110], [50, 45, 56]) is None
    assert speed_adjusted([100, 90, 110, 95], [50, 45, 56, 48])["runs"] == 4
    assert speed_adjusted([100, 90, 110, 95], [50, 45, None, 48]) is None


_T95_5 = 2.571          # Student's t, 5 degrees of freedom (8 runs, 3 coefficients)
