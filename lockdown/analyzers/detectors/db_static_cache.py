"""db-static-cache: static data (localisation messages, configuration) read from the database
one key at a time, the same keys on every page view (docs/pathologies.md section 2).

Mechanism
    MediaWiki's localisation cache falls back to the database store (`LCStoreDB`, table
    `l10n_cache`) when `$wgCacheDirectory` is not set: every message a page renders is one
    `SELECT lc_value FROM l10n_cache WHERE lc_lang = 'en' AND lc_key = 'messages:<key>'
    LIMIT 1`, more than 100 per page view, the same keys on every view, from a table that page
    views never write. Each lookup is a client/server round trip plus PHP's fetch and
    unserialize; the data could be one PHP array file that the opcode cache keeps in shared
    memory (`LCStoreStaticArray`, 15-24x faster per value than MySQL or memcached).

Signature (generic: no table or column name is known in advance)
    One pt-query-digest fingerprint that
    - is a single-table point lookup by key: `SELECT <columns> FROM <one table> WHERE a = <literal>
      [AND b = <literal>] [LIMIT n]` (equality on one or two columns, no join, no ORDER BY);
      PDO and mysqli statements look the same in the server's log;
    - runs at least `min_queries_per_request` times in a request, with at least
      `min_distinct_keys_per_request` different keys (fewer keys, each asked many times, is a
      missing memo: repeated-query's finding);
    - does so on at least `min_request_share` of the requests of a URL;
    - has keys that mostly repeat across requests: for each such request, the share of its keys
      that no other such request sent is at most `max_distinct_values_share` (median over the
      requests). Static data is the same key set on every view; per-user or per-item data is
      not. At least two such requests are needed to see it;
    - reads a table that no statement of the capture writes (INSERT, UPDATE, REPLACE, DELETE,
      TRUNCATE, LOAD DATA/XML, ALTER, DROP, RENAME, CREATE naming it, from any request or
      client, attributed or not).

Not flagged
    - Per-row lookups that follow the query that returned their rows: when the statement just
      before the first lookup of a request (within `[n-plus-one] parent_window` statements)
      returned as many rows as the request made lookups (or as many as it had distinct keys), the
      loop is an N+1 and belongs to n-plus-one, even if the keys repeat on every view (a listing
      viewed twice shows the same authors). Rule shared with n-plus-one: keys that repeat across
      requests on a read-only table and no parent query => db-static-cache; a parent query, or
      keys that change between requests, or a written table => n-plus-one.
    - Lookups on a table the capture writes (sessions, counters, caches being filled).
    - Lookups whose keys change between requests (per-user, per-item), or a URL seen once
      with no other request sending the fingerprint (repetition cannot be seen).
    - Fewer lookups than the thresholds: WordPress's 11 per-request `SELECT option_value FROM
      wp_options WHERE option_name = '...' LIMIT 1` for options that are not autoloaded have
      the shape and repeat on every view, but stay below `min_queries_per_request`.
    - lockdown's own statements (`lockdown-capture` markers).

Limits
    A capture that views one user's page over and over cannot tell that user's data from
    static data (the same keys come back on every view); capture several users to separate
    them. The write check is conservative: a write statement that names the table's name
    anywhere (as a table or a column) counts as a write to it.

Share of request time
    `share_pct` is what the reported lookups cost timed requests, as % of their wall time
    (`statement_time`): server time plus one round trip each (measured on the instrumented
    requests, at most what each timed request's statements left of its wall time), or, when the statements
    name their PHP sender, what PHP spends under it, whichever is larger. Without a named
    sender it is a lower bound: the unserialize of each value comes on top (MediaWiki: 104
    lookups took 76.8 ms of a ~95 ms page when instrumented in PHP; `LCStoreDB::get` is named).
    Severity follows `findings.severity_for(share_pct)`.

Details (for a remediation step)
    `table`, `key_columns` (the WHERE columns in order), `varying_columns` (those whose values
    change between lookups: the key), `constant_columns` (column -> the one value they always
    had, e.g. the language), `fingerprint`, `query_id`, `queries_per_request` (min, median,
    max), `distinct_keys`, `keys_sample` (sorted, at most 50; each key is the varying values
    joined with " | "), `keys_on_every_request`, `missing_keys` and `missing_keys_sample`
    (keys looked up on every request that never returned a row), `per_url` (requests, requests
    with the lookups, lookups per request), `examples`. The fix for
    MediaWiki is `$wgCacheDirectory = "$IP/cache"` with
    `$wgLocalisationCacheConf['storeClass'] = 'LCStoreStaticArray'` and
    `php maintenance/rebuildLocalisationCache.php`; for another application, a PHP file
    returning the table's rows as an array (`var_export`), `require`d once per request.

The SQL helpers the query detectors share are in ../sql_text.py (tokens, literals,
point lookups, writes), the loops and the tables the capture writes in query_loops.py.
"""
from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass

