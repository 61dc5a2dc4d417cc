"""Group captured SQL statements into pt-query-digest query classes.

Classes are keyed by the same fingerprint pt-query-digest uses, so a class here can be looked up
by its Query ID in a pt-query-digest report of the same slow log, and the N+1 / repeated-query
detectors (docs/pathologies.md section 4) can count a fingerprint per request.

`fingerprint` follows percona-toolkit's QueryRewriter::fingerprint (3.x), in its order, and keeps
its known quirks because matching the real tool matters more than being "right":

 1. `SELECT /*!40001 SQL_NO_CACHE */ * FROM `...` (mysqldump) -> `mysqldump`.
 2. A `/*db.tbl:N/N*/` comment (pt-table-checksum and friends) -> `percona-toolkit`.
 3. `administrator command: ...` is returned unchanged.
 4. `CALL proc(...)` -> `call proc` (lower-cased, arguments dropped; needs `(` right after
    the name).
 5. Multi-row `INSERT|REPLACE [IGNORE] INTO ... VALUES (...), (...)` is cut after the first row.
 6. `/* ... */` comments are removed, but not `/*! version */` comments; then `-- ...` and
    `# ...` comments to end of line (crude: a comment holding a quote is kept, and `--` needs
    no space after it).
 7. `USE db` (the whole statement) -> `use ?`, returned at once (not lower-cased further).
 8. Escaped quotes `\\'` `\\"` are dropped, then "..." and '...' strings become `?`.
 9. `true` / `false` (any case) become `?`.
10. Anything that looks like a number -- a digit, `+` or `-` followed by `[0-9a-f.xb+-]*`,
    matched case-sensitively *before* lower-casing and with no word boundary -- becomes `?`,
    then a leftover `x?` `b?` `.?` `+?` `-?` becomes `?`. So hex/bit literals (`0x1F`,
    `x'1F'`, `b'01'`), floats and signs collapse, and digits inside identifiers are replaced
    too: `tbl1` -> `tbl?`, `wp_2_posts` -> `wp_?_posts`, `utf8mb4` -> `utf?m?`, and a lone
    `+` / `-` operator becomes `?` (`a + 1` -> `a ? ?`). (pt-fingerprint's
    --match-embedded-numbers keeps identifier digits: `match_embedded_numbers=True`;
    --match-md5-checksums: `match_md5_checksums=True`.)
11. Leading whitespace and one trailing newline are removed; runs of space, tab, CR, LF, FF
    become one space (a single trailing space can remain, as in the real tool).
12. ASCII lower-casing (Perl `lc` on bytes), then `null` -> `?`.
13. `IN (...)`, `VALUE(...)`, `VALUES (...), (...)` holding only `?`, commas and spaces ->
    `in(?+)` / `value(?+)` / `values(?+)` (`IN (SELECT ...)` is left alone).
14. `select X union [all] select X ...` repeats of the same select -> `select X /*repeat union*/`.
15. The first `limit ?`, `limit ?, ?`, `limit ?,?` or `limit ? offset ?` -> `limit ?`.
16. After the first `order by `, every ` asc` (no word boundary) is removed.
Not normalised, as in the real tool: spaces around `=` and `,`, identifier back-quotes,
`IN` lists holding expressions or subqueries.
"""
from __future__ import annotations

import hashlib
import math
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

from ..bundle.model import RequestRecord, Statement

_A = re.ASCII  # the real tool matches bytes: \s \w \b are ASCII only
_MYSQLDUMP = re.compile(r"\ASELECT /\*!40001 SQL_NO_CACHE \*/ \* FROM `", _A)
_PT_TOOL = re.compile(r"/\*\w+\.\w+:[0-9]/[0-9]\*/", _A)
_CALL = re.compile(r"\A\s*(call\s+\S+)\(", _A | re.I)
_MULTI_INSERT = re.compile(
    r"\A((?:INSERT|REPLACE)(?: IGNORE)?\s+INTO.+?VALUES\s*\(.*?\))\s*,\s*\(", _A | re.I | re.S)
