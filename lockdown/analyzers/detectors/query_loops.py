"""What the query detectors read of a capture's statements, beyond their text (../sql_text.py):
the tables it writes, and each request's loops -- a SELECT fingerprint run several times in
one request -- with the parent query that returned the rows a loop walks. db-static-cache,
n-plus-one and repeated-query share them."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from functools import cached_property

from ...bundle.model import Statement
from ..sql_text import fp_of, identifiers, is_marker, is_noise, is_table_select, is_write, literals
from .context import Context


def written_tables(ctx: Context) -> set[str]:
    """Lower-cased identifiers named by any write statement of the capture (conservative: a
    column named like a table counts as a write to that table)."""
    out: set[str] = set()
    for s in ctx.statements:
        if not is_marker(s.sql) and is_write(s.sql):
            out |= identifiers(s.sql)
    return out


def find_parent(stmts: list[Statement], first: int, counts: set[int], window: int) -> Statement | None:
    """The statement that returned the rows a loop iterates over: the nearest of the `window`
    data statements before the loop's first execution (index `first` in the request's
    statements) that is a SELECT and returned exactly one of `counts` rows (2 or more)."""
    seen = 0
    fp = fp_of(stmts[first].sql)
    for j in range(first - 1, -1, -1):
        s = stmts[j]
        if is_marker(s.sql) or is_noise(s.sql) or fp_of(s.sql) == fp:
            continue
        seen += 1
        if seen > window:
            break
        if s.rows_sent >= 2 and s.rows_sent in counts and is_table_select(s.sql):
            return s
    return None


@dataclass
class Loop:
    """One fingerprint's executions in one request."""
    request: str
    url: str
    fingerprint: str
    statements: list[Statement]
    first: int                       # index of the first execution in the request's statements
    parent: Statement | None = None

    @property
    def executions(self) -> int:
        return len(self.statements)

    @cached_property
    def keys(self) -> list[tuple[str, ...]]:
        return [literals(s.sql) for s in self.statements]

    @cached_property
    def distinct(self) -> int:
        return len(set(self.keys))


def loops(ctx: Context, min_executions: int = 2) -> list[Loop]:
    """Every (request, SELECT fingerprint) run at least `min_executions` times in the request,
    with its parent query looked up (`[n-plus-one] parent_window`). Cached on the context."""
    cache = ctx.__dict__.setdefault("_query_loops", {})
    if min_executions in cache:
        return cache[min_executions]
    window = ctx.threshold("n-plus-one", "parent_window")
    out = []
    for r in ctx.requests:
        stmts = ctx.statements_of[r.id]
        groups: dict[str, list[int]] = defaultdict(list)
        for i, s in enumerate(stmts):
            if is_marker(s.sql) or not is_table_select(s.sql):
                continue
            groups[fp_of(s.sql)].append(i)
        for fp, idx in groups.items():
            if len(idx) < min_executions:
                continue
            loop = Loop(r.id, ctx.url_of[r.id], fp, [stmts[i] for i in idx], idx[0])
            loop.parent = find_parent(stmts, idx[0], {loop.executions, loop.distinct}, window)
            out.append(loop)
    cache[min_executions] = out
    return out
