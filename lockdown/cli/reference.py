"""docs/commands.md, the command reference, made from the commands' own --help so that it
cannot drift from them: `python3 -m lockdown.cli.reference > docs/commands.md`. A test
(tests/test_cli.py) fails when the committed file is not what this prints."""
from __future__ import annotations

import click

from .main import main

WIDTH = 100            # fixed, so the text does not depend on the terminal it was made in

# A table row longer than a line of code ends its lines with a backslash: in the string that
# continues the line, so the row stays one line of Markdown.
INTRO = """# Command reference

Every command's `--help`, made by `python3 -m lockdown.cli.reference > docs/commands.md`
(a test fails when this file is out of date). The other documents explain what the numbers
mean: bench.md, profile.md, analysis.md, detectors.md, verify.md, reports.md.

Environment variables:

| variable | what it sets |
|---|---|
| `LOCKDOWN_HOME` | where runs, prepared targets and records of running commands live (default \
`$XDG_DATA_HOME/lockdown`, else `~/.local/share/lockdown`, and `/var/lib/lockdown` for root: as root the servers run \
as the account `lockdown-run`, which must pass through every directory above a run) |
| `LOCKDOWN_MYSQL_PASSWORD` | the password of a `--mysql` DSN written without one (`mysql://user@host/`): a command \
line is visible to every account in `ps`, the environment is not |
| `LOCKDOWN_SERVERS_DIR` | where the records of users' MariaDB servers (`--mysql`) live: settings a capture changed, \
databases a command loaded; one place for every `LOCKDOWN_HOME` of the account, so the next command puts back what a \
killed one left (default `$XDG_STATE_HOME/lockdown/servers`, else `~/.local/state/lockdown/servers`, and \
`/var/lib/lockdown/servers` for root) |
| `LOCKDOWN_PREPARED_DIR` | where prepared targets are kept (default `$LOCKDOWN_HOME/prepared`) |
| `LOCKDOWN_TARGETS` | the directory the built-in target names are looked up in (default `fixtures/apps` of this \
checkout) |
| `LOCKDOWN_<TOOL>` | the program run for a tool, by name or path: `LOCKDOWN_PHP`, `LOCKDOWN_PHP_FPM`, \
`LOCKDOWN_MARIADBD`, `LOCKDOWN_NGINX`, `LOCKDOWN_PERF`, `LOCKDOWN_WRK`, ... (lockdown/harness/toolchain.py) |
| `LOCKDOWN_PHP_EXTENSION_DIR` | PHP's extension directory for php-fpm (how `doctor`'s missing-extension check is \
tested) |

## Exit status

Every command exits with one of four statuses (lockdown/errors.py), so that a script can tell
a typo from a failed run:

| status | meaning | e.g. |
|---|---|---|
| 0 | success | `verify`: the fix is confirmed |
| 1 | runtime failure: the command line was right, the work failed | a server or the target that does not start or \
serve (its install step, the sanity check, a hook), a run with more than 1% failed requests, requests the capture \
did not log, `--timeout` passed, a full disk (`No space left on device`); also a bug's traceback |
| 2 | usage error: what was given is wrong, found before anything starts | an unknown option or a bad value, an \
unknown target or a bad target.toml, a bundle or run directory that is missing or damaged, an `-o` or `--run-dir` \
that is taken, not empty or not writable, a `--port` in use, a `--php-ini` setting php-fpm rejects, a `--patch` that \
does not apply |
| 3 | the command worked and its check says no | `verify`: the fix is not confirmed (the finding stayed, or the RPS \
interval is not above zero); `validate`: a coverage check failed; `doctor`: a required check failed |

Interrupted: 130 (Ctrl-C), 143 (SIGTERM), 129 (SIGHUP), everything started stopped first.
Errors are one line on stderr, `lockdown: error: ...`, naming the file or option and what to
do; a failed phase adds its evidence (a log's tail) below it.

## Shell completion

click completes commands, options, choices and paths. For bash, add to `~/.bashrc`:

```sh
eval "$(_LOCKDOWN_COMPLETE=bash_source lockdown)"
```

zsh: `eval "$(_LOCKDOWN_COMPLETE=zsh_source lockdown)"` in `~/.zshrc`; fish:
`_LOCKDOWN_COMPLETE=fish_source lockdown | source` in `~/.config/fish/completions/lockdown.fish`.
Generating the script once into a file (`_LOCKDOWN_COMPLETE=bash_source lockdown >
~/.lockdown-complete.bash`, then `. ~/.lockdown-complete.bash`) saves starting lockdown in
every new shell.
"""


def _help(command: click.Command, path: list[str]) -> str:
    info_name = " ".join(path)
    with click.Context(command, info_name=info_name, terminal_width=WIDTH, max_content_width=WIDTH,
                       help_option_names=["-h", "--help"]) as ctx:
        return command.get_help(ctx)


def reference() -> str:
    parts = [INTRO, "## lockdown\n", "```text", _help(main, ["lockdown"]), "```\n"]
    for name in sorted(main.list_commands(None)):
        command = main.get_command(None, name)
        parts += [f"## lockdown {name}\n", "```text", _help(command, ["lockdown", name]), "```\n"]
        for sub in sorted(command.list_commands(None)) if isinstance(command, click.Group) else []:
            parts += [f"### lockdown {name} {sub}\n", "```text",
                      _help(command.get_command(None, sub), ["lockdown", name, sub]), "```\n"]
    return "\n".join(parts)


if __name__ == "__main__":
    click.echo(reference(), nl=False)
