"""Summary statistics of repeated measurements: mean, sample deviation, CV, 95% CI (Student t)."""
from __future__ import annotations

import math
import statistics

# Two-sided 95% quantiles of Student's t distribution, by degrees of freedom.
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
        9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120,
        17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064,
        25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045, 30: 2.042, 40: 2.021, 60: 2.000,
        120: 1.980}


def t95(df: int) -> float:
    if df < 1:
        return math.nan
    if df in _T95:
        return _T95[df]
    larger = [k for k in _T95 if k > df]
    return _T95[min(larger)] if larger else 1.960


def summarize(values: list[float]) -> dict:
    """`{"n", "mean", "stddev", "cv", "ci95": [lo, hi]}`; deviation and CI need two values."""
    n = len(values)
    if n == 0:
        return {"n": 0, "mean": None, "stddev": None, "cv": None, "ci95": [None, None]}
    mean = statistics.fmean(values)
    if n == 1:
        return {"n": 1, "mean": mean, "stddev": None, "cv": None, "ci95": [None, None]}
    sd = statistics.stdev(values)
    half = t95(n - 1) * sd / math.sqrt(n)
    return {"n": n, "mean": mean, "stddev": sd, "cv": sd / mean if mean else None,
            "ci95": [mean - half, mean + half]}


def compare_paired(before: list[float], after: list[float]) -> dict:
    """The change from `before` to `after` measured as interleaved pairs (run i of each arm
    back to back): the geometric mean of the per-pair ratios after/before, with a 95% CI from
    Student's t on the log ratios. Pairing cancels drift that moves both arms alike (a warming
    database, a noisy neighbour), which a comparison of the two means would count as noise.

    `{"pairs", "ratio", "change_pct", "ci95_pct": [lo, hi], "significant", "se_log", "df",
    "method"}`; `significant` means the interval excludes zero; `se_log` is the standard error
    of the log ratio, on `df` degrees of freedom (what `pairs_needed` plans with)."""
    pairs = [(a, b) for a, b in zip(before, after) if a > 0 and b > 0]
    n = len(pairs)
    out = {"pairs": n, "ratio": None, "change_pct": None, "ci95_pct": [None, None],
           "significant": False, "se_log": None, "df": n - 1,
           "method": "paired: geometric mean of per-pair RPS ratios after/before, 95% CI from "
                     "Student's t on their logarithms"}
    if n == 0:
        return out
    logs = [math.log(b / a) for a, b in pairs]
    mean = statistics.fmean(logs)
    out["ratio"] = math.exp(mean)
    out["change_pct"] = 100.0 * (math.exp(mean) - 1.0)
    if n >= 2:
        out["se_log"] = se = statistics.stdev(logs) / math.sqrt(n)
        half = t95(n - 1) * se
        lo, hi = 100.0 * (math.exp(mean - half) - 1.0), 100.0 * (math.exp(mean + half) - 1.0)
        out["ci95_pct"] = [lo, hi]
        out["significant"] = lo > 0 or hi < 0
    return out


# -- host speed as a covariate ------------------------------------------------------------------
# On a shared VM the host's CPU speed drifts by tens of percent within a minute and throughput
# follows it (harness/host_speed.py). Regressing log RPS on the log of the speed the probe saw
# during each run takes that out (analysis of covariance, as A/B tests adjust for a covariate);
# the elasticity is fitted from the same runs, as memory-bound PHP slows more than the probe.
# The benchmark passes each run's capacity as its "speed": the probe's speed times the share of
# CPU time not stolen by the hypervisor (harness/bench.capacities_of).

def _solve(a: list[list[float]], b: list[float]) -> list[float] | None:
    """Gauss-Jordan for a small square system; None when singular."""
    n = len(b)
    m = [row[:] + [v] for row, v in zip(a, b)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) < 1e-12:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                m[r] = [x - f * y for x, y in zip(m[r], m[col])]
    return [m[i][n] / m[i][i] for i in range(n)]


def _ols(rows: list[list[float]], y: list[float]) -> tuple[list[float], float, list[list[float]]] | None:
    """Least squares: (coefficients, residual variance, inverse of X'X); None if singular or
    without residual degrees of freedom."""
    p, n = len(rows[0]), len(rows)
    if n <= p:
        return None
    xtx = [[sum(r[i] * r[j] for r in rows) for j in range(p)] for i in range(p)]
    xty = [sum(r[i] * v for r, v in zip(rows, y)) for i in range(p)]
    beta = _solve(xtx, xty)
    if beta is None:
        return None
    inv = [_solve(xtx, [1.0 if i == j else 0.0 for i in range(p)]) for j in range(p)]
    sse = sum((v - sum(b * x for b, x in zip(beta, r))) ** 2 for r, v in zip(rows, y))
    return beta, sse / (n - p), inv


def speed_adjusted(rps: list[float], speeds: list[float | None]) -> dict | None:
    """The run-to-run spread of RPS once the host's speed is taken out:
    `{"cv", "elasticity", "runs"}` (cv: residual deviation of log RPS after regressing it on log
    speed, which is a CV for small values). None without a speed for every run, with fewer
    than 4 runs, or when the speed did not vary. Three runs leave one degree of freedom: the
    fitted elasticity is then noise (a 3-run `lockdown run` bench with the host 0.3% steady
    gave -11.7, and a "CV with the host taken out" above the raw one)."""
    pts = [(r, s) for r, s in zip(rps, speeds) if r and s]
    if len(pts) != len(rps) or len(pts) < 4:
        return None
    fit = _ols([[1.0, math.log(s)] for _, s in pts], [math.log(r) for r, _ in pts])
    if fit is None:
        return None
    beta, var, _ = fit
    return {"cv": math.sqrt(var), "elasticity": beta[1], "runs": len(pts)}


