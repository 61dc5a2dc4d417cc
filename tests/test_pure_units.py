"""Unit tests of pure modules' own functions, on small synthetic inputs with exact expected
values: lockdown/options.py, analyzers/sql_caller.py, analyzers/sql_text.py,
analyzers/round_trip.py, remediation/propose.py and reports/reproduce.py. No server starts."""
from __future__ import annotations

from lockdown import options
from lockdown.harness import ab_bench, bench, steady_runs


# ------------------------------------------------------------------------------ options.py

def test_options_defaults_are_the_harness_own():
    """The defaults moved below harness and reports are the ones the harness measures with."""
    assert options.HOST_TOLERANCE == steady_runs.TOLERANCE
    assert options.BenchOptions().host_tolerance == 100 * steady_runs.TOLERANCE == 5.0
    assert bench.BenchOptions is options.BenchOptions
    assert (ab_bench.DEFAULT_RUNS, ab_bench.DEFAULT_MAX_RUNS) == (options.DEFAULT_RUNS, options.DEFAULT_MAX_RUNS) == (5, 15)
    assert ab_bench.PairPlan(None).max_runs == 15
    assert options.VERIFY_DEFAULTS == {"runs": 5, "duration": 10, "load": "wrk", "warmup_duration": 5}
    assert options.RUN_DEFAULTS == {"runs": 3, "duration": 10, "warmup_duration": 5, "requests": 120,
                                    "xhprof_every": 10}


def test_bench_options_non_default_and_tolerance():
    o = options.BenchOptions()
    assert o.non_default() == [] and o.tolerance() == 0.05
    o = options.BenchOptions(runs=3, php_ini={"opcache.enable": "0"}, port=8080, hooks={"after-warmup": "true"},
                             rerun_disturbed=False)
    # the port and the hooks do not make a benchmark non-canonical
    assert o.non_default() == ["runs", "php_ini", "rerun_disturbed"] and o.tolerance() is None
    assert options.BenchOptions(host_tolerance=10).tolerance() == 0.1
