"""The PHP function that sends a set of statements, found in the xhprof call graph when the
statements do not name it (`sql_caller` reads the names frameworks write in comments).

The slow log cannot say which PHP call sent a statement, and xhprof keeps one level of context
(caller ==> callee). What it does give is how often each function was called: walking up from
the builtins that send statements (`round_trip.CLIENT_CALLS`), the nearest user function
called exactly as many times as the statements ran in that request sends one of them per call
(catalog's `DbCatalogue::lookup`, 99 calls for 99 translation lookups; bulletin's
`db_server_read_only`). A database layer that every statement goes through can be called as
often (bulletin's `db_query` runs one probe before each query, so both are called 7 times):
of several at the same distance, one that calls another is left out (the callee sends these
statements, the caller more), and of the rest the one whose inclusive time is closest to what
the statements cost there (server time and round trips) is taken. Excimer's wall-clock samples
under that function are then what the statements cost PHP, all their round trips included."""
from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable

from ...bundle.model import Statement
from ..round_trip import app_statements, is_client_call
from .context import Context

MAX_DEPTH = 6   # call-graph steps from the client call up to the sender
MIN_CALLS = 2   # statements per request: a function called once is as often the page itself


def ancestors(ctx: Context, rid: str) -> list[list[str]]:
    """The user and internal functions above the client calls of request `rid`, by distance:
    [the client calls' callers, their callers, ...], MAX_DEPTH levels at most, each once."""
    edges = ctx.xhprof_edges.get(rid)
    if not edges:
        return []
    callers: dict[str, set[str]] = defaultdict(set)
    for parent, child in edges:
        callers[child].add(parent)
    frontier = sorted({p for c in callers if is_client_call(c) for p in callers[c]})
    seen = set(frontier)
    levels = []
    while frontier and len(levels) < MAX_DEPTH:
        levels.append(frontier)
        frontier = sorted({p for f in frontier for p in callers.get(f, ()) if p not in seen})
        seen.update(frontier)
    return levels


def sender_of(ctx: Context, rid: str, executions: int, cost_us: float,
              accept: Callable[[str], bool] = lambda f: True, min_calls: int = MIN_CALLS) -> str | None:
    """The nearest user function above a client call in request `rid` that was called exactly
    `executions` times (and that `accept`s); of several at the same distance, not one that
    calls another, then the one whose inclusive time is closest to `cost_us`. None when there is
    none within MAX_DEPTH steps, or when `executions` is below `min_calls`."""
    totals = ctx.xhprof.get(rid, {})
    if executions < min_calls:
        return None
    for level in ancestors(ctx, rid):
        hits = [f for f in level if not ctx.is_internal(f) and accept(f)
                and totals.get(f, {}).get("calls") == executions]
        # a candidate that calls another sends more than these (bulletin's db_query calls
        # db_server_read_only before each of its own queries): the callee is the sender
        inner = [f for f in hits if not any((f, g) in ctx.xhprof_edges[rid] for g in hits if g != f)]
        if inner:
            return min(inner, key=lambda f: (abs(totals[f].get("inclusive_us", 0) - cost_us), f))
    return None


def xhprof_sender(ctx: Context, statements: list[Statement],
                  accept: Callable[[str], bool] = lambda f: True, min_calls: int = MIN_CALLS) -> str | None:
    """The sender most instrumented requests among `statements`' agree on (`sender_of`, with
    each request's count of them and their cost: server time plus the measured round trip)."""
    rt = ctx.round_trip.per_call_us if ctx.round_trip else 0.0
    per_request: dict[str, list[Statement]] = defaultdict(list)
    for s in statements:
        if s.request in ctx.xhprof_profiles:
            per_request[s.request].append(s)
    found = Counter()
    for rid, mine in per_request.items():
        mine = app_statements(mine)
        if mine:
            found[sender_of(ctx, rid, len(mine), sum(s.duration_us + rt for s in mine), accept, min_calls)] += 1
    found.pop(None, None)
    return found.most_common(1)[0][0] if found else None
