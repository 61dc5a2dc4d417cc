"""n-plus-one: one query per row -- a loop that runs the same SELECT shape many times in one
request with a different literal each time (docs/pathologies.md section 4).

Mechanism
    Code fetches a list (posts), then for each row asks for what belongs to it
    (`SELECT id, name FROM authors WHERE id = 17`, `... = 18`, ...). Each execution is a
    round trip with its own parse, plan and network latency, so 30 rows cost 31 queries where
    one `... WHERE id IN (17, 18, ...)` or a join would do.

Signature
    In one request, one pt-query-digest fingerprint of a SELECT that reads a table
    - runs at least `min_executions` times,
    - with at least two different literal sets, and either a parent query was found or at
      least `min_distinct_share` of the executions have different literals (mostly the same
      literals, no parent: a repeated query, repeated-query's finding -- the fix is a memo);
    - on at least `min_request_share` of a URL's requests.
    The parent query is the statement that returned the rows the loop walks: the nearest of
    the `parent_window` data statements before the loop's first execution that is a SELECT and
    returned exactly as many rows as the loop ran (or as many as it had different literals, for a
    loop that memoizes duplicates), at least 2. It is evidence, and decides the boundary with
    db-static-cache.

Boundary with db-static-cache (the rule both detectors apply)
    A localisation lookup is also "many executions with different literals". A loop with no
    parent query, whose fingerprint is a single-table key lookup on a table the capture never
    writes and whose keys repeat across requests (db_static_cache.static_fingerprints), is
    static data: db-static-cache's, reported there if it meets that detector's thresholds and
    not here in any case. A loop that follows its parent query is N+1 even if its keys repeat on
    every view (a listing shows the same authors each time); so is a loop whose keys change
    between requests, or one on a table the capture writes.

Not flagged
    - Writes (a loop of INSERTs is batched with a multi-row INSERT, a different fix), SELECTs
      that read no table (`SELECT @@...`, `SELECT GET_LOCK(...)`), SET/SHOW/transaction control.
    - A loop on fewer than `min_request_share` of its URL's requests.
    - The static lookups above. On WordPress: the ~11 `SELECT option_value FROM wp_options WHERE
      option_name = '...' LIMIT 1` per page (options that are not autoloaded, the same names
      on every view, no parent query) are static lookups, not N+1.
    - lockdown's own statements (`lockdown-capture` markers).

Share of request time
    `share_pct`: what the loop's executions cost timed requests, as % of their wall time
    (`statement_time`: server time plus one round trip each -- measured on the instrumented
    requests, at most what each timed request's statements left of its wall time --, or what PHP spends under
    the sender the statements name, whichever is larger); the batched query that replaces them
    costs something too. Severity follows
    `findings.severity_for(share_pct)`.

Details
    `fingerprint`, `query_id`, `table`/`key_columns`/`varying_columns` (when the loop is a
    single-table key lookup), `executions_per_request` and `distinct_per_request` (min, median,
    max), `values_sample` (the first reported request's varying values, at most 50), `parent`
    (fingerprint, query id, example, rows_sent, requests where it was found), `batched_example`
    (the lookup rewritten with `IN (...)` for the first request's values, when it is a key
    lookup), `examples`.
"""
from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass

from ..findings import Evidence, Finding, severity_for
from ..query_digest import query_id
from .context import Context
from .statement_time import StatementTime, describe_statement_time, statement_time
from ..sql_text import fp_of, normalize, one_line, point_lookup
from .db_static_cache import static_fingerprints
from .figures import spread
from .query_loops import Loop, loops

ID = "n-plus-one"
SUBJECT = "fingerprint"  # what tells its findings apart (findings.SUBJECT_KEYS)


def _candidate(ctx: Context, lp: Loop) -> bool:
    min_exec = ctx.threshold(ID, "min_executions")
    min_distinct = ctx.threshold(ID, "min_distinct_share")
    return (lp.executions >= min_exec and lp.distinct >= 2
            and (lp.parent is not None or lp.distinct >= min_distinct * lp.executions))


