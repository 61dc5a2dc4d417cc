"""repeated-query: the very same SELECT -- same shape and same literals -- sent several times in
one request (docs/pathologies.md section 4).

Mechanism
    A helper that reads a setting, the current user or a term is called from many places while
    a page renders and asks the database every time (minicms's `setting('site_name')`, once per
    block). The answer cannot change within the request unless the request itself writes the
    table, so every execution after the first is a wasted round trip.

Signature
    In one request, one statement text -- comments removed and whitespace normalised (tokens
    joined by single spaces), literals and case kept -- runs at least `min_executions` times
    with no write between those executions to a table it reads (a write statement naming the
    table restarts the count: the repeat after it may see new data). That on at least
    `min_request_share` of a URL's requests. One finding per statement text.

Ignored, and why
    - Anything but a SELECT that reads a table. Transaction and session control (BEGIN, START
      TRANSACTION, COMMIT, ROLLBACK, SAVEPOINT, SET NAMES, SET ..., SHOW ..., USE, LOCK TABLES)
      and SELECTs without FROM (`SELECT @@SESSION.sql_mode`, `SELECT 1` pings,
      `SELECT FOUND_ROWS()`, `SELECT LAST_INSERT_ID()`, `SELECT GET_LOCK(...)`) are driver or
      framework housekeeping whose answer is session state, not table data: a memo of table data
      is wrong for them (session-probe reports the costly repeats of SELECTs without FROM).
      Writes repeat for other reasons (write-on-read covers the costly kind).
    - SELECTs whose answer may change between two identical executions: locking reads
      (`FOR UPDATE`, `LOCK IN SHARE MODE`, `FOR SHARE`) and calls of non-deterministic or
      session functions (NOW, RAND, UUID, SYSDATE, CURRENT_TIMESTAMP, UNIX_TIMESTAMP, FOUND_ROWS,
      LAST_INSERT_ID, ROW_COUNT, CONNECTION_ID, GET_LOCK, RELEASE_LOCK, SLEEP, NEXTVAL, ...).
    - Executions separated by a write to a table the SELECT reads (counted as separate runs).
    - Statements of a loop that n-plus-one or db-static-cache reports in the same request
      (batching or a static cache removes those repeats too; one finding per cause).
    - lockdown's own statements (`lockdown-capture` markers).

Share of request time
    `share_pct`: what the executions a per-request memo would save cost timed requests -- every
    execution after the first of each write-free run -- as % of their wall time
    (`statement_time`: server time plus one round trip each -- measured on the instrumented
    requests, at most what each timed request's statements left of its wall time --, or what PHP spends under
    the sender the statements name, whichever is larger). Severity
    follows `findings.severity_for(share_pct)`.

Details
    `statement` (normal form), `fingerprint`, `query_id`, `tables` (read), `executions_per_request`
    and `longest_run_per_request` (min, median, max over the reported requests),
    `saved_per_request` (executions a memo saves), `per_url`.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from functools import lru_cache

from ...bundle.model import Statement
from ..findings import Evidence, Finding, severity_for
from ..query_digest import query_id
from . import db_static_cache, n_plus_one
from .context import Context
from .statement_time import SHARE_SOURCE, StatementTime, describe_statement_time, statement_time
from ..sql_text import fp_of, ident, identifiers, is_marker, is_table_select, is_write, normalize, tokens
from .figures import busiest_url, spread, spread_by_url

ID = "repeated-query"
SUBJECT = "statement"  # what tells its findings apart (findings.SUBJECT_KEYS)

_VOLATILE = {"rand", "uuid", "uuid_short", "now", "sysdate", "curdate", "curtime", "current_timestamp",
             "current_date", "current_time", "utc_timestamp", "utc_date", "utc_time", "localtime",
             "localtimestamp", "unix_timestamp", "found_rows", "last_insert_id", "row_count",
             "connection_id", "get_lock", "release_lock", "is_free_lock", "is_used_lock", "sleep",
             "nextval", "lastval", "benchmark"}


@lru_cache(maxsize=65536)
def memoizable(sql: str) -> bool:
    """A SELECT reading a table whose answer only the tables decide (see the module docstring)."""
    if not is_table_select(sql):
        return False
    words = [t.lower() for k, t in tokens(sql) if k == "ident"]
    if _VOLATILE & set(words):
        return False
    pairs = set(zip(words, words[1:]))
    return not ({("for", "update"), ("for", "share"), ("share", "mode")} & pairs)


@lru_cache(maxsize=65536)
def tables_read(sql: str) -> frozenset[str]:
    """Lower-cased names after FROM / JOIN (and after commas of a FROM list); schema dropped."""
    toks = tokens(sql)
    out = set()
    i = 0
    while i < len(toks):
        k, t = toks[i]
        if k == "ident" and t.lower() in ("from", "join"):
            j = i + 1
            while j < len(toks) and toks[j][0] == "ident":
                name = toks[j][1]
                if j + 2 < len(toks) and toks[j + 1] == ("punct", ".") and toks[j + 2][0] == "ident":
                    j += 2
                    name = toks[j][1]
                out.add(ident(name).lower())
                j += 1
                # an alias, then a comma continues the FROM list
                if j < len(toks) and toks[j][0] == "ident" and toks[j][1].lower() == "as":
                    j += 1
                if j < len(toks) and toks[j][0] == "ident" and toks[j][1].lower() not in _CLAUSE:
                    j += 1
                if j < len(toks) and toks[j] == ("punct", ","):
                    j += 1
                    continue
                break
            i = j
        else:
            i += 1
    return frozenset(out)


_CLAUSE = {"where", "join", "inner", "left", "right", "cross", "straight_join", "natural", "on",
           "using", "limit", "order", "group", "having", "union", "force", "use", "ignore", "for",
           "lock", "window", "procedure", "into"}


@dataclass
class Repeat:
    """One statement text's executions in one request."""
    request: str
    url: str
    text: str
    statements: list[Statement] = field(default_factory=list)
    saved: list[Statement] = field(default_factory=list)   # executions after the first of a run
    longest: int = 0

    @property
    def executions(self) -> int:
        return len(self.statements)


