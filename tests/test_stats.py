"""Summary statistics of repeated runs."""
import math

import pytest

from lockdown.analyzers.stats import summarize, t95


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
