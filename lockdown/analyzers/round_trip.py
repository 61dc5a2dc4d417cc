"""What a statement costs the PHP request beyond its server time: the round trip.

The slow log times a statement inside the server. The request waits longer: the packet goes
out, the server thread wakes, the result comes back and is decoded. For the small point lookups
that N+1 loops and database-served caches send, that is most of the cost (minicms: 69 us in the
server, 173 us in `mysqli::query`). xhprof times the client call of each statement, so the
instrumented requests give both sides: the mean extra time per call is
(client time - server time of the same requests) / client calls. A native prepared statement
makes more than one trip (PREPARE, then EXECUTE; the slow log shows the execution only): the
time of its prepare and close calls counts with the statement's (`PREPARE_CALLS`).

That mean is measured on other requests than the ones it is applied to: the instrumented ones
run one at a time on their own xhprof pool after the timed pass, the timed ones under the
capture's concurrency. A timed request cannot have spent more on round trips than the time
its own statements left of its wall time, so each timed request gets

    min(measured round trip, (its wall time - its statements' server time) / its statements)

per statement (`applied`): the bound is measured on the request itself. Without it, a round trip
of 1.3 ms measured on slow instrumented requests, applied to the many repeats of fast timed
requests, made a repeated-query finding explain 444% of their time (issue 29). With it, the
statements of a request never cost more than its wall time (server time + round trips <=
wall), so no share of request time built on it exceeds 100%. lockdown's own marker statement
(`lockdown-capture`, sent after the request's end was taken and outside xhprof) is no
statement of the request here."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..bundle.model import RequestRecord, Statement
from .builtins import entries
from .sql_text import MARKER

# Builtins that send one statement and wait for its result (mysqli, procedural and OO; PDO).
# Connect and fetch calls are left out: connects are not per statement, and fetches read a
# result already in the client's buffer.
CLIENT_CALLS = frozenset(name.lower() for name in (
    "mysqli_query", "mysqli_real_query", "mysqli_multi_query", "mysqli_execute_query",
    "mysqli_stmt_execute", "mysqli_execute",
    "mysqli::query", "mysqli::real_query", "mysqli::multi_query", "mysqli::execute_query",
    "mysqli_stmt::execute",
    "PDO::query", "PDO::exec", "PDOStatement::execute",
))
# The other round trips of a native prepared statement: its PREPARE (COM_STMT_PREPARE, a round
# trip the slow log does not show: it logs the execution only) and an explicit close. With PDO's
# ATTR_EMULATE_PREPARES false and with mysqli's prepare, each statement costs 1 + (prepares per
# execution) round trips (catalog: one prepare per execution, 134 each a request, the prepares
# taking 74% of the executions' client time). Their time is counted with the statement's: the
# round trip per statement is what the client spends on it beyond its server time, all its trips
# together. With emulated prepares PDO::prepare sends nothing and costs a few microseconds.
# PDOStatement::closeCursor frees a result without a round trip (the statement's own close is
# sent from its destructor, outside any call xhprof times).
PREPARE_CALLS = frozenset(name.lower() for name in (
    "PDO::prepare", "mysqli::prepare", "mysqli_prepare", "mysqli_stmt::prepare", "mysqli_stmt_prepare",
    "mysqli_stmt::close", "mysqli_stmt_close",
))


def is_client_call(name: str) -> bool:
    return name.lower() in CLIENT_CALLS


def is_prepare_call(name: str) -> bool:
    return name.lower() in PREPARE_CALLS


def _is_either(name: str) -> bool:
    low = name.lower()
    return low in CLIENT_CALLS or low in PREPARE_CALLS


@dataclass(frozen=True)
class RoundTrip:
    """Client-side time of statements measured on the xhprof-instrumented requests."""
    requests: int        # instrumented requests with at least one client call
    calls: int           # client calls in them (one per statement the slow log shows)
    client_us: int       # summed inclusive wall time of those calls and of their prepares and closes
    server_us: int       # summed slow-log duration of those requests' statements
    per_call_us: float   # (client_us - server_us) / calls, never below 0
    prepares: int = 0    # prepare and close calls among them (PREPARE_CALLS): extra round trips
    prepare_us: int = 0  # their inclusive wall time, part of client_us

    @property
    def trips_per_statement(self) -> float:
        """Round trips per statement: 1 + prepares (and closes) per execution."""
        return 1 + self.prepares / self.calls if self.calls else 1.0


def client_calls(profile: dict) -> tuple[int, int]:
    """(calls, inclusive us) of the statement-sending builtins in one xhprof array, the
    prepares and closes that go with them counted in the time (not the calls).
    tideways' doubled self-edges of internal functions are dropped (see `builtins.entries`)."""
    calls, us, _, _ = client_and_prepare_calls(profile)
    return calls, us


