"""The share of request time a set of statements explains, and the evidence lines that show how
it was reckoned. Two estimates, the larger one counts:

- server time from the slow log plus one round trip per statement, measured on the
  instrumented requests (`Context.round_trip`) and, in each timed request, at most what that
  request's statements left of its wall time (`Context.round_trip_applied`), with the
  server-only figure beside it;
- when the statements name the PHP function that sent them (`sql_caller`, MediaWiki's
  `/* LCStoreDB::get */`), Excimer's share of timed requests' samples under that function,
  times the part of its statements that are these: what the framework's own database layer
  and the code around each lookup cost as well;
- otherwise, when the xhprof call graph shows a user function called once per statement
  (`call_sender`: catalog's `DbCatalogue::lookup`), Excimer's wall-clock share under it, times
  the part of its calls that are these. That one is preferred to the first estimate, not only
  taken when larger: it measures the statements' whole cost, every round trip of a native
  prepared statement included, on the timed requests themselves, where the first applies a
  round trip measured on the slower instrumented ones (catalog: 144 us a statement with its
  PREPARE, 52.8% for the translations against 36.8% of the samples under the lookup).

Shared by the query detectors."""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from ...bundle.model import Statement
from ..findings import Evidence
from ..round_trip import RoundTrip
from ..sql_caller import caller_of
from .call_sender import xhprof_sender
from .context import Context

SHARE_SOURCE = "statements.jsonl duration_us, requests.jsonl wall_us"
MIN_NAMED = 0.9     # of the statements naming one function, for its samples to count


@dataclass
class Bounded:
    """The round trip as applied to a set of statements' timed requests, where their own time
    bounded it below the measured one (`round_trip.applied`)."""
    mean_us: float          # over the statements
    capped: int             # timed requests where it was bounded
    requests: int           # timed requests of the statements


@dataclass
class Sender:
    """The PHP function the statements name as their sender, and Excimer's share under it."""
    function: str
    sampled_pct: float      # of timed requests' samples with it on the stack
    part: float             # these statements' part of all it sent
    share: float            # sampled_pct x part
    source: str = "comment"     # the statements name it; "xhprof": called once per statement


@dataclass
class StatementTime:
    """What a set of statements costs the timed requests, both estimates (docstring above)."""
    share: float                    # the larger estimate: the finding's share
    served: float                   # server time (+ one round trip each when measured), %
    server_only: float | None       # server time alone, %, beside it when a round trip was measured
    round_trip: RoundTrip | None
    bounded: Bounded | None
    overfull: list[str]             # timed requests whose statements outlasted the request
    sender: Sender | None

    @property
    def function(self) -> str | None:
        """The sender the statements name (details["sender"], which `related` links by); one
        found in the call graph is in `sender` only."""
        return self.sender.function if self.sender and self.sender.source == "comment" else None


def statement_time(ctx: Context, statements: Iterable[Statement],
                   of: Iterable[Statement] | None = None) -> StatementTime:
    """`of`: all the executions `statements` are part of (repeated-query's saved executions are
    part of all the statement's), for the sender found in the call graph; default: themselves."""
    mine = list(statements)
    served = ctx.share_of(mine)
    rt = ctx.round_trip
    named = sender_share(ctx, mine)
    sender = (*named, "comment") if named else called_sender_share(ctx, mine, mine if of is None else list(of))
    share = served if sender is None else sender[3] if sender[4] == "xhprof" else max(served, sender[3])
    return StatementTime(
        share=share, served=served,
        server_only=None if rt is None else ctx.server_share_of(mine), round_trip=rt,
        bounded=None if rt is None else bounded(ctx, mine),
        overfull=sorted({s.request for s in mine if s.request in ctx.overfull}),
        sender=None if sender is None else Sender(*sender))


def bounded(ctx: Context, statements: list[Statement]) -> Bounded | None:
    """The round trip as applied to these statements' timed requests, when their own time
    bounded it below the measured one (`round_trip.applied`); None otherwise."""
    rt, trip = ctx.round_trip, ctx.round_trip_applied
    mine = [s for s in statements if s.request in trip.per_call_us] if trip else []
    capped = sorted({s.request for s in mine if trip.per_call_us[s.request] < rt.per_call_us})
    if not capped:
        return None
    mean = sum(trip.per_call_us[s.request] for s in mine) / len(mine)
    return Bounded(mean, len(capped), len({s.request for s in mine}))