def flagged(ctx: Context) -> list[Loop]:
    """The loops this detector reports (one per request and fingerprint)."""
    cache = ctx.__dict__.setdefault("_n_plus_one", {})
    if "v" in cache:
        return cache["v"]
    min_share = ctx.threshold(ID, "min_request_share")
    static = static_fingerprints(ctx)
    per_url: dict[tuple[str, str], list[Loop]] = defaultdict(list)
    for lp in loops(ctx):
        if lp.parent is None and lp.fingerprint in static:
            continue                      # static data: db-static-cache's
        if _candidate(ctx, lp):
            per_url[(lp.fingerprint, lp.url)].append(lp)
    out = [lp for (fp, url), ls in per_url.items() if len(ls) >= min_share * len(ctx.by_url[url])
           for lp in ls]
    cache["v"] = out
    return out


def batched(lp: Loop) -> str | None:
    """The loop's lookup as one query: the varying equality becomes `IN (...)` over the
    request's distinct values, and a LIMIT is dropped. None unless the loop is a single-table
    key lookup with one varying column."""
    lookups = [point_lookup(s.sql) for s in lp.statements]
    if any(lk is None for lk in lookups):
        return None
    first = lookups[0]
    varying = [i for i in range(len(first.columns)) if len({lk.values[i] for lk in lookups}) > 1]
    if len(varying) != 1:
        return None
    i = varying[0]
    values = list(dict.fromkeys(lk.raw[i] for lk in lookups))
    text = normalize(lp.statements[0].sql)
    cond = re.compile(re.escape(first.qualified[i]) + r"\s*=\s*" + re.escape(first.raw[i]))
    text = cond.sub(lambda m: f"{first.qualified[i]} IN ({', '.join(values)})", text, count=1)
    text = re.sub(r"\s+LIMIT\s+\d+(?:\s*(?:,|\s+OFFSET\s+)\s*\d+)?$", "", text, flags=re.I)
    selected = re.split(r"\s+from\s+", text, maxsplit=1, flags=re.I)[0]
    if "*" not in selected and not re.search(rf"(?<![\w$`]){re.escape(first.columns[i])}(?![\w$`])",
                                             selected, re.I):
        # The caller needs the key column to map rows back to its loop.
        text = re.sub(r"^select\s+", lambda m: f"{m.group()}{first.qualified[i]}, ", text, count=1, flags=re.I)
    return text


@dataclass
class Case:
    """One loop shape, as the reported requests ran it."""
    fingerprint: str
    urls: list[str]
    requests: list[str]             # the reported requests, sorted
    on_urls: int                    # requests to those URLs
    executions: dict                # per request (spread)
    distinct: dict                  # different literal sets per request (spread)
    time: StatementTime
    table: str | None               # a single-table key lookup's table, columns and varying columns
    columns: list[str] | None
    varying: list[str] | None
    values: list[str]               # the first request's varying values, in order
    parent: dict | None             # the query that returned the rows, most often
    examples: list[str]
    batched: str | None             # the loop as one query


def decide(ctx: Context) -> list[Case]:
    by_fp: dict[str, list[Loop]] = defaultdict(list)
    for lp in flagged(ctx):
        by_fp[lp.fingerprint].append(lp)
    cases = []
    for fp, ls in by_fp.items():
        ls.sort(key=lambda lp: lp.request)
        urls = sorted({lp.url for lp in ls})
        first = ls[0]
        lookup = point_lookup(first.statements[0].sql)
        all_lookups = [point_lookup(s.sql) for lp in ls for s in lp.statements]
        table = columns = varying = None
        if lookup is not None and all(lk is not None for lk in all_lookups):
            table, columns = lookup.table, list(lookup.columns)
            varying = [columns[i] for i in range(len(columns))
                       if len({lk.values[i] for lk in all_lookups}) > 1]
        # The first request's values, the positions that change only.
        keys = first.keys
        pos = [i for i in range(len(keys[0])) if len({k[i] for k in keys if len(k) > i}) > 1]
        cases.append(Case(
            fingerprint=fp, urls=urls, requests=[lp.request for lp in ls],
            on_urls=sum(len(ctx.by_url[u]) for u in urls),
            executions=spread([lp.executions for lp in ls]), distinct=spread([lp.distinct for lp in ls]),
            time=statement_time(ctx, (s for lp in ls for s in lp.statements)),
            table=table, columns=columns, varying=varying,
            values=list(dict.fromkeys(" | ".join(k[i] for i in pos if i < len(k)) for k in keys)),
            parent=parent_query(ls), examples=[one_line(s.sql) for s in first.statements[:3]],
            batched=batched(first)))
    cases.sort(key=lambda c: (-(round(c.time.share, 2) or 0), c.fingerprint))
    return cases


