"""The documents a `lockdown run` directory ends with besides findings.json and the write-ups:
the HTML report and one flame graph per kind of stack, so that one command (and `make demo`)
leaves everything there is to read. `lockdown verify` rewrites the report, which then shows
its verification."""
from __future__ import annotations

from pathlib import Path

from ..analyzers.stacks import KINDS
from ..bundle.store import Bundle, BundleError
from ..errors import LockdownError
from .html_report import capture_flamegraph, report_html
from .output import write_text_atomic

REPORT = "report.html"
FLAMEGRAPHS = "flamegraphs"


def write_report(run_dir: Path) -> Path:
    """RUN/report.html, written whole or not at all."""
    out = run_dir / REPORT
    write_text_atomic(out, report_html(run_dir))
    return out


def write_flamegraphs(bundle: Bundle, run_dir: Path) -> list[Path]:
    """RUN/flamegraphs/php.svg and native.svg (the `lockdown flamegraph` defaults over the
    whole capture); a kind whose collector was off or saw nothing is left out."""
    written = []
    for kind in sorted(KINDS, reverse=True):          # php first: what users open first
        label = "PHP" if kind == "php" else "Native"
        try:
            svg = capture_flamegraph(bundle, kind, f"{label} stacks: {bundle.root.name}")
        except BundleError:
            raise
        except LockdownError:
            continue
        out = run_dir / FLAMEGRAPHS / f"{kind}.svg"
        out.parent.mkdir(exist_ok=True)
        write_text_atomic(out, svg)
        written.append(out)
    return written
