"""`lockdown flamegraph`: flame graphs (SVG), folded stacks and speedscope files from a bundle,
and differential flame graphs of two captures."""
from __future__ import annotations

import math
from pathlib import Path

import click

from ..analyzers.folded import format_folded
from ..analyzers.stacks import KINDS, TITLES
from ..bundle.store import open_bundle
from ..errors import LockdownError
from ..reports.flamegraph import FlameOptions, php_builtins, render_diff_flamegraph, render_flamegraph
from ..reports.output import write_json_atomic, write_text_atomic
from ..reports.pprof import bundle_profile, from_weights, write_profile
from .destinations import check_not_input, say_written
from .flame_units import (default_name, diff_folded_text, diff_pair, differential, folded_of, say_unit,
                          speedscope_document, unit_of)
from .main import main

FORMATS = ("svg", "folded", "speedscope", "pprof")


def _format_of(out: Path, given: str | None) -> str:
    if given:
        return given
    if out.is_dir():
        return "svg"
    name = out.name.lower()
    if name.endswith(".svg"):
        return "svg"
    if name.endswith(".json"):
        return "speedscope"
    if name.endswith((".folded", ".txt", ".collapsed")):
        return "folded"
    if name.endswith((".pb.gz", ".pprof")):
        return "pprof"
    raise LockdownError(f"cannot tell the format from {out.name!r}: name it .svg, .folded, .json or .pb.gz, "
                        f"or give --format {'|'.join(FORMATS)}")


def _finite(ctx, param, value: float) -> float:
    """click's FloatRange(0) lets nan through (every comparison with it is false) and inf (no
    upper bound); neither is a width."""
    if not math.isfinite(value):
        raise click.BadParameter(f"{value} is not a finite number")
    return value


@main.command("flamegraph")
@click.argument("bundle", required=False, type=click.Path(path_type=Path))
@click.option("-o", "--output", "out", required=True, type=click.Path(path_type=Path),
              help="File to write: .svg, .folded, .json (speedscope) or .pb.gz (pprof); or a directory, "
                   "where the file is named after the kind and, for folded stacks, their unit "
                   "(php.svg, native.ns.folded, diff-php.samples.folded).")
@click.option("--kind", type=click.Choice(KINDS), default="php", show_default=True,
              help="PHP stacks (Excimer), native stacks (perf, engine and kernel frames), or PHP "
                   "stacks weighted by their time off the CPU (Excimer's wall samples less perf's "
                   "on-CPU samples, in us: where PHP waited).")
@click.option("--request", "request_id", metavar="ID", help="Only this request.")
@click.option("--url", metavar="PATH", help="Only the requests for this URL path.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), help="Output format [default: from -o's suffix].")
@click.option("--diff", nargs=2, type=click.Path(path_type=Path), metavar="BEFORE AFTER",
              help="Differential flame graph of two bundles or folded files: widths from AFTER, "
                   "red grew, blue shrank (shares of the total, unless --no-normalize); as an SVG, "
                   "or as three-column folded stacks (`stack before after`, difffolded.pl's and "
                   "inferno-diff-folded's output). A three-column file given as BUNDLE is drawn the same way.")
@click.option("--normalize/--no-normalize", default=True, show_default=True,
              help="With --diff: scale BEFORE to AFTER's total first (difffolded.pl -n in folded output).")
@click.option("--widths", type=click.Choice(("after", "before")), default="after", show_default=True,
              help="With --diff: draw AFTER's picture, or BEFORE's (where frames that vanished "
                   "show, in blue).")
@click.option("--reverse", is_flag=True, help="Merge stacks from the leaf: who calls the hot functions.")
@click.option("--inverted", is_flag=True, help="Icicle graph: root at the top.")
@click.option("--minwidth", type=click.FloatRange(0), default=0.1, show_default=True, callback=_finite,
              help="Leave out frames narrower than this many pixels.")
@click.option("--width", type=click.IntRange(200), default=1200, show_default=True, help="SVG width in pixels.")
@click.option("--title", help="Title of the graph.")
@click.option("--countname", metavar="WORD",
              help="What the counts are, in the SVG's tooltips (flamegraph.pl's --countname) "
                   "[default: the kind's: samples; us for php-offcpu; for a folded file, samples].")
def flamegraph_cmd(bundle, out, kind, request_id, url, fmt, diff, normalize, widths, reverse,
                   inverted, minwidth, width, title, countname):
    """Flame graph of BUNDLE's PHP or native stacks (whole capture, --url or --request), as an
    interactive SVG (click to zoom, Ctrl-F to search), folded stacks (stackcollapse-perf.pl's
    conventions), speedscope JSON or pprof; or, with --diff or a three-column folded file as
    BUNDLE, what changed between two captures."""
    if diff and bundle:
        raise click.UsageError("give either BUNDLE or --diff BEFORE AFTER, not both")
    if not diff and not bundle:
        raise click.UsageError("give a BUNDLE (or --diff BEFORE AFTER)")
    fmt = _format_of(out, fmt)
    svg = fmt == "svg"
    is_diff = bool(diff) or differential(bundle)
    unit = unit_of(bundle if not diff else diff[1], kind, svg, countname)
    if out.is_dir():
        out = out / default_name(kind, fmt, unit, is_diff)
    check_not_input(out, [bundle, *(diff or ())])
    scope = f"request {request_id}" if request_id else f"URL {url}" if url else "all requests"
    opts = FlameOptions(width=width, minwidth=minwidth, reverse=reverse, inverted=inverted, count_name=unit,
                        palette="native" if kind == "native" else "php")
    if is_diff:
        if fmt not in ("svg", "folded"):
            raise LockdownError("a differential graph is written as an SVG or as three-column folded "
                                "stacks: name the output .svg or .folded")
        before, after, php, names = diff_pair(bundle, diff, kind, request_id, url, svg)
        if fmt == "folded":
            write_text_atomic(out, diff_folded_text(before, after, normalize))
        else:
            opts.title = title or (f"{kind} stacks: {names}" if diff else f"Differential flame graph: {names}")
            opts.subtitle = f"{scope if diff else 'from ' + names}; widths from {widths.upper()}; red grew, blue shrank"
            opts.builtins = php_builtins(php)
            write_text_atomic(out, render_diff_flamegraph(before, after, opts, normalize=normalize,
                                                             widths=widths))
    else:
        folded, php = folded_of(bundle, kind, request_id, url, counts=svg)
        name = f"{kind} stacks of {bundle.name} ({scope})"
        if fmt == "pprof":
            write_profile(out, bundle_profile(open_bundle(bundle), kind, request_id, url) if bundle.is_dir()
                          else from_weights(folded, ("samples", "count")))
        elif fmt == "folded":
            write_text_atomic(out, format_folded(folded))
        elif fmt == "speedscope":
            write_json_atomic(out, speedscope_document(bundle, folded, kind, request_id, name, unit), indent=None)
        else:
            opts.title = title or f"{TITLES[kind]}: {bundle.name}"
            opts.subtitle, opts.builtins = scope, php_builtins(php)
            write_text_atomic(out, render_flamegraph(folded, opts))
    say_written(out)
    say_unit(fmt, unit, out)
