"""`lockdown flamegraph`: flame graphs (SVG), folded stacks and speedscope files from a bundle,
and differential flame graphs of two captures."""
from __future__ import annotations

import math
from pathlib import Path

import click

from ..analyzers.folded import format_folded, read_folded
from ..analyzers.stacks import KINDS, TITLES, stacks
from ..bundle.store import open_bundle
from ..errors import LockdownError
from ..reports.flamegraph import FlameOptions, php_builtins, render_diff_flamegraph, render_flamegraph
from ..reports.output import write_json_atomic, write_text_atomic
from ..reports.pprof import bundle_profile, from_weights, write_profile
from ..reports.speedscope import to_speedscope
from .destinations import check_not_input, say_written
from .main import main

FORMATS = ("svg", "folded", "speedscope", "pprof")


def _format_of(out: Path, given: str | None) -> str:
    if given:
        return given
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


def _stacks_of(source: Path, kind: str, request, url, counts: bool) -> tuple[dict, dict]:
    """A bundle directory or a folded file -> (stacks, the bundle's php facts or {})."""
    if source.is_file():
        try:
            return read_folded(source), {}
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise LockdownError(f"{source}: not a folded-stacks file ({e}); give a bundle or a .folded file")
    bundle = open_bundle(source)
    return stacks(bundle, kind, request, url, counts=counts), bundle.manifest.get("php", {})


@main.command("flamegraph")
@click.argument("bundle", required=False, type=click.Path(path_type=Path))
@click.option("-o", "--output", "out", required=True, type=click.Path(path_type=Path),
              help="File to write: .svg, .folded, .json (speedscope) or .pb.gz (pprof).")
@click.option("--kind", type=click.Choice(KINDS), default="php", show_default=True,
              help="PHP stacks (Excimer), native stacks (perf, engine and kernel frames), or PHP "
                   "stacks weighted by their time off the CPU (Excimer's wall samples less perf's "
                   "on-CPU samples, in us: where PHP waited).")
@click.option("--request", "request_id", metavar="ID", help="Only this request.")
@click.option("--url", metavar="PATH", help="Only the requests for this URL path.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), help="Output format [default: from -o's suffix].")
@click.option("--diff", nargs=2, type=click.Path(path_type=Path), metavar="BEFORE AFTER",
              help="Differential flame graph of two bundles or folded files: widths from AFTER, "
                   "red grew, blue shrank (shares of the total, unless --no-normalize).")
@click.option("--normalize/--no-normalize", default=True, show_default=True,
              help="With --diff: scale BEFORE to AFTER's total first.")
@click.option("--widths", type=click.Choice(("after", "before")), default="after", show_default=True,
              help="With --diff: draw AFTER's picture, or BEFORE's (where frames that vanished "
                   "show, in blue).")
@click.option("--reverse", is_flag=True, help="Merge stacks from the leaf: who calls the hot functions.")
@click.option("--inverted", is_flag=True, help="Icicle graph: root at the top.")
@click.option("--minwidth", type=click.FloatRange(0), default=0.1, show_default=True, callback=_finite,
              help="Leave out frames narrower than this many pixels.")
@click.option("--width", type=click.IntRange(200), default=1200, show_default=True, help="SVG width in pixels.")
@click.option("--title", help="Title of the graph.")
def flamegraph_cmd(bundle, out, kind, request_id, url, fmt, diff, normalize, widths, reverse,
                   inverted, minwidth, width, title):
    """Flame graph of BUNDLE's PHP or native stacks (whole capture, --url or --request), as an
    interactive SVG (click to zoom, Ctrl-F to search), folded stacks (stackcollapse-perf.pl's
    conventions) or speedscope JSON; or, with --diff, what changed between two captures."""
    fmt = _format_of(out, fmt)
    if diff and bundle:
        raise click.UsageError("give either BUNDLE or --diff BEFORE AFTER, not both")
    if not diff and not bundle:
        raise click.UsageError("give a BUNDLE (or --diff BEFORE AFTER)")
    check_not_input(out, [bundle, *(diff or ())])
    svg = fmt == "svg"
    scope = f"request {request_id}" if request_id else f"URL {url}" if url else "all requests"
    if diff:
        if fmt != "svg":
            raise LockdownError("--diff writes an SVG: name the output .svg")
        (before, _), (after, php) = (_stacks_of(p, kind, request_id, url, True) for p in diff)
        opts = FlameOptions(title=title or f"{kind} stacks: {diff[0].name} -> {diff[1].name}",
                            subtitle=f"{scope}; widths from {widths.upper()}; red grew, blue shrank",
                            width=width, minwidth=minwidth, reverse=reverse, inverted=inverted,
                            builtins=php_builtins(php))
        write_text_atomic(out, render_diff_flamegraph(before, after, opts, normalize=normalize,
                                                         widths=widths))
    else:
        folded, php = _stacks_of(bundle, kind, request_id, url, counts=svg)
        name = f"{kind} stacks of {bundle.name} ({scope})"
        if fmt == "pprof":
            write_profile(out, bundle_profile(open_bundle(bundle), kind, request_id, url) if bundle.is_dir()
                          else from_weights(folded, ("samples", "count")))
        elif fmt == "folded":
            write_text_atomic(out, format_folded(folded))
        elif fmt == "speedscope":
            unit = {"native": "nanoseconds", "php-offcpu": "microseconds"}.get(kind, "none")
            write_json_atomic(out, to_speedscope(folded, name, unit), indent=None)
        else:
            opts = FlameOptions(title=title or f"{TITLES[kind]}: {bundle.name}", subtitle=scope,
                                width=width, minwidth=minwidth, reverse=reverse, inverted=inverted,
                                palette="native" if kind == "native" else "php",
                                builtins=php_builtins(php))
            write_text_atomic(out, render_flamegraph(folded, opts))
    say_written(out)
