"""The human table of a bench result (the numbers come computed in the result)."""
from __future__ import annotations

from ..options import BenchOptions
from ..rundir.model import BenchConfig, BenchResult
from . import numbers


_NOT_RECORDED = object()


def _fmt(v, spec=".1f", none="-"):
    return none if v is None else format(v, spec)


def as_result(result: BenchResult | dict) -> BenchResult:
    """A bench result's model: bench.json read through rundir/store.py open_run is one; the
    harness's result as `lockdown bench` and `lockdown run` print it (harness/bench.py
    run_bench's dict, or a part of one before its runs are kept) is checked into one here."""
    if isinstance(result, BenchResult):
        return result
    return BenchResult.from_json({"runs": [], **result})


def canonical_text(result: BenchResult | dict) -> str:
    """"yes", or what differs from `lockdown bench`'s defaults with both values ("no: runs 3
    (canonical 5)"): `lockdown run` measures 3 runs by default, so its benchmark is not
    canonical though the user changed nothing, and the values say which way it differs."""
    result = as_result(result)
    if result.canonical:
        return "yes"
    default, cfg = BenchOptions(), result.config or BenchConfig()
    parts = []
    for key in result.non_default_options:
        value = cfg.option(key, _NOT_RECORDED)
        if key == "php_ini":
            parts.append("php.ini overrides")
        elif key == "mysql":
            parts.append("an existing MariaDB server (--mysql)")
        elif key == "on_top_of":
            parts.append(f"{result.on_top_of} applied to the copies served")
        elif key == "rerun_disturbed":
            parts.append("every run kept (--keep-disturbed)")
        elif key == "host_tolerance":
            parts.append(f"host tolerance {value or 0:g}% (canonical {default.host_tolerance:g}%)")
        elif value is not _NOT_RECORDED and hasattr(default, key):
            parts.append(f"{key.replace('_', ' ')} {value:g} (canonical {getattr(default, key):g})"
                         if isinstance(value, (int, float)) else f"{key} {value} (canonical {getattr(default, key)})")
        else:
            parts.append(key.replace("_", " "))
    return "no: " + (", ".join(parts) or "non-default options")


def format_bench(result: BenchResult | dict) -> str:
    """The table of a bench result (bench.json, or harness/bench.py run_bench's dict)."""
    result = as_result(result)
    cfg, s = result.config, result.summary
    lines = [
        f"target {result.target}  load {cfg.load}  concurrency {cfg.concurrency}  "
        f"workers {cfg.workers}  {cfg.runs} x {cfg.duration:g} s  "
        f"canonical {canonical_text(result)}",
    ]
    if cfg.php_ini:
        lines.append("php.ini overrides: " + ", ".join(f"{k}={v}" for k, v in cfg.php_ini.items()))
    header = f"{'run':>4} {'req/s':>9} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8} " \
             f"{'errors':>6} {'cpu ms/req':>10} {'cpu%':>5} {'steal%':>6}  statuses"
    lines += [header, "-" * len(header)]
    for i, r in enumerate(result.runs, 1):
        i = i if r.run is None else r.run       # numbered as measured: runs set aside leave gaps
        lat, host = r.latency_ms, r.host_cpu
        statuses = " ".join(f"{k}:{v}" for k, v in r.status_counts.items())
        lines.append(f"{i:>4} {r.rps:>9.1f} {lat.p50:>8.1f} {lat.p90:>8.1f} "
                     f"{lat.p99:>8.1f} {lat.max:>8.1f} {r.errors:>6} "
                     f"{_fmt(r.server_cpu.ms_per_request, '.2f'):>10} "
                     f"{_fmt(host.busy_pct):>5} {_fmt(host.steal_pct):>6}  {statuses}")
    lo, hi = s.ci95
    cv = None if s.rps_cv is None else 100 * s.rps_cv
    lines.append("-" * len(header))
    runs = len(result.runs) if s.runs is None else s.runs
    lines.append(f"mean {numbers.rps(s.rps_mean)} req/s, stddev {numbers.sd(s.rps_stddev)}, "
                 f"CV {_fmt(cv, '.2f')}%, {numbers.rps_ci_text(lo, hi, runs)}")
    lines += set_aside_lines(result)
    coarse = numbers.latency_note(result.runs)
    if coarse:
        lines.append(f"latencies: {coarse}")
    return "\n".join(lines + _host_lines(result))


def _host_lines(result: BenchResult) -> list[str]:
    """The servers' CPU per request, and how much of the RPS spread the host's speed explains."""
    s, lines = result.summary, []
    if s.server_cpu_ms_mean is not None:
        split = ", ".join(f"{name} {_fmt(v, '.2f')}" for name, v in (s.server_cpu_by_server_ms or {}).items())
        lines.append(f"servers' CPU per request (stolen time not counted): "
                     f"mean {_fmt(s.server_cpu_ms_mean, '.2f')} ms" + (f" ({split})" if split else "")
                     + f", CV {_fmt(None if s.server_cpu_cv is None else 100 * s.server_cpu_cv, '.2f')}%")
    if s.host_speed_cv is not None:
        steal = s.host_steal_pct_max
        stolen = "" if steal is None else f", steal took up to {_fmt(steal, '.1f')}% of the CPU"
        host = f"host speed varied {_fmt(100 * s.host_speed_cv, '.1f')}% (CV) over the runs{stolen}; "
        if numbers.speed_explains_nothing(s.speed_elasticity):
            lines.append(host + f"it explains none of the RPS spread here (fitted elasticity "
                                f"{_fmt(s.speed_elasticity, '.2f')}: a faster host served no more), "
                                "so the RPS CV stands as measured")
        elif s.rps_cv_speed_adjusted is not None:
            lines.append(host + f"RPS CV with {'both' if stolen else 'it'} taken out: "
                                f"{_fmt(100 * s.rps_cv_speed_adjusted, '.2f')}% "
                                f"(elasticity {_fmt(s.speed_elasticity, '.2f')}; docs/bench.md)")
        elif len(result.runs) < 4:
            lines.append(host + f"{len(result.runs)} runs are too few to take it out of the RPS CV (4 needed)")
    return lines


def set_aside_lines(result: BenchResult | dict) -> list[str]:
    """The runs the host disturbed, measured again (harness/steady_runs.py), with the CV over
    every run for comparison; nothing when none was set aside."""
    result = as_result(result)
    s, aside = result.summary, result.set_aside
    if not aside:
        return []
    cv_all = s.rps_cv_all_runs
    out = [f"set aside: run {r.run} ({numbers.rps(r.rps)} req/s): {r.set_aside}" for r in aside]
    out.append(f"measured {s.runs_measured} runs; CV over all of them "
               f"{_fmt(None if cv_all is None else 100 * cv_all, '.2f')}% (--keep-disturbed keeps every run)")
    if s.host_unsteady:
        out.append(f"the host did not hold still: fewer than {len(result.runs)} runs were within "
                   f"{100 * (s.host_tolerance or 0):g}% of the median host capacity; "
                   "kept the ones closest to it")
    return out
