"""`lockdown doctor`: is everything lockdown needs here, and how to fix what is not."""
from __future__ import annotations

import json

import click

from ..errors import NOT_CONFIRMED
from ..harness.doctor import run_checks
from .main import main


@main.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON.")
def doctor_cmd(as_json):
    """Check prerequisites: one row each, with the fix for each failure. Exit 3 if a required
    check fails."""
    checks = run_checks()
    failed_required = [c for c in checks if c.required and not c.ok]
    if as_json:
        click.echo(json.dumps({"ok": not failed_required, "checks": [c.to_json() for c in checks]},
                              indent=2))
    else:
        width = max(len(c.name) for c in checks)
        for c in checks:
            status = "ok" if c.ok else ("FAIL" if c.required else "warn")
            line = f"{status:<4}  {c.name:<{width}}  {c.detail}"
            if not c.ok and c.fix:
                line += f"\n      {'':<{width}}  fix: {c.fix}"
            click.echo(line)
        click.echo(f"{len(failed_required)} required check(s) failed" if failed_required
                   else "all required checks passed")
    if failed_required:
        raise SystemExit(NOT_CONFIRMED)
