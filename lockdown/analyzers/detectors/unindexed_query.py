"""unindexed-query: a SELECT that reads far more rows than it returns on most views of a page
-- a lookup by a column with no index, so the server scans the table for each execution.

Mechanism: a table that grew after launch (comments, orders, log rows) is filtered by a column
nobody indexed (`SELECT ... FROM comments WHERE post_id = 12 ORDER BY created_at LIMIT 20`):
MariaDB reads every row (EXPLAIN: type ALL, "Using where; Using filesort") to return twenty. Its
cost grows with the table, not with the page.

Signature, from the slow log's own counters: executions whose `rows_examined` is at least
`min_rows_examined` and at least `min_examined_per_row` times the rows they returned, on at least
`min_request_share` of a URL's requests, with a WHERE clause (a full read asked for, a report
or a COUNT(*) of the whole table, is not a missing index).

Not flagged: statements without WHERE; writes (write-on-read's); small tables (under
`min_rows_examined`, a scan costs less than an index lookup's round trip); lockdown's own
capture markers. The share is statement_time's (server time plus one round trip each).
The proposed index (the WHERE clause's columns, then ORDER BY's) is a suggestion to check with
EXPLAIN, not a checked patch: the capture does not know the table's existing indexes."""
from __future__ import annotations

import re
import statistics

from ..findings import Evidence, Finding, severity_for
from ..query_digest import fingerprint, plan_counts, plan_text, query_id
from ..sql_text import FROM, ORDER_BY, is_select, without_strings
from .context import Context
from .statement_time import statement_time

ID = "unindexed-query"
SUBJECT = "fingerprint"  # what tells its findings apart (findings.SUBJECT_KEYS)
_WHERE = re.compile(r"\bWHERE\b(.*?)(?:\bGROUP\s+BY\b|\bORDER\s+BY\b|\bLIMIT\b|\bHAVING\b|$)", re.I | re.S)
_COND_COL = re.compile(r"(?:`?\w+`?\.)?`?([A-Za-z_]\w*)`?\s*(?:=|<=?|>=?|<>|!=|\bIN\b|\bLIKE\b|\bBETWEEN\b|\bIS\b)", re.I)
_ORDER_COL = re.compile(r"(?:`?\w+`?\.)?`?([A-Za-z_]\w*)`?\s*(?:ASC|DESC)?\s*(?:,|$)", re.I)


def is_filtered_select(sql: str) -> bool:
    """A SELECT with a WHERE clause (outside string literals), not one of lockdown's markers."""
    return is_select(sql) and _WHERE.search(without_strings(sql)) is not None


def index_hint(sql: str) -> tuple[str | None, list[str]]:
    """(table, columns) an index could serve: the first FROM table, the columns the WHERE
    clause compares, then the ORDER BY columns; a hint for EXPLAIN, not a checked fix."""
    text = without_strings(sql)
    m = FROM.search(text)
    table = (m.group(2) or m.group(1)) if m else None
    cols: list[str] = []
    where = _WHERE.search(text)
    order = ORDER_BY.search(text)
    for part, pattern in ((where.group(1) if where else "", _COND_COL), (order.group(1) if order else "", _ORDER_COL)):
        for c in pattern.findall(part.strip()):
            if c.upper() not in {"AND", "OR", "NOT", "NULL"} and c not in cols:
                cols.append(c)
    return table, cols


def scans(s, min_rows: int, min_ratio: float) -> bool:
    return s.rows_examined >= min_rows and s.rows_examined >= min_ratio * max(s.rows_sent, 1)


def plan_evidence(sent: list) -> list[Evidence]:
    """What the server itself says of its plan for these executions (slow log query_plan flags):
    a full scan confirms the missing index; an index used badly shows none."""
    known = [s for s in sent if s.plan is not None]
    if not known:
        return []
    others = {f: n for f, n in plan_counts(known).items() if f != "full_scan"}
    return [Evidence("executions the server ran as a full table scan",
                     f"{sum('full_scan' in s.plan for s in known)} of {len(known)}"
                     + (f"; also {plan_text(others, len(known))}" if others else ""),
                     "slow log Full_scan (log_slow_verbosity=query_plan)")]


def detect(ctx: Context) -> list:
    min_rows = ctx.threshold(ID, "min_rows_examined")
    min_ratio = ctx.threshold(ID, "min_examined_per_row")
    min_share = ctx.threshold(ID, "min_request_share")
    findings = []
    for fp, urls, per_url in ctx.shapes_on_urls(
            lambda s: scans(s, min_rows, min_ratio) and is_filtered_select(s.sql), min_share):
        rids = sorted(set().union(*(per_url[u] for u in urls)))
        sent = [s for rid in rids for s in ctx.statements_of[rid]
                if scans(s, min_rows, min_ratio) and fingerprint(s.sql) == fp]
        examined = statistics.median(s.rows_examined for s in sent)
        returned = statistics.median(s.rows_sent for s in sent)
        server_us = statistics.median(s.duration_us for s in sent)
        per_request = statistics.median(sum(1 for s in sent if s.request == rid) for rid in rids)
        share, time_evidence, _sender = statement_time(ctx, sent, "time in these statements")
        example = max(sent, key=lambda s: s.rows_examined).sql
        table, cols = index_hint(example)
        hint = (f"an index on `{table}` ({', '.join(cols)})" if table and cols else
                "an index on the columns its WHERE clause compares")
        reads = len([r for u in urls for r in ctx.by_url[u]])
        findings.append(Finding(
            id=ID, title=f"A query reads {examined:.0f} rows to return {returned:.0f} on {len(urls)} URL(s)",
            severity=severity_for(share), share_pct=round(share, 2),
            summary=(f"`{fp}` examined {examined:.0f} rows per execution (median) to return "
                     f"{returned:.0f}, {server_us / 1000:.1f} ms in the server each, on {len(rids)} of "
                     f"{reads} requests to {', '.join(urls[:3])}{' ...' if len(urls) > 3 else ''}. "
                     f"The server reads the table (or most of it) for every execution, so the page "
                     f"slows down as the table grows: a column it filters on has no usable index. "
                     f"Check with EXPLAIN (type ALL, or rows far above what it returns) and add {hint}."),
            evidence=[Evidence("statement shape (pt-query-digest fingerprint)", fp, f"query id {query_id(fp)}"),
                      Evidence("rows examined per execution (median)", round(examined), "slow log Rows_examined"),
                      Evidence("rows returned per execution (median)", round(returned), "slow log Rows_sent"),
                      Evidence("server time per execution (median, us)", round(server_us), "slow log Query_time"),
                      Evidence("executions per request (median)", per_request, "statements.jsonl"),
                      Evidence("requests with the scan", f"{len(rids)} of {reads}", "statements.jsonl"),
                      *time_evidence,
                      *plan_evidence(sent),
                      Evidence("index to try (WHERE columns, then ORDER BY)", hint, "the example's text; check with EXPLAIN"),
                      Evidence("example", example, "statements.jsonl")],
            urls=urls, requests=rids[:5],
            details={"fingerprint": fp, "query_id": query_id(fp), "table": table, "columns": cols,
                     "rows_examined": examined, "rows_sent": returned, "example": example,
                     "plan": plan_counts(sent), "plan_known": sum(1 for s in sent if s.plan is not None)}))
    return findings
