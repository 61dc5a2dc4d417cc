"""The documents a `lockdown run` directory ends with besides findings.json: the HTML report,
one markdown write-up per finding (findings/KEY.md) and one flame graph per kind of stack, so
that one command (and `make demo`) leaves everything there is to read. `lockdown verify`
rewrites the report and the write-ups, which then show its verification."""
from __future__ import annotations

from pathlib import Path

from ..analyzers.stacks import TITLES
from ..bundle.store import Bundle, BundleError
from ..errors import LockdownError
from .html_report import capture_flamegraph, report_html
from .output import write_text_atomic
from .run_results import REDO_RUN, load_results, reading
from .writeup import finding_writeups

REPORT = "report.html"
FLAMEGRAPHS = "flamegraphs"
FINDINGS = "findings"


def write_report(run_dir: Path) -> Path:
    """RUN/report.html, written whole or not at all."""
    out = run_dir / REPORT
    write_text_atomic(out, report_html(run_dir))
    return out


def write_finding_writeups(run_dir: Path) -> Path:
    """RUN/findings/KEY.md, one per finding, as `lockdown writeup` writes them: with every
    verification made so far (each file written whole)."""
    results = load_results(run_dir)
    with reading(run_dir, REDO_RUN):
        files = finding_writeups(results)
    out = run_dir / FINDINGS
    out.mkdir(exist_ok=True)
    for name, text in files.items():
        write_text_atomic(out / name, text)
    return out


def write_flamegraphs(bundle: Bundle, run_dir: Path) -> list[Path]:
    """RUN/flamegraphs/php.svg, php-offcpu.svg and native.svg (the `lockdown flamegraph`
    defaults over the whole capture), titled with the target's name; a kind whose collectors
    were off or saw nothing is left out."""
    written = []
    target = (bundle.manifest.get("target") or {}).get("name") or bundle.root.name
    for kind, label in TITLES.items():
        try:
            svg = capture_flamegraph(bundle, kind, f"{label}: {target}")
        except BundleError:
            raise
        except LockdownError:
            continue
        out = run_dir / FLAMEGRAPHS / f"{kind}.svg"
        out.parent.mkdir(exist_ok=True)
        write_text_atomic(out, svg)
        written.append(out)
    return written
