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
@click.option("--request", "request_id", metavar="ID", help="Only this request (e.g. r000007): "
              "its budget, subsystems, functions and its statements in order.")
@click.option("--url", metavar="PATH", help="Only the requests for this URL path (as in the URL list).")
@click.option("--json", "as_json", is_flag=True, help="Print the analysis as JSON.")
def analyze_cmd(bundle, top, request_id, url, as_json):
    """Where BUNDLE's time went: on-CPU by engine subsystem, the engine's caches, the time
    budget per URL and per request (CPU, database wait, waiting for a CPU, other wait), each
    URL's slowest tenth against its middle half, hot PHP functions and builtins, the database
    server's counters and the query digest; over the whole capture, one URL (--url) or one
    request (--request)."""
    result = analyze(open_bundle(bundle), top=top, request=request_id, url=url)
    click.echo(json.dumps(result, indent=1) if as_json else format_analysis(result, top))
