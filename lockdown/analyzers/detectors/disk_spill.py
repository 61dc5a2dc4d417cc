"""disk-spill: a SELECT that, on most views of a page, makes MariaDB write to disk -- its internal
temporary table (an on-disk Aria table) or its sort (temporary files merged in passes).

Mechanism: GROUP BY, DISTINCT, UNION, derived tables and an ORDER BY other than the GROUP BY
need an internal temporary table; MariaDB keeps it in memory with the MEMORY engine, which
cannot hold TEXT or BLOB columns. A temporary table with such a column in it is an Aria table
on disk from the start; one without grows in memory up to min(tmp_table_size,
max_heap_table_size) (16M each by default) and is then converted to disk. A sort (filesort)
holds its keys in sort_buffer_size (2M by default); one that does not fit writes sorted runs to
temporary files and merges them (Merge_passes; MariaDB may log Filesort_on_disk: No beside it).
Sorting by a TEXT or BLOB column puts max_sort_length bytes (1024 by default) of it in every
key, so a few thousand rows are enough. In both cases the page pays for file creation and I/O
on every view, and the cost grows with the table.

Signature, from the server's own plan flags (slow log with log_slow_verbosity=query_plan,
`Statement.plan`): executions of one SELECT shape (fingerprint) flagged `tmp_table_on_disk`,
`filesort_on_disk` or `merge_passes`, on at least `min_request_share` of a URL's requests, and
at least `min_execution_share` of the shape's executions on those URLs' requests that have plan
lines (a shape that spills only for a rare large argument is not the shape's problem).

Not flagged: in-memory temporary tables and sorts (`tmp_table`, `filesort` alone: WordPress and
MediaWiki have them on every page, and they are cheap); writes; lockdown's own statements;
bundles without plan lines. The share is statement_time's (server time plus one round trip
each) over the spilling executions: an upper bound of what keeping them in memory saves.

The likely cause is read from the statement's text (which clause needs the temporary table or
the sort, which columns it groups, sorts and selects); the slow log does not know the column
types, so the finding names the columns to look for TEXT/BLOB with SHOW CREATE TABLE, and what
EXPLAIN shows. No patch (`details.no_patch`): the capture does not know the schema."""
from __future__ import annotations

import re
import statistics
from dataclasses import dataclass

from ..findings import Evidence, Finding, severity_for
from ..query_digest import fingerprint, plan_counts, plan_text, query_id
from ..sql_text import FROM, ORDER_BY, is_select, without_strings
from .context import Context
from .statement_time import StatementTime, describe_statement_time, statement_time

ID = "disk-spill"
SUBJECT = "fingerprint"  # what tells its findings apart (findings.SUBJECT_KEYS)
TABLE_FLAGS = ("tmp_table_on_disk",)
SORT_FLAGS = ("filesort_on_disk", "merge_passes")
NO_PATCH = ("the capture does not know the schema (column types, indexes) or the server's memory "
            "settings: the change is a query or schema change to check with EXPLAIN and SHOW CREATE TABLE")

_KEYWORDS = {"select", "from", "where", "and", "or", "not", "null", "asc", "desc", "as", "distinct", "by"}
_MODIFIERS = re.compile(r"^(?:(?:ALL|DISTINCT|DISTINCTROW|HIGH_PRIORITY|STRAIGHT_JOIN|SQL_\w+)\s+)*", re.I)
_GROUP = re.compile(r"\bGROUP\s+BY\b(.*?)(?:\bHAVING\b|\bORDER\s+BY\b|\bLIMIT\b|\bWINDOW\b|$)", re.I | re.S)
_ALIAS = re.compile(r"\bAS\s+`?(\w+)`?", re.I)
_COLUMN = re.compile(r"^(?:`?\w+`?\.)?`?([A-Za-z_]\w*)`?(?:\s+(?:AS\s+)?`?\w+`?)?(?:\s+(?:ASC|DESC))?$", re.I)
_STAR = re.compile(r"^(?:`?\w+`?\.)?\*$")


