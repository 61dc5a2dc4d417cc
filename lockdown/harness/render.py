"""Render the harness's config templates (nginx, php-fpm, my.cnf, wrk script)."""
from __future__ import annotations

from pathlib import Path

import jinja2

from . import service_account

_ENV = jinja2.Environment(loader=jinja2.PackageLoader("lockdown.harness", "templates"),
                          undefined=jinja2.StrictUndefined, keep_trailing_newline=True)


def render_to(template: str, dest: Path, **values) -> Path:
    values.setdefault("account", service_account.account())   # the servers' unprivileged account
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(_ENV.get_template(template).render(**values))
    return dest
