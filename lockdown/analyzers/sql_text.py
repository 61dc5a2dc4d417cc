"""What a statement's text says, where the slow log gives nothing else: its tokens and normal
form, its literals, whether it is a SELECT (of a table), a write or session housekeeping, a
single-table lookup by key, the identifiers it names, which table it reads first and what its
clauses name. A tokenizer that knows quotes and comments, and regular expressions over the text
with string literals blanked out: good enough for hints a reader checks with EXPLAIN; not a
parser. The query detectors (db-static-cache, n-plus-one, repeated-query, write-on-read,
unindexed-query, disk-spill) and `related` share these helpers."""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from ..bundle.model import CAPTURE_MARKER as MARKER   # noqa: F401  (round_trip imports it from here)
from .query_digest import fingerprint

SELECT = re.compile(r"^\s*(?:/\*.*?\*/\s*)*(?:\(\s*)?SELECT\b", re.I | re.S)
FROM = re.compile(r"\bFROM\s+`?(\w+)`?(?:\.`?(\w+)`?)?", re.I)
ORDER_BY = re.compile(r"\bORDER\s+BY\b(.*?)(?:\bLIMIT\b|$)", re.I | re.S)
STRINGS = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")


def is_marker(sql: str) -> bool:
    """lockdown's own ordering statement (the prepend's `lockdown-capture` marker)."""
    return MARKER in sql


def is_select(sql: str) -> bool:
    """A SELECT of the application's (not the capture's own marker)."""
    return SELECT.match(sql) is not None and MARKER not in sql


def without_strings(sql: str) -> str:
    """The text with every string literal replaced by '', so that keywords inside them do not count."""
    return STRINGS.sub("''", sql)


