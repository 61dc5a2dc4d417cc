"""`lockdown validate BUNDLE`: integrity (one line per damaged file) and coverage checks."""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import click

from ..bundle.validate import validate
from ..errors import NOT_CONFIRMED
from ..reports.bundle_summary import format_checks, format_summary
from .main import main


@main.command("validate")
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON.")
def validate_cmd(bundle, as_json):
    """Check BUNDLE: every file intact and of a known format version, and the capture complete
    (requests logged, samples attributed, stacks, profiles, statements tied to requests).
    Exit 2 if the bundle is damaged, 3 if a coverage check fails."""
    b, checks = validate(bundle)
    if as_json:
        click.echo(json.dumps({"bundle": str(b.root), "ok": all(c.ok for c in checks),
                               "checks": [asdict(c) for c in checks]}, indent=1))
    else:
        click.echo(format_summary(b))
        click.echo("checks:")
        click.echo(format_checks(checks))
    if not all(c.ok for c in checks):
        raise SystemExit(NOT_CONFIRMED)
