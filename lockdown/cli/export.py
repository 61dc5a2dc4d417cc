"""`lockdown export`: a bundle's xhprof profiles as xhprof_html runs, an XHGui import file or
callgrind files; its stacks as pprof profiles."""
from __future__ import annotations

from pathlib import Path

import click

from ..bundle.store import open_bundle
from ..errors import LockdownError
from ..analyzers.stacks import KINDS
from ..reports.callgrind import GROUPS, callgrind_files
from ..reports.output import write_dir_atomic
from ..reports.pprof import pprof_files
from ..reports.xhprof_export import (FORMATS, INDEX_FILE, XHGUI_FILE, export_files, exported, source_name,
                                     viewer_command)
from .main import main


def check_destination(out: Path) -> None:
    """DIR may be new or an empty directory, in an existing parent."""
    if out.exists() and not out.is_dir():
        raise LockdownError(f"{out} exists and is not a directory; choose another -o")
    if out.is_dir() and any(out.iterdir()):
        raise LockdownError(f"{out} exists and is not empty; choose another -o or empty it")
    if not out.parent.is_dir():
        raise LockdownError(f"cannot write {out}: directory {out.parent} does not exist")


EXPORTS = (*FORMATS, "callgrind", "pprof")


def _check_options(fmt: str, group: str | None, kind: str | None, raw: bool) -> None:
    """Options that do nothing with this format are refused, not ignored."""
    if group and fmt not in ("callgrind", "pprof"):
        raise click.UsageError(f"--group is for --format callgrind or pprof, not {fmt}")
    if kind and fmt != "pprof":
        raise click.UsageError(f"--kind is for --format pprof (sampled stacks); {fmt} exports xhprof profiles")
    if raw and fmt == "pprof":
        raise click.UsageError("--raw is for the xhprof formats; pprof exports sampled stacks")


@main.command("export")
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("-o", "--output", "out", required=True, type=click.Path(path_type=Path),
              help="Directory to create (or an empty one).")
@click.option("--format", "fmt", type=click.Choice(EXPORTS), default="xhprof", show_default=True,
              help="xhprof: one <run>.<source>.xhprof per request for xhprof_html; "
                   f"xhgui: {XHGUI_FILE} for XHGui's importer; callgrind: callgrind.out.* files "
                   "(KCachegrind, QCachegrind, webgrind, callgrind_annotate) from the xhprof call "
                   "graphs; pprof: gzipped profile.proto files (go tool pprof, Pyroscope, Grafana) "
                   "of the --kind stacks.")
@click.option("--request", "request_id", metavar="ID", help="Only this request.")
@click.option("--url", metavar="PATH", help="Only the requests for this URL path.")
@click.option("--group", type=click.Choice(GROUPS),
              help="callgrind and pprof: one file per request, per URL, or one for all  "
                   "[default: request for callgrind, all for pprof].")
@click.option("--kind", type=click.Choice(KINDS),
              help="pprof: PHP stacks (Excimer), native stacks (perf) or PHP stacks off the CPU  "
                   "[default: php].")
@click.option("--raw", is_flag=True,
              help="Export the profiles exactly as recorded, without repairing tideways_xhprof's "
                   "main() and doubled internal calls.")
def export_cmd(bundle, out, fmt, request_id, url, group, kind, raw):
    """Export BUNDLE's xhprof profiles (every instrumented request, or --request / --url) for
    xhprof_html, XHGui or callgrind readers, or its sampled stacks as pprof profiles;
    docs/analysis.md ("Exports") says how to load them.

    By default each xhprof profile is repaired so that the tools show the request's totals:
    the calls tideways_xhprof records without a caller go under main(), main() gets the
    request's wall time, CPU time and peak memory from the request log, and tideways' second
    record of every internal function call (f==>f@1) goes."""
    _check_options(fmt, group, kind, raw)
    check_destination(out)
    b = open_bundle(bundle)
    if fmt == "pprof":
        kind = kind or "php"
        files = pprof_files(b, kind, request_id, url, group or "all")
        write_dir_atomic(out, {f.name: f.data for f in files})
        click.echo(f"wrote {len(files) - 1} pprof profile(s) of {kind} stacks to {out} (files and "
                   f"their requests in {out / INDEX_FILE})")
        click.echo(f"read them with: go tool pprof -top {out / files[0].name}")
        return
    items = exported(b, request_id, url, raw)
    files = (callgrind_files(b.manifest, items, group or "request") if fmt == "callgrind"
             else export_files(b, fmt, items))
    write_dir_atomic(out, {f.name: f.data for f in files}, {f.name: f.mtime for f in files})
    repaired = sum(e.repaired for e in items)
    how = ("as recorded (--raw)" if raw else
           f"{repaired} repaired for the tools' totals" if repaired else "as recorded (nothing to repair)")
    if fmt == "callgrind":
        click.echo(f"wrote {len(files) - 1} callgrind file(s) of {len(items)} profiles to {out}, {how} "
                   f"(files and their requests in {out / INDEX_FILE})")
        click.echo(f"open them with kcachegrind, or: callgrind_annotate {out / files[0].name}")
    elif fmt == "xhprof":
        runs = [f.name.split(".")[0] for f in files if f.name.endswith(".xhprof")]
        source = source_name(b)
        click.echo(f"wrote {len(runs)} xhprof runs to {out}, {how} (source {source}; run ids, URLs and "
                   f"repairs in {out / INDEX_FILE})")
        click.echo(f"serve them with xhprof_html (XHPROF_HTML_DIR: its directory): "
                   f"{viewer_command(str(out.resolve()))}")
        click.echo(f"then open http://127.0.0.1:8000/index.php?run={runs[0]}&source={source}")
    else:
        path = out / XHGUI_FILE
        click.echo(f"wrote {len(items)} profiles to {path}, {how} (SERVER.LOCKDOWN_PROFILE says which)")
        click.echo(f"load them into XHGui: php external/import.php -f {path.resolve()}")
