"""The PHP function a statement names as its sender. Some frameworks put it in a comment
right after the verb (MediaWiki's Rdbms layer: `SELECT /* LCStoreDB::get */ lc_value ...`,
`UPDATE /* WikiPage::updateRevisionOn */ ...`): an exact link from the slow log back to the
PHP call chain, which xhprof's counts cannot give. Where no comment and no text in the code
names it, the counts are what is left (`senders_by_count`)."""
from __future__ import annotations

import re
from typing import Iterable

_CALLER = re.compile(r"^\s*[A-Za-z]+\s+/\*\s*(\\?[A-Za-z_][\w\\]*(?:::[A-Za-z_]\w*)?)")


def caller_of(sql: str) -> str | None:
    """`Class::method` or `function` named in the comment after the statement's first word."""
    m = _CALLER.match(sql)
    return m.group(1).lstrip("\\") if m else None


def senders_by_count(sent: dict[str, dict[str, int]], calls: dict[str, dict[str, int]],
                     reach_db: set[str] | None = None, min_sent: int = 3,
                     min_requests: int = 2) -> dict[str, list[str]]:
    """Statement shape -> the functions called exactly as many times as it was sent in every
    profiled request that sent it `min_sent` times or more (xhprof), and no more times than it
    was sent in the others (a page may send it from elsewhere too), for the shapes that at
    least `min_requests` profiled requests sent that often. A query builder (Eloquent,
    Doctrine's, WP_Query) leaves no text of the statement in the app's code; the app's function
    that asks for it once per statement is found by its counts (laravel:
    App\\Support\\Settings::get, 64 calls for the settings lookup's 64 on `/`, 9 and 9 on a post
    page). Fewer sends, or one request, match too many functions by chance.

    `sent`: shape -> request id -> executions; `calls`: request id -> function -> calls;
    `reach_db`: when given, only these functions can be a sender (those from which xhprof's
    call graph reaches a database client: a helper the sender calls as often does not). Only
    the requests with a call profile count."""
    out: dict[str, list[str]] = {}
    rids = sorted(calls)
    for shape, per_request in sent.items():
        wanted = [per_request.get(rid, 0) for rid in rids]
        if sum(n >= min_sent for n in wanted) < min_requests:
            continue
        functions = set().union(*(calls[rid] for rid in rids))
        if reach_db is not None:
            functions &= reach_db
        found = sorted(fn for fn in functions if all(_fits(calls[rid].get(fn, 0), n, min_sent)
                                                     for rid, n in zip(rids, wanted)))
        if found:
            out[shape] = found
    return out


def _fits(called: int, sent: int, min_sent: int) -> bool:
    """A repeating request: one call per statement; another: no more calls than statements."""
    return called == sent if sent >= min_sent else called <= sent


def reaching(edges: Iterable[tuple[str, str]], targets: set[str]) -> set[str]:
    """The functions from which the call graph's `edges` (caller, callee) reach one of
    `targets`, the targets included."""
    callers: dict[str, set[str]] = {}
    for caller, callee in edges:
        callers.setdefault(callee, set()).add(caller)
    out, todo = set(targets), list(targets)
    while todo:
        for caller in callers.get(todo.pop(), ()):
            if caller not in out:
                out.add(caller)
                todo.append(caller)
    return out


# An ORM's lazy loader -> the namespace of the ORM's own code, for the loaders that call the
# app's relation method: reading `$post->author` on an Eloquent model that has not loaded it
# calls Post::author() from getRelationshipFromMethod (beside the framework's getResults and
# `tap`, which are not relations) and sends one query.
LAZY_LOADERS = {"Illuminate\\Database\\Eloquent\\Model::getRelationshipFromMethod": "Illuminate\\"}


def lazy_relations_by_count(sent: dict[str, dict[str, int]],
                            edges: dict[str, dict[tuple[str, str], dict]]) -> dict[str, list[str]]:
    """Statement shape -> the relation methods an ORM's lazy loader (LAZY_LOADERS) called
    exactly as many times as it was sent, by senders_by_count's rule: the per-row query of an
    N+1 that no app code holds, sent when a loop reads a relation the query before it did not
    load (laravel: App\\Models\\Post::author, 30 calls for the 30 user lookups on `/`).
    `edges`: request id -> (caller, callee) -> {ct, ...} (xhprof)."""
    calls = {rid: {callee: int(v.get("ct", 0)) for (caller, callee), v in per.items()
                   if caller in LAZY_LOADERS and "::" in callee and not callee.startswith(LAZY_LOADERS[caller])}
             for rid, per in edges.items()}
    return senders_by_count(sent, calls) if any(calls.values()) else {}
