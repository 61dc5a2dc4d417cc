"""session-probe: a statement without FROM -- a question about the server or the session, not a
table -- asked again and again in every request (docs/pathologies.md section 4,
"session-state probes").

Mechanism
    A database layer asks the server about its own state before or around each query:
    MediaWiki's `DatabaseMysqlBase::serverIsReadOnly` sends `SELECT @@GLOBAL.read_only` (43 times
    a page on a wiki without a local object cache, 26% of the timed samples), drivers ping with
    `SELECT 1`, frameworks read `@@sql_mode` or `SHOW VARIABLES LIKE ...`. Each is a full round
    trip whose answer the request already had after the first one. repeated-query leaves these
    statements out on purpose (a memo of table data is wrong for them); this detector reports
    them when they cost.

Signature
    In one request, one probe text -- a SELECT without FROM that names no statement-tied or
    value-making function (FOUND_ROWS, LAST_INSERT_ID, ROW_COUNT, GET_LOCK, SLEEP, NOW, RAND,
    UUID, ...: see `is_probe`), or `SHOW [GLOBAL|SESSION] VARIABLES|STATUS ...` -- runs at least
    `min_executions` times, on at least `min_request_share` of a URL's requests, and the
    executions after the first of each request cost at least `min_share_pct` of the timed
    requests' wall time. One finding per probe text.

Sender
    The PHP function that sends the probe: named in the statement's comment
    (`sql_caller.caller_of`, MediaWiki), else found in the xhprof call graph of the instrumented
    requests (`call_sender`: the nearest user function above the client calls called exactly as
    many times as the probe ran in that request; of several, the innermost, then the closest in
    time).

Share of request time
    `share_pct`: what the executions after the first of each request cost the timed requests
    (what remembering the answer for the request saves), as `statement_time` reckons it: server
    time plus the round trip, or the Excimer samples under the sender (the part of its calls that
    are saved), preferred when the call graph found it.

Details
    `statement` (normal form), `fingerprint`, `query_id`, `sender`, `sender_source`,
    `executions_per_request`, `saved_per_request` (min, median, max), `per_url`.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from functools import lru_cache

from ..findings import Evidence, Finding, severity_for
from ..query_digest import query_id
from ..sql_text import fp_of, is_marker, is_select, is_table_select, normalize, tokens
from .call_sender import xhprof_sender
from .context import Context
from .figures import busiest_url, spread, spread_by_url
from .statement_time import StatementTime, describe_statement_time, statement_time

ID = "session-probe"
SUBJECT = "statement"  # what tells its findings apart (findings.SUBJECT_KEYS)

# Functions whose answer belongs to the statement before (FOUND_ROWS, LAST_INSERT_ID, ...), that
# act (locks, SLEEP) or make a new value each time (NOW, RAND, UUID): no probe of a state.
_NOT_A_PROBE = {"rand", "uuid", "uuid_short", "now", "sysdate", "curdate", "curtime", "current_timestamp",
                "current_date", "current_time", "utc_timestamp", "utc_date", "utc_time", "localtime",
                "localtimestamp", "unix_timestamp", "found_rows", "last_insert_id", "row_count",
                "get_lock", "release_lock", "release_all_locks", "is_free_lock", "is_used_lock", "sleep",
                "nextval", "lastval", "setval", "benchmark", "master_pos_wait", "master_gtid_wait"}


@lru_cache(maxsize=65536)
def is_probe(sql: str) -> bool:
    """A question about the server's or the session's state (see the module docstring)."""
    if is_marker(sql):
        return False
    words = [t.lower() for k, t in tokens(sql) if k == "ident"]
    if words[:1] == ["show"]:
        rest = words[2:] if words[1:2] in (["global"], ["session"]) else words[1:]
        return rest[:1] in (["variables"], ["status"])
    return is_select(sql) and not is_table_select(sql) and not (_NOT_A_PROBE & set(words))


@dataclass
class Probes:
    """One probe text's executions in one request."""
    request: str
    url: str
    text: str
    executions: int = 0


def per_request(ctx: Context) -> list[Probes]:
    out = []
    for r in ctx.requests:
        counts = Counter(normalize(s.sql) for s in ctx.statements_of[r.id] if is_probe(s.sql))
        out += [Probes(r.id, ctx.url_of[r.id], text, n) for text, n in counts.items()]
    return out