from ...bundle.model import Statement
from ..findings import Evidence, Finding, severity_for
from ..query_digest import query_id
from ..sql_text import normalize, point_lookup
from .context import Context
from .figures import busiest, others_text, spread, spread_by_url
from .query_loops import Loop, loops, written_tables
from .statement_time import StatementTime, describe_statement_time, statement_time

ID = "db-static-cache"
SUBJECT = "fingerprint"  # what tells its findings apart (findings.SUBJECT_KEYS)


def static_fingerprints(ctx: Context) -> dict[str, dict]:
    """Fingerprints that behave as static lookups, whatever their count: point lookups on a table
    the capture never writes, looked up at least twice in a request with no parent query, in at
    least two requests, where the median share of a request's keys that no other such request
    sent is at most `max_distinct_values_share`. fingerprint -> {table, loops (those requests),
    unique_share}. n_plus_one leaves these loops (without a parent) to this detector."""
    cache = ctx.__dict__.setdefault("_static_fps", {})
    if "v" in cache:
        return cache["v"]
    max_unique = ctx.threshold(ID, "max_distinct_values_share")
    written = written_tables(ctx)
    by_fp: dict[str, list[Loop]] = defaultdict(list)
    for loop in loops(ctx):
        if loop.parent is None:
            by_fp[loop.fingerprint].append(loop)
    out = {}
    for fp, ls in by_fp.items():
        lookup = point_lookup(ls[0].statements[0].sql)
        if lookup is None or lookup.table.lower() in written or len(ls) < 2:
            continue
        if any(point_lookup(s.sql) is None for lp in ls for s in lp.statements):
            continue
        key_sets = [set(lp.keys) for lp in ls]
        holders: dict[tuple, int] = defaultdict(int)
        for ks in key_sets:
            for k in ks:
                holders[k] += 1
        unique = [sum(1 for k in ks if holders[k] == 1) / len(ks) for ks in key_sets]
        share = statistics.median(unique)
        if share <= max_unique:
            out[fp] = {"table": lookup.table, "loops": ls, "unique_share": share}
    cache["v"] = out
    return out


def flagged(ctx: Context) -> list[Loop]:
    """The loops this detector reports (one per request and fingerprint)."""
    min_q = ctx.threshold(ID, "min_queries_per_request")
    min_keys = ctx.threshold(ID, "min_distinct_keys_per_request")
    min_share = ctx.threshold(ID, "min_request_share")
    out = []
    for fp, info in static_fingerprints(ctx).items():
        per_url: dict[str, list[Loop]] = defaultdict(list)
        for lp in info["loops"]:
            if lp.executions >= min_q and lp.distinct >= min_keys:
                per_url[lp.url].append(lp)
        for url, ls in per_url.items():
            if len(ls) >= min_share * len(ctx.by_url[url]):
                out.extend(ls)
    # Keys repeating across requests is only seen with two reported requests or more.
    by_fp: dict[str, list[Loop]] = defaultdict(list)
    for lp in out:
        by_fp[lp.fingerprint].append(lp)
    return [lp for ls in by_fp.values() if len(ls) >= 2 for lp in ls]


@dataclass
class Case:
    """One static lookup shape, as the reported requests sent it."""
    fingerprint: str
    table: str
    columns: list[str]              # the WHERE columns in order
    varying: list[str]              # those whose values change between lookups
    constant: dict[str, str]        # the others, with their one value
    urls: list[str]
    requests: list[str]             # the reported requests, sorted
    on_urls: int                    # requests to those URLs
    per_request: dict               # lookups per request (spread)
    per_url: dict
    distinct: set[str]              # keys (the varying values, joined)
    every: set[str]                 # keys looked up on every reported request
    empty: set[str]                 # of those, keys that never returned a row
    unique_share: float
    time: StatementTime
    examples: list[str]


