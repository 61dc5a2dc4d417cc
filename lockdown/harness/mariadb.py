"""MariaDB for a run: a private instance in the run directory, or the user's server by DSN.

Statements go through the `mariadb` command-line client with a generated option file, so no
password ever appears on a command line.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from ..errors import LockdownError, PhaseFailed, UsageError
# moved below the stages (run_marker needs them); kept here for every other importer
from ..redact import redact_dsn, redacted_argv  # noqa: F401
from . import ports, service_account
from .logs import evidence
from .processes import Child, ProcessGroup
from .render import render_to
from .toolchain import tool


@dataclass
class DatabaseServer:
    """How to reach a server, for lockdown (admin account) and for the application."""

    host: str
    port: int
    socket: str | None
    user: str
    password: str
    client_cnf: Path
    version: str = ""

    @classmethod
    def create(cls, run_dir: Path | None, host: str, port: int, socket: str | None, user: str,
               password: str) -> "DatabaseServer":
        """The server with its client option file: `run_dir/mysql/client-USER.cnf` (0600), or,
        with `run_dir` None (a user's server, whose password must not stay on disk), a file
        that exists only in this process's memory (a memfd; the clients lockdown starts open it
        as /proc/PID/fd/N) and is gone when lockdown exits, however it exits."""
        # with a socket, the client uses it only for host "localhost" (127.0.0.1 means TCP)
        lines = ["[client]", f"user={_option_value(user)}", f"password={_option_value(password)}",
                 f"host={_option_value('localhost' if socket else host)}", f"port={int(port)}"]
        if socket:
            lines.append(f"socket={_option_value(socket)}")
        text = "\n".join(lines) + "\n"
        if run_dir is None:
            return cls(host, port, socket, user, password, _memory_file(text))
        cnf = run_dir / "mysql" / f"client-{user}.cnf"
        cnf.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(cnf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        return cls(host, port, socket, user, password, cnf)

    def protocol(self) -> str:
        """The client's transport: the socket when there is one (a private server's
        administrator logs in by socket only), else TCP."""
        return "--protocol=SOCKET" if self.socket else "--protocol=TCP"

    def client_argv(self, database: str | None = None) -> list[str]:
        argv = [tool("mariadb"), f"--defaults-file={self.client_cnf}", "--batch", "--skip-column-names",
                "--comments"]
        argv.append(self.protocol())
        if database:
            argv.append(f"--database={database}")
        return argv

    def sql(self, statement: str, database: str | None = None, timeout: float = 300) -> str:
        """Run statements; return the client's tab-separated output."""
        try:
            proc = subprocess.run(self.client_argv(database), input=statement, text=True,
                                  capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise PhaseFailed(f"MariaDB statement timed out after {timeout:.0f} s: {statement[:80]!r}")
        if proc.returncode != 0:
            raise PhaseFailed(f"MariaDB at {self.where()} refused a statement: "
                              f"{proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else 'no message'}")
        return proc.stdout

    def load_file(self, path: Path, database: str, timeout: float = 900) -> None:
        with open(path, "rb") as f:
            proc = subprocess.run(self.client_argv(database), stdin=f, capture_output=True,
                                  timeout=timeout)
        if proc.returncode != 0:
            raise PhaseFailed(f"loading {path} into {database} failed: "
                              f"{proc.stderr.decode('utf-8', 'replace').strip()[-300:]}")

    def dump(self, database: str, dest: Path, timeout: float = 900) -> None:
        argv = [tool("mariadb-dump"), f"--defaults-file={self.client_cnf}", self.protocol(), "--single-transaction",
                "--skip-dump-date", database]
        with open(dest, "wb") as out:
            proc = subprocess.run(argv, stdout=out, stderr=subprocess.PIPE, timeout=timeout)
        if proc.returncode != 0:
            raise PhaseFailed(f"dumping {database} failed: {proc.stderr.decode()[-300:]}")

    def where(self) -> str:
        return self.socket or f"{self.host}:{self.port}"


DSN_FORM = "mysql://USER:PASSWORD@HOST[:PORT]/[?socket=PATH]"

# The password of a --mysql DSN that has none (`mysql://user@host/`): lockdown's own command
# line is readable by every local account (ps, /proc/PID/cmdline), its environment is not.
PASSWORD_ENV = "LOCKDOWN_MYSQL_PASSWORD"

def _option_value(value: str) -> str:
    """A value for a MariaDB option file: double-quoted, with backslash escapes, so that any
    character is read back as itself (unquoted, `#` starts a comment, and quotes, backslashes
    and spaces at either end change the value)."""
    escaped = (value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
               .replace("\r", "\\r").replace("\t", "\\t"))
    return f'"{escaped}"'


_memory_files: dict[tuple[int, str], Path] = {}


def _memory_file(text: str) -> Path:
    """A 0600 file holding `text` that exists only in this process's memory, named as the
    processes lockdown starts (its own user's) can open it; the same text, the same file."""
    key = (os.getpid(), text)
    if key not in _memory_files:
        fd = os.memfd_create("lockdown-client.cnf", os.MFD_CLOEXEC)
        os.fchmod(fd, 0o600)     # a memfd starts 0777; the client ignores a world-writable file
        data = text.encode()
        while data:
            data = data[os.write(fd, data):]
        _memory_files[key] = Path(f"/proc/{os.getpid()}/fd/{fd}")
    return _memory_files[key]


def dsn_parts(dsn: str) -> urllib.parse.SplitResult:
    """The parts of a `--mysql` DSN, or one line on what is wrong with its form: the CLI checks
    it when the option is parsed, before a run directory is made."""
    parts = urllib.parse.urlsplit(dsn)
    try:
        parts.port
    except ValueError:   # a port that is not a number, or out of range
        parts = None
    if parts is None or parts.scheme not in ("mysql", "mariadb") or not parts.hostname:
        raise LockdownError(f"bad --mysql DSN {redact_dsn(dsn)!r}: expected {DSN_FORM}")
    return parts


def parse_dsn(dsn: str, run_dir: Path | None = None) -> DatabaseServer:
    """`mysql://user:password@host:port/` (or `?socket=/path`) -> a DatabaseServer. A DSN
    without a password takes $LOCKDOWN_MYSQL_PASSWORD's. The client option file is kept in
    memory, never written to disk (`run_dir` is not used: the run directory keeps no password)."""
    parts = dsn_parts(dsn)
    query = urllib.parse.parse_qs(parts.query)
    socket_path = query.get("socket", [None])[0]
    password = urllib.parse.unquote(parts.password or "") or os.environ.get(PASSWORD_ENV, "")
    server = DatabaseServer.create(None, parts.hostname, parts.port or 3306, socket_path,
                                   urllib.parse.unquote(parts.username or "root"), password)
    try:
        server.version = server.sql("SELECT VERSION();").strip()
    except PhaseFailed as e:
        raise UsageError(f"cannot connect to the --mysql server {server.where()}: {e}")
    _dsn_servers[server.where()] = server
    return server


_dsn_servers: dict[str, DatabaseServer] = {}


def dsn_server(where: str) -> DatabaseServer | None:
    """The server `parse_dsn` reached at `where` (its `where()`) in this process, if any: how
    a claim on one of its databases (db_claim.py) reaches it, given only where it is."""
    return _dsn_servers.get(where)


class PrivateMariaDB:
    """A mariadbd with its own datadir, socket and loopback port inside the run directory, run
    as the servers' unprivileged account (service_account.py). Its only accounts log in through
    the socket as the OS user they are named for (root, or the user lockdown runs as), plus the
    app's, whose password is random (prepare.py, stack.py): nobody logs in over TCP without it,
    and `INTO OUTFILE` / `LOAD DATA` reach only `files_dir`."""

    def __init__(self, procs: ProcessGroup, base: Path, datadir: Path, port: int | None = None):
        self.procs = procs
        self.base = base
        self.datadir = datadir
        self.port = port or ports.free_port()
        self.acct = service_account.account()
        # what the server writes besides its data: socket, pid, error log, temporary files, and
        # the one directory its file statements may use; the server's own, lockdown's config beside
        self.server_dir = base / "server"
        self.files_dir = self.server_dir / "files"
        self.socket = ports.unix_socket_path(self.server_dir / "mysqld.sock")
        self.error_log = self.server_dir / "mysqld.err"
        self.child: Child | None = None

    @staticmethod
    def initialize(procs: ProcessGroup, datadir: Path) -> None:
        """A new datadir whose administrator is the OS account running lockdown, by socket."""
        acct = service_account.account()
        service_account.check_reachable(datadir.parent, acct, "the database directory",
                                        "set LOCKDOWN_HOME (or LOCKDOWN_PREPARED_DIR) elsewhere")
        # temporary tables in the run's own directory, not the shared /tmp: a bootstrap once
        # failed there on "Error on delete of '/tmp/#sql-temptable-...'" with other servers up
        tmp = datadir.parent / "tmp"
        for d in (datadir, tmp):
            d.mkdir(parents=True, exist_ok=True)
            service_account.give(d, acct)
        argv = [tool("mariadb-install-db"), "--no-defaults", f"--datadir={datadir}",
                "--auth-root-authentication-method=socket",
                f"--auth-root-socket-user={service_account.os_user()}", "--skip-test-db",
                "--innodb-log-file-size=16M", f"--tmpdir={tmp}"]
        result = procs.run("mariadb-install-db", argv, timeout=300, user=acct)
        if result.returncode != 0:
            raise PhaseFailed(f"mariadb-install-db failed for {datadir}; see "
                              f"{procs.run_dir / 'logs' / 'mariadb-install-db.out'}")

    def start(self, timeout: float = 90) -> DatabaseServer:
        ports.ensure_free(self.port, "MariaDB", "--mysql-port")
        self.base.mkdir(parents=True, exist_ok=True)
        service_account.check_reachable(self.base, self.acct, "the database directory",
                                        "choose a run directory (-o, --run-dir, LOCKDOWN_HOME)")
        tmp = self.server_dir / "tmp"        # its temporary tables and sort files, not /tmp's
        for d in (self.server_dir, tmp, self.files_dir):
            d.mkdir(parents=True, exist_ok=True)
            service_account.give(d, self.acct)
        self.server_dir.chmod(0o700)
        socket_dir = Path(self.socket).parent
        if socket_dir != self.server_dir:     # a short one under /tmp (ports.unix_socket_path)
            service_account.give(socket_dir, self.acct)
        service_account.give(self.datadir, self.acct, recursive=True)
        cnf = render_to("my.cnf.j2", self.base / "my.cnf", run_dir=self.procs.run_dir,
                        datadir=self.datadir, tmpdir=tmp, socket=self.socket, port=self.port,
                        pid_file=self.server_dir / "mysqld.pid", error_log=self.error_log,
                        files_dir=self.files_dir)
        self.child = self.procs.spawn("mariadbd", [tool("mariadbd"), f"--defaults-file={cnf}"],
                                      log=self.server_dir / "mysqld.out", user=self.acct)
        if not ports.wait_connectable(self.socket, timeout, self.child.alive):
            raise PhaseFailed("MariaDB did not start", evidence(self.error_log))
        server = DatabaseServer.create(self.base.parent, "127.0.0.1", self.port, self.socket,
                                       service_account.os_user(), "")
        server.version = server.sql("SELECT VERSION();").strip()
        if self.acct is not None:
            # the capture's marker query, from the PHP workers: it sees the processlist, by
            # socket as the workers' OS account, and may do nothing else
            server.sql(f"CREATE USER IF NOT EXISTS '{self.workers_user}'@'localhost' IDENTIFIED VIA unix_socket;"
                       f"GRANT PROCESS ON *.* TO '{self.workers_user}'@'localhost';")
        return server

    @property
    def workers_user(self) -> str:
        """The account the PHP workers log in as by socket, without a password, for the
        capture's marker query: theirs when they run as the servers' account, else the
        administrator's (the workers then run as lockdown's own user)."""
        return self.acct.name if self.acct is not None else service_account.os_user()

    def stop(self) -> None:
        """Clean shutdown (SIGTERM lets InnoDB flush), so the datadir can be reused."""
        if self.child is not None:
            self.procs.stop(self.child, grace=120)
            self.child = None
        ports.remove_short_socket_dir(self.socket)


def copy_datadir(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src, dest, symlinks=True)