@dataclass
class Case:
    text: str
    fingerprint: str
    urls: list[str]
    requests: list[str]
    on_urls: int
    executions: dict
    saved: dict
    time: StatementTime
    sender: str | None
    sender_source: str | None       # "comment" or "xhprof" (call_sender)
    per_url: dict

    @property
    def share(self) -> float:
        return self.time.share


def _flagged(ctx: Context) -> dict[str, list[Probes]]:
    min_exec = ctx.threshold(ID, "min_executions")
    min_share = ctx.threshold(ID, "min_request_share")
    per_url: dict[tuple[str, str], list[Probes]] = defaultdict(list)
    for p in per_request(ctx):
        if p.executions >= min_exec:
            per_url[(p.text, p.url)].append(p)
    by_text: dict[str, list[Probes]] = defaultdict(list)
    for (text, url), ps in per_url.items():
        if len(ps) >= min_share * len(ctx.by_url[url]):
            by_text[text] += ps
    return by_text


def _case(ctx: Context, text: str, probes: list[Probes]) -> Case:
    probes.sort(key=lambda p: p.request)
    rids = {p.request for p in probes}
    mine = [s for s in ctx.statements if s.request in rids and is_probe(s.sql) and normalize(s.sql) == text]
    first: set[str] = set()
    saved = []
    for s in mine:
        if s.request in first:
            saved.append(s)
        first.add(s.request)
    time = statement_time(ctx, saved, of=mine)
    sender = time.sender.function if time.sender else xhprof_sender(ctx, mine)
    source = time.sender.source if time.sender else "xhprof" if sender else None
    urls = sorted({p.url for p in probes})
    return Case(text=text, fingerprint=fp_of(mine[0].sql), urls=urls, requests=[p.request for p in probes],
                on_urls=sum(len(ctx.by_url[u]) for u in urls), executions=spread([p.executions for p in probes]),
                saved=spread([p.executions - 1 for p in probes]), time=time, sender=sender, sender_source=source,
                per_url=spread_by_url(ctx, probes, urls, "with_probes", "executions_per_request"))


def decide(ctx: Context) -> list[Case]:
    min_pct = ctx.threshold(ID, "min_share_pct")
    cases = [_case(ctx, text, probes) for text, probes in _flagged(ctx).items()]
    cases = [c for c in cases if c.share >= min_pct]
    cases.sort(key=lambda c: (-round(c.share, 2), c.text))
    return cases


def detect(ctx: Context) -> list[Finding]:
    return [describe(c) for c in decide(ctx)]


def describe(c: Case) -> Finding:
    execs, saved = c.executions, c.saved
    source = f"statements.jsonl, {len(c.requests)} requests"
    how_often = busiest_url(c.per_url) or f"{execs['median']:g} times per request"
    by = f", sent by `{c.sender}`," if c.sender else ""
    summary = (f"`{c.text}` ran {how_often}{by} asking the server about its own or the session's state: "
               "after the first answer the request already knows it. Ask once per request (a static "
               "variable in the function that sends it), or keep it in a local cache with a short "
               "lifetime when it must follow a change on the server.")
    evidence = [
        Evidence("statement (comments removed, whitespace normalised)", c.text, f"request {c.requests[0]}"),
        Evidence("executions per request (min/median/max)", f"{execs['min']}/{execs['median']}/{execs['max']}",
                 source),
        Evidence("executions asking once per request saves (min/median/max)",
                 f"{saved['min']}/{saved['median']}/{saved['max']}", source),
        Evidence("requests with the repeats", f"{len(c.requests)} of {c.on_urls}", "requests.jsonl, statements.jsonl"),
        *describe_statement_time(c.time, "time in the saved executions"),
    ]
    if c.sender_source == "xhprof" and c.time.sender is None:
        evidence.append(Evidence(
            "sender: the nearest user function above the client call, called as many times as the probe ran "
            "(no Excimer samples under it)", c.sender, "xhprof call graph of the instrumented requests"))
    return Finding(
        id=ID, title=f"Session probe {how_often}: {c.text}", severity=severity_for(c.share),
        share_pct=round(c.share, 2), summary=summary, evidence=evidence, urls=c.urls, requests=c.requests[:5],
        details={"statement": c.text, "fingerprint": c.fingerprint, "query_id": query_id(c.fingerprint),
                 "sender": c.sender, "sender_source": c.sender_source, "executions_per_request": execs,
                 "saved_per_request": saved, "per_url": c.per_url})
