"""What lockdown holds on a user's server (--mysql), whatever LOCKDOWN_HOME each command uses.

With `--mysql`, a target's database is loaded into the user's server as `lockdown_<target>`,
dropped and loaded again at the start of each command and dropped at its end. Two commands on
the same target and server at once would drop each other's database mid-run; two statement
captures at once would record each other's settings as the server's own. Both are refused on
the server itself, so that two LOCKDOWN_HOMEs (two users, two checkouts) cannot share a server
unawares:

- `ServerLock`: a named lock (GET_LOCK) held by a connection of lockdown's for as long as the
  command needs it. The server releases it when that connection ends, however the command
  ends: its `mariadb` client reads the end of its input when lockdown exits, and gets SIGTERM
  from the kernel if lockdown is killed. `lockdown_capture` is a statement capture's
  (collectors/server_settings.py), `lockdown_db:<database>` a database claim's.
- `claim`: the database claim. Besides the server's lock, an advisory lock (flock) on a file in
  $LOCKDOWN_HOME/active/mysql-claims says which command of this home holds it (its pid and run
  directory) in the refusal; and a record in the records of users' servers (paths.servers_dir,
  databases/; one place for every LOCKDOWN_HOME) (0600, with how to reach the server) names the
  database loaded there until it is dropped. After a kill -9, `lockdown restore` (and the next
  lockdown command) drops that database, unless a live lockdown holds it by then
  (`drop_left_databases`).
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import select
import subprocess
import time
from pathlib import Path

from .. import paths
from ..errors import LockdownError, PhaseFailed, UsageError
from .mariadb import DatabaseServer, dsn_server
from .processes import dead_records, owner_record
from .service_account import die_with_parent

ANSWER_TIMEOUT = 30          # seconds for the server to answer a lock statement


def _sql_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


class LockHeld(LockdownError):
    """The server's lock is another connection's; `holder` says which, in words."""

    def __init__(self, name: str, holder: str):
        super().__init__(f"the server's lock {name} is held by {holder}")
        self.name = name
        self.holder = holder


class ServerLock:
    """A named lock held on the server until `close` (or lockdown's end, however it ends)."""

    def __init__(self, db: DatabaseServer, name: str):
        if len(name) > 64:               # the server's limit on a lock's name
            name = name[:23] + hashlib.sha1(name.encode()).hexdigest()
        self.db = db
        self.name = name
        # its own session: a Ctrl-C at the terminal must not end it before lockdown has put
        # back what the lock protects
        self.proc = subprocess.Popen(db.client_argv() + ["--unbuffered"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True, preexec_fn=die_with_parent)

    @classmethod
    def take(cls, db: DatabaseServer, name: str) -> "ServerLock":
        """The lock, now; LockHeld when another connection holds it (nothing waits), PhaseFailed
        when the server cannot be asked."""
        lock = cls(db, name)
        try:
            # an idle connection is closed after wait_timeout (8 hours by default): not this one
            got, holder = lock._ask(f"SET SESSION wait_timeout = 31536000; "
                                    f"SELECT GET_LOCK({_sql_string(lock.name)}, 0), "
                                    f"IS_USED_LOCK({_sql_string(lock.name)});")
            if got != "1":
                raise LockHeld(lock.name, lock._describe(holder))
        except BaseException:
            lock._end()
            raise
        return lock

    def _ask(self, statement: str) -> list[str]:
        """One statement's one row, from the lock's connection."""
        try:
            self.proc.stdin.write(statement + "\n")
            self.proc.stdin.flush()
        except OSError:
            pass                          # the client has ended: its error is read below
        ready, _, _ = select.select([self.proc.stdout], [], [], ANSWER_TIMEOUT)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            err = self._end().strip()
            why = err.splitlines()[-1] if err else (f"no answer in {ANSWER_TIMEOUT} s" if not ready
                                                    else "the client ended")
            raise PhaseFailed(f"MariaDB at {self.db.where()} did not take the lock {self.name}: {why}")
        return line.rstrip("\n").split("\t")

    def _describe(self, connection: str) -> str:
        """The connection holding the lock, as far as this account may see it."""
        if not connection.isdigit():
            return "another connection"
        try:
            who = self.db.sql(f"SELECT CONCAT(USER, '@', HOST) FROM information_schema.PROCESSLIST "
                              f"WHERE ID = {int(connection)};", timeout=ANSWER_TIMEOUT).strip()
        except PhaseFailed:
            who = ""
        return f"MariaDB connection {connection}" + (f", {who}" if who else "")

    def close(self) -> None:
        """Release the lock, at once (not whenever the server notices the client is gone)."""
        if self.proc.poll() is None:
            try:
                self._ask(f"SELECT RELEASE_LOCK({_sql_string(self.name)});")
            except PhaseFailed:
                pass                      # the connection is gone, and the lock with it
        self._end()

    def _end(self) -> str:
        """End the client (and the connection, and the lock with it); what it said on stderr."""
        if self.proc.stdin and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()   # the client's end of input: it quits
            except OSError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        err = ""
        if self.proc.stderr and not self.proc.stderr.closed:
            err = self.proc.stderr.read()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream and not stream.closed:
                stream.close()
        return err


def claim_file(where: str, database: str) -> Path:
    return paths.active_dir() / "mysql-claims" / (re.sub(r"[^A-Za-z0-9_.-]", "_", f"{where}-{database}") + ".lock")


def records_dir() -> Path:
    """Records of databases loaded into users' servers, one per command while it holds one."""
    return paths.servers_dir() / "databases"


def lock_name(database: str) -> str:
    return f"lockdown_db:{database}"


def _server_record(db: DatabaseServer) -> dict:
    return {"host": db.host, "port": db.port, "socket": db.socket, "user": db.user,
            "password": db.password}


def _server_from(record: dict) -> DatabaseServer:
    s = record["server"]
    return DatabaseServer.create(None, s["host"], s["port"], s["socket"], s["user"], s["password"])


def _exists(db: DatabaseServer, database: str) -> bool:
    return db.sql(f"SELECT SCHEMA_NAME FROM information_schema.SCHEMATA "
                  f"WHERE SCHEMA_NAME = {_sql_string(database)};", timeout=60).strip() != ""


class Claim:
    """A command's hold on a database of a user's server; `close` releases it."""

    def __init__(self, db: DatabaseServer, database: str, run_dir: Path, home_lock):
        self.db = db
        self.database = database
        self.home_lock = home_lock
        self.lock: ServerLock | None = None
        self.record: Path | None = None
        try:
            self.lock = ServerLock.take(db, lock_name(database))
        except LockHeld as e:
            raise UsageError(f"database {database} on {db.where()} is in use by another lockdown "
                                f"command ({e.holder}, maybe of another LOCKDOWN_HOME): run the two "
                                f"commands one after the other, or give this one another --mysql server")
        except PhaseFailed as e:
            raise LockdownError(f"cannot claim database {database} on {db.where()}: {e}")
        try:
            d = records_dir()
            paths.make_dir(d, "LOCKDOWN_SERVERS_DIR")
            record = d / f"{os.getpid()}-{time.time_ns()}.json"
            data = {**owner_record(), "where": db.where(), "database": database,
                    "run_dir": str(run_dir), "created": time.time(), "server": _server_record(db)}
            fd = os.open(record, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            self.record = record
            with os.fdopen(fd, "w") as f:
                json.dump(data, f)
        except BaseException:
            if self.record is not None:
                self.record.unlink(missing_ok=True)
            self.lock.close()
            raise

    def close(self) -> None:
        """Release the claim. Its record goes too, unless the database is still on the server
        (the command's drop failed): then the next command, or `lockdown restore`, drops it."""
        try:
            if self.record is not None:
                try:
                    left = _exists(self.db, self.database)
                except PhaseFailed:
                    left = True
                if not left:
                    self.record.unlink(missing_ok=True)
                self.record = None
        finally:
            if self.lock is not None:
                self.lock.close()
                self.lock = None
            if self.home_lock is not None:
                self.home_lock.close()
                self.home_lock = None


def claim(where: "str | DatabaseServer", database: str, run_dir: Path) -> Claim:
    """Hold `database` on a user's server for this command (`where`: the server, or its
    `where()` when it was reached by a --mysql DSN in this process); `close` releases it, and so
    does the end of lockdown, however it ends. Refused in one line while another command holds
    it, in this LOCKDOWN_HOME or another."""
    db = where if isinstance(where, DatabaseServer) else dsn_server(where)
    if db is None:
        raise LockdownError(f"no --mysql server at {where} to claim {database} on")
    path = claim_file(db.where(), database)
    paths.make_dir(path.parent, "LOCKDOWN_HOME")
    f = open(path, "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "another lockdown command"
        f.close()
        raise UsageError(f"database {database} on {db.where()} is in use by {holder}: run the two "
                            f"commands one after the other, or give this one another --mysql server")
    try:
        held = Claim(db, database, run_dir, f)
    except BaseException:
        f.close()
        raise
    f.seek(0)
    f.truncate()
    f.write(f"lockdown (pid {os.getpid()}, run directory {run_dir})")
    f.flush()
    return held


def drop_left_databases() -> list[str]:
    """Drop the databases that commands killed since left on users' servers (those no live
    lockdown holds: a command of another home may have claimed it since, and keeps it); one
    message per database dropped, or that could not be."""
    messages = []
    for record, data in dead_records(records_dir()):
        database, where = data.get("database", "?"), data.get("where", "?")
        try:
            db = _server_from(data)
            lock = ServerLock.take(db, lock_name(database))
        except LockHeld:
            record.unlink(missing_ok=True)       # a live command's now: it drops it itself
            continue
        except (KeyError, TypeError, AttributeError):        # not a record this version wrote
            messages.append(f"lockdown: could not drop the database named in {record}: it is "
                            f"damaged; remove it once that server is checked")
            continue
        except LockdownError as e:
            messages.append(f"lockdown: could not drop database {database} on {where}, left by an "
                            f"interrupted command: {e}; run `lockdown restore` when it is reachable")
            continue
        try:
            left = _exists(db, database)
            if left:
                db.sql(f"DROP DATABASE IF EXISTS `{database.replace('`', '``')}`;", timeout=300)
        except PhaseFailed as e:
            messages.append(f"lockdown: could not drop database {database} on {where}, left by an "
                            f"interrupted command: {e}; run `lockdown restore` when it is reachable")
            continue
        finally:
            lock.close()
        record.unlink(missing_ok=True)
        if left:
            messages.append(f"lockdown: dropped database {database} on {where}, left by an "
                            f"interrupted command (pid {data.get('owner')})")
    return messages
