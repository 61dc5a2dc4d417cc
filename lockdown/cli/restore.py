"""`lockdown restore`: put back what a killed command left on a MariaDB server."""
from __future__ import annotations

import click

from ..collectors import server_settings
from ..errors import RUNTIME_FAILURE
from .main import main


@main.command("restore")
def restore_cmd():
    """Restore server settings (slow log, long_query_time, ...) changed by a capture whose
    lockdown was killed, and drop the lockdown_<target> database a killed command left on a
    --mysql server. Every lockdown command does this at start; this does only that."""
    earlier = list(server_settings.reported)    # done as this command started, said on stderr
    messages = server_settings.restore_pending()
    for m in messages:
        click.echo(m)
    if not messages and not earlier:
        click.echo("nothing to restore")
    if any(m.startswith("lockdown: could not") for m in messages):
        raise SystemExit(RUNTIME_FAILURE)
