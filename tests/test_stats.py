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
    same = compare_speed_adjusted(before, before_s, [500 * (s / 60) ** 1.7 * e for s, e in zip(after_s, noise_a)], after_s)
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


def test_every_tabulated_t_quantile_is_the_975th_percentile():
    """Each _T95 entry against Student's t itself: Newton's method on the CDF (Simpson's rule
    over the density), to the table's three decimals."""
    from lockdown.analyzers.stats import _T95

    def quantile(df, q, n=4000):
        c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
        pdf = lambda t: c * (1 + t * t / df) ** (-(df + 1) / 2)    # noqa: E731
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
