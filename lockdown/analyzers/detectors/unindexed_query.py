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
from dataclasses import dataclass

from ..findings import Evidence, Finding, severity_for
from ..query_digest import fingerprint, plan_counts, plan_text, query_id
from ..sql_text import FROM, ORDER_BY, is_select, without_strings
from .context import Context
from .statement_time import StatementTime, describe_statement_time, statement_time

ID = "unindexed-query"
SUBJECT = "fingerprint"  # what tells its findings apart (findings.SUBJECT_KEYS)
_WHERE = re.compile(r"\bWHERE\b(.*?)(?:\bGROUP\s+BY\b|\bORDER\s+BY\b|\bLIMIT\b|\bHAVING\b|$)", re.I | re.S)
_COND_COL = re.compile(r"(?:`?\w+`?\.)?`?([A-Za-z_]\w*)`?\s*"
                       r"(?:=|<=?|>=?|<>|!=|\bIN\b|\bLIKE\b|\bBETWEEN\b|\bIS\b)", re.I)
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


@dataclass
class Case:
    """One SELECT shape that scans on most views of some URLs."""
    fingerprint: str
    urls: list[str]
    requests: list[str]             # those that sent a scanning execution, sorted
    on_urls: int                    # requests to those URLs
    examined: float                 # per scanning execution (median), and returned, server time
    returned: float
    server_us: float
    per_request: float              # scanning executions per request (median)
    time: StatementTime
    example: str                    # the execution that examined most rows
    table: str | None               # the index hint: the first FROM table and the columns
    columns: list[str]
    plan: dict                      # the server's plan flags over the scanning executions
    plan_known: int                 # executions with plan lines
    full_scans: int                 # of those, flagged Full_scan


def decide(ctx: Context) -> list[Case]:
    min_rows = ctx.threshold(ID, "min_rows_examined")
    min_ratio = ctx.threshold(ID, "min_examined_per_row")
    min_share = ctx.threshold(ID, "min_request_share")
    cases = []
    for fp, urls, per_url in ctx.shapes_on_urls(
            lambda s: scans(s, min_rows, min_ratio) and is_filtered_select(s.sql), min_share):
        rids = sorted(set().union(*(per_url[u] for u in urls)))
        sent = [s for rid in rids for s in ctx.statements_of[rid]
                if scans(s, min_rows, min_ratio) and fingerprint(s.sql) == fp]
        example = max(sent, key=lambda s: s.rows_examined).sql
        table, cols = index_hint(example)
        known = [s for s in sent if s.plan is not None]
        cases.append(Case(
            fingerprint=fp, urls=urls, requests=rids, on_urls=len([r for u in urls for r in ctx.by_url[u]]),
            examined=statistics.median(s.rows_examined for s in sent),
            returned=statistics.median(s.rows_sent for s in sent),
            server_us=statistics.median(s.duration_us for s in sent),
            per_request=statistics.median(sum(1 for s in sent if s.request == rid) for rid in rids),
            time=statement_time(ctx, sent), example=example, table=table, columns=cols,
            plan=plan_counts(sent), plan_known=len(known), full_scans=sum("full_scan" in s.plan for s in known)))
    return cases


def detect(ctx: Context) -> list[Finding]:
    return [describe(c) for c in decide(ctx)]


def describe_plan(c: Case) -> list[Evidence]:
    """What the server itself says of its plan for these executions (slow log query_plan flags):
    a full scan confirms the missing index; an index used badly shows none."""
    if not c.plan_known:
        return []
    others = {f: n for f, n in c.plan.items() if f != "full_scan"}
    return [Evidence("executions the server ran as a full table scan",
                     f"{c.full_scans} of {c.plan_known}"
                     + (f"; also {plan_text(others, c.plan_known)}" if others else ""),
                     "slow log Full_scan (log_slow_verbosity=query_plan)")]


def describe(c: Case) -> Finding:
    fp, urls = c.fingerprint, c.urls
    hint = (f"an index on `{c.table}` ({', '.join(c.columns)})" if c.table and c.columns else
            "an index on the columns its WHERE clause compares")
    return Finding(
        id=ID, title=f"A query reads {c.examined:.0f} rows to return {c.returned:.0f} on {len(urls)} URL(s)",
        severity=severity_for(c.time.share), share_pct=round(c.time.share, 2),
        summary=(f"`{fp}` examined {c.examined:.0f} rows per execution (median) to return "
                 f"{c.returned:.0f}, {c.server_us / 1000:.1f} ms in the server each, on {len(c.requests)} of "
                 f"{c.on_urls} requests to {', '.join(urls[:3])}{' ...' if len(urls) > 3 else ''}. "
                 f"The server reads the table (or most of it) for every execution, so the page "
                 f"slows down as the table grows: a column it filters on has no usable index. "
                 f"Check with EXPLAIN (type ALL, or rows far above what it returns) and add {hint}."),
        evidence=[Evidence("statement shape (pt-query-digest fingerprint)", fp, f"query id {query_id(fp)}"),
                  Evidence("rows examined per execution (median)", round(c.examined), "slow log Rows_examined"),
                  Evidence("rows returned per execution (median)", round(c.returned), "slow log Rows_sent"),
                  Evidence("server time per execution (median, us)", round(c.server_us), "slow log Query_time"),
                  Evidence("executions per request (median)", c.per_request, "statements.jsonl"),
                  Evidence("requests with the scan", f"{len(c.requests)} of {c.on_urls}", "statements.jsonl"),
                  *describe_statement_time(c.time, "time in these statements"),
                  *describe_plan(c),
                  Evidence("index to try (WHERE columns, then ORDER BY)", hint,
                           "the example's text; check with EXPLAIN"),
                  Evidence("example", c.example, "statements.jsonl")],
        urls=urls, requests=c.requests[:5],
        details={"fingerprint": fp, "query_id": query_id(fp), "table": c.table, "columns": c.columns,
                 "rows_examined": c.examined, "rows_sent": c.returned, "example": c.example,
                 "plan": c.plan, "plan_known": c.plan_known})
