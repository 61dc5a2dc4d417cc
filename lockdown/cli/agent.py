"""`lockdown agent`: the fleet agent's pool lines, and its switch (docs/fleet.md)."""
from __future__ import annotations

import os
from pathlib import Path

import click

from ..fleet import agent
from ..fleet.collector import DEFAULT_STREAM, PASSWORD_ENV
from .main import main


@main.group("agent")
def agent_group():
    """The production agent: an auto_prepend_file sending each request's record and Excimer
    stacks to a Redis stream (docs/fleet.md). lockdown never edits a system file: `snippet`
    prints the lines to add."""


@agent_group.command("snippet")
@click.option("--redis", "redis_at", default="tcp://127.0.0.1:6379", show_default=True,
              help="Where the agent sends: tcp://HOST:PORT or unix:///PATH.")
@click.option("--stream", default=DEFAULT_STREAM, show_default=True, help="The Redis stream (one per fleet or pool).")
@click.option("--pool", default=None, help="The pool's name in the records (default: the stream's).")
@click.option("--state", type=click.Path(path_type=Path), default=None,
              help="A directory the workers can write: the off switch and the count of records lost.")
@click.option("--period", type=click.FloatRange(min=0.001), default=0.05, show_default=True,
              help="Excimer's sampling period in seconds.")
@click.option("--maxlen", type=click.IntRange(min=1000), default=1_000_000, show_default=True,
              help="Approximate length the stream is trimmed to (XADD MAXLEN ~).")
@click.option("--timeout", type=click.FloatRange(min=0.001, max=5), default=0.05, show_default=True,
              help="Connect and read timeout in seconds; after the response, never before.")
@click.option("--agent", "agent_path", type=click.Path(path_type=Path), default=None,
              help="Where you copied agent.php (default: the file in lockdown's package, which an "
                   "upgrade of lockdown replaces).")
@click.option("--ini", "form", flag_value="ini", help="php.ini lines instead of a php-fpm pool's.")
@click.option("--fpm", "form", flag_value="fpm", default=True, help="php-fpm pool lines (the default).")
def snippet_cmd(redis_at, stream, pool, state, period, maxlen, timeout, agent_path, form):
    """Print the lines that load the agent. The Redis password, if any, is taken from
    $LOCKDOWN_REDIS_PASSWORD (never from the command line)."""
    env = agent.pool_env(redis_at, stream, pool, state.absolute() if state else None, period,
                         password=os.environ.get(PASSWORD_ENV) or None, maxlen=maxlen, timeout=timeout)
    click.echo(agent.snippet(env, form, agent_path.absolute() if agent_path else agent.AGENT), nl=False)


@agent_group.command("off")
@click.argument("state", type=click.Path(path_type=Path))
def off_cmd(state):
    """Turn the agent off at the next request, without a restart (STATE: its state directory)."""
    click.echo(agent.switch(state, on=False))


@agent_group.command("on")
@click.argument("state", type=click.Path(path_type=Path))
def on_cmd(state):
    """Turn the agent back on at the next request (STATE: its state directory)."""
    click.echo(agent.switch(state, on=True))
