"""MariaDB's own counters over the timed capture: what a DBA reads first.

The slow log says what each statement did; the server's status counters say what the server
did for all of them: pages read from disk rather than the buffer pool, temporary tables and
sort passes, rows read by scans, connections and the threads created for them, tables opened
again, row-lock waits. `SHOW GLOBAL STATUS` is read (never changed) before and after each
capture slice and the differences summed. A read counts itself (a temporary table, a table
scan, a connection, the statement): its own footprint is measured once, by two reads in a
row, and taken out of each slice. The counters are server-wide: on a server shared with other
clients (`--mysql`), those clients count too; lockdown's marker statement (SHOW PROCESSLIST,
one per request, on one persistent connection per worker) counts in Questions, the bytes and
Connections.
"""
from __future__ import annotations

from ..harness.mariadb import DatabaseServer
from .attribution import ADMIN_TAG

COUNTERS = (
    "Innodb_buffer_pool_read_requests", "Innodb_buffer_pool_reads",
    "Created_tmp_tables", "Created_tmp_disk_tables", "Created_tmp_files",
    "Sort_merge_passes", "Sort_rows", "Sort_scan", "Sort_range",
    "Select_full_join", "Select_full_range_join", "Select_range", "Select_scan",
    "Handler_read_rnd_next", "Handler_read_rnd", "Handler_read_key", "Handler_read_next", "Handler_read_first",
    "Handler_write", "Handler_update", "Handler_delete",
    "Innodb_rows_read", "Innodb_row_lock_waits", "Innodb_row_lock_time",
    "Connections", "Threads_created", "Aborted_connects", "Aborted_clients",
    "Opened_tables", "Opened_table_definitions", "Table_open_cache_hits", "Table_open_cache_misses",
    "Table_locks_waited", "Questions", "Com_select", "Com_insert", "Com_update", "Com_delete",
    "Bytes_sent", "Bytes_received",
)


def read_status(db: DatabaseServer) -> dict[str, int]:
    """The counters as the server has them now (those it lacks are left out)."""
    names = ", ".join(f"'{n}'" for n in COUNTERS)
    out = db.sql(f"SHOW GLOBAL STATUS WHERE Variable_name IN ({names}) {ADMIN_TAG};")
    values = {}
    for line in out.splitlines():
        name, _, value = line.partition("\t")
        if value.strip().lstrip("-").isdigit():
            values[name] = int(value)
    return values


def difference(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """What the server counted in between; a counter that went back (a server restart, FLUSH
    STATUS) is left out rather than read as negative work."""
    return {k: after[k] - before[k] for k in after if k in before and after[k] >= before[k]}


def summed(deltas: list[dict[str, int]]) -> dict[str, int]:
    """The slices' differences together; a counter missing from any slice is left out."""
    if not deltas:
        return {}
    keys = set(deltas[0]).intersection(*deltas[1:])
    return {k: sum(d[k] for d in deltas) for k in sorted(keys)}


def own_footprint(db: DatabaseServer) -> dict[str, int]:
    """What one `read_status` adds to the counters it reads: two reads in a row, differenced."""
    return difference(read_status(db), read_status(db))


def without(delta: dict[str, int], footprint: dict[str, int]) -> dict[str, int]:
    """A slice's differences less the one read after it that they include."""
    return {k: max(0, v - footprint.get(k, 0)) for k, v in delta.items()}
