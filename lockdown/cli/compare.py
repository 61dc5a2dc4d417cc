"""`lockdown compare TARGET --with KEY=VALUE`: two engine configurations of one target (opcache
off, JIT on, pcre.jit off, ...) measured against each other in interleaved A/B runs, with the
host's capacity (speed and steal) taken out and the pages of both compared. Two separate `bench` runs minutes
apart differ by as much as the host's speed moves (docs/bench.md); interleaved pairs do not."""
from __future__ import annotations

from pathlib import Path

import click

from ..harness.bench import BenchOptions
from ..pipeline.compare import CompareOptions, measure, plan_compare, write_compare
from ..progress import for_command
from ..reports.compare_text import format_compare
from .bench import check_bounds, parse_ini
from .destinations import check_not_input, target_inputs
from .json_output import check_destination, deliver, json_option, to_stdout
from .main import deadline, main
from .stack_options import ab_options, check_max_runs, max_runs_option


@main.command("compare")
@click.argument("target")
@click.option("--with", "with_ini", multiple=True, metavar="KEY=VALUE",
              help="php.ini setting of the second configuration (repeatable), e.g. opcache.jit=tracing "
                   "with opcache.jit_buffer_size=64M (the JIT needs both).")
@click.option("--patch", "patch_files", multiple=True, metavar="FILE",
              type=click.Path(dir_okay=False, path_type=Path),
              help="A unified diff of the app's files (`git diff`, `diff -u`; paths as `patch -p1` reads "
                   "them in the app tree) applied to the second configuration's copy (repeatable: in "
                   "order). Checked against the prepared tree before anything starts.")
@click.option("--php-ini", multiple=True, metavar="KEY=VALUE",
              help="php.ini override of both configurations (repeatable).")
@click.option("--on-top-of", "on_top_of", type=click.Path(file_okay=False, path_type=Path), default=None,
              metavar="VERIFIED",
              help="Both configurations start from the fixes of a confirmed `lockdown verify` (its result "
                   "directory; a run directory means its verify/all): compare a change on the site as a "
                   "lockdown left it.")
@ab_options("configuration")
@click.option("--resolve", type=float, default=None, metavar="PCT",
              help="Plan the pairs to resolve a change of PCT percent in RPS with 80% power: the "
                   "first --runs are a pilot, and as many more as their noise says it needs follow, "
                   "up to --max-runs [default: exactly --runs].")
@max_runs_option("the --resolve change")
@click.option("--run-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Run directory, new or empty (default: a new one under $LOCKDOWN_HOME/runs).")
@click.option("--timeout", type=click.FloatRange(1), default=None, metavar="SECONDS",
              help="Stop everything and fail if the whole command takes longer.")
@json_option("the comparison (both arms' runs, the change with its CI, the pages)")
def compare_cmd(target, with_ini, patch_files, php_ini, on_top_of, runs, duration, concurrency, workers, load,
                warmup_duration, resolve, max_runs, run_dir, timeout, json_out):
    """Compare TARGET as configured (baseline) with TARGET plus the --with php.ini settings
    and/or --patch diffs of its code: RPS change with its 95% CI from interleaved pairs, and
    whether both serve the same pages."""
    if resolve is not None and not (resolve > -100 and resolve != 0):
        raise click.UsageError(f"--resolve {resolve:g}: give the change in percent, e.g. 2 or -5 (not 0, "
                               f"above -100)")
    check_max_runs(runs, max_runs)
    check_bounds(concurrency=concurrency, workers=workers, duration=duration, warmup_duration=warmup_duration)
    opts = BenchOptions(runs=runs, duration=duration, concurrency=concurrency, workers=workers,
                        load=load, warmup_duration=warmup_duration)
    both = parse_ini(php_ini)
    plan = plan_compare(target, CompareOptions(with_ini=parse_ini(with_ini, "--with"), php_ini=both,
                                               patches=list(patch_files), on_top_of=on_top_of, bench=opts,
                                               resolve=resolve, max_runs=max_runs, run_dir=run_dir))
    check_destination(json_out)
    check_not_input(json_out, target_inputs(plan.target) + [p.resolve() for p in patch_files], "--json")
    say = for_command(f"compare {plan.target.name}", to_stdout(json_out))
    with deadline(timeout):
        measured = measure(plan, say)
    outcome = write_compare(plan, measured)
    result, directory = outcome.result, outcome.directory
    deliver(json_out, result, f"{format_compare(result)}\n\nresult: {directory / 'compare.json'}; "
                              f"logs in {directory}/before, {directory}/after")

