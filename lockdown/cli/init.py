"""`lockdown init -o TARGET_DIR --app DIR (--db DSN | --db-dump FILE | --no-db)`: an existing site made
into a target. The stage is lockdown/intake/init.py's; this parses, calls and prints."""
from __future__ import annotations

import shlex
from pathlib import Path

import click

from ..intake.detect import FRAMEWORKS, detect
from ..intake.dump import DUMP_FORM
from ..intake.init import InitOptions, check, init
from ..progress import for_command
from .main import deadline, main
from .stack_options import _check_dsn


@main.command("init")
@click.option("-o", "--output", "out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="The target directory to write (new or empty).")
@click.option("--app", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Your site's PHP code (read only: each run copies it).")
@click.option("--db", "dsn", metavar="DSN", default=None, callback=_check_dsn,
              help=f"Your site's database, dumped once with mariadb-dump --single-transaction (read-only): "
                   f"{DUMP_FORM}. Without :PASSWORD, $LOCKDOWN_MYSQL_PASSWORD's; it is never written anywhere.")
@click.option("--db-dump", "dump_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Or a dump of it you made (plain SQL of one database), copied as it is.")
@click.option("--no-db", "no_db", is_flag=True, default=False,
              help="Or: the app has no database (files only, as DokuWiki or a flat-file CMS).")
@click.option("--access-log", "access_logs", multiple=True, type=click.Path(dir_okay=False, path_type=Path),
              help="An nginx or Apache access log in the combined format (repeatable): the URL list and its "
                   "weights come from its GET requests answered 2xx, static files left out.")
@click.option("--framework", type=click.Choice(FRAMEWORKS), default=None,
              help="The framework, when detection (from the app's files) gets it wrong.")
@click.option("--config", "config", metavar="FILE", default=None,
              help="A generic app's configuration file holding its database settings, relative to --app.")
@click.option("--timeout", type=click.FloatRange(1), default=None, metavar="SECONDS",
              help="Stop everything and fail if the whole command takes longer.")
def init_cmd(out, app, dsn, dump_file, no_db, access_logs, framework, config, timeout):
    """Make a target of an existing site: its framework detected from its files, its database
    dumped once (read-only, credentials never written), a configure step pointing its own
    configuration at lockdown's copy, the URL list from its access logs (or its home page's
    links), a sanity text from its home page. Then: lockdown run TARGET_DIR -o REPORT_DIR."""
    options = InitOptions(app=app, out=out, dsn=dsn, dump_file=dump_file, no_db=no_db, access_logs=list(access_logs),
                          framework=framework, config=config)
    check(options)                        # bad input: exit 2, before anything is written
    detect(app.resolve(), framework)
    with deadline(timeout):               # a failure while working: exit 1
        result = init(options, say=for_command("init", False))
    t = result.target
    click.echo(f"\ntarget written: {t} ({result.detected.framework}, docroot {result.detected.docroot})")
    for path, weight, count in result.urls:
        click.echo(f"  {weight:>5}  {path}" + (f"  ({count} in the logs)" if count is not None else ""))
    if not result.configured:
        click.echo(f"configure: your app's database settings were not found: fill in {t / 'configure.php'} "
                   f"or run init again with --config FILE")
        return
    click.echo(f"sanity: the home page holds {result.sanity!r}")
    click.echo(f"next: lockdown run {shlex.quote(str(t))} -o {shlex.quote(str(t) + '-report')}   "
               f"(or lockdown serve {shlex.quote(str(t))} to look at it)")