def _repeats(ctx: Context, rid: str, skip: set[tuple[str, str]]) -> list[Repeat]:
    stmts = ctx.statements_of[rid]
    url = ctx.url_of[rid]
    found: dict[str, Repeat] = {}
    run: dict[str, int] = {}
    for s in stmts:
        if is_marker(s.sql):
            continue
        if is_write(s.sql):
            touched = identifiers(s.sql)
            for text in run:
                if tables_read(text) & touched:
                    run[text] = 0
            continue
        if not memoizable(s.sql) or (rid, fp_of(s.sql)) in skip:
            continue
        text = normalize(s.sql)
        rep = found.setdefault(text, Repeat(rid, url, text))
        rep.statements.append(s)
        run[text] = run.get(text, 0) + 1
        if run[text] > 1:
            rep.saved.append(s)
        rep.longest = max(rep.longest, run[text])
    return list(found.values())


def flagged(ctx: Context) -> list[Repeat]:
    """The repeats this detector reports (one per request and statement text)."""
    min_exec = ctx.threshold(ID, "min_executions")
    min_share = ctx.threshold(ID, "min_request_share")
    skip = {(lp.request, lp.fingerprint) for lp in n_plus_one.flagged(ctx)}
    skip |= {(lp.request, lp.fingerprint) for lp in db_static_cache.flagged(ctx)}
    per_url: dict[tuple[str, str], list[Repeat]] = defaultdict(list)
    for r in ctx.requests:
        for rep in _repeats(ctx, r.id, skip):
            if rep.longest >= min_exec:
                per_url[(rep.text, rep.url)].append(rep)
    return [rep for (text, url), reps in per_url.items() if len(reps) >= min_share * len(ctx.by_url[url])
            for rep in reps]