def spills(s) -> bool:
    return bool(s.plan) and any(f in s.plan for f in TABLE_FLAGS + SORT_FLAGS)


def _split(part: str) -> list[str]:
    """Top-level comma-separated items of a clause (commas inside parentheses kept)."""
    items, depth, cur = [], 0, []
    for ch in part:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            items.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        items.append("".join(cur).strip())
    return items


def _columns(items: list[str], aliases: set[str]) -> list[str]:
    """Plain column references among `items` (expressions and the select list's aliases left out)."""
    out = []
    for item in items:
        m = _COLUMN.match(item)
        if m and m.group(1).lower() not in aliases and m.group(1).lower() not in _KEYWORDS:
            out.append(m.group(1))
    return out


def shape(sql: str) -> dict:
    """What the statement's text says of the work that may spill: its first table, whether it
    has GROUP BY, DISTINCT, UNION, ORDER BY and LIMIT, and the plain columns it selects,
    groups and sorts by (`*` when it selects every column). A reading of the text, not of the plan."""
    text = without_strings(sql)
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    m = FROM.search(text)
    table = (m.group(2) or m.group(1)) if m else None
    sel = re.search(r"\bSELECT\s+(.*?)\bFROM\b", text, re.I | re.S)
    select_part = sel.group(1) if sel else ""
    distinct = re.match(r"\s*(?:\w+\s+)*?DISTINCT(?:ROW)?\b", select_part, re.I) is not None
    select_items = _split(_MODIFIERS.sub("", select_part.strip()))
    aliases = {a.lower() for a in _ALIAS.findall(select_part)}
    group = _GROUP.search(text)
    order = ORDER_BY.search(text)
    return {
        "table": table,
        "distinct": distinct,
        "union": re.search(r"\bUNION\b", text, re.I) is not None,
        "limit": re.search(r"\bLIMIT\b", text, re.I) is not None,
        "star": any(_STAR.match(i) for i in select_items),
        "selected": _columns(select_items, aliases),
        "grouped": _columns(_split(group.group(1)), aliases) if group else [],
        "group_by": group is not None,
        "ordered": _columns(_split(order.group(1)), aliases) if order else [],
        "order_by": order is not None,
    }


def _unique(*lists: list[str]) -> list[str]:
    out: list[str] = []
    for cols in lists:
        out.extend(c for c in cols if c not in out)
    return out


def _size(v) -> str | None:
    if not (isinstance(v, str) and v.isdigit()):
        return None
    n = int(v)
    return f"{n / (1 << 20):.1f} MB" if n >= 1 << 20 else f"{n / 1024:.0f} KB" if n >= 1024 else f"{n} bytes"


def check_columns(sh: dict, table_spill: bool, sort_spill: bool) -> list[str]:
    """The columns to look up with SHOW CREATE TABLE: those a spilled temporary table groups or
    selects, then those a spilled sort orders by (`shape`)."""
    check: list[str] = []
    if table_spill:
        check = _unique(check, sh["grouped"], sh["selected"])
    if sort_spill:
        check = _unique(check, sh["ordered"] or sh["grouped"])
    return check


@dataclass
class Case:
    """One SELECT shape whose executions spill on most views of some URLs."""
    fingerprint: str
    urls: list[str]
    requests: list[str]             # those with a spilling execution, sorted
    on_urls: int                    # requests to those URLs
    executions: int                 # of the shape there, with plan lines, spilled
    known: int
    spilled: int
    plan: dict                      # the server's plan flags over the executions with plan lines
    table_spill: bool               # a temporary table on disk, a sort through files
    sort_spill: bool
    per_request: float              # executions per request with a spill (median)
    server_us: float                # per spilling execution (median), rows examined, returned
    examined: float
    returned: float
    time: StatementTime
    example: str                    # the slowest spilling execution
    shape: dict                     # what its text says (`shape`)
    variables: dict | None          # the server's variables as the capture read them
    check: list[str]                # columns to check for TEXT/BLOB


