"""`lockdown serve TARGET`: the target's stack kept up until Ctrl-C, to look at by hand. The
stage is lockdown/pipeline/serve.py's; this parses, calls and prints."""
from __future__ import annotations

from pathlib import Path

import click

from .. import paths
from ..harness.bench import DEFAULT_WORKERS_TEXT, BenchOptions
from ..pipeline.serve import Serving, ServeOptions, serve
from ..progress import for_command
from ..signals import Terminated
from ..targets.registry import resolve
from .bench import check_bounds, parse_ini
from .main import main, working


@main.command("serve")
@click.argument("target")
@click.option("--port", type=click.IntRange(1, 65535), default=None,
              help="nginx port on 127.0.0.1 (default: a free one).")
@click.option("--workers", "-w", type=click.IntRange(1), default=BenchOptions().workers,
              show_default=DEFAULT_WORKERS_TEXT, help="php-fpm static workers.")
@click.option("--php-ini", multiple=True, metavar="KEY=VALUE",
              help="php.ini override (repeatable), e.g. opcache.enable=0.")
@click.option("--run-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Run directory, new or empty (default: a new one under $LOCKDOWN_HOME/runs).")
def serve_cmd(target, port, workers, php_ini, run_dir):
    """Start TARGET's stack as `run` does (on copies, unprivileged, on 127.0.0.1) and keep it up
    until Ctrl-C; print its URL, a database client command, the logs and how to send a request
    through the capture by hand. Ctrl-C stops everything and exits 0."""
    check_bounds(workers=workers)
    t = resolve(target)
    options = ServeOptions(workers=workers, port=port, php_ini=parse_ini(php_ini))
    run_dir = (paths.new_run_dir(t.name, "serve") if run_dir is None
               else paths.empty_dir(run_dir, "--run-dir")).resolve()
    try:
        with working():                   # a stack that fails is a runtime failure (exit 1)
            serve(t, run_dir, options, _print_ready, say=for_command(f"serve {t.name}", False))
    except KeyboardInterrupt as e:
        if isinstance(e, Terminated):
            raise                         # SIGTERM, SIGHUP: lockdown's usual 143, 129
        click.echo(f"\nstopped: everything started was stopped; logs stay in {run_dir / 'logs'}")


def _print_ready(s: Serving) -> None:
    click.echo("")
    click.echo(f"serving {s.url}/  (Ctrl-C stops everything)")
    if s.db_client:
        click.echo(f"database: {s.db_client}")
        click.echo("          (the password is in the 0600 file --defaults-extra-file names)")
    for label, path in s.paths.items():
        click.echo(f"{label + ':':<20} {path}")
    click.echo(f"a request through the capture: {s.capture_by_hand}")
    click.echo(f"run directory: {s.run_dir}", nl=True)