@dataclass
class Case:
    """One statement text repeated in the reported requests."""
    text: str
    fingerprint: str
    urls: list[str]
    requests: list[str]             # the reported requests, sorted
    on_urls: int                    # requests to those URLs
    executions: dict                # per request (spread), and the longest write-free run
    longest: dict
    saved: dict                     # executions a per-request memo saves, per request
    time: StatementTime             # of the saved executions
    total_share: float              # of all its executions there, % of timed requests' wall time
    tables: list[str]
    per_url: dict


def decide(ctx: Context) -> list[Case]:
    by_text: dict[str, list[Repeat]] = defaultdict(list)
    for rep in flagged(ctx):
        by_text[rep.text].append(rep)
    cases = []
    for text, reps in by_text.items():
        reps.sort(key=lambda rep: rep.request)
        urls = sorted({rep.url for rep in reps})
        cases.append(Case(
            text=text, fingerprint=fp_of(reps[0].statements[0].sql), urls=urls,
            requests=[rep.request for rep in reps], on_urls=sum(len(ctx.by_url[u]) for u in urls),
            executions=spread([rep.executions for rep in reps]), longest=spread([rep.longest for rep in reps]),
            saved=spread([len(rep.saved) for rep in reps]),
            time=statement_time(ctx, (s for rep in reps for s in rep.saved),
                                of=(s for rep in reps for s in rep.statements)),
            total_share=ctx.share_of(s for rep in reps for s in rep.statements),
            tables=sorted(tables_read(text)),
            per_url=spread_by_url(ctx, reps, urls, "with_repeats", "executions_per_request")))
    cases.sort(key=lambda c: (-(round(c.time.share, 2) or 0), c.text))
    return cases


def detect(ctx: Context) -> list[Finding]:
    return [describe(c) for c in decide(ctx)]


def describe(c: Case) -> Finding:
    text, fp, execs, saved, urls = c.text, c.fingerprint, c.executions, c.saved, c.urls
    source = f"statements.jsonl, {len(c.requests)} requests"
    short = text if len(text) <= 100 else text[:97] + "..."
    busiest = busiest_url(c.per_url)
    plain = f"{execs['median']:g} times per request"
    where = f"{', '.join(urls[:3])}{' ...' if len(urls) > 3 else ''}"
    how_often = (f"{busiest}, a median of {execs['median']:g} over its {len(c.requests)} requests" if busiest
                 else f"{plain} (median; {execs['min']}-{execs['max']}) on {where}")
    summary = (
        f"`{short}` ran {how_often}, the same text each time and "
        f"no write to {', '.join(f'`{t}`' for t in c.tables)} in between: every execution after the "
        "first asks a question already answered. Remember the result for the rest of the request "
        "(a static variable or a per-request cache in the function that sends it).")
    return Finding(
        id=ID, title=f"Same query {busiest or plain}: {short}",
        severity=severity_for(c.time.share), share_pct=round(c.time.share, 2), summary=summary,
        evidence=[
            Evidence("statement (comments removed, whitespace normalised)", text, f"request {c.requests[0]}"),
            Evidence("statement shape (pt-query-digest fingerprint)", fp, f"query id {query_id(fp)}"),
            Evidence("executions per request (min/median/max)",
                     f"{execs['min']}/{execs['median']}/{execs['max']}", source),
            Evidence("executions a per-request memo saves (min/median/max)",
                     f"{saved['min']}/{saved['median']}/{saved['max']}", source),
            Evidence("requests with the repeats", f"{len(c.requests)} of {c.on_urls}",
                     "requests.jsonl, statements.jsonl"),
            *describe_statement_time(c.time, "time in the saved executions"),
            Evidence("time in all its executions on these URLs, % of timed requests' wall time"
                     + (" (server time + one round trip each)" if c.time.round_trip is not None else
                        " (server side only)"), round(c.total_share, 2), SHARE_SOURCE),
        ],
        urls=urls, requests=c.requests[:5],
        details={"sender": c.time.function, "statement": text, "fingerprint": fp, "query_id": query_id(fp),
                 "tables": c.tables, "executions_per_request": execs, "longest_run_per_request": c.longest,
                 "saved_per_request": saved, "per_url": c.per_url})
