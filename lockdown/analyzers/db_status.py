"""The database server's counters over the capture, per request: what a DBA reads first.

From `manifest.database.status` (collectors/server_status.py): the differences of `SHOW GLOBAL
STATUS` over the timed capture, divided by its requests, and the ratios that say whether a
server setting is the limit: the buffer pool's hit ratio (innodb_buffer_pool_size), the share
of temporary tables created on disk (tmp_table_size, or TEXT/BLOB columns), the threads created
per connection (thread_cache_size), tables opened again (table_open_cache). Server-wide: on a
shared server other clients count too, which the summary says.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class Check:
    """One thing the counters say, with whether it points at the server's configuration."""
    name: str
    value: str
    flagged: bool
    setting: str          # the server setting or the cause to look at when flagged


@dataclass
class DatabaseStatus:
    requests: int
    private: bool
    per_request: dict = field(default_factory=dict)    # counter -> mean per timed request
    buffer_pool_hit_pct: float | None = None
    tmp_disk_pct: float | None = None
    threads_per_connection: float | None = None
    checks: list[Check] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


def _pct(part: int, whole: int) -> float | None:
    return round(100.0 * part / whole, 2) if whole else None


def summarize(database: dict | None) -> DatabaseStatus | None:
    """None when the bundle has no counters (no database, or captured before they were read)."""
    status = (database or {}).get("status")
    if not isinstance(status, dict) or not status.get("counters") or not status.get("requests"):
        return None
    c, n = status["counters"], status["requests"]
    out = DatabaseStatus(n, bool(database.get("private")), {k: round(v / n, 4) for k, v in sorted(c.items())})
    g = c.get
    if g("Innodb_buffer_pool_read_requests"):
        out.buffer_pool_hit_pct = round(100.0 - _pct(g("Innodb_buffer_pool_reads", 0),
                                                     g("Innodb_buffer_pool_read_requests")), 3)
    out.tmp_disk_pct = _pct(g("Created_tmp_disk_tables", 0), g("Created_tmp_tables", 0))
    if g("Connections"):
        out.threads_per_connection = round(g("Threads_created", 0) / g("Connections"), 3)
    out.checks = _checks(out, c, n)
    return out


def _rate(v: float) -> str:
    """A count a request: two decimals, or four when a rare event would read as 0.00."""
    return f"{v:,.2f}" if v == 0 or v >= 0.01 else f"{v:.4f}"


def _checks(s: DatabaseStatus, c: dict, n: int) -> list[Check]:
    """Each check flagged from the raw counters (a rare event, 1 in 300 requests, is still
    one), shown per request."""
    per = s.per_request

    def rate(key: str) -> float:
        return c.get(key, 0) / n
    out = []
    if s.buffer_pool_hit_pct is not None:
        reads = rate("Innodb_buffer_pool_reads")
        page_reads = per["Innodb_buffer_pool_read_requests"]
        out.append(Check("buffer pool", f"{s.buffer_pool_hit_pct:.2f}% of {page_reads:,.0f} "
                                        f"page reads a request from memory, {_rate(reads)} from disk",
                         reads >= 1, "innodb_buffer_pool_size: the pages the requests use do not stay in memory"))
    if "Created_tmp_tables" in c:
        out.append(Check("temporary tables", f"{_rate(per['Created_tmp_tables'])} a request, "
                                             f"{_rate(rate('Created_tmp_disk_tables'))} on disk",
                         c.get("Created_tmp_disk_tables", 0) > 0,
                         "tmp_table_size / max_heap_table_size, or TEXT/BLOB columns in GROUP BY, DISTINCT, "
                         "UNION (the disk-spill finding names the statements)"))
    if "Sort_merge_passes" in c:
        out.append(Check("sort merge passes", f"{_rate(per['Sort_merge_passes'])} a request",
                         c["Sort_merge_passes"] > 0, "sort_buffer_size, or sorting fewer or narrower rows"))
    if "Handler_read_rnd_next" in c:
        out.append(Check("rows read by table scans", f"{per['Handler_read_rnd_next']:,.0f} a request "
                                                     f"(Handler_read_rnd_next; index lookups: "
                                                     f"{per.get('Handler_read_key', 0):,.0f})",
                         False, ""))
    if "Select_full_join" in c:
        out.append(Check("joins without an index", f"{_rate(per['Select_full_join'])} a request",
                         c["Select_full_join"] > 0, "an index on the join column (the unindexed-query finding)"))
    if s.threads_per_connection is not None:
        out.append(Check("connections", f"{_rate(per['Connections'])} a request, "
                                        f"{s.threads_per_connection:.2f} new server threads per connection",
                         s.threads_per_connection >= 0.5 and rate("Connections") >= 0.5,
                         "thread_cache_size: each connection starts a thread"))
    if "Table_open_cache_misses" in c:
        out.append(Check("table cache", f"{_rate(per['Table_open_cache_misses'])} misses a request "
                                        f"({_rate(rate('Opened_tables'))} tables opened)",
                         rate("Table_open_cache_misses") >= 0.1, "table_open_cache: tables are opened again"))
    if "Innodb_row_lock_waits" in c:
        out.append(Check("row lock waits", f"{_rate(per['Innodb_row_lock_waits'])} a request, "
                                           f"{_rate(rate('Innodb_row_lock_time'))} ms",
                         c["Innodb_row_lock_waits"] > 0,
                         "requests writing the same rows at once (a counter row updated on every view)"))
    return out
