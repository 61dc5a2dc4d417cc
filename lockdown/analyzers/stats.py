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

    `{"pairs", "ratio", "change_pct", "ci95_pct": [lo, hi], "significant", "method"}`;
    `significant` means the interval excludes zero."""
    pairs = [(a, b) for a, b in zip(before, after) if a > 0 and b > 0]
    n = len(pairs)
    out = {"pairs": n, "ratio": None, "change_pct": None, "ci95_pct": [None, None],
           "significant": False,
           "method": "paired: geometric mean of per-pair RPS ratios after/before, 95% CI from "
                     "Student's t on their logarithms"}
    if n == 0:
        return out
    logs = [math.log(b / a) for a, b in pairs]
    mean = statistics.fmean(logs)
    out["ratio"] = math.exp(mean)
    out["change_pct"] = 100.0 * (math.exp(mean) - 1.0)
    if n >= 2:
        half = t95(n - 1) * statistics.stdev(logs) / math.sqrt(n)
        lo, hi = 100.0 * (math.exp(mean - half) - 1.0), 100.0 * (math.exp(mean + half) - 1.0)
        out["ci95_pct"] = [lo, hi]
        out["significant"] = lo > 0 or hi < 0
    return out
