"""The PHP function a statement names as its sender. Some frameworks put it in a comment
right after the verb (MediaWiki's Rdbms layer: `SELECT /* LCStoreDB::get */ lc_value ...`,
`UPDATE /* WikiPage::updateRevisionOn */ ...`): an exact link from the slow log back to the
PHP call chain, which xhprof's counts cannot give."""
from __future__ import annotations

import re

_CALLER = re.compile(r"^\s*[A-Za-z]+\s+/\*\s*(\\?[A-Za-z_][\w\\]*(?:::[A-Za-z_]\w*)?)")


def caller_of(sql: str) -> str | None:
    """`Class::method` or `function` named in the comment after the statement's first word."""
    m = _CALLER.match(sql)
    return m.group(1).lstrip("\\") if m else None
