"""Reading a statement's text where the slow log gives nothing else: is it a SELECT, which
table does it read first, what do its clauses name. Regular expressions over the text with
string literals blanked out, good enough for hints a reader checks with EXPLAIN; not a parser."""
from __future__ import annotations

import re

SELECT = re.compile(r"^\s*(?:/\*.*?\*/\s*)*(?:\(\s*)?SELECT\b", re.I | re.S)
FROM = re.compile(r"\bFROM\s+`?(\w+)`?(?:\.`?(\w+)`?)?", re.I)
ORDER_BY = re.compile(r"\bORDER\s+BY\b(.*?)(?:\bLIMIT\b|$)", re.I | re.S)
STRINGS = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
MARKER = "lockdown-capture"      # the prepend's ordering statement (collectors/attribution.py)


def is_select(sql: str) -> bool:
    """A SELECT of the application's (not the capture's own marker)."""
    return SELECT.match(sql) is not None and MARKER not in sql


def without_strings(sql: str) -> str:
    """The text with every string literal replaced by '', so that keywords inside them do not count."""
    return STRINGS.sub("''", sql)
