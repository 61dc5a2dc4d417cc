"""MariaDB server settings a capture changes, and putting them back.

Statement capture turns the slow log on for every statement (`long_query_time=0`), into a
file of lockdown's. Those are global settings of a server that may be the user's:

- One capture per server at a time, whatever LOCKDOWN_HOME each lockdown uses: a capture holds
  the server's lock `lockdown_capture` (harness/db_claim.ServerLock) from before it reads the
  settings until they are back; another is refused in one line before it changes anything.
- Before changing anything, the original values are written to a record in the records of
  users' servers (paths.servers_dir, one place for every LOCKDOWN_HOME; 0600); they are
  restored when the capture ends (also on Ctrl-C, SIGTERM, errors and timeouts), and if
  lockdown was killed outright, by the next lockdown command (`restore_pending`) or explicitly
  by `lockdown restore`.
- Values that are a capture's own are never taken for the server's: when the server's slow log
  is still in a lockdown-slowlog directory (a killed capture of another home, not restored
  yet), the capture puts back the server's defaults for what captures change, and says so.
- A value the server refuses when it is put back (its slow log's directory is gone) is
  replaced by the server's default, and said in one line: never retried forever.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

from .. import paths
from ..errors import LockdownError, PhaseFailed
from ..harness.db_claim import LockHeld, ServerLock, drop_left_databases
from ..harness.mariadb import DatabaseServer
from ..harness.processes import dead_records, owner_record
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

# Every setting a capture changes: when the server's are a killed capture's, these are not its own
CHANGED = tuple(k for k, _ in CAPTURE) + ("slow_query_log_file",)

CAPTURE_LOCK = "lockdown_capture"
SLOWLOG_PREFIX = "lockdown-slowlog-"


def records_dir() -> Path:
    """Original settings of captures running or killed, shared by every LOCKDOWN_HOME."""
    return paths.servers_dir() / "settings"


def _literal(value: str | None) -> str:
    if value is None:               # an original that was not the server's own: its default
        return "DEFAULT"
    if re.fullmatch(r"-?\d+(\.\d+)?|ON|OFF", value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _shown(value: str | None) -> str:
    return "DEFAULT" if value is None else value


def capture_log_dir(values: dict) -> str | None:
    """The lockdown-slowlog directory the server logs into, when its settings are a capture's."""
    log = values.get("slow_query_log_file") or ""
    parent = os.path.dirname(log)
    return parent if os.path.basename(parent).startswith(SLOWLOG_PREFIX) else None


