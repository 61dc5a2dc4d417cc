"""Where a command may write: never over what it reads. `lockdown report W -o W/analysis.json`
or folded stacks written into the bundle they came from would succeed and destroy the input,
and every later command would then fail on it."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

import click

from ..errors import LockdownError
from ..reports.output import writes_through


def check_not_input(out: Path | None, inputs: Iterable[Path | None], option: str = "-o") -> None:
    """Refuse `out` when it is one of `inputs` (files or directories) or lies inside one, or
    when an input lies inside it (a directory that would be replaced whole); checked before
    any work, on resolved paths (links followed)."""
    if out is None or str(out) == "-":
        return
    target = out.resolve()
    for given in inputs:
        if given is None:
            continue
        source = Path(given).resolve()
        if target == source or source in target.parents:
            raise LockdownError(f"{option} {out} would write over {given}, which this command reads; "
                                f"choose another {option}")
        if target in source.parents:
            raise LockdownError(f"{option} {out} holds {given}, which this command reads; "
                                f"choose another {option}")


def say_written(out: Path) -> None:
    """"wrote OUT" on stdout, or on stderr when OUT was written through (`-o /dev/stdout`, a
    pipe): there it would land in the middle of the document itself."""
    click.echo(f"wrote {out}", err=writes_through(out))


def target_inputs(target) -> list[Path | None]:
    """What a command that runs a target reads of it: the target's directory and the app's
    source (a file written there would also change the hash its prepared install is kept by)."""
    return [target.directory, target.app_source, target.app_files]


def run_inputs(run_dir: Path) -> list[Path]:
    """What the commands that read a `lockdown run` directory read from it."""
    return [run_dir / name for name in ("findings.json", "analysis.json", "accounting.json", "bench.json", "bundle",
                                        "findings", "verify")]
