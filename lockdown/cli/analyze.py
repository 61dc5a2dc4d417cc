"""`lockdown analyze BUNDLE`: time accounting, subsystems, time budget, hot PHP functions, query digest."""
from __future__ import annotations

import json
from pathlib import Path

import click

from ..analyzers.accounting import of_bundle, read_findings
from ..analyzers.analysis import analyze, query_classes
from ..analyzers.detectors import load_thresholds
from ..analyzers.versus import query_rates, versus
from ..bundle.store import open_bundle
from ..reports.analysis_text import format_analysis
from .main import main


def _queries(ctx, param, value: str | None) -> int | None:
    """--queries N|all -> N, 0 for all (analyze()'s `queries`), None when not given."""
    if value is None:
        return None
    if value.strip().lower() == "all":
        return 0
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise click.BadParameter(f"{value!r}: give a number of query classes (1 or more) or all")
    return n


@main.command("analyze")
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("--top", type=click.IntRange(1), default=15, show_default=True, help="Rows per table.")
@click.option("--request", "request_id", metavar="ID", help="Only this request (e.g. r000007): "
              "its budget, subsystems, functions and its statements in order.")
@click.option("--url", metavar="PATH", help="Only the requests for this URL path (as in the URL list).")
@click.option("--baseline", type=click.Path(path_type=Path), metavar="BUNDLE",
              help="Another capture of the site (e.g. before a change): what moved per URL, in the engine's "
                   "subsystems, the query classes and the PHP functions, before -> after.")
@click.option("--findings", "findings_file", type=click.Path(path_type=Path), metavar="FILE",
              help="Account time with these findings (a `lockdown run` directory's findings.json, after the "
                   "argument probe) instead of the detect step's over BUNDLE.")
@click.option("--thresholds", type=click.Path(path_type=Path), metavar="FILE",
              help="Detector thresholds for the detect step of the time accounting (as `lockdown run "
                   "--thresholds`).")
@click.option("--queries", metavar="N|all", callback=_queries,
              help="Query classes to show, by total time: N, or all [default: --top's].")
@click.option("--json", "as_json", is_flag=True, help="Print the analysis as JSON.")
def analyze_cmd(bundle, top, request_id, url, baseline, findings_file, thresholds, queries, as_json):
    """Where BUNDLE's time went: the share of it the findings explain and the top unexplained
    hotspots, on-CPU by engine subsystem and native function, the engine's
    caches, the time budget per URL and per request (CPU, database wait, waiting for a CPU,
    other wait), each URL's slowest tenth against its middle half, hot PHP functions and
    builtins, where PHP waited off the CPU, the database server's counters and the query
    digest; over the whole capture, one URL (--url) or one request (--request).

    The time accounting's findings are those of the detect step over BUNDLE (what `lockdown
    run` finds before the argument probe, which needs servers), or a run's (--findings)."""
    if baseline is not None and request_id is not None:
        raise click.UsageError("--baseline compares whole captures or one URL (--url), not one request: "
                               "request ids differ between captures")
    if findings_file is not None and thresholds is not None:
        raise click.UsageError("--thresholds sets the detect step's thresholds; "
                               "with --findings there is no detect step")
    this = open_bundle(bundle)
    result = analyze(this, top=top, request=request_id, url=url, queries=queries)
    found, notes, source = None, [], None
    if findings_file is not None:
        found, notes = read_findings(findings_file, this.root)
        source = str(findings_file)
    limits = load_thresholds(thresholds) if thresholds is not None else None
    accounting = of_bundle(this, found, limits, request=request_id, url=url, top=top, source=source)
    accounting.notes[:0] = notes
    result["time_accounting"] = accounting.to_json()
    if baseline is not None:
        base = open_bundle(baseline)
        result["baseline"] = versus(analyze(base, top=top, url=url), result,
                                    query_rates(*query_classes(base, url)), query_rates(*query_classes(this, url)))
    click.echo(json.dumps(result, indent=1) if as_json else format_analysis(result, top, queries))