_ML_COMMENT = re.compile(r"/\*[^!].*?\*/", _A | re.S)
_OL_COMMENT = re.compile(r"(?:--|#)[^'\"\r\n]*(?=[\r\n]|\Z)", _A)
_USE = re.compile(r"\Ause \S+(?=\n?\Z)", _A | re.I)
_ESCAPED_QUOTE = re.compile(r"\\[\"']")
_DQ_STRING = re.compile(r'".*?"', re.S)
_SQ_STRING = re.compile(r"'.*?'", re.S)
_BOOL = re.compile(r"\bfalse\b|\btrue\b", _A | re.I)
_MD5 = re.compile(r"([._-])[a-f0-9]{32}")
_NUMBER = re.compile(r"[0-9+-][0-9a-f.xb+-]*")
_NUMBER_WORD = re.compile(r"\b[0-9+-][0-9a-f.xb+-]*", _A)
_LEFTOVER = re.compile(r"[xb.+-]\?")
_LEFTOVER_MD5 = re.compile(r"[xb+-]\?")
_LEADING_WS = re.compile(r"\A\s+", _A)
_WS = re.compile(r"[ \n\t\r\f]+")
_NULL = re.compile(r"\bnull\b", _A)
_LISTS = re.compile(r"\b(in|values?)(?:[\s,]*\([\s?,]*\))+", _A)
_UNION = re.compile(r"\b(select\s.*?)(?:(\sunion(?:\sall)?)\s\1)+", _A)
_LIMIT = re.compile(r"\blimit \?(?:, ?\?| offset \?)?", _A)
_ORDER_BY = re.compile(r"\bORDER BY ", _A | re.I)
_ASC = re.compile(r"(.+?)\s+ASC", _A | re.I)
_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def fingerprint(sql: str, *, match_embedded_numbers: bool = False,
                match_md5_checksums: bool = False) -> str:
    """pt-query-digest's fingerprint of `sql` (rules in the module docstring)."""
    q = sql
    if _MYSQLDUMP.search(q):
        return "mysqldump"
    if _PT_TOOL.search(q):
        return "percona-toolkit"
    if q.startswith("administrator command: "):
        return q
    m = _CALL.search(q)
    if m:
        return m.group(1).translate(_LOWER)
    m = _MULTI_INSERT.search(q)
    if m:
        q = m.group(1)
    q = _OL_COMMENT.sub("", _ML_COMMENT.sub("", q))
    q, n = _USE.subn("use ?", q)
    if n:
        return q
    q = _ESCAPED_QUOTE.sub("", q)
    q = _SQ_STRING.sub("?", _DQ_STRING.sub("?", q))
    q = _BOOL.sub("?", q)
    if match_md5_checksums:
        q = _MD5.sub(r"\1?", q)
    q = (_NUMBER_WORD if match_embedded_numbers else _NUMBER).sub("?", q)
    q = (_LEFTOVER_MD5 if match_md5_checksums else _LEFTOVER).sub("?", q)
    q = _LEADING_WS.sub("", q)
    if q.endswith("\n"):
        q = q[:-1]
    q = _WS.sub(" ", q).translate(_LOWER)
    q = _NULL.sub("?", q)
    q = _LISTS.sub(r"\1(?+)", q)
    q = _UNION.sub(r"\1 /*repeat\2*/", q)
    q = _LIMIT.sub("limit ?", q, count=1)
    m = _ORDER_BY.search(q)
    if m:
        # One pass anchored where ORDER BY ends, each match starting where the last one ended.
        pos, kept = m.end(), []
        while (a := _ASC.match(q, pos)):
            kept.append(a.group(1))
            pos = a.end()
        q = q[:m.end()] + "".join(kept) + q[pos:]
    return q


def query_id(fp: str, *, legacy: bool = False) -> str:
    """The Query ID of a fingerprint: uppercase hex MD5 of its UTF-8 bytes.

    pt-query-digest 3.x prints it as `0x` + these 32 digits (report header `ID 0x...`) and
    stores the 32 digits in its review table. 2.x used only the last 16 digits (its
    make_checksum); `legacy=True` gives that form. No `0x` prefix here.
    """
    h = hashlib.md5(fp.encode("utf-8", "surrogateescape")).hexdigest().upper()
    return h[-16:] if legacy else h


