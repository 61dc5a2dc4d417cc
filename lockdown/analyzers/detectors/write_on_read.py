"""write-on-read: a read-only request (GET) that writes to the database, the same statement
shape on most views of a page -- MediaWiki's old `UPDATE page SET page_counter = page_counter
+ 1` on every view (docs/pathologies.md section 3). Each such write takes row locks and
forces a log flush on the hottest pages, and turns reads into contention under load."""
from __future__ import annotations

from dataclasses import dataclass

from ..findings import Evidence, Finding
from ..query_digest import fingerprint, query_id
from ..sql_text import ROW_WRITES, write_verb
from .context import Context
from .statement_time import StatementTime, describe_statement_time, statement_time

ID = "write-on-read"
SUBJECT = "fingerprint"  # what tells its findings apart (findings.SUBJECT_KEYS)


def is_write(sql: str) -> bool:
    """A row write (UPDATE, INSERT, REPLACE, DELETE; sql_text.write_verb): what a read-only
    request should not send. Schema statements and TRUNCATE are writes too (sql_text.is_write),
    but not this pathology's."""
    return write_verb(sql) in ROW_WRITES


@dataclass
class Case:
    """One write shape on most read-only views of some URLs."""
    fingerprint: str
    urls: list[str]
    requests: list[str]         # the read-only requests to those URLs that sent it
    reads: int                  # read-only requests to those URLs
    executions: int
    time: StatementTime
    example: str
    verb: str


def decide(ctx: Context) -> list[Case]:
    methods = {m.upper() for m in ctx.threshold(ID, "methods")}
    min_share = ctx.threshold(ID, "min_request_share")
    is_read = lambda r: r.method.upper() in methods
    cases = []
    for fp, urls, per_url in ctx.shapes_on_urls(lambda s: is_write(s.sql), min_share, among=is_read):
        example = next(s.sql for r in ctx.requests if is_read(r) for s in ctx.statements_of[r.id]
                       if is_write(s.sql) and fingerprint(s.sql) == fp)
        rids = sorted(set().union(*(per_url[u] for u in urls)))
        sent = [s for rid in rids for s in ctx.statements_of[rid] if fingerprint(s.sql) == fp]
        cases.append(Case(fp, urls, rids, sum(1 for u in urls for r in ctx.by_url[u] if is_read(r)), len(sent),
                          statement_time(ctx, sent), example, write_verb(example)))
    return cases


def detect(ctx: Context) -> list[Finding]:
    return [describe(c) for c in decide(ctx)]


def describe(c: Case) -> Finding:
    fp = c.fingerprint
    return Finding(
        id=ID, title=f"Every page view writes: {c.verb} on {len(c.urls)} read-only URL(s)",
        severity="medium", share_pct=round(c.time.share, 2),
        summary=(f"{len(c.requests)} of {c.reads} GET requests to {', '.join(c.urls[:3])} ran `{fp}`. "
                 "A write on every view takes row locks and flushes the log on the hottest "
                 "pages; disable it, batch it, or move it to a cache."),
        evidence=[Evidence("statement shape (pt-query-digest fingerprint)", fp, f"query id {query_id(fp)}"),
                  Evidence("GET requests that sent it", f"{len(c.requests)} of {c.reads}", "statements.jsonl"),
                  Evidence("executions", c.executions, "statements.jsonl"),
                  *describe_statement_time(c.time, "time in these writes"),
                  Evidence("example", c.example, "statements.jsonl")],
        urls=c.urls, requests=c.requests[:5],
        details={"sender": c.time.function, "fingerprint": fp, "query_id": query_id(fp), "verb": c.verb,
                 "example": c.example})