def decide(ctx: Context) -> list[Case]:
    min_request_share = ctx.threshold(ID, "min_request_share")
    min_execution_share = ctx.threshold(ID, "min_execution_share")
    cases = []
    for fp, urls, _ in ctx.shapes_on_urls(lambda s: spills(s) and is_select(s.sql), min_request_share):
        on_urls = [r.id for u in urls for r in ctx.by_url[u]]
        executions = [s for rid in on_urls for s in ctx.statements_of[rid] if fingerprint(s.sql) == fp]
        known = [s for s in executions if s.plan is not None]
        spilled = [s for s in known if spills(s)]
        if len(spilled) < min_execution_share * len(known):
            continue
        rids = sorted({s.request for s in spilled})
        plan = plan_counts(known)
        table_spill = any(f in plan for f in TABLE_FLAGS)
        sort_spill = any(f in plan for f in SORT_FLAGS)
        example = max(spilled, key=lambda s: s.duration_us).sql
        sh = shape(example)
        cases.append(Case(
            fingerprint=fp, urls=urls, requests=rids, on_urls=len(on_urls), executions=len(executions),
            known=len(known), spilled=len(spilled), plan=plan, table_spill=table_spill, sort_spill=sort_spill,
            per_request=statistics.median(sum(1 for s in executions if s.request == rid) for rid in rids),
            server_us=statistics.median(s.duration_us for s in spilled),
            examined=statistics.median(s.rows_examined for s in spilled),
            returned=statistics.median(s.rows_sent for s in spilled),
            time=statement_time(ctx, spilled), example=example, shape=sh,
            variables=(ctx.manifest.get("database") or {}).get("variables"),
            check=check_columns(sh, table_spill, sort_spill)))
    return cases


def detect(ctx: Context) -> list[Finding]:
    return [describe(c) for c in decide(ctx)]


# -- description ---------------------------------------------------------------------------------

def describe_setting(variables: dict | None, names: tuple, default: str) -> str:
    """Server variables as the capture read them ("16.0 MB and 16.0 MB on the captured server"),
    else MariaDB's documented default ("16M each by default") for bundles without them."""
    sizes = [_size((variables or {}).get(n)) for n in names]
    if all(sizes):
        return " and ".join(sizes) + " on the captured server"
    return default


def describe_causes(sh: dict, table_spill: bool, sort_spill: bool, rows_examined: float,
                    variables: dict | None = None) -> list[str]:
    """Sentences naming the likely cause and what to check, from the text's `shape`."""
    table = f"`{sh['table']}`" if sh["table"] else "the tables it reads"
    out: list[str] = []
    if table_spill:
        needs = [w for w, on in (("GROUP BY", sh["group_by"]), ("DISTINCT", sh["distinct"]),
                                 ("UNION", sh["union"])) if on] or ["its plan"]
        cols = _unique(sh["grouped"], sh["selected"])
        what = (("any column (it selects `*`" + (f", and {', '.join(cols)})" if cols else ")")) if sh["star"]
                else cols[0] if len(cols) == 1 else f"any of {', '.join(cols)}" if cols
                else "any column it groups or selects")
        heap_limits = describe_setting(variables, ("tmp_table_size", "max_heap_table_size"), "16M each by default")
        out.append(
            f"The internal temporary table that {' and '.join(needs)} needs was written to disk (an Aria "
            f"table). MariaDB's in-memory engine cannot hold TEXT or BLOB columns, so a temporary table with "
            f"one is on disk from the start: check with SHOW CREATE TABLE {table} whether {what} is "
            f"TEXT or BLOB. If one is, group or deduplicate on short columns (the key, or a hash such as "
            f"MD5() of the text) and read the TEXT afterwards by key. If none is, the table outgrew "
            f"min(tmp_table_size, max_heap_table_size) ({heap_limits}; "
            f"{rows_examined:.0f} rows examined "
            f"per execution): read fewer rows.")
    if sort_spill:
        cols = sh["ordered"] or sh["grouped"]
        on = (", ".join(cols) if cols else "its ORDER BY/GROUP BY expressions")
        sort_buffer = describe_setting(variables, ("sort_buffer_size",), "2M by default")
        out.append(
            f"The sort (by {on}) did not fit sort_buffer_size ({sort_buffer}) "
            f"and went through temporary files merged in passes. A TEXT or BLOB sort column puts max_sort_length "
            f"bytes ({(variables or {}).get('max_sort_length') or '1024 by default'}) "
            f"of it in every row's key: check with SHOW CREATE TABLE {table}. Sort by a short or indexed "
            f"column, "
            + ("" if sh["limit"] else "add a LIMIT (a small one sorts in memory, keeping only the top rows), ")
            + f"or read fewer rows ({rows_examined:.0f} examined per execution).")
    shows = [w for w, on in (("`Using temporary`", table_spill), ("`Using filesort`", sort_spill)) if on]
    out.append(f"EXPLAIN shows the plan ({' and '.join(shows)} in Extra).")
    return out


