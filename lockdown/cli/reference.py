"""docs/commands.md, the command reference, made from the commands' own --help so that it
cannot drift from them: `python3 -m lockdown.cli.reference > docs/commands.md`. A test
(tests/test_cli.py) fails when the committed file is not what this prints."""
from __future__ import annotations

import click

from .main import main

WIDTH = 100            # fixed, so the text does not depend on the terminal it was made in

INTRO = """# Command reference

Every command's `--help`, made by `python3 -m lockdown.cli.reference > docs/commands.md`
(a test fails when this file is out of date). The other documents explain what the numbers
mean: bench.md, profile.md, analysis.md, detectors.md, verify.md, reports.md.

Environment variables:

| variable | what it sets |
|---|---|
| `LOCKDOWN_HOME` | where runs, prepared targets and records of running commands live (default `$XDG_DATA_HOME/lockdown`, else `~/.local/share/lockdown`, and `/var/lib/lockdown` for root: as root the servers run as the account `lockdown-run`, which must pass through every directory above a run) |
| `LOCKDOWN_MYSQL_PASSWORD` | the password of a `--mysql` DSN written without one (`mysql://user@host/`): a command line is visible to every account in `ps`, the environment is not |
| `LOCKDOWN_SERVERS_DIR` | where the records of users' MariaDB servers (`--mysql`) live: settings a capture changed, databases a command loaded; one place for every `LOCKDOWN_HOME` of the account, so the next command puts back what a killed one left (default `$XDG_STATE_HOME/lockdown/servers`, else `~/.local/state/lockdown/servers`, and `/var/lib/lockdown/servers` for root) |
| `LOCKDOWN_PREPARED_DIR` | where prepared targets are kept (default `$LOCKDOWN_HOME/prepared`) |
| `LOCKDOWN_TARGETS` | the directory the built-in target names are looked up in (default `fixtures/apps` of this checkout) |
| `LOCKDOWN_<TOOL>` | the program run for a tool, by name or path: `LOCKDOWN_PHP`, `LOCKDOWN_PHP_FPM`, `LOCKDOWN_MARIADBD`, `LOCKDOWN_NGINX`, `LOCKDOWN_PERF`, `LOCKDOWN_WRK`, ... (lockdown/harness/toolchain.py) |
| `LOCKDOWN_PHP_EXTENSION_DIR` | PHP's extension directory for php-fpm (how `doctor`'s missing-extension check is tested) |
"""


def _help(command: click.Command, path: list[str]) -> str:
    info_name = " ".join(path)
    with click.Context(command, info_name=info_name, terminal_width=WIDTH, max_content_width=WIDTH,
                       help_option_names=["-h", "--help"]) as ctx:
        return command.get_help(ctx)


def reference() -> str:
    parts = [INTRO, "## lockdown\n", "```text", _help(main, ["lockdown"]), "```\n"]
    for name in sorted(main.list_commands(None)):
        parts += [f"## lockdown {name}\n", "```text", _help(main.get_command(None, name), ["lockdown", name]),
                  "```\n"]
    return "\n".join(parts)


if __name__ == "__main__":
    click.echo(reference(), nl=False)
