"""`lockdown writeup DIR -o OUTDIR`: one markdown issue per finding of a `lockdown run`, with
its measured effect when `lockdown verify` has run, and SUMMARY.md."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import click

from ..errors import LockdownError
from ..reports.output import write_dir_atomic
from ..reports.run_results import REDO_RUN, load_results, reading
from ..reports.writeup import writeups
from .destinations import check_not_input, run_inputs
from .main import main

MARKER = "SUMMARY.md"


def replace_writeups(out: Path, files: dict) -> None:
    """Write OUTDIR whole; earlier write-ups there (SUMMARY.md and other markdown files, and
    nothing else) are replaced only once the new ones are complete; any other non-empty
    directory is left alone: replacing it would delete what else the user keeps there."""
    if not (out.is_dir() and any(out.iterdir())):
        write_dir_atomic(out, files)
        return
    if not (out / MARKER).is_file():
        raise LockdownError(f"{out} is not empty and holds no earlier write-ups (no {MARKER}); "
                            f"choose another -o")
    other = sorted(p.name for p in out.iterdir() if not (p.is_file() and p.suffix == ".md"))
    if other:
        raise LockdownError(f"{out} holds earlier write-ups but also {', '.join(other[:3])}"
                            f"{' ...' if len(other) > 3 else ''}, which a write-up would delete; "
                            f"choose another -o or move them")
    old = out.with_name(f".{out.name}.old-{os.getpid()}")
    out.rename(old)
    try:
        write_dir_atomic(out, files)
    except BaseException:
        old.rename(out)
        raise
    shutil.rmtree(old, ignore_errors=True)


@main.command("writeup")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("-o", "--output", "out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Directory for the write-ups (created; replaced whole if it holds earlier write-ups).")
def writeup_cmd(directory, out):
    """Write the lockdown issues of the run in DIRECTORY: one markdown file per finding (title,
    where it is hot, evidence, proposed change, measured effect, how to reproduce) and
    SUMMARY.md (headline, methodology, baseline, results per fix, what did not pan out)."""
    check_not_input(out, run_inputs(directory))     # DIR/issues is fine, DIR itself is not
    results = load_results(directory.resolve())
    with reading(directory, REDO_RUN):
        files = writeups(results)
    replace_writeups(out, files)
    click.echo(f"wrote {len(files) - 1} finding write-up(s) and SUMMARY.md to {out}")
