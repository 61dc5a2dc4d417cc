"""Passwords out of what lockdown writes: a DSN's password replaced by `***` in outputs, logs,
reports and the records of a command line. Pure text functions, below every stage: the
harness, the CLI and the run directory's marker share them."""
from __future__ import annotations

import re
import sys

# a URL's password: from `scheme://user:` to the last `@` (a password may hold `@`, `/`, spaces)
_URL_PASSWORD = re.compile(r"([a-z][a-z0-9+.-]*://[^:/?#@\s]*):.*@", re.IGNORECASE | re.DOTALL)


def redact_dsn(dsn: str) -> str:
    """`dsn` as lockdown writes it anywhere (outputs, logs, reports, records of the command):
    its password replaced by `***`, `mysql://user:***@host:port/`. Also a DSN of the wrong form,
    or a text holding one; one without a password is unchanged."""
    return _URL_PASSWORD.sub(r"\1:***@", dsn)


def redacted_argv(argv: list[str] | None = None) -> list[str]:
    """A command line (default: this process's) as lockdown records it (manifest.json's
    `command`, a run directory's incomplete.json): every DSN's password replaced by `***`."""
    return [redact_dsn(str(a)) for a in (sys.argv if argv is None else argv)]