def _warn(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


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


def _ordered(values: dict) -> list[tuple[str, str | None]]:
    """SET order: slow_query_log off first and set last."""
    statements = [("slow_query_log", "OFF")] if "slow_query_log" in values else []
    statements += [(k, v) for k, v in values.items() if k != "slow_query_log"]
    if "slow_query_log" in values:
        statements.append(("slow_query_log", values["slow_query_log"]))
    return statements


def apply(db: DatabaseServer, values: dict) -> None:
    """SET GLOBAL each of `values` (None: the server's default), slow_query_log off first and
    set last (each statement tagged, so the capture can leave lockdown's own statements out)."""
    db.sql("\n".join(f"SET GLOBAL {k} = {_literal(v)} {ADMIN_TAG};" for k, v in _ordered(values)))


def _refusal(e: Exception) -> str:
    """The server's own words from a refused statement (PhaseFailed's last line)."""
    return re.sub(r"^.*?ERROR \d+ \(\w+\)( at line \d+)?: ", "", str(e))


def restore(db: DatabaseServer, original: dict) -> dict[str, str]:
    """Put back what `read_settings` read (general_log is only watched, never set). A value the
    server refuses now (a slow log file whose directory is gone) is replaced by the server's
    default: returned as {name: the server's words}, everything else put back. PhaseFailed when
    the server cannot be reached, or refuses its defaults too."""
    values = {k: v for k, v in original.items() if k != "general_log"}
    try:
        apply(db, values)
        return {}
    except PhaseFailed:
        pass                 # which one? One at a time, in the same order
    refused = {}
    for k, v in _ordered(values):
        try:
            db.sql(f"SET GLOBAL {k} = {_literal(v)} {ADMIN_TAG};")
        except PhaseFailed as e:
            if v is None:
                raise
            db.sql(f"SET GLOBAL {k} = DEFAULT {ADMIN_TAG};")
            refused[k] = _refusal(e)
    return refused


def _fallbacks(original: dict, refused: dict, after: dict) -> str:
    """One line's worth on the settings put to the server's default instead of their original."""
    return "; ".join(f"{k}={original[k]} refused ({why}), set to the server's default "
                     f"{after.get(k, 'DEFAULT')!r} instead" for k, why in refused.items())


def _server_key(db: DatabaseServer) -> str:
    return db.socket or f"{db.host}:{db.port}"


def _server_account(db: DatabaseServer) -> os.stat_result:
    """Who the server runs as: the owner of its data directory (it writes there as itself)."""
    datadir = db.sql(f"SELECT @@datadir {ADMIN_TAG};").strip()
    try:
        return os.stat(datadir)
    except OSError as e:
        raise LockdownError(f"MariaDB at {db.where()} keeps its data in {datadir}, which lockdown "
                            f"cannot see ({e.strerror}): statement capture needs the server on this "
                            f"host, writing its slow log where lockdown reads it (or leave out "
                            f"--collect queries)")


class SlowLogCapture:
    """Context manager: every statement the server runs goes to `self.log_file` meanwhile."""

    def __init__(self, db: DatabaseServer, run_dir: Path, private: bool, warn=_warn):
        self.db = db
        self.run_dir = run_dir
        self.private = private
        self.warn = warn
        self.original: dict = {}
        self.record: Path | None = None
        self.lock: ServerLock | None = None
        self.tmp: Path | None = None
        self.log_file: Path | None = None

    def __enter__(self) -> "SlowLogCapture":
        self.tmp = Path(tempfile.mkdtemp(prefix=SLOWLOG_PREFIX))        # 0700, lockdown's
        self.log_file = self.tmp / "slow.log"
        try:
            self._give_to_server()
            if not self.private:
                self._take_lock()
            self.original = read_settings(self.db)
            self._not_a_captures()
            if not self.private:
                self._write_record()
        except BaseException:     # nothing changed yet: only the directory to remove
            self._release()
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

    def _give_to_server(self) -> None:
        """The slow log's directory, writable by the server's account and nobody else's.

        The server writes its slow log as its own account (`mysql` for a packaged MariaDB,
        `lockdown-run` for lockdown's private ones), found as the owner of its data directory.
        Every statement the applications send is in that log, so no other account may read it,
        add to it (a forged entry), or put a symlink in its place: the directory is 0700, made
        by mkdtemp. It stays lockdown's when the server runs as lockdown's own user; as root,
        lockdown gives it to the server's account (root reads and moves the log regardless); as
        a member of the server's group, lockdown gives it to that group (02770: the server's
        0660 log is readable through the group, by no one else). Otherwise the log could not be
        read by lockdown without being open to every account, as the 0777 directory of earlier
        versions was: the capture is refused in one line instead."""
        st = _server_account(self.db)
        me = os.geteuid()
        if st.st_uid == me:
            return
        if me == 0:
            os.chown(self.tmp, st.st_uid, st.st_gid)
        elif st.st_gid in os.getgroups() or st.st_gid == os.getegid():
            os.chown(self.tmp, -1, st.st_gid)
            self.tmp.chmod(0o2770)
        else:
            raise LockdownError(f"MariaDB at {self.db.where()} runs as another account (uid "
                                f"{st.st_uid}, the owner of its data directory) and writes its slow "
                                f"log as that account: capturing its statements needs lockdown to "
                                f"run as root, as that account, or as a member of its group (gid "
                                f"{st.st_gid}); or leave out --collect queries")

    def _take_lock(self) -> None:
        try:
            self.lock = ServerLock.take(self.db, CAPTURE_LOCK)
        except LockHeld as e:
            raise LockdownError(f"another lockdown is capturing statements on MariaDB at "
                                f"{self.db.where()} ({e.holder}; maybe of another LOCKDOWN_HOME): "
                                f"one capture per server at a time, wait for it to finish")
        except PhaseFailed as e:
            raise LockdownError(f"cannot capture statements on MariaDB at {self.db.where()}: {e}")

    def _not_a_captures(self) -> None:
        """A server still logging into a lockdown-slowlog directory has a killed capture's
        settings (another home's, not restored yet): those are never recorded as its own; its
        defaults are put back instead (that home's `lockdown restore` puts back what it found)."""
        left = capture_log_dir(self.original)
        if left is None:
            return
        for k in CHANGED:
            if k in self.original:
                self.original[k] = None
        self.warn(f"lockdown: warning: MariaDB at {self.db.where()} still has the settings of an "
                  f"interrupted lockdown capture (its slow log is in {left}): they are not kept as "
                  f"the server's own, its defaults are put back after this capture; `lockdown "
                  f"restore` with that capture's LOCKDOWN_HOME puts back the settings it found")

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
                          f"can write to {self.tmp.parent} (or leave out --collect queries)")

    def __exit__(self, *exc) -> None:
        with held():          # a Ctrl-C meanwhile waits until the settings are back
            try:
                self._put_back()
            finally:
                self._release()

    def _put_back(self) -> None:
        try:
            refused = restore(self.db, self.original)
            after = read_settings(self.db)
        except LockdownError as e:
            raise PhaseFailed(f"could not restore MariaDB settings on {self.db.where()}: {e}; "
                              f"run `lockdown restore` when the server is reachable")
        self.take_log(self.run_dir / "capture" / "slow.log")
        if refused:
            self.warn(f"lockdown: warning: MariaDB settings on {self.db.where()} not put back as "
                      f"they were: {_fallbacks(self.original, refused, after)}")
        # what was put back, where a default was set: whatever the default is
        expected = {k: after.get(k) if v is None or k in refused else v for k, v in self.original.items()}
        changed = {k: (v, after.get(k)) for k, v in expected.items() if after.get(k) != v}
        if changed:
            raise PhaseFailed(f"MariaDB settings on {self.db.where()} differ after restoring: "
                              f"{changed}; run `lockdown restore`")
        if self.record is not None:
            self.record.unlink(missing_ok=True)

    def _release(self) -> None:
        if self.lock is not None:
            self.lock.close()
            self.lock = None

    def take_log(self, dest: Path) -> Path:
        """Move the log into the run directory (kept as evidence whatever happened) and drop
        the temporary directory."""
        dest.parent.mkdir(parents=True, exist_ok=True)
        if self.log_file.exists():
            shutil.move(self.log_file, dest)
        shutil.rmtree(self.tmp, ignore_errors=True)
        return dest

    def _write_record(self) -> None:
        d = paths.make_dir(records_dir(), "LOCKDOWN_SERVERS_DIR")
        self.record = d / f"{os.getpid()}-{int(time.time() * 1000)}.json"
        data = {**owner_record(), "server_key": _server_key(self.db), "created": time.time(),
                "tmp": str(self.tmp),
                "server": {"host": self.db.host, "port": self.db.port, "socket": self.db.socket,
                           "user": self.db.user, "password": self.db.password},
                "original": self.original}
        fd = os.open(self.record, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)