def compare_speed_adjusted(before: list[float], before_speed: list[float | None],
                           after: list[float], after_speed: list[float | None]) -> dict | None:
    """The change from `before` to `after` with the host's speed as a covariate: log RPS =
    a + b * after + k * log speed over all runs of both arms; the ratio is exp(b), its 95% CI
    from Student's t with n - 3 degrees of freedom. Same keys as `compare_paired`, plus
    `elasticity`. None when a run has no speed or the fit is singular."""
    runs = [(0.0, r, s) for r, s in zip(before, before_speed)] + \
           [(1.0, r, s) for r, s in zip(after, after_speed)]
    if len(runs) < 4 or not all(r and s for _, r, s in runs):
        return None
    mean_ls = statistics.fmean(math.log(s) for _, _, s in runs)
    fit = _ols([[1.0, arm, math.log(s) - mean_ls] for arm, _, s in runs],
               [math.log(r) for _, r, _ in runs])
    if fit is None:
        return None
    beta, var, inv = fit
    se = math.sqrt(var * inv[1][1])
    half = t95(len(runs) - 3) * se
    lo, hi = 100.0 * (math.exp(beta[1] - half) - 1.0), 100.0 * (math.exp(beta[1] + half) - 1.0)
    return {"runs": len(runs), "ratio": math.exp(beta[1]), "change_pct": 100.0 * (math.exp(beta[1]) - 1.0),
            "ci95_pct": [lo, hi], "significant": lo > 0 or hi < 0, "elasticity": beta[2],
            "se_log": se, "df": len(runs) - 3,
            "method": "log RPS regressed on the arm and the log of the host capacity measured "
                      "during each run (the probe's speed x the CPU share not stolen; covariate "
                      "adjustment); 95% CI from Student's t on the arm's coefficient"}


def ratios_speed_adjusted(groups: dict[str, list[tuple[float, float | None, float | None]]]) -> dict | None:
    """Ratios measured in groups (e.g. capture overhead per collector set), each as (ratio,
    host speed during the numerator's pass, host speed during the denominator's): log ratio =
    a_group + k * log(speed ratio), one elasticity k for all groups. Returns `{"elasticity",
    "groups": {name: {"ratio", "ci95": [lo, hi], "n"}}}`, each group's ratio at equal host
    speed with a 95% CI from Student's t; None when a speed is missing or the fit is singular."""
    names = list(groups)
    rows, y = [], []
    for i, name in enumerate(names):
        for ratio, top, bottom in groups[name]:
            if not (ratio and top and bottom):
                return None
            rows.append([1.0 if j == i else 0.0 for j in range(len(names))] + [math.log(top / bottom)])
            y.append(math.log(ratio))
    fit = _ols(rows, y) if rows else None
    if fit is None:
        return None
    beta, var, inv = fit
    half_t = t95(len(rows) - len(names) - 1)
    out = {}
    for i, name in enumerate(names):
        half = half_t * math.sqrt(var * inv[i][i])
        out[name] = {"ratio": math.exp(beta[i]), "ci95": [math.exp(beta[i] - half), math.exp(beta[i] + half)],
                     "n": len(groups[name])}
    return {"elasticity": beta[-1], "groups": out}


# -- how many pairs a change needs --------------------------------------------------------------
# `verify` plans its pairs as an internal pilot (Wittes & Brittain, Stat. Med. 1990): the first
# pairs measure the noise, and the number needed to resolve the change the finding predicts
# follows from that noise alone, never from the change the pilot measured. Going on only while
# the interval includes zero would look at the effect and inflate the 5% error; re-estimating
# the size from the variance keeps the final 95% CI at its level (the inflation is negligible).

Z_POWER = 0.8416       # standard normal quantile of the 80% power asked for


def _normal_cdf(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def power(effect_log: float, se_log: float, df: int) -> float:
    """The chance that a 95% CI excludes zero when the true change is `effect_log` (log ratio)
    and the estimate's standard error is `se_log` on `df` degrees of freedom (normal
    approximation of the estimate around the effect, Student's t for the interval)."""
    if se_log <= 0:
        return 1.0 if effect_log else 0.0
    return _normal_cdf(abs(effect_log) / se_log - t95(df))


def resolvable_pct(se_log: float, df: int) -> float:
    """The smallest change, in percent, that an estimate with this standard error resolves
    with 80% power (the minimum detectable effect): a smaller real change is more likely than
    not to leave an interval that includes zero."""
    return 100.0 * (math.exp((t95(df) + Z_POWER) * se_log) - 1.0)


def pairs_needed(effect_log: float, se_log: float, pairs: int, df_at, limit: int = 1000) -> int | None:
    """The fewest pairs m >= `pairs` that resolve the change `effect_log` with 80% power, the
    standard error measured over `pairs` shrinking as sqrt(pairs / m); `df_at(m)` gives the
    degrees of freedom at m pairs. None when even `limit` pairs would not (no change predicted,
    or one lost in the noise)."""
    if not effect_log:
        return None
    for m in range(max(pairs, 1), limit + 1):
        if (t95(df_at(m)) + Z_POWER) * se_log * math.sqrt(pairs / m) <= abs(effect_log):
            return m
    return None
