"""MariaDB server settings a capture changes, and putting them back.

Statement capture turns the slow log on for every statement (`long_query_time=0`), into a
file of lockdown's. Those are global settings of a server that may be the user's: before
changing anything, the original values are written to a record in
`$LOCKDOWN_HOME/active/mysql/`; they are restored when the capture ends (also on Ctrl-C,
SIGTERM, errors and timeouts), and if lockdown was killed outright, by the next lockdown
command (`restore_pending`) or explicitly by `lockdown restore`.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

from .. import paths
from ..errors import LockdownError, PhaseFailed
from ..harness.mariadb import DatabaseServer
from ..harness.processes import dead_records, owner_alive, owner_record
from ..signals import held
from .attribution import ADMIN_TAG

# Read before, compared after; general_log is watched, not changed.
WATCHED = ("slow_query_log", "long_query_time", "log_output", "general_log", "slow_query_log_file",
           "log_slow_rate_limit", "log_slow_filter", "min_examined_row_limit",
           "log_slow_disabled_statements", "log_slow_verbosity")

# What a capture sets (in this order, slow_query_log last); variables a server lacks are skipped.
CAPTURE = (("slow_query_log", "OFF"), ("long_query_time", "0"), ("log_output", "FILE"),
           ("log_slow_rate_limit", "1"), ("min_examined_row_limit", "0"),
           ("log_slow_filter", "admin,filesort,filesort_on_disk,filesort_priority_queue,full_join,"
                               "full_scan,query_cache,query_cache_miss,tmp_table,tmp_table_on_disk"),
           ("log_slow_disabled_statements", "sp"), ("log_slow_verbosity", "query_plan"))


def records_dir() -> Path:
    return paths.active_dir() / "mysql"


def _literal(value: str) -> str:
    if re.fullmatch(r"-?\d+(\.\d+)?|ON|OFF", value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


# Read, never changed: the memory the server gives a statement's temporary tables and sorts,
# which the disk-spill detector quotes (manifest database.variables)
STATEMENT_MEMORY = ("tmp_table_size", "max_heap_table_size", "sort_buffer_size", "max_sort_length")


def read_settings(db: DatabaseServer, watched: tuple = WATCHED) -> dict:
    names = ", ".join(f"'{n}'" for n in watched)
    out = db.sql(f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({names}) {ADMIN_TAG};")
    values = {}
    for line in out.splitlines():
        name, _, value = line.partition("\t")
        values[name] = value
    return values


def apply(db: DatabaseServer, values: dict) -> None:
    """SET GLOBAL each of `values`, slow_query_log off first and set last (each statement
    tagged, so the capture can leave lockdown's own statements out)."""
    rest = [k for k in values if k != "slow_query_log"]
    statements = [("slow_query_log", "OFF")] if "slow_query_log" in values else []
    statements += [(k, values[k]) for k in rest]
    if "slow_query_log" in values:
        statements.append(("slow_query_log", values["slow_query_log"]))
    db.sql("\n".join(f"SET GLOBAL {k} = {_literal(v)} {ADMIN_TAG};" for k, v in statements))


def restore(db: DatabaseServer, original: dict) -> None:
    """Put back what `read_settings` read (general_log is only watched, never set)."""
    apply(db, {k: v for k, v in original.items() if k != "general_log"})


def _server_key(db: DatabaseServer) -> str:
    return db.socket or f"{db.host}:{db.port}"


class SlowLogCapture:
    """Context manager: every statement the server runs goes to `self.log_file` meanwhile."""

    def __init__(self, db: DatabaseServer, run_dir: Path, private: bool):
        self.db = db
        self.run_dir = run_dir
        self.private = private
        self.original: dict = {}
        self.record: Path | None = None
        self.tmp: Path | None = None
        self.log_file: Path | None = None

    def __enter__(self) -> "SlowLogCapture":
        # A server of the user's runs as its own user: give it a directory it can write.
        self.tmp = Path(tempfile.mkdtemp(prefix="lockdown-slowlog-"))
        self.log_file = self.tmp / "slow.log"
        try:
            self.tmp.chmod(0o777)
            self.original = read_settings(self.db)
            if not self.private:
                self._write_record()
        except BaseException:     # nothing changed yet: only the directory to remove
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise
        wanted = {k: v for k, v in CAPTURE if k in self.original}
        # with query_plan on, an entry without plan lines is a statement with no flag set
        self.plans = "log_slow_verbosity" in wanted
        wanted["slow_query_log_file"] = str(self.log_file)
        wanted["slow_query_log"] = "ON"
        try:
            apply(self.db, wanted)
            self._wait_for_log()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def pause(self) -> None:
        """Log nothing for a while (an uncollected slice of an interleaved overhead check);
        connections opened meanwhile are not logged until they end."""
        self.db.sql(f"SET GLOBAL slow_query_log = OFF {ADMIN_TAG};")

    def resume(self) -> None:
        self.db.sql(f"SET GLOBAL slow_query_log = ON {ADMIN_TAG};")

    def _wait_for_log(self, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.db.sql(f"SELECT 1 {ADMIN_TAG};")
            if self.log_file.exists() and ADMIN_TAG in self.log_file.read_text(errors="replace"):
                return
            time.sleep(0.2)
        raise PhaseFailed(f"MariaDB at {self.db.where()} does not write its slow log to "
                          f"{self.log_file}; statement capture needs a server on this host that "
                          f"can write to /tmp (or leave out --collect queries)")

    def __exit__(self, *exc) -> None:
        with held():          # a Ctrl-C meanwhile waits until the settings are back
            try:
                restore(self.db, self.original)
                after = read_settings(self.db)
            except LockdownError as e:
                raise PhaseFailed(f"could not restore MariaDB settings on {self.db.where()}: {e}; "
                                  f"run `lockdown restore` when the server is reachable")
            self.take_log(self.run_dir / "capture" / "slow.log")
            changed = {k: (v, after.get(k)) for k, v in self.original.items() if after.get(k) != v}
            if changed:
                raise PhaseFailed(f"MariaDB settings on {self.db.where()} differ after restoring: "
                                  f"{changed}; run `lockdown restore`")
            if self.record is not None:
                self.record.unlink(missing_ok=True)

    def take_log(self, dest: Path) -> Path:
        """Move the log into the run directory (kept as evidence whatever happened) and drop
        the temporary directory."""
        dest.parent.mkdir(parents=True, exist_ok=True)
        if self.log_file.exists():
            shutil.move(self.log_file, dest)
        shutil.rmtree(self.tmp, ignore_errors=True)
        return dest

    def _write_record(self) -> None:
        d = records_dir()
        d.mkdir(parents=True, exist_ok=True)
        key = _server_key(self.db)
        for other in d.glob("*.json"):
            try:
                data = json.loads(other.read_text())
            except (OSError, ValueError):
                continue
            if data.get("server_key") == key and owner_alive(data):
                raise LockdownError(f"another lockdown (pid {data['owner']}) is capturing statements "
                                    f"on MariaDB at {key}; wait for it to finish")
        self.record = d / f"{os.getpid()}-{int(time.time() * 1000)}.json"
        data = {**owner_record(), "server_key": key, "created": time.time(), "tmp": str(self.tmp),
                "server": {"host": self.db.host, "port": self.db.port, "socket": self.db.socket,
                           "user": self.db.user, "password": self.db.password},
                "original": self.original}
        fd = os.open(self.record, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)


def restore_pending() -> list[str]:
    """Put back the settings of captures whose lockdown died; one message per server."""
    messages = []
    for record, data in dead_records(records_dir()):
        s = data["server"]
        with tempfile.TemporaryDirectory(prefix="lockdown-restore-") as tmp:
            db = DatabaseServer.create(Path(tmp), s["host"], s["port"], s["socket"], s["user"],
                                       s["password"])
            original = data["original"]
            try:
                restore(db, original)
            except LockdownError as e:
                messages.append(f"lockdown: could not restore MariaDB settings on "
                                f"{data['server_key']} changed by an interrupted capture: {e}; "
                                f"run `lockdown restore` when it is reachable")
                continue
        record.unlink(missing_ok=True)
        if data.get("tmp", "").startswith(tempfile.gettempdir() + "/lockdown-slowlog-"):
            shutil.rmtree(data["tmp"], ignore_errors=True)
        shown = ", ".join(f"{k}={original[k]}" for k in ("slow_query_log", "long_query_time",
                                                          "log_output", "slow_query_log_file")
                          if k in original)
        messages.append(f"lockdown: restored MariaDB settings on {data['server_key']} left changed "
                        f"by an interrupted capture (pid {data['owner']}): {shown}")
    return messages
