"""`lockdown targets`: list the built-in targets."""
from __future__ import annotations

import json

import click

from ..errors import LockdownError
from ..targets.registry import builtin_names, resolve
from .main import main


@main.command("targets")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def targets_cmd(as_json):
    """List the built-in targets (each TARGET argument also takes a path to a target directory)."""
    rows = []
    for name in builtin_names():
        try:
            t = resolve(name)
            rows.append({"name": t.name, "description": t.description, "path": str(t.directory),
                         "database": t.database, "urls": len(t.urls)})
        except LockdownError as e:
            rows.append({"name": name, "description": f"(broken: {e})", "path": "", "database": None,
                         "urls": 0})
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    width = max([len(r["name"]) for r in rows] + [4])
    for r in rows:
        click.echo(f"{r['name']:<{width}}  {r['description']}")
