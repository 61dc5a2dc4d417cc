"""`lockdown analyze BUNDLE`: subsystems, time budget, hot PHP functions, query digest."""
from __future__ import annotations

import json
from pathlib import Path

import click

from ..analyzers.analysis import analyze, query_classes
from ..analyzers.versus import query_rates, versus
from ..bundle.store import open_bundle
from ..reports.analysis_text import format_analysis
from .main import main


@main.command("analyze")
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("--top", type=click.IntRange(1), default=15, show_default=True, help="Rows per table.")
@click.option("--request", "request_id", metavar="ID", help="Only this request (e.g. r000007): "
              "its budget, subsystems, functions and its statements in order.")
@click.option("--url", metavar="PATH", help="Only the requests for this URL path (as in the URL list).")
@click.option("--baseline", type=click.Path(path_type=Path), metavar="BUNDLE",
              help="Another capture of the site (e.g. before a change): what moved per URL, in the engine's "
                   "subsystems, the query classes and the PHP functions, before -> after.")
@click.option("--json", "as_json", is_flag=True, help="Print the analysis as JSON.")
def analyze_cmd(bundle, top, request_id, url, baseline, as_json):
    """Where BUNDLE's time went: on-CPU by engine subsystem and native function, the engine's
    caches, the time budget per URL and per request (CPU, database wait, waiting for a CPU,
    other wait), each URL's slowest tenth against its middle half, hot PHP functions and
    builtins, where PHP waited off the CPU, the database server's counters and the query
    digest; over the whole capture, one URL (--url) or one request (--request)."""
    if baseline is not None and request_id is not None:
        raise click.UsageError("--baseline compares whole captures or one URL (--url), not one request: "
                               "request ids differ between captures")
    this = open_bundle(bundle)
    result = analyze(this, top=top, request=request_id, url=url)
    if baseline is not None:
        base = open_bundle(baseline)
        result["baseline"] = versus(analyze(base, top=top, url=url), result,
                                    query_rates(*query_classes(base, url)), query_rates(*query_classes(this, url)))
    click.echo(json.dumps(result, indent=1) if as_json else format_analysis(result, top))
