"""`lockdown bench TARGET`: benchmark a target under production-like load."""
from __future__ import annotations

import click

from .. import paths
from ..errors import LockdownError
from ..harness.bench import DEFAULT_WORKERS_TEXT, BenchOptions, bound_errors, run_bench
from ..harness.loadgen import TOOLS
from ..progress import for_command
from ..reports.bench_table import format_bench
from ..reports.output import write_json_atomic
from ..targets.registry import resolve
from .destinations import check_not_input, target_inputs
from .json_output import check_destination, deliver, json_option, to_stdout
from .main import deadline, main
from .stack_options import stack_options


def parse_ini(values: tuple[str, ...], option: str = "--php-ini") -> dict:
    """KEY=VALUE settings of `option` (--php-ini, or compare's --with) as a dict."""
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise LockdownError(f"bad {option} {item!r}: expected KEY=VALUE, e.g. opcache.enable=0")
        out[key.strip()] = value.strip()
    return out


def check_bounds(**options) -> None:
    """Options beyond lockdown's sane bounds (harness/bench.py: --concurrency at most 10,000
    and what the open-file limit allows, --workers 256, a duration a day, --requests 10
    million) are a usage error: one line, exit 2, before anything starts."""
    problems = bound_errors(**options)
    if problems:
        raise click.UsageError("; ".join(problems), click.get_current_context(silent=True))


d = BenchOptions()


@main.command("bench")
@click.argument("target")
@click.option("--runs", "-r", type=click.IntRange(1), default=d.runs, show_default=True,
              help="Measured runs.")
@click.option("--duration", "-d", type=click.IntRange(1), default=d.duration, show_default=True,
              help="Seconds per measured run (whole seconds: the load generators take no fractions).")
@click.option("--concurrency", "-c", type=click.IntRange(1), default=d.concurrency, show_default=DEFAULT_WORKERS_TEXT,
              help="Concurrent connections of the load generator.")
@click.option("--workers", "-w", type=click.IntRange(1), default=d.workers, show_default=DEFAULT_WORKERS_TEXT,
              help="php-fpm static workers.")
@click.option("--load", type=click.Choice(TOOLS), default=d.load, show_default=True,
              help="Load generator.")
@click.option("--warmup-requests", type=click.IntRange(0), default=d.warmup_requests,
              show_default=True, help="Single-client warmup requests.")
@click.option("--warmup-duration", type=click.IntRange(0), default=d.warmup_duration,
              show_default=True, help="Seconds of concurrent warmup.")
@click.option("--host-tolerance", type=click.FloatRange(0.5, 50), default=d.host_tolerance, show_default=True,
              metavar="PCT", help="A run whose host capacity (the probe's speed, less steal) is more than PCT% "
                                  "off the runs' median is set aside and measured again, up to --runs extra runs; "
                                  "set-aside runs stay in the result with their reason.")
@click.option("--keep-disturbed", is_flag=True, help="Keep every measured run (no run set aside).")
@stack_options("after-benchmark", "Shell command run after the runs.")
@json_option("the result (runs, summary, configuration)")
def bench_cmd(target, runs, duration, concurrency, workers, load, warmup_requests, warmup_duration,
              host_tolerance, keep_disturbed, php_ini, port, mysql, exec_before_warmup, exec_after_warmup,
              exec_after_benchmark, run_dir, timeout, json_out):
    """Benchmark TARGET (a built-in name or a path): nginx -> php-fpm -> MariaDB under load,
    with a sanity check, warmups and repeated measured runs."""
    check_bounds(concurrency=concurrency, workers=workers, duration=duration, warmup_duration=warmup_duration)
    t = resolve(target)
    opts = BenchOptions(
        runs=runs, duration=duration, concurrency=concurrency, workers=workers, load=load,
        warmup_requests=warmup_requests, warmup_duration=warmup_duration, rerun_disturbed=not keep_disturbed,
        host_tolerance=host_tolerance,
        php_ini=parse_ini(php_ini),
        port=port, mysql=mysql,
        hooks={"before-warmup": exec_before_warmup, "after-warmup": exec_after_warmup,
               "after-benchmark": exec_after_benchmark})
    check_destination(json_out)
    check_not_input(json_out, target_inputs(t), "--json")
    # a run directory of its own: the run's copies (app/, mysql/data/) are removed at the end,
    # and an existing directory's own app/ went with them
    run_dir = (paths.new_run_dir(t.name, "bench") if run_dir is None
               else paths.empty_dir(run_dir, "--run-dir")).resolve()
    with deadline(timeout):
        result = run_bench(t, run_dir, opts, say=for_command(f"bench {t.name}", to_stdout(json_out)))
    write_json_atomic(run_dir / "bench.json", result)
    deliver(json_out, result, f"{format_bench(result)}\n"
                              f"result written to {run_dir / 'bench.json'}; logs in {run_dir / 'logs'}")
