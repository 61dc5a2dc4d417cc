"""write-on-read: a read-only request (GET) that writes to the database, the same statement
shape on most views of a page -- MediaWiki's old `UPDATE page SET page_counter = page_counter
+ 1` on every view (docs/pathologies.md section 3). Each such write takes row locks and
forces a log flush on the hottest pages, and turns reads into contention under load."""
from __future__ import annotations

from ..findings import Evidence, Finding
from ..query_digest import fingerprint, query_id
from ..sql_text import ROW_WRITES, write_verb
from .context import Context
from .statement_time import statement_time

ID = "write-on-read"
SUBJECT = "fingerprint"  # what tells its findings apart (findings.SUBJECT_KEYS)


def is_write(sql: str) -> bool:
    """A row write (UPDATE, INSERT, REPLACE, DELETE; sql_text.write_verb): what a read-only
    request should not send. Schema statements and TRUNCATE are writes too (sql_text.is_write),
    but not this pathology's."""
    return write_verb(sql) in ROW_WRITES


def detect(ctx: Context) -> list:
    methods = {m.upper() for m in ctx.threshold(ID, "methods")}
    min_share = ctx.threshold(ID, "min_request_share")
    is_read = lambda r: r.method.upper() in methods
    findings = []
    for fp, urls, per_url in ctx.shapes_on_urls(lambda s: is_write(s.sql), min_share, among=is_read):
        example = next(s.sql for r in ctx.requests if is_read(r) for s in ctx.statements_of[r.id]
                       if is_write(s.sql) and fingerprint(s.sql) == fp)
        rids = sorted(set().union(*(per_url[u] for u in urls)))
        reads = [r for u in urls for r in ctx.by_url[u] if is_read(r)]
        sent = [s for rid in rids for s in ctx.statements_of[rid] if fingerprint(s.sql) == fp]
        count = len(sent)
        share, time_evidence, sender = statement_time(ctx, sent, "time in these writes")
        verb = write_verb(example)
        findings.append(Finding(
            id=ID, title=f"Every page view writes: {verb} on {len(urls)} read-only URL(s)",
            severity="medium", share_pct=round(share, 2),
            summary=(f"{len(rids)} of {len(reads)} GET requests to {', '.join(urls[:3])} ran `{fp}`. "
                     "A write on every view takes row locks and flushes the log on the hottest "
                     "pages; disable it, batch it, or move it to a cache."),
            evidence=[Evidence("statement shape (pt-query-digest fingerprint)", fp, f"query id {query_id(fp)}"),
                      Evidence("GET requests that sent it", f"{len(rids)} of {len(reads)}", "statements.jsonl"),
                      Evidence("executions", count, "statements.jsonl"),
                      *time_evidence,
                      Evidence("example", example, "statements.jsonl")],
            urls=urls, requests=rids[:5],
            details={"sender": sender, "fingerprint": fp, "query_id": query_id(fp), "verb": verb, "example": example}))
    return findings