# -- tokens ----------------------------------------------------------------------------------

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<comment>/\*.*?(?:\*/|\Z)|(?:--(?=[\s]|\Z)|\#)[^\r\n]*)
  | (?P<str>'(?:[^'\\]|\\.|'')*(?:'|\Z)|"(?:[^"\\]|\\.|"")*(?:"|\Z))
  | (?P<ident>`(?:[^`]|``)*(?:`|\Z)|@{0,2}[A-Za-z_$][\w$]*)
  | (?P<num>0[xX][0-9A-Fa-f]+|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)(?![\w$])
  | (?P<word>\d[\w$]*)
  | (?P<punct>.)
""", re.X | re.S)


@lru_cache(maxsize=65536)
def tokens(sql: str) -> tuple[tuple[str, str], ...]:
    """(kind, text) tokens of a statement without whitespace and comments; kinds: str, ident,
    num, punct (an identifier that starts with a digit is an ident; a user or system variable,
    `@name`, `@@GLOBAL`, is one ident with its @s)."""
    out = []
    for m in _TOKEN.finditer(sql):
        kind = m.lastgroup
        if kind in ("ws", "comment"):
            continue
        out.append(("ident" if kind == "word" else kind, m.group()))
    return tuple(out)


@lru_cache(maxsize=65536)
def normalize(sql: str) -> str:
    """The statement as its tokens joined by one space (none before `,` `)` `.` and after `(`
    `.`), comments removed, a trailing `;` dropped; literals and case are kept. Two statements
    with the same normal form differ only in whitespace and comments."""
    parts: list[str] = []
    for kind, text in tokens(sql):
        if parts and not (text in (",", ")", ".") and kind == "punct") and parts[-1] not in ("(", "."):
            parts.append(" ")
        parts.append(text)
    while parts and parts[-1] in (";", " "):
        parts.pop()
    return "".join(parts)


def one_line(sql: str) -> str:
    """The statement as written, on one line (for examples)."""
    return " ".join(sql.split())


def unquote(text: str) -> str:
    """The value of a string or number token (quotes removed, escapes undone)."""
    if text[:1] in ("'", '"'):
        q = text[0]
        body = text[1:-1] if len(text) > 1 and text.endswith(q) else text[1:]
        return re.sub(r"\\(.)", r"\1", body.replace(q + q, q))
    return text


def ident(text: str) -> str:
    """An identifier token's name: back-quotes removed (and a doubled back-quote undone)."""
    return text[1:-1].replace("``", "`") if text.startswith("`") else text


@lru_cache(maxsize=65536)
def literals(sql: str) -> tuple[str, ...]:
    """The statement's literal values (strings and numbers) in order."""
    return tuple(unquote(t) for k, t in tokens(sql) if k in ("str", "num"))


@lru_cache(maxsize=65536)
def identifiers(sql: str) -> frozenset[str]:
    """Lower-cased identifiers a statement names (literals excluded, back-quotes removed)."""
    return frozenset(ident(t).lower() for k, t in tokens(sql) if k == "ident")


@lru_cache(maxsize=65536)
def fp_of(sql: str) -> str:
    """The statement's pt-query-digest fingerprint (query_digest.fingerprint), cached."""
    return fingerprint(sql)


# -- what kind of statement ------------------------------------------------------------------

# Statements that change a table's rows or its definition. One rule for every reader: the
# tables the capture writes (db-static-cache: "never written"), the writes that end a run of
# repeats (repeated-query), the writes of a read-only request (write-on-read, which keeps the
# row writes, ROW_WRITES). Read on the normal form, so that comments of every kind (/* */, --,
# #) before the verb are skipped.
_WRITE = re.compile(r"^\(?\s*(insert|update|replace|delete|truncate|load\s+data|load\s+xml|alter|"
                    r"drop|rename|create)\b", re.I)
ROW_WRITES = ("UPDATE", "INSERT", "REPLACE", "DELETE")


def write_verb(sql: str) -> str | None:
    """The verb of a write (`is_write`), upper case, one space inside (`LOAD DATA`), or None."""
    m = _WRITE.match(normalize(sql))
    return None if m is None else " ".join(m.group(1).upper().split())


_WRITTEN = re.compile(r"^\(?\s*(?:insert(?:\s+(?:low_priority|delayed|high_priority|ignore))*\s+(?:into\s+)?|"
                      r"replace(?:\s+(?:low_priority|delayed))*\s+(?:into\s+)?|update(?:\s+(?:low_priority|ignore))*\s+|"
                      r"delete(?:\s+(?:low_priority|quick|ignore))*\s+from\s+)"
                      r"((?:`[^`]+`|\w+)(?:\.(?:`[^`]+`|\w+))?)", re.I)


def written_table(sql: str) -> str | None:
    """The table a row write (INSERT, REPLACE, UPDATE, DELETE) writes, lower case, without its
    schema; None for anything else (or a multi-table form it cannot tell)."""
    m = _WRITTEN.match(normalize(sql))
    if not m:
        return None
    return ident(m.group(1).rpartition(".")[2]).lower()


def is_write(sql: str) -> bool:
    """A statement that changes a table's rows or definition: INSERT, UPDATE, REPLACE, DELETE,
    TRUNCATE, LOAD DATA/XML, ALTER, DROP, RENAME, CREATE."""
    return write_verb(sql) is not None


_NOISE = re.compile(r"^(?:set|show|use|begin|start\s+transaction|commit|rollback|savepoint|"
                    r"release\s+savepoint|xa|lock\s+tables|unlock\s+tables|do)\b", re.I)


def is_noise(sql: str) -> bool:
    """Session and transaction control (SET, SHOW, BEGIN, COMMIT, ...): not data queries."""
    return _NOISE.match(normalize(sql)) is not None


@lru_cache(maxsize=65536)
def is_table_select(sql: str) -> bool:
    """A SELECT that reads a table (has a FROM clause). `SELECT @@sql_mode`, `SELECT 1`,
    `SELECT FOUND_ROWS()`, `SELECT GET_LOCK(...)` read session or server state instead."""
    toks = tokens(sql)
    i = 0
    while i < len(toks) and toks[i] == ("punct", "("):
        i += 1
    return (i < len(toks) and toks[i][0] == "ident" and toks[i][1].lower() == "select"
            and any(k == "ident" and t.lower() == "from" for k, t in toks[i + 1:]))


# -- single-table lookups by key -------------------------------------------------------------

_LIT = r"""(?:'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*"|(?:[-+]\s*)?(?:0x[0-9a-f]+|\d+(?:\.\d+)?(?:e[-+]?\d+)?))"""
_ID = r"(?:`(?:[^`]|``)+`|[a-z_$][\w$]*)"
_COND = r"\(?\s*(?P<q{n}>(?:{i}\.)?(?P<c{n}>{i}))\s*=\s*(?P<v{n}>{l})\s*\)?"
_POINT = re.compile(
    rf"^select\s+(?P<cols>(?:(?!\bfrom\b).)+?)\s+from\s+(?:{_ID}\.)?(?P<table>{_ID})"
    rf"(?:\s+(?:as\s+)?(?P<alias>{_ID}))?\s+where\s+"
    rf"{_COND.format(i=_ID, l=_LIT, n=1)}(?:\s+and\s+{_COND.format(i=_ID, l=_LIT, n=2)})?"
    rf"(?:\s+limit\s+\d+(?:\s*(?:,|\s+offset\s+)\s*\d+)?)?$", re.I | re.S)
_KEYWORDS = {"where", "join", "inner", "left", "right", "cross", "straight_join", "natural",
             "limit", "order", "group", "having", "union", "force", "use", "ignore", "for", "lock"}


@dataclass(frozen=True)
class PointLookup:
    table: str                      # bare table name as written (no schema, no back-quotes)
    columns: tuple[str, ...]        # WHERE columns in order
    values: tuple[str, ...]         # their literal values in this statement
    raw: tuple[str, ...] = ()       # the literals as written (quotes kept)
    qualified: tuple[str, ...] = () # the columns as written (`a.id`), for rewriting


@lru_cache(maxsize=65536)
def point_lookup(sql: str) -> PointLookup | None:
    """The statement as a single-table lookup by key (equality on one or two columns,
    optionally LIMIT), or None."""
    q = normalize(sql)
    m = _POINT.match(q)
    if not m or re.search(r"\bselect\b", m.group("cols"), re.I):
        return None
    if m.group("alias") and m.group("alias").lower() in _KEYWORDS:
        return None
    cols, vals, raw, qual = [], [], [], []
    for n in (1, 2):
        if m.group(f"c{n}"):
            cols.append(ident(m.group(f"c{n}")))
            raw.append(re.sub(r"^\+\s*|(?<=-)\s+", "", m.group(f"v{n}")))
            vals.append(unquote(raw[-1]))
            qual.append(m.group(f"q{n}"))
    return PointLookup(ident(m.group("table")), tuple(cols), tuple(vals), tuple(raw), tuple(qual))
