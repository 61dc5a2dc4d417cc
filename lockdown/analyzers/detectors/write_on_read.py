"""write-on-read: a read-only request (GET) that writes to the database, the same statement
shape on most views of a page -- MediaWiki's old `UPDATE page SET page_counter = page_counter
+ 1` on every view (docs/pathologies.md section 3). Each such write takes row locks and
forces a log flush on the hottest pages, and turns reads into contention under load. Writes
sent after the app released its response (fastcgi_finish_request, then shutdown functions:
`Context.after_release`) are left out: the page did not wait for them. A write that a logging
function sends, once per call (`log_sender`: Drupal's `watchdog`, bulletin's `bb_log`), is a
log entry: the finding names that cause (`details.cause`) and advises fixing what is logged,
not the write (docs/pathologies.md section 1; php-warning reports a logged PHP warning). A write
to a table whose name says it is a cache (`objectcache`, `cache_page`) is a cache refill
(`details.refills`): the fix is an in-memory cache, not removing the write."""
from __future__ import annotations

from dataclasses import dataclass

import re

from ..findings import Evidence, Finding
from ..query_digest import fingerprint, query_id
from ..sql_text import ROW_WRITES, write_verb, written_table
from .call_sender import xhprof_sender
from .context import Context
from .statement_time import StatementTime, describe_statement_time, statement_time

ID = "write-on-read"
SUBJECT = "fingerprint"  # what tells its findings apart (findings.SUBJECT_KEYS)

# Words of a function name that make it a logger (`bb_log`, `watchdog`, `dblog_watchdog`,
# `Psr\Log\LoggerInterface::warning`, `Monolog\Logger::addRecord`); whole words, so that
# `Catalog\...`, `blog_*` and `login` are not.
LOG_WORDS = frozenset({"log", "logs", "logger", "logging", "watchdog", "syslog", "dblog", "monolog", "errorlog"})
_WORDS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")


def is_logger(function: str) -> bool:
    """A function whose name (its words: snake_case, CamelCase, namespaces) says it logs."""
    return any(w.lower() in LOG_WORDS for w in _WORDS.findall(function))


def log_sender(ctx: Context, sent: list) -> str | None:
    """The logging function that sends these writes, one per call, in the xhprof call graph
    (`call_sender`, restricted to `is_logger` names; once a request is enough here, the name
    tells it from the page), or None."""
    return xhprof_sender(ctx, sent, accept=is_logger, min_calls=1)


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
    cause: str | None = None    # the logging function that sends it (`log_sender`): a log write
    refills: str | None = None  # the cache table it writes (a name holding "cache"): a cache refill


def decide(ctx: Context) -> list[Case]:
    methods = {m.upper() for m in ctx.threshold(ID, "methods")}
    min_share = ctx.threshold(ID, "min_request_share")

    def is_read(request) -> bool:
        return request.method.upper() in methods

    # a write sent after the response was released (deferred with fastcgi_finish_request) is off
    # the response path: the page does not wait for it
    def on_path(statement) -> bool:
        return is_write(statement.sql) and statement.seq not in ctx.after_release

    cases = []
    for fp, urls, per_url in ctx.shapes_on_urls(on_path, min_share, among=is_read):
        example = next(s.sql for r in ctx.requests if is_read(r) for s in ctx.statements_of[r.id]
                       if is_write(s.sql) and fingerprint(s.sql) == fp)
        rids = sorted(set().union(*(per_url[u] for u in urls)))
        sent = [s for rid in rids for s in ctx.statements_of[rid] if fingerprint(s.sql) == fp and on_path(s)]
        cases.append(Case(fp, urls, rids, sum(1 for u in urls for r in ctx.by_url[u] if is_read(r)), len(sent),
                          statement_time(ctx, sent), example, write_verb(example)))
    for c in cases:
        c.cause = log_sender(ctx, [s for rid in c.requests for s in ctx.statements_of[rid]
                                   if fingerprint(s.sql) == c.fingerprint])
        table = written_table(c.example)
        if c.cause is None and table and "cache" in table:
            c.refills = table
    return cases


def cause_of(c: Case) -> dict | None:
    if c.cause:
        return {"kind": "log write", "function": c.cause}
    if c.refills:
        return {"kind": "cache refill", "table": c.refills}
    return None


def describe_advice(c: Case) -> str:
    if c.cause:
        return (f"It is a log entry: the logging function `{c.cause}` sends it, once per write. The "
                "cause is what is logged on every view (a PHP warning, a missing module: see the "
                "php-warning finding when there is one); fix that, and the write goes with it.")
    if c.refills:
        return (f"It refills a cache kept in the database table `{c.refills}`: the app keeps it there because "
                "no in-memory cache is configured (or its entries do not last a view), so every view writes "
                "it again. The fix is configuring a local in-memory cache (APCu, or Memcached or Redis for "
                "several servers) for it, not removing the write; for MediaWiki, `$wgMainCacheType = "
                "CACHE_ACCEL;` with APCu.")
    return ("A write on every view takes row locks and flushes the log on the hottest "
            "pages; disable it, batch it, or move it to a cache.")


def detect(ctx: Context) -> list[Finding]:
    return [describe(c) for c in decide(ctx)]


def describe(c: Case) -> Finding:
    fp = c.fingerprint
    return Finding(
        id=ID, title=f"Every page view writes: {c.verb} on {len(c.urls)} read-only URL(s)",
        severity="medium", share_pct=round(c.time.share, 2),
        summary=(f"{len(c.requests)} of {c.reads} GET requests to {', '.join(c.urls[:3])} ran `{fp}`. "
                 + describe_advice(c)),
        evidence=[Evidence("statement shape (pt-query-digest fingerprint)", fp, f"query id {query_id(fp)}"),
                  Evidence("GET requests that sent it", f"{len(c.requests)} of {c.reads}", "statements.jsonl"),
                  Evidence("executions", c.executions, "statements.jsonl"),
                  *describe_statement_time(c.time, "time in these writes"),
                  Evidence("example", c.example, "statements.jsonl"),
                  *([Evidence("sent by a logging function, once per write", c.cause,
                              "xhprof call graph of the instrumented requests (call_sender)")] if c.cause else []),
                  *([Evidence("table written, a cache by its name", c.refills, "the statement")] if c.refills else [])],
        urls=c.urls, requests=c.requests[:5],
        details={"sender": c.time.function, "fingerprint": fp, "query_id": query_id(fp), "verb": c.verb,
                 "example": c.example, "cause": cause_of(c), "refills": c.refills})