def called_sender_share(ctx: Context, statements: list[Statement], whole: list[Statement]):
    """(function, % of timed samples under it, part, share, "xhprof") for the user function the
    call graph shows sending `whole` one per call (`call_sender.xhprof_sender`), when it is an
    Excimer frame; `part` is `statements`' part of `whole` in the timed requests."""
    timed = [s for s in whole if s.request in ctx.timed_ids]
    if not timed or not ctx.excimer_total:
        return None
    function = xhprof_sender(ctx, whole)
    if function is None or function not in ctx.excimer_frames:
        return None
    part = sum(1 for s in statements if s.request in ctx.timed_ids) / len(timed)
    sampled = ctx.php_share_pct(lambda frame: frame == function)
    return function, sampled, part, sampled * part, "xhprof"


def sender_share(ctx: Context, statements: list[Statement]) -> tuple[str, float, float, float] | None:
    """(function, % of timed samples under it, part of its statements that are these, the share
    that makes) when at least MIN_NAMED of `statements` name one function that is an Excimer frame."""
    mine = [s for s in statements if s.request in ctx.timed_ids]
    if not mine or not ctx.excimer_total:
        return None
    function, named = Counter(caller_of(s.sql) for s in mine).most_common(1)[0]
    if function is None or named < MIN_NAMED * len(mine) or function not in ctx.excimer_frames:
        return None
    part = named / ctx.sent_by[function]
    sampled = ctx.php_share_pct(lambda frame: frame == function)
    return function, sampled, part, sampled * part


# -- description ---------------------------------------------------------------------------------

def describe_statement_time(t: StatementTime, what: str) -> list[Evidence]:
    """The evidence lines that show how `t` was reckoned, for `what` (e.g. "time in these
    statements")."""
    rt = t.round_trip
    if rt is None:
        evidence = [Evidence(f"{what}, % of timed requests' wall time (server side only: no client "
                             "call of a statement in the xhprof profiles)", round(t.served, 2), SHARE_SOURCE)]
    else:
        evidence = [
            Evidence(f"{what}, % of timed requests' wall time (server time + one round trip each)",
                     round(t.served, 2), f"{SHARE_SOURCE}, round trip below"),
            Evidence(f"{what}, server side only", round(t.server_only, 2), SHARE_SOURCE),
            Evidence("round trip per statement beyond its server time (mean)", f"{rt.per_call_us:.0f} us",
                     f"xhprof: {rt.calls} client calls in {rt.requests} instrumented requests took "
                     f"{rt.client_us / 1000:.1f} ms, their statements {rt.server_us / 1000:.1f} ms in the server"),
        ]
        evidence += describe_bounded(t.bounded)
    if t.overfull:
        evidence.append(Evidence(
            "timed requests whose statements took longer in the server than the request itself "
            "(some are not its own; each counted at most its wall time)", len(t.overfull),
            f"{SHARE_SOURCE}: {', '.join(t.overfull[:3])}{' ...' if len(t.overfull) > 3 else ''}"))
    if t.sender is not None and t.sender.source == "xhprof":
        s = t.sender
        evidence.append(Evidence(
            f"{what}, % of timed requests' wall time, as PHP spends it in their sender {s.function} "
            "(preferred: Excimer's wall-clock samples on the timed requests, every round trip included)",
            round(s.share, 2),
            f"xhprof: {s.function} is the nearest user function above the client calls called once per "
            f"statement; Excimer: {s.sampled_pct:.1f}% of timed requests' samples have it on the stack, and "
            f"these are {100 * s.part:.0f}% of its calls"))
    elif t.sender is not None:
        s = t.sender
        evidence.append(Evidence(
            f"{what}, % of timed requests' wall time, as PHP spends it in their sender {s.function}",
            round(s.share, 2),
            f"statements name {s.function} in a comment; Excimer: {s.sampled_pct:.1f}% of timed requests' "
            f"samples have it on the stack, and these are {100 * s.part:.0f}% of the statements it sent"))
    return evidence


def describe_bounded(b: Bounded | None) -> list[Evidence]:
    if b is None:
        return []
    return [Evidence(
        "round trip per statement as the timed requests can have spent it (mean over these statements)",
        f"{b.mean_us:.0f} us",
        f"in {b.capped} of {b.requests} timed requests the measured round trip "
        "exceeds what their statements left of their wall time (wall time - server time, per "
        "statement), which bounds it there: the instrumented requests ran apart and slower")]