def describe(c: Case) -> Finding:
    fp, urls = c.fingerprint, c.urls
    why = describe_causes(c.shape, c.table_spill, c.sort_spill, c.examined, c.variables)
    star = c.table_spill and c.shape["star"]
    what = ("writes its temporary table and its sort to disk" if c.table_spill and c.sort_spill else
            "writes its temporary table to disk" if c.table_spill else "sorts through temporary files on disk")
    where = f"{', '.join(urls[:3])}{' ...' if len(urls) > 3 else ''}"
    flags = plan_text(c.plan, c.known)
    return Finding(
        id=ID, title=f"A query {what} on {len(urls)} URL(s), {c.server_us / 1000:.1f} ms each",
        severity=severity_for(c.time.share), share_pct=round(c.time.share, 2),
        summary=(f"`{fp}` {what} on {len(c.requests)} of {c.on_urls} requests to {where} "
                 f"({c.spilled} of {c.known} executions; server plan flags: {flags}), "
                 f"{c.server_us / 1000:.1f} ms in the server each (median). " + " ".join(why)),
        evidence=[Evidence("statement shape (pt-query-digest fingerprint)", fp, f"query id {query_id(fp)}"),
                  Evidence("executions per request (median)", c.per_request, "statements.jsonl"),
                  Evidence("requests with a spilling execution", f"{len(c.requests)} of {c.on_urls}",
                           "statements.jsonl"),
                  Evidence("executions the server flagged as spilling to disk", f"{c.spilled} of {c.known}",
                           "slow log Tmp_table_on_disk, Filesort_on_disk, Merge_passes "
                           "(log_slow_verbosity=query_plan)"),
                  Evidence("the server's plan flags, % of executions", flags,
                           "slow log query_plan lines"),
                  Evidence("server time per spilling execution (median, us)", round(c.server_us),
                           "slow log Query_time"),
                  Evidence("rows examined / returned per spilling execution (median)",
                           f"{c.examined:.0f} / {c.returned:.0f}", "slow log Rows_examined, Rows_sent"),
                  *describe_statement_time(c.time, "time in the spilling executions"),
                  Evidence("columns to check for TEXT/BLOB (SHOW CREATE TABLE)",
                           ", ".join(c.check + (["every column (SELECT *)"] if star else [])) or "-",
                           "the example's text"),
                  Evidence("example", c.example, "statements.jsonl")],
        urls=urls, requests=c.requests[:5],
        details={"fingerprint": fp, "query_id": query_id(fp), "table": c.shape["table"],
                 "temporary_table_on_disk": c.table_spill, "sort_on_disk": c.sort_spill,
                 "executions": c.executions, "spilled": c.spilled, "plan": c.plan,
                 "plan_known": c.known, "executions_per_request": c.per_request,
                 "server_us": c.server_us, "rows_examined": c.examined, "rows_sent": c.returned,
                 "check_columns": c.check, "causes": why, "example": c.example, "no_patch": NO_PATCH})
