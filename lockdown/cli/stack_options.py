"""Options every command that starts the target's stack shares (bench, profile), and the
A/B measurement options of verify and compare."""
from __future__ import annotations

from pathlib import Path

import click

from ..errors import LockdownError
from ..harness.ab_bench import DEFAULT_MAX_RUNS, DEFAULT_RUNS
from ..harness.bench import DEFAULT_WORKERS_TEXT, BenchOptions
from ..harness.loadgen import TOOLS
from ..harness.mariadb import DSN_FORM, PASSWORD_ENV, dsn_parts, redact_dsn


def _check_dsn(ctx, param, value):
    """A --mysql DSN of the wrong form is a usage error, found before anything is made."""
    if value is not None:
        try:
            dsn_parts(value)
        except LockdownError:
            # the value is not a DSN, but may hold a password all the same
            raise click.BadParameter(f"{redact_dsn(value)!r} is not a DSN: expected {DSN_FORM}") from None
    return value


def stack_options(last_hook: str, last_hook_help: str):
    """--php-ini, --port, --mysql, the three phase hooks (the last one named `last_hook`),
    --run-dir and --timeout."""
    options = [
        click.option("--php-ini", multiple=True, metavar="KEY=VALUE",
                     help="php.ini override (repeatable), e.g. opcache.enable=0."),
        click.option("--port", type=click.IntRange(1, 65535), default=None,
                     help="nginx port on 127.0.0.1 (default: a free one)."),
        click.option("--mysql", metavar="DSN", default=None, callback=_check_dsn,
                     help="Use an existing server: mysql://USER:PASSWORD@HOST[:PORT]/ "
                          "(add ?socket=PATH for a unix socket). Without :PASSWORD, the password is "
                          f"${PASSWORD_ENV}'s: a command line is visible to every local account "
                          "(ps), the environment is not. Outputs show the DSN as USER:***@."),
        click.option("--exec-before-warmup", metavar="CMD", help="Shell command run before warmup."),
        click.option("--exec-after-warmup", metavar="CMD", help="Shell command run after warmup."),
        click.option(f"--exec-{last_hook}", metavar="CMD", help=last_hook_help),
        click.option("--run-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
                     help="Run directory, new or empty (default: a new one under $LOCKDOWN_HOME/runs)."),
        click.option("--timeout", type=click.FloatRange(1), default=None, metavar="SECONDS",
                     help="Stop everything and fail if the whole command takes longer."),
    ]

    def apply(f):
        for option in reversed(options):
            f = option(f)
        return f
    return apply


def ab_options(each: str):
    """--runs (at least 5 per side), --duration, --concurrency, --workers, --load and
    --warmup-duration of an interleaved A/B measurement; `each` names a side in the help
    ("arm", "configuration")."""
    d = BenchOptions()
    options = [
        click.option("--runs", "-r", type=click.IntRange(5), default=DEFAULT_RUNS, show_default=True,
                     help=f"Measured runs per {each} (at least 5), interleaved in pairs."),
        click.option("--duration", "-d", type=click.IntRange(1), default=d.duration, show_default=True,
                     help="Seconds per measured run (whole seconds: the load generators take no fractions)."),
        click.option("--concurrency", "-c", type=click.IntRange(1), default=d.concurrency,
                     show_default=DEFAULT_WORKERS_TEXT, help="Concurrent connections of the load generator."),
        click.option("--workers", "-w", type=click.IntRange(1), default=d.workers, show_default=DEFAULT_WORKERS_TEXT,
                     help=f"php-fpm static workers of each {each}."),
        click.option("--load", type=click.Choice(TOOLS), default=d.load, show_default=True,
                     help="Load generator."),
        click.option("--warmup-duration", type=click.IntRange(0), default=d.warmup_duration, show_default=True,
                     help=f"Seconds of unmeasured load on each {each} before the runs."),
    ]

    def apply(f):
        for option in reversed(options):
            f = option(f)
        return f
    return apply


def max_runs_option(change: str):
    """--max-runs: how far the pair plan (harness/ab_bench.PairPlan) may go past --runs to
    resolve `change` ("the change the finding predicts")."""
    return click.option("--max-runs", type=click.IntRange(5), default=DEFAULT_MAX_RUNS, show_default=True,
                        help=f"The most pairs: when the first --runs are too noisy to resolve {change} "
                             f"with 80% power, take more, up to this many. Equal to --runs: exactly --runs.")


def check_max_runs(runs: int, max_runs: int) -> None:
    if max_runs < runs:
        raise click.UsageError(f"--max-runs {max_runs} is fewer than --runs {runs}: give at least as many")
