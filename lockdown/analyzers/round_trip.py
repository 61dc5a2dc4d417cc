"""What a statement costs the PHP request beyond its server time: the round trip.

The slow log times a statement inside the server. The request waits longer: the packet goes
out, the server thread wakes, the result comes back and is decoded. For the small point lookups
that N+1 loops and database-served caches send, that is most of the cost (minicms: 69 us in the
server, 173 us in `mysqli::query`). xhprof times the client call of each statement, so the
instrumented requests give both sides: the mean extra time per call is
(client time - server time of the same requests) / client calls."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..bundle.model import Statement
from .builtins import entries

# Builtins that send one statement and wait for its result (mysqli, procedural and OO; PDO).
# Prepare, connect and fetch calls are left out: prepares are not statements in the slow log,
# connects are not per statement, and fetches read a result already in the client's buffer.
CLIENT_CALLS = frozenset(name.lower() for name in (
    "mysqli_query", "mysqli_real_query", "mysqli_multi_query", "mysqli_execute_query",
    "mysqli_stmt_execute", "mysqli_execute",
    "mysqli::query", "mysqli::real_query", "mysqli::multi_query", "mysqli::execute_query",
    "mysqli_stmt::execute",
    "PDO::query", "PDO::exec", "PDOStatement::execute",
))


def is_client_call(name: str) -> bool:
    return name.lower() in CLIENT_CALLS


@dataclass(frozen=True)
class RoundTrip:
    """Client-side time of statements measured on the xhprof-instrumented requests."""
    requests: int        # instrumented requests with at least one client call
    calls: int           # client calls in them
    client_us: int       # summed inclusive wall time of those calls
    server_us: int       # summed slow-log duration of those requests' statements
    per_call_us: float   # (client_us - server_us) / calls, never below 0


def client_calls(profile: dict) -> tuple[int, int]:
    """(calls, inclusive us) of the statement-sending builtins in one xhprof array.
    tideways' doubled self-edges of internal functions are dropped (see `builtins.entries`)."""
    calls = us = 0
    for _, child, v in entries(profile, is_client_call):
        if is_client_call(child):
            calls += v.get("ct", 0)
            us += v.get("wt", 0)
    return calls, us


def measure(profiles: Mapping[str, dict], statements_of: Mapping[str, Iterable[Statement]]) -> RoundTrip | None:
    """The round trip over the instrumented requests (request id -> xhprof array) that sent
    statements through a known client call; None when there are none."""
    requests = calls = client_us = server_us = 0
    for rid, profile in profiles.items():
        n, us = client_calls(profile)
        if not n:
            continue
        requests += 1
        calls += n
        client_us += us
        server_us += sum(s.duration_us for s in statements_of.get(rid, ()))
    if not calls:
        return None
    return RoundTrip(requests, calls, client_us, server_us, max(0.0, (client_us - server_us) / calls))