def client_and_prepare_calls(profile: dict) -> tuple[int, int, int, int]:
    """(statement calls, their us and the prepares' us together, prepare calls, prepares' us)."""
    calls = us = prepares = prepare_us = 0
    for _, child, v in entries(profile, _is_either):
        if is_client_call(child):
            calls += v.get("ct", 0)
            us += v.get("wt", 0)
        elif is_prepare_call(child):
            prepares += v.get("ct", 0)
            prepare_us += v.get("wt", 0)
    return calls, us + prepare_us, prepares, prepare_us


def app_statements(statements: Iterable[Statement]) -> list[Statement]:
    """The application's statements: lockdown's own marker left out."""
    return [s for s in statements if MARKER not in s.sql]


def measure(profiles: Mapping[str, dict], statements_of: Mapping[str, Iterable[Statement]]) -> RoundTrip | None:
    """The round trip over the instrumented requests (request id -> xhprof array) that sent
    statements through a known client call; None when there are none."""
    requests = calls = client_us = server_us = prepares = prepare_us = 0
    for rid, profile in profiles.items():
        n, us, p, p_us = client_and_prepare_calls(profile)
        if not n:
            continue
        requests += 1
        calls += n
        client_us += us
        prepares += p
        prepare_us += p_us
        server_us += sum(s.duration_us for s in app_statements(statements_of.get(rid, ())))
    if not calls:
        return None
    return RoundTrip(requests, calls, client_us, server_us, max(0.0, (client_us - server_us) / calls),
                     prepares, prepare_us)


def bound_us(wall_us: float, statements: Iterable[Statement]) -> float | None:
    """The most a request's statements can have cost it each beyond their server time: what
    they left of its wall time, shared among them (never below 0); None without statements."""
    mine = app_statements(statements)
    if not mine:
        return None
    return max(0.0, wall_us - sum(s.duration_us for s in mine)) / len(mine)


@dataclass(frozen=True)
class Applied:
    """The measured round trip as applied to the timed requests, each bounded by itself."""
    per_call_us: dict          # request id -> round trip per statement applied to its statements
    requests: int              # timed requests with statements
    capped: int                # of those, requests whose own time bounded the measured round trip
    statements: int            # their statements (lockdown's markers left out)
    us: float                  # the round trips applied to them, summed

    @property
    def mean_us(self) -> float:
        """Per statement, over the timed requests' statements."""
        return self.us / self.statements if self.statements else 0.0


def applied(rt: RoundTrip, requests: Iterable[RequestRecord],
            statements_of: Mapping[str, Iterable[Statement]]) -> Applied:
    """`rt` applied to `requests` (the timed ones): each request's statements get
    min(rt.per_call_us, bound_us(request)) each (see the module docstring)."""
    per_call: dict = {}
    n = capped = statements = 0
    us = 0.0
    for r in requests:
        mine = app_statements(statements_of.get(r.id, ()))
        bound = bound_us(r.wall_us, mine)
        if bound is None:
            continue
        n += 1
        capped += bound < rt.per_call_us
        per_call[r.id] = min(rt.per_call_us, bound)
        statements += len(mine)
        us += per_call[r.id] * len(mine)
    return Applied(per_call, n, capped, statements, us)
