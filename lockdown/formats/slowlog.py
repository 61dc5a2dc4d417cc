"""MariaDB's slow query log (file output) -> statements with their timings.

With `long_query_time=0` every statement is logged, after it completes, as
    # Time: 261121 17:18:31            (only when the second changed)
    # User@Host: user[user] @ localhost [127.0.0.1]
    # Thread_id: 5  Schema: wp  QC_hit: No
    # Query_time: 0.000104  Lock_time: 0.000000  Rows_sent: 1  Rows_examined: 0
    # Rows_affected: 0  Bytes_sent: 58
    use wp;                             (optional)
    SET timestamp=1795281511;
    select 1;
The server writes a three-line banner when it (re)opens the file. Statements may span lines.
With `log_slow_verbosity=query_plan` (what the capture sets) a statement that ran a plan also has
    # Full_scan: Yes  Full_join: No  Tmp_table: Yes  Tmp_table_on_disk: No
    # Filesort: Yes  Filesort_on_disk: No  Merge_passes: 0  Priority_queue: No
whose Yes flags become `plan`. The server prints those lines only when a flag is set, so
with `plans=True` (the capture turned query_plan on) an entry without them has no flag (`[]`);
otherwise it is unknown (None).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Iterator

_BANNER = (re.compile(r"^\S+, Version: "), re.compile(r"^Tcp port: "), re.compile(r"^Time\s+Id\s+Command"))
_FIELD = re.compile(r"(\w+): (\S*)")
_SET_TIMESTAMP = re.compile(r"^SET timestamp=(\d+);$")


class SlowLogError(ValueError):
    """The file is not a MariaDB slow log in the shape lockdown configured."""


@dataclass(slots=True)
class SlowLogEntry:
    line: int                 # line number of the entry's first header line
    user_host: str
    thread_id: int
    schema: str
    query_time_us: int
    lock_time_us: int
    rows_sent: int
    rows_examined: int
    rows_affected: int | None
    timestamp: int | None     # statement start, whole seconds (Unix time)
    sql: str
    plan: list[str] | None = None   # the server's plan flags that were Yes (PLAN_FLAGS), lower case


# log_slow_verbosity=query_plan's flags, in the order the server prints them
PLAN_FLAGS = ("Full_scan", "Full_join", "Tmp_table", "Tmp_table_on_disk", "Filesort", "Filesort_on_disk")


def plan_of(fields: dict, plans: bool = False) -> list[str] | None:
    """The Yes flags of an entry's query-plan lines; without them, [] when the log has plan
    lines for every flagged statement (`plans`), else None (unknown)."""
    if not any(f in fields for f in PLAN_FLAGS):
        return [] if plans else None
    flags = [f.lower() for f in PLAN_FLAGS if fields.get(f) == "Yes"]
    if fields.get("Merge_passes", "0") not in ("0", ""):
        flags.append("merge_passes")
    return flags


def _us(value: str) -> int:
    return round(float(value) * 1_000_000)


def parse(lines: Iterable[str], source: str = "slow log", plans: bool = False) -> Iterator[SlowLogEntry]:
    fields: dict = {}
    start = 0
    body: list[str] = []
    user_host = ""
    in_entry = False

    def finish():
        if not in_entry:
            return None
        for need in ("Thread_id", "Query_time", "Rows_sent", "Rows_examined"):
            if need not in fields:
                raise SlowLogError(f"{source} line {start}: entry without {need}")
        timestamp = None
        sql_lines = []
        for text in body:
            m = _SET_TIMESTAMP.match(text)
            if m and not sql_lines:
                timestamp = int(m.group(1))
            elif not sql_lines and text.startswith("use ") and text.endswith(";"):
                continue
            else:
                sql_lines.append(text)
        sql = "\n".join(sql_lines).strip()
        if sql.endswith(";"):
            sql = sql[:-1]
        try:
            return SlowLogEntry(start, user_host, int(fields["Thread_id"]), fields.get("Schema", ""),
                                _us(fields["Query_time"]), _us(fields.get("Lock_time", "0")),
                                int(fields["Rows_sent"]), int(fields["Rows_examined"]),
                                int(fields["Rows_affected"]) if "Rows_affected" in fields else None,
                                timestamp, sql, plan_of(fields, plans))
        except ValueError:
            raise SlowLogError(f"{source} line {start}: a number field is not a number: {fields}")

    for n, raw in enumerate(lines, 1):
        line = raw.rstrip("\n")
        if line.startswith("# Time: "):
            continue
        if line.startswith("# User@Host: "):
            entry = finish()
            if entry is not None:
                yield entry
            fields, body, start, in_entry = {}, [], n, True
            user_host = line[len("# User@Host: "):]
            continue
        if any(p.match(line) for p in _BANNER):
            entry = finish()
            if entry is not None:
                yield entry
            in_entry = False
            continue
        if not in_entry:
            if line.strip():
                raise SlowLogError(f"{source} line {n}: text outside any entry: {line[:80]!r}")
            continue
        if line.startswith("# ") and not body:
            fields.update(_FIELD.findall(line))
            continue
        body.append(line)
    entry = finish()
    if entry is not None:
        yield entry