def decide(ctx: Context) -> list[Case]:
    by_fp: dict[str, list[Loop]] = defaultdict(list)
    for lp in flagged(ctx):
        by_fp[lp.fingerprint].append(lp)
    static = static_fingerprints(ctx)
    cases = []
    for fp, ls in by_fp.items():
        ls.sort(key=lambda lp: lp.request)
        urls = sorted({lp.url for lp in ls})
        lookups = [point_lookup(s.sql) for lp in ls for s in lp.statements]
        columns = list(lookups[0].columns)
        varying = [i for i in range(len(columns)) if len({lk.values[i] for lk in lookups}) > 1]

        def key_of(s: Statement) -> str:
            vals = point_lookup(s.sql).values
            return " | ".join(vals[i] for i in varying) if varying else " | ".join(vals)

        key_sets = [{key_of(s) for s in lp.statements} for lp in ls]
        every = set.intersection(*key_sets)
        cases.append(Case(
            fingerprint=fp, table=lookups[0].table, columns=columns, varying=[columns[i] for i in varying],
            constant={columns[i]: lookups[0].values[i] for i in range(len(columns)) if i not in varying},
            urls=urls, requests=[lp.request for lp in ls], on_urls=sum(len(ctx.by_url[u]) for u in urls),
            per_request=spread([lp.executions for lp in ls]),
            per_url=spread_by_url(ctx, ls, urls, "with_lookups", "queries_per_request"),
            distinct=set.union(*key_sets), every=every,
            empty={k for k in every if all(s.rows_sent == 0 for lp in ls for s in lp.statements if key_of(s) == k)},
            unique_share=static[fp]["unique_share"],
            time=statement_time(ctx, (s for lp in ls for s in lp.statements)),
            examples=[normalize(s.sql) for s in ls[0].statements[:3]]))
    cases.sort(key=lambda c: (-(round(c.time.share, 2) or 0), c.fingerprint))
    return cases


def detect(ctx: Context) -> list[Finding]:
    return [describe(c) for c in decide(ctx)]


def describe(c: Case) -> Finding:
    fp, table, per_req, urls = c.fingerprint, c.table, c.per_request, c.urls
    source = f"statements.jsonl, {len(c.requests)} requests"
    most = busiest(c.per_url, "queries_per_request")
    summary = (
        f"{per_req['median']} single-key lookups per request (median; {per_req['min']}-{per_req['max']}"
        f"{f': {most[1]:g} on {most[0]}, {others_text(*most[2:])}' if most else ''}) "
        f"read `{table}` one row at a time on {', '.join(urls[:3])}{' ...' if len(urls) > 3 else ''}: "
        f"{len(c.distinct)} distinct keys, {len(c.every)} of them on every one of the {len(c.requests)} requests, "
        f"and nothing in the capture writes `{table}`. This is static data (translations, "
        "configuration) served by the database: one round trip per value. Load it once from a "
        "PHP file returning an array, which the opcode cache keeps in memory (MediaWiki: "
        "$wgCacheDirectory with LCStoreStaticArray and rebuildLocalisationCache.php).")
    return Finding(
        id=ID,
        title=f"Static data read from the database: {per_req['median']} key lookups per request on table {table}",
        severity=severity_for(c.time.share), share_pct=round(c.time.share, 2), summary=summary,
        evidence=[
            Evidence("statement shape (pt-query-digest fingerprint)", fp, f"query id {query_id(fp)}"),
            Evidence("lookups per request (min/median/max)",
                     f"{per_req['min']}/{per_req['median']}/{per_req['max']}", source),
            Evidence("requests with the lookups", f"{len(c.requests)} of {c.on_urls}",
                     "requests.jsonl, statements.jsonl"),
            Evidence("distinct keys", len(c.distinct), source),
            Evidence("keys looked up on every request", len(c.every), source),
            Evidence("of those, keys that returned no row every time (rows_sent 0)", len(c.empty), source),
            Evidence("a request's keys that no other request looked up (median share)",
                     f"{100 * c.unique_share:.0f}%", source),
            Evidence("writes to the table in the capture", 0, "statements.jsonl (all clients)"),
            *describe_statement_time(c.time, "time in these statements"),
            Evidence("table", table, "statement text"),
            *[Evidence("example", e, f"request {c.requests[0]}") for e in c.examples],
        ],
        urls=urls, requests=c.requests[:5],
        details={"sender": c.time.function, "table": table, "key_columns": c.columns,
                 "varying_columns": c.varying, "constant_columns": c.constant,
                 "fingerprint": fp, "query_id": query_id(fp),
                 "queries_per_request": per_req, "distinct_keys": len(c.distinct),
                 "keys_sample": sorted(c.distinct)[:50], "keys_on_every_request": len(c.every),
                 "missing_keys": len(c.empty), "missing_keys_sample": sorted(c.empty)[:50],
                 "per_url": c.per_url, "examples": c.examples})
