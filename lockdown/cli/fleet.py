"""`lockdown fleet`: collect the agents' stream into a store, report on it, and hand the
fleet's traffic mix to the lab (docs/fleet.md)."""
from __future__ import annotations

import time
from pathlib import Path

import click

from ..errors import UsageError
from ..fleet import analysis, report, store
from ..fleet.collector import DEFAULT_STREAM, GROUP, CollectOptions, collect
from ..reports.output import write_dir_atomic
from ..targets import toml_out
from .destinations import check_not_input, say_written
from .main import main, working

STORE_HELP = "The fleet store (the --store of `lockdown fleet collect`)."


@main.group("fleet")
def fleet_group():
    """Production profiling across app servers: the agents' records and stacks (`lockdown agent`)
    collected from Redis into a store, fleet reports, and the traffic mix as a target's URL list."""


@fleet_group.command("collect")
@click.option("--redis", "redis_url", required=True,
              help="redis://[:PASSWORD@]HOST:PORT/DB or unix:///PATH; the password is better "
                   "given in $LOCKDOWN_REDIS_PASSWORD.")
@click.option("--store", "store_dir", required=True, type=click.Path(path_type=Path), help="The store's directory.")
@click.option("--stream", "streams", multiple=True, default=(DEFAULT_STREAM,), show_default=True,
              help="A stream to read (repeat for several pools).")
@click.option("--group", default=GROUP, show_default=True,
              help="The consumer group (collectors sharing it split the entries).")
@click.option("--consumer", default=None,
              help="This collector's name in the group (default: the host's name); a "
                   "restart under the same name takes up its unacknowledged entries at once.")
@click.option("--claim-idle", type=click.FloatRange(min=1), default=60, show_default=True,
              help="Seconds after which another consumer's unacknowledged entries are claimed (a dead collector's).")
@click.option("--retention", default=None, help="Remove hours older than this (14d, 48h); default: keep everything.")
@click.option("--exit-when-idle", type=click.FloatRange(min=0.1), default=None,
              help="Stop once no entry came for this many seconds (default: run until a signal).")
def collect_cmd(redis_url, store_dir, streams, group, consumer, claim_idle, retention, exit_when_idle):
    """Read the agents' stream entries through a consumer group into the store, acknowledging
    each batch once it is on disk (fsync): nothing lost or counted twice across a kill -9."""
    opts = CollectOptions(redis_url, store_dir, tuple(streams), group, claim_idle_s=claim_idle,
                          exit_when_idle_s=exit_when_idle,
                          retention_s=store.parse_duration(retention, "--retention") if retention else None)
    if consumer:
        opts.consumer = consumer
    if store_dir.exists() and not store_dir.is_dir():
        raise UsageError(f"--store {store_dir}: not a directory; give the store's directory")
    with working():
        collect(opts, say=lambda m: click.echo(m, err=True))


def _records(store_dir: Path, since: str) -> list[dict]:
    start = time.time() - store.parse_duration(since, "--since")
    return list(store.read_records(store_dir, since=start))


@fleet_group.command("report")
@click.option("--store", "store_dir", required=True, type=click.Path(path_type=Path, exists=True, file_okay=False),
              help=STORE_HELP)
@click.option("--since", default="24h", show_default=True, help="How far back (30m, 24h, 7d).")
@click.option("--route", default=None, help='Only this route ("GET /path/{n}", as the route table names it).')
@click.option("--host", default=None, help="Only this host.")
@click.option("-o", "--output", "out", required=True, type=click.Path(path_type=Path),
              help="The report's directory (index.html, report.json, flamegraphs/); must not exist.")
def report_cmd(store_dir, since, route, host, out):
    """The fleet report: routes by share of requests and CPU, p50/p99 wall, statements per
    request, findings production data supports with what a lab run would confirm, hot
    functions, flame graphs fleet-wide and per route."""
    check_not_input(out, [store_dir])
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"-o {out} exists and is not empty; choose a new directory")
    store.parse_duration(since, "--since")
    with working():
        records = _records(store_dir, since)
        doc = report.build(records, route, host)
        if not doc["requests"]:
            raise UsageError(f"no request in {store_dir} since {since}"
                             + (f" for route {route!r}" if route else "") + (f" on host {host!r}" if host else ""))
        write_dir_atomic(out, report.render(doc, records))
    click.echo(report.text(doc))
    say_written(out)


@fleet_group.command("urls")
@click.option("--store", "store_dir", required=True, type=click.Path(path_type=Path, exists=True, file_okay=False),
              help=STORE_HELP)
@click.option("--since", default="24h", show_default=True, help="How far back (30m, 24h, 7d).")
@click.option("--host", default=None, help="Only this host.")
@click.option("--top", type=click.IntRange(min=1), default=50, show_default=True, help="How many URLs.")
def urls_cmd(store_dir, since, host, top):
    """Print a target.toml [[urls]] list weighted by the fleet's real traffic (GET requests
    answered 2xx, by URL as requested), for `lockdown init` or a target's own file."""
    store.parse_duration(since, "--since")
    with working():
        records = analysis.filtered(analysis.served(_records(store_dir, since)), host=host)
        mix = analysis.url_mix(records, top)
        if not mix:
            raise UsageError(f"no GET request answered 2xx in {store_dir} since {since}")
    total = sum(m["weight"] for m in mix)
    click.echo(f"# {total} requests from the fleet store {store_dir}, since {since}")
    click.echo(toml_out.dumps({"urls": [{"path": m["path"], "weight": m["weight"]} for m in mix]}), nl=False)
