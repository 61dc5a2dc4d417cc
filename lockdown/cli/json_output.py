"""`--json [FILE]` of the long commands: one machine-readable document, to a file beside the
usual terminal output (as hyperfine's --export-json and pyperf's --output do), or to stdout
(`--json` alone or `--json -`), which is then the only output: no progress and no tables."""
from __future__ import annotations

import json
import os
from pathlib import Path

import click

from ..errors import LockdownError
from ..reports.output import write_json_atomic, writes_through

STDOUT = "-"


def json_option(what: str):
    return click.option(
        "--json", "json_out", is_flag=False, flag_value=STDOUT, default=None, metavar="[FILE]",
        type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
        help=f"Machine-readable: {what} as JSON to FILE, with the progress and tables as "
             f"without it; or to stdout with --json alone or --json -, then quiet: no progress "
             f"and no tables.")


def to_stdout(json_out: Path | None) -> bool:
    """Whether the document goes to stdout (`--json`, `--json -`): then it is the command's
    only output, and progress and tables stay off."""
    return json_out is not None and str(json_out) == STDOUT


def written_line(json_out: Path | None) -> str | None:
    """The last line of a command whose --json FILE was written; None otherwise."""
    return None if json_out is None or to_stdout(json_out) else f"JSON written to {json_out}"


def check_destination(json_out: Path | None) -> None:
    """Fail before any work when the document could not be written at the end."""
    if json_out is None or str(json_out) == STDOUT:
        return
    parent = json_out.resolve().parent
    if not parent.is_dir():
        raise LockdownError(f"cannot write {json_out}: directory {parent} does not exist")
    if not writes_through(json_out) and not os.access(parent, os.W_OK | os.X_OK):
        raise LockdownError(f"cannot write {json_out}: directory {parent} is not writable; "
                            f"choose another --json FILE")


def emit(json_out: Path, document: dict) -> None:
    if str(json_out) == STDOUT:
        click.echo(json.dumps(document, indent=2, sort_keys=False))
    else:
        write_json_atomic(json_out, document)


def deliver(json_out: Path | None, document: dict, text: str) -> None:
    """The command's result: `text` after a blank line (below the progress lines), and the
    JSON document to --json's FILE; to stdout alone with `--json`/`--json -`."""
    if json_out is not None:
        emit(json_out, document)
        if to_stdout(json_out):
            return
    click.echo("")
    click.echo(text)
    if (line := written_line(json_out)) is not None:
        click.echo(line)