def _restore_one(data: dict) -> str:
    """Put back one interrupted capture's settings; its message. LockdownError when it cannot
    be done now (the record stays)."""
    s, key, original = data["server"], data["server_key"], data["original"]
    db = DatabaseServer.create(None, s["host"], s["port"], s["socket"], s["user"], s["password"])
    try:
        lock = ServerLock.take(db, CAPTURE_LOCK)
    except LockHeld as e:
        raise LockdownError(f"another lockdown is capturing statements on it now ({e.holder}); "
                            f"run `lockdown restore` after it ends")
    except PhaseFailed as e:
        raise LockdownError(f"{e}; run `lockdown restore` when it is reachable")
    try:
        now = read_settings(db)
        if None in original.values() and capture_log_dir(now) != data.get("tmp"):
            # its originals were another capture's defaults, and the server has been put back
            # since (or holds a later capture's): nothing of this one's to undo
            return (f"lockdown: MariaDB settings on {key} changed by an interrupted capture (pid "
                    f"{data['owner']}) were put back since; nothing to restore")
        refused = restore(db, original)
        after = read_settings(db) if refused else {}
    except PhaseFailed as e:
        raise LockdownError(f"{e}; run `lockdown restore` when it is reachable")
    finally:
        lock.close()
    shown = ", ".join(f"{k}={_shown(original[k])}" for k in ("slow_query_log", "long_query_time",
                                                               "log_output", "slow_query_log_file")
                      if k in original and k not in refused)
    message = (f"lockdown: restored MariaDB settings on {key} left changed by an interrupted "
               f"capture (pid {data['owner']}): {shown}")
    if refused:
        message += f"; but {_fallbacks(original, refused, after)}"
    return message


# every message restore_pending gave in this process (`lockdown restore` after the start's own)
reported: list[str] = []


def restore_pending() -> list[str]:
    """Put back the settings of captures whose lockdown died, and drop the databases commands
    that died left on users' servers (harness/db_claim.py); one message each. Those of what
    could not be done now start with "lockdown: could not"."""
    messages = _restore_pending()
    reported.extend(messages)
    return messages


def _restore_pending() -> list[str]:
    messages = []
    for record, data in dead_records(records_dir()):
        try:
            messages.append(_restore_one(data))
        except LockdownError as e:
            messages.append(f"lockdown: could not restore MariaDB settings on "
                            f"{data.get('server_key', '?')} changed by an interrupted capture (pid "
                            f"{data.get('owner')}): {e}")
            continue
        except (KeyError, TypeError, AttributeError):      # not a record this version wrote
            messages.append(f"lockdown: could not restore MariaDB settings from {record}: it is "
                            f"damaged; remove it once the server's settings are checked")
            continue
        record.unlink(missing_ok=True)
        tmp = data.get("tmp") or ""
        if os.path.basename(tmp).startswith(SLOWLOG_PREFIX) and os.path.dirname(tmp) == tempfile.gettempdir():
            shutil.rmtree(tmp, ignore_errors=True)
    return messages + drop_left_databases()
