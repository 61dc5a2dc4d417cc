"""`lockdown report DIR [-o report.html]`: one self-contained HTML page from a `lockdown run`
directory (lockdown/reports/html_report.py; docs/reports.md); by default DIR/report.html,
the one `lockdown run` and `lockdown verify` keep there."""
from __future__ import annotations

from pathlib import Path

import click

from ..reports.html_report import report_html
from ..reports.output import write_text_atomic
from ..reports.run_documents import REPORT
from .destinations import check_not_input, run_inputs, say_written
from .main import main


@main.command("report")
@click.argument("run_dir", metavar="DIR", type=click.Path(path_type=Path))
@click.option("-o", "--output", "out", type=click.Path(dir_okay=False, path_type=Path),
              help="HTML file to write (one file: no network, no external scripts, styles or fonts) "
                   "[default: DIR/report.html].")
def report_cmd(run_dir, out):
    """HTML report of DIR (the -o of `lockdown run`): methodology, benchmark with error bars,
    findings with copyable patches and their verification, engine subsystems, time budget per
    URL, hot PHP functions and builtins, query digest, flame graphs and every request."""
    out = out or run_dir / REPORT
    check_not_input(out, run_inputs(run_dir))
    html = report_html(run_dir)
    write_text_atomic(out, html)
    say_written(out)
