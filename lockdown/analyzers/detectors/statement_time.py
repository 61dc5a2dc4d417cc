"""The share of request time a set of statements explains, and the evidence lines that show how
it was reckoned: server time from the slow log plus one measured round trip per statement
(`Context.round_trip`), with the server-only figure beside it. Shared by the query detectors."""
from __future__ import annotations

from collections.abc import Iterable

from ...bundle.model import Statement
from ..findings import Evidence
from .context import Context

SHARE_SOURCE = "statements.jsonl duration_us, requests.jsonl wall_us"


def statement_time(ctx: Context, statements: Iterable[Statement], what: str) -> tuple[float, list[Evidence]]:
    """(share % of timed requests' wall time, evidence) for `what` (e.g. "time in these statements")."""
    mine = list(statements)
    share = ctx.share_of(mine)
    rt = ctx.round_trip
    if rt is None:
        return share, [Evidence(f"{what}, % of timed requests' wall time (server side only: no client "
                                "call of a statement in the xhprof profiles)", round(share, 2), SHARE_SOURCE)]
    return share, [
        Evidence(f"{what}, % of timed requests' wall time (server time + one round trip each)",
                 round(share, 2), f"{SHARE_SOURCE}, round trip below"),
        Evidence(f"{what}, server side only", round(ctx.server_share_of(mine), 2), SHARE_SOURCE),
        Evidence("round trip per statement beyond its server time (mean)", f"{rt.per_call_us:.0f} us",
                 f"xhprof: {rt.calls} client calls in {rt.requests} instrumented requests took "
                 f"{rt.client_us / 1000:.1f} ms, their statements {rt.server_us / 1000:.1f} ms in the server"),
    ]
