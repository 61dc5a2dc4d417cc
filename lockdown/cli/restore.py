"""`lockdown restore`: put back MariaDB settings a killed capture left changed."""
from __future__ import annotations

import click

from ..collectors.server_settings import restore_pending
from .main import main


@main.command("restore")
def restore_cmd():
    """Restore server settings (slow log, long_query_time, ...) changed by a capture whose
    lockdown was killed. Every lockdown command does this at start; this does only that."""
    messages = restore_pending()
    for m in messages:
        click.echo(m)
    if not messages:
        click.echo("nothing to restore")
    if any("could not" in m for m in messages):
        raise SystemExit(1)