@dataclass(frozen=True)
class QueryClass:
    """One fingerprint's totals; times in microseconds, from exact values, not pt's 5% buckets.

    p95 as pt computes it (`pct95`); median is the ordinary median; stddev is the population
    deviation, pt's formula from three values up (pt's bucketed median leans high).
    """
    id: str
    fingerprint: str
    count: int
    count_per_request: float | None   # count / requests captured; None when none were
    max_per_request: int              # most executions seen in one request
    time_total: int
    time_min: int
    time_max: int
    time_avg: float
    time_p95: int
    time_median: float
    time_stddev: float
    lock_total: int
    rows_sent_total: int
    rows_sent_avg: float
    rows_examined_total: int
    rows_examined_avg: float
    rows_affected_total: int
    requests: int                     # distinct requests it ran in
    urls: int                         # distinct RequestRecord.url of those requests
    example: str                      # SQL of the slowest execution (the latest, on ties)
    # the server's plan (slow log, log_slow_verbosity=query_plan): executions with each flag
    # (full_scan, full_join, tmp_table, tmp_table_on_disk, filesort, filesort_on_disk,
    # merge_passes), over plan_known executions that had plan lines; pt-query-digest prints
    # the same as "Full scan", "Tmp table on disk", ... percentages
    plan: dict = field(default_factory=dict)
    plan_known: int = 0


def pct95(sorted_values: list[int]) -> int:
    """pt-query-digest's 95th percentile, on exact values instead of its 5% buckets.

    The tool drops the top n - floor(0.95 n) values when n >= 10 (none below 10) and reports
    the largest one left: the value of rank floor(0.95 n) (rank n, the maximum, when n < 10).
    """
    n = len(sorted_values)
    return sorted_values[(math.floor(n * 0.95) if n >= 10 else n) - 1]


def by_request(statements: Iterable[Statement]) -> dict[str, list[Statement]]:
    """Each request's statements in log order; statements tied to no request are left out."""
    out: dict[str, list[Statement]] = {}
    for s in sorted(statements, key=lambda s: s.seq):
        if s.request is not None:
            out.setdefault(s.request, []).append(s)
    return out


def digest(statements: Iterable[Statement], requests: Iterable[RequestRecord]) -> list[QueryClass]:
    """Query classes, most total time first (ties by fingerprint)."""
    url_of = {r.id: r.url for r in requests}
    groups: dict[str, list[Statement]] = {}
    for s in sorted(statements, key=lambda s: s.seq):
        groups.setdefault(fingerprint(s.sql), []).append(s)
    out = []
    for fp, ss in groups.items():
        n = len(ss)
        times = sorted(s.duration_us for s in ss)
        per_req: dict[str, int] = {}
        for s in ss:
            if s.request is not None:
                per_req[s.request] = per_req.get(s.request, 0) + 1
        worst = max(reversed(ss), key=lambda s: s.duration_us)  # latest of the slowest
        sent = sum(s.rows_sent for s in ss)
        examined = sum(s.rows_examined for s in ss)
        out.append(QueryClass(
            id=query_id(fp), fingerprint=fp, count=n,
            count_per_request=n / len(url_of) if url_of else None,
            max_per_request=max(per_req.values(), default=0),
            time_total=sum(times), time_min=times[0], time_max=times[-1],
            time_avg=sum(times) / n, time_p95=pct95(times),
            time_median=statistics.median(times), time_stddev=statistics.pstdev(times),
            lock_total=sum(s.lock_us for s in ss),
            rows_sent_total=sent, rows_sent_avg=sent / n,
            rows_examined_total=examined, rows_examined_avg=examined / n,
            rows_affected_total=sum(s.rows_affected or 0 for s in ss),
            requests=len(per_req),
            urls=len({url_of[r] for r in per_req if url_of.get(r) is not None}),
            example=worst.sql, plan=plan_counts(ss), plan_known=sum(1 for s in ss if s.plan is not None)))
    out.sort(key=lambda c: (-c.time_total, c.fingerprint))
    return out


def plan_counts(statements: Iterable[Statement]) -> dict[str, int]:
    """Executions with each plan flag, in the server's order (flags never seen left out)."""
    counts = Counter(f for s in statements for f in (s.plan or ()))
    order = ("full_scan", "full_join", "tmp_table", "tmp_table_on_disk", "filesort", "filesort_on_disk",
             "merge_passes")
    return {f: counts[f] for f in order if counts[f]}


def plan_text(plan: dict, known: int) -> str:
    """A class's plan flags in words, each with the share of its executions: "full scan 100%,
    filesort 50%"; "-" when no execution had plan lines, "" when none was flagged."""
    if not known:
        return "-"
    return ", ".join(f"{PLAN_LABELS.get(f, f.replace('_', ' '))} {100 * n / known:.0f}%" for f, n in plan.items())


# MariaDB logs Filesort_on_disk: No beside Merge_passes: 1 -- the sort still went to temporary files
PLAN_LABELS = {"merge_passes": "sort merged from temporary files"}
