"""`--json [FILE]` of the long commands: quiet, one machine-readable document, to a file or
to stdout (`--json` alone or `--json -`)."""
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
        help=f"Quiet, machine-readable: no progress and no tables; {what} as JSON to FILE, or "
             f"to stdout with --json alone or --json -.")


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
    """The command's result: the JSON document when --json was given, else `text` after a
    blank line (below the progress lines)."""
    if json_out is not None:
        emit(json_out, document)
        return
    click.echo("")
    click.echo(text)
