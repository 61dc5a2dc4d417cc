"""`lockdown analyze BUNDLE`: subsystems, time budget, hot PHP functions, query digest."""
from __future__ import annotations

import json
from pathlib import Path

import click

from ..analyzers.analysis import analyze
from ..bundle.store import open_bundle
from ..reports.analysis_text import format_analysis
from .main import main


@main.command("analyze")
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("--top", type=click.IntRange(1), default=15, show_default=True, help="Rows per table.")
@click.option("--json", "as_json", is_flag=True, help="Print the analysis as JSON.")
def analyze_cmd(bundle, top, as_json):
    """Where BUNDLE's time went: on-CPU by engine subsystem, the time budget per URL (CPU,
    database wait, other wait), hot PHP functions and the query digest."""
    result = analyze(open_bundle(bundle), top=top)
    click.echo(json.dumps(result, indent=1) if as_json else format_analysis(result, top))
