"""How many pairs a verification takes: the power arithmetic (analyzers/stats.py), the plan
made from the pilot's noise (harness/ab_bench.planned_runs), its words in the outputs
(reports/numbers.resolution_clause), and what the options refuse. The plan carried out on the
real stack: tests/test_user_patch.py (compare --resolve)."""
import math
import random

import pytest

from lockdown.analyzers.stats import (Z_POWER, compare_paired, pairs_needed, power, resolvable_pct, t95)
from lockdown.harness.ab_bench import PairPlan, planned_runs, resolution
from lockdown.reports.numbers import resolution_clause


def paired_df(m):
    return m - 1


def test_power_is_eighty_percent_at_the_resolvable_change_and_falls_to_the_error_rate_at_zero():
    se, df = 0.03, 9
    smallest = resolvable_pct(se, df)
    assert smallest == pytest.approx(100 * (math.exp((t95(df) + Z_POWER) * se) - 1))
    assert power(math.log1p(smallest / 100), se, df) == pytest.approx(0.80, abs=1e-3)
    assert power(-math.log1p(smallest / 100), se, df) == pytest.approx(0.80, abs=1e-3)   # either way
    assert power(0.0, se, df) < 0.025                      # one tail of the 5% two-sided error
    assert power(0.01, se, df) < power(0.05, se, df) < power(0.2, se, df) <= 1.0
    assert power(0.01, 0.0, df) == 1.0 and power(0.0, 0.0, df) == 0.0
    assert resolvable_pct(se, 4) > resolvable_pct(se, 40)  # fewer degrees of freedom, a wider t


def test_pairs_needed_is_the_fewest_that_resolve_the_change():
    effect, se, pilot = math.log(1.05), 0.04, 5
    m = pairs_needed(effect, se, pilot, paired_df)

    def resolves(k):
        return (t95(paired_df(k)) + Z_POWER) * se * math.sqrt(pilot / k) <= effect
    assert m is not None and m > pilot and resolves(m) and not resolves(m - 1)
    assert pairs_needed(-effect, se, pilot, paired_df) == m                # a slowdown alike
    assert pairs_needed(math.log(3.0), se, pilot, paired_df) == pilot      # a large change: the pilot will do
    assert pairs_needed(0.0, se, pilot, paired_df) is None                 # nothing predicted
    assert pairs_needed(0.001, 0.2, pilot, paired_df, limit=50) is None    # lost in the noise


def test_the_planned_pairs_have_the_power_they_promise():
    """Simulated pairs of log ratios with a real change and known noise: at the planned number
    of pairs, the paired 95% CI excludes zero in about 80% of measurements."""
    rng = random.Random(7)
    sd, change = 0.08, math.log(1.06)
    m = pairs_needed(change, sd / math.sqrt(5), 5, paired_df)
    hits = 0
    for _ in range(3000):
        before = [100.0] * m
        after = [100.0 * math.exp(rng.gauss(change, sd)) for _ in range(m)]
        hits += compare_paired(before, after)["significant"]
    assert 0.77 <= hits / 3000 <= 0.88, (m, hits)


def test_the_pilot_keeps_the_five_percent_error_when_nothing_changed():
    """The internal pilot plans from the noise only: with no real change, the final interval
    excludes zero in about 5% of verifications, not more (going on until it is significant
    would give far more)."""
    rng = random.Random(11)
    wrong, runs_taken = 0, set()
    for _ in range(4000):
        sd = rng.choice((0.02, 0.05, 0.1))
        logs = [rng.gauss(0.0, sd) for _ in range(15)]
        pilot = compare_paired([100.0] * 5, [100.0 * math.exp(x) for x in logs[:5]])
        total = planned_runs(PairPlan(5.0, 15), pilot, 5)["runs"]
        runs_taken.add(total)
        final = compare_paired([100.0] * total, [100.0 * math.exp(x) for x in logs[:total]])
        wrong += final["significant"]
    assert len(runs_taken) > 3                         # the plan did vary with the noise
    assert 0.035 <= wrong / 4000 <= 0.065, wrong


def test_planned_runs_from_the_pilot():
    pilot = compare_paired([100.0] * 5, [103.0, 99.0, 106.0, 101.0, 104.0])
    small = planned_runs(PairPlan(2.0, 15), pilot, 5)
    assert small["pilot_runs"] == 5 and small["planned_change_pct"] == 2.0
    assert small["runs_needed"] == pairs_needed(math.log(1.02), pilot["se_log"], 5, paired_df) > 15
    assert small["runs"] == 15 and small["max_runs"] == 15
    middle = planned_runs(PairPlan(3.0, 15), pilot, 5)
    assert 5 < middle["runs"] == middle["runs_needed"] < 15
    assert planned_runs(PairPlan(100.0, 15), pilot, 5)["runs"] == 5         # resolved by the pilot
    assert planned_runs(PairPlan(None, 15), pilot, 5)["runs"] == 5          # nothing predicted
    assert planned_runs(PairPlan(2.0, 5), pilot, 5)["runs"] == 5            # --max-runs = --runs
    assert planned_runs(PairPlan(2.0, 15), compare_paired([1.0], [1.0]), 5)["runs"] == 5   # no noise measured
    # the speed-adjusted estimate has two runs a pair and three coefficients
    adjusted = {**pilot, "elasticity": 1.0, "df": 7}
    assert planned_runs(PairPlan(5.0, 99), adjusted, 5)["runs_needed"] == pairs_needed(
        math.log(1.05), pilot["se_log"], 5, lambda m: 2 * m - 3)


def test_resolution_says_why_an_interval_includes_zero():
    c = {"change_pct": 1.2, "significant": False, "se_log": 0.05, "df": 7}
    c.update(resolution(c, 3.9))
    bench = {"change": c, "plan": {"pilot_runs": 5, "runs": 15, "runs_needed": 79, "planned_change_pct": 3.9,
                                   "named": "the predicted"}}
    text = resolution_clause(bench)
    assert "the first 5 pairs were a pilot, too noisy to resolve the predicted +3.9%" in text
    assert "that needed 79 pairs, and --max-runs allowed 15" in text
    assert f"resolve changes of \u00b1{c['resolvable_pct']:.1f}% or more" in text
    assert f"chance of resolving the predicted +3.9% was {100 * c['power']:.0f}%" in text
    done = {"change": {**c, "significant": True}, "plan": {**bench["plan"], "runs": 12, "runs_needed": 12}}
    assert resolution_clause(done) == ("the first 5 pairs were a pilot, too noisy to resolve the predicted "
                                       "+3.9% with 80% power: that needed 12 pairs")
    assert resolution_clause({"change": {**c, "significant": True}}) is None
    assert resolution_clause({"change": {"significant": False}}) is None      # verify.json from before
    assert resolution_clause(None) is None and resolution({"se_log": None, "df": 4}) == {}


def test_bad_plans_get_one_line(lockdown):
    for args, words in ((("--resolve", "0"), "--resolve 0: give the change in percent"),
                        (("--resolve", "-100"), "--resolve -100: give the change in percent"),
                        (("--runs", "9", "--max-runs", "8"), "--max-runs 8 is fewer than --runs 9"),
                        (("--max-runs", "4"), "--max-runs")):
        r = lockdown("compare", "hello", "--with", "opcache.enable=0", *args)
        assert r.returncode == 2 and words in r.stderr and r.stderr.strip().count("\n") <= 1, r.stderr
