"""write-on-read: a read-only request (GET) that writes to the database, the same statement
shape on most views of a page -- MediaWiki's old `UPDATE page SET page_counter = page_counter
+ 1` on every view (docs/pathologies.md section 3). Each such write takes row locks and
forces a log flush on the hottest pages, and turns reads into contention under load."""
from __future__ import annotations

import re
from collections import defaultdict

from ..findings import Evidence, Finding
from ..query_digest import fingerprint, query_id
from .context import Context
from .statement_time import statement_time

ID = "write-on-read"
_WRITE = re.compile(r"^\s*(?:/\*.*?\*/\s*)*(UPDATE|INSERT|REPLACE|DELETE)\b", re.I | re.S)


def is_write(sql: str) -> bool:
    return _WRITE.match(sql) is not None


def detect(ctx: Context) -> list:
    methods = {m.upper() for m in ctx.threshold(ID, "methods")}
    min_share = ctx.threshold(ID, "min_request_share")
    findings = []
    # fingerprint -> url -> set of request ids that sent it
    seen: dict[str, dict[str, set]] = defaultdict(lambda: defaultdict(set))
    examples: dict[str, str] = {}
    for r in ctx.requests:
        if r.method.upper() not in methods:
            continue
        for s in ctx.statements_of[r.id]:
            if is_write(s.sql):
                fp = fingerprint(s.sql)
                seen[fp][ctx.url_of[r.id]].add(r.id)
                examples.setdefault(fp, s.sql)
    for fp, per_url in sorted(seen.items()):
        urls = sorted(u for u, rids in per_url.items()
                      if len(rids) >= min_share * sum(1 for r in ctx.by_url[u] if r.method.upper() in methods))
        if not urls:
            continue
        rids = sorted(set().union(*(per_url[u] for u in urls)))
        reads = [r for u in urls for r in ctx.by_url[u] if r.method.upper() in methods]
        sent = [s for rid in rids for s in ctx.statements_of[rid] if fingerprint(s.sql) == fp]
        count = len(sent)
        share, time_evidence, sender = statement_time(ctx, sent, "time in these writes")
        verb = _WRITE.match(examples[fp]).group(1).upper()
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
                      Evidence("example", examples[fp], "statements.jsonl")],
            urls=urls, requests=rids[:5],
            details={"sender": sender, "fingerprint": fp, "query_id": query_id(fp), "verb": verb, "example": examples[fp]}))
    return findings