def parent_query(ls: list[Loop]) -> dict | None:
    """The parent query the loops follow most often: its fingerprint, an example, the rows it
    returned (spread) and in how many requests."""
    parents = [lp.parent for lp in ls if lp.parent is not None]
    if not parents:
        return None
    pfp, _ = Counter(fp_of(p.sql) for p in parents).most_common(1)[0]
    mine = [p for p in parents if fp_of(p.sql) == pfp]
    return {"fingerprint": pfp, "query_id": query_id(pfp), "example": one_line(mine[0].sql),
            "rows_sent": spread([p.rows_sent for p in mine]), "requests": len(mine)}


def detect(ctx: Context) -> list[Finding]:
    return [describe(c) for c in decide(ctx)]


def describe(c: Case) -> Finding:
    fp, execs, distinct, parent, urls = c.fingerprint, c.executions, c.distinct, c.parent, c.urls
    n = len(c.requests)
    source = f"statements.jsonl, {n} requests"
    after = (f", right after `{parent['fingerprint']}` returned {parent['rows_sent']['median']} rows "
             f"(in {parent['requests']} of {n} requests)") if parent else ""
    summary = (
        f"One query per row: `{fp}` ran {execs['median']} times per request (median; "
        f"{execs['min']}-{execs['max']}) with {distinct['median']} different values on "
        f"{', '.join(urls[:3])}{' ...' if len(urls) > 3 else ''}{after}. Each execution is a round "
        "trip; fetch the rows at once with one query using `IN (...)` over the values, or join "
        "the table into the parent query." + (f" For example: `{c.batched}`." if c.batched else ""))
    evidence = [
        Evidence("statement shape (pt-query-digest fingerprint)", fp, f"query id {query_id(fp)}"),
        Evidence("executions per request (min/median/max)",
                 f"{execs['min']}/{execs['median']}/{execs['max']}", source),
        Evidence("different literal values per request (min/median/max)",
                 f"{distinct['min']}/{distinct['median']}/{distinct['max']}", source),
        Evidence("requests with the loop", f"{n} of {c.on_urls}", "requests.jsonl, statements.jsonl"),
        *describe_statement_time(c.time, "time in these statements"),
    ]
    if parent:
        evidence.append(Evidence("parent query (returned the rows the loop walks)",
                                 f"{parent['fingerprint']} (rows_sent {parent['rows_sent']['median']}, "
                                 f"{parent['requests']} of {n} requests)",
                                 f"query id {parent['query_id']}"))
    evidence += [Evidence("example", e, f"request {c.requests[0]}") for e in c.examples]
    return Finding(
        id=ID, title=(f"N+1 queries: {execs['median']} lookups per request on "
                      + (f"table {c.table}" if c.table else fp)),
        severity=severity_for(c.time.share), share_pct=round(c.time.share, 2), summary=summary,
        evidence=evidence, urls=urls, requests=c.requests[:5],
        details={"sender": c.time.function, "fingerprint": fp, "query_id": query_id(fp), "table": c.table,
                 "key_columns": c.columns, "varying_columns": c.varying,
                 "executions_per_request": execs, "distinct_per_request": distinct,
                 "values_sample": c.values[:50], "parent": parent, "batched_example": c.batched,
                 "examples": c.examples})
