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

from ..errors import LockdownError, PhaseFailed
from . import ports
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
    def create(cls, run_dir: Path, host: str, port: int, socket: str | None, user: str,
               password: str) -> "DatabaseServer":
        cnf = run_dir / "mysql" / f"client-{user}.cnf"
        cnf.parent.mkdir(parents=True, exist_ok=True)
        lines = ["[client]", f"user={user}", f"password={password}", f"host={host}", f"port={port}"]
        if socket:
            lines.append(f"socket={socket}")
        fd = os.open(cnf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write("\n".join(lines) + "\n")
        return cls(host, port, socket, user, password, cnf)

    def client_argv(self, database: str | None = None) -> list[str]:
        argv = [tool("mariadb"), f"--defaults-file={self.client_cnf}", "--batch", "--skip-column-names",
                "--comments"]
        if self.socket is None:
            argv.append("--protocol=TCP")
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
        argv = [tool("mariadb-dump"), f"--defaults-file={self.client_cnf}", "--single-transaction",
                "--skip-dump-date", database]
        with open(dest, "wb") as out:
            proc = subprocess.run(argv, stdout=out, stderr=subprocess.PIPE, timeout=timeout)
        if proc.returncode != 0:
            raise PhaseFailed(f"dumping {database} failed: {proc.stderr.decode()[-300:]}")

    def where(self) -> str:
        return self.socket or f"{self.host}:{self.port}"


DSN_FORM = "mysql://USER:PASSWORD@HOST[:PORT]/[?socket=PATH]"


def dsn_parts(dsn: str) -> urllib.parse.SplitResult:
    """The parts of a `--mysql` DSN, or one line on what is wrong with its form: the CLI checks
    it when the option is parsed, before a run directory is made."""
    parts = urllib.parse.urlsplit(dsn)
    try:
        parts.port
    except ValueError:   # a port that is not a number, or out of range
        parts = None
    if parts is None or parts.scheme not in ("mysql", "mariadb") or not parts.hostname:
        raise LockdownError(f"bad --mysql DSN {dsn!r}: expected {DSN_FORM}")
    return parts


def parse_dsn(dsn: str, run_dir: Path) -> DatabaseServer:
    """`mysql://user:password@host:port/` (or `?socket=/path`) -> a DatabaseServer."""
    parts = dsn_parts(dsn)
    query = urllib.parse.parse_qs(parts.query)
    socket_path = query.get("socket", [None])[0]
    server = DatabaseServer.create(run_dir, parts.hostname, parts.port or 3306, socket_path,
                                   urllib.parse.unquote(parts.username or "root"),
                                   urllib.parse.unquote(parts.password or ""))
    try:
        server.version = server.sql("SELECT VERSION();").strip()
    except PhaseFailed as e:
        raise LockdownError(f"cannot connect to the --mysql server {server.where()}: {e}")
    return server


class PrivateMariaDB:
    """A mariadbd with its own datadir, socket and loopback port inside the run directory."""

    def __init__(self, procs: ProcessGroup, base: Path, datadir: Path, port: int | None = None):
        self.procs = procs
        self.base = base
        self.datadir = datadir
        self.port = port or ports.free_port()
        self.socket = ports.unix_socket_path(base / "mysqld.sock")
        self.error_log = base / "mysqld.err"
        self.child: Child | None = None

    @staticmethod
    def initialize(procs: ProcessGroup, datadir: Path) -> None:
        datadir.parent.mkdir(parents=True, exist_ok=True)
        # temporary tables in the run's own directory, not the shared /tmp: a bootstrap once
        # failed there on "Error on delete of '/tmp/#sql-temptable-...'" with other servers up
        tmp = datadir.parent / "tmp"
        tmp.mkdir(exist_ok=True)
        argv = [tool("mariadb-install-db"), "--no-defaults", f"--datadir={datadir}",
                "--auth-root-authentication-method=normal", "--skip-test-db",
                "--innodb-log-file-size=16M", f"--tmpdir={tmp}"]
        if os.geteuid() == 0:
            argv.append("--user=root")
        result = procs.run("mariadb-install-db", argv, timeout=300)
        if result.returncode != 0:
            raise PhaseFailed(f"mariadb-install-db failed for {datadir}; see "
                              f"{procs.run_dir / 'logs' / 'mariadb-install-db.out'}")

    def start(self, timeout: float = 90) -> DatabaseServer:
        ports.ensure_free(self.port, "MariaDB", "--mysql-port")
        tmp = self.base / "tmp"            # its temporary tables and sort files, not /tmp's
        tmp.mkdir(parents=True, exist_ok=True)
        cnf = render_to("my.cnf.j2", self.base / "my.cnf", run_dir=self.procs.run_dir,
                        datadir=self.datadir, tmpdir=tmp, socket=self.socket, port=self.port,
                        pid_file=self.base / "mysqld.pid", error_log=self.error_log)
        self.child = self.procs.spawn("mariadbd", [tool("mariadbd"), f"--defaults-file={cnf}"],
                                      log=self.base / "mysqld.out")
        if not ports.wait_connectable(self.socket, timeout, self.child.alive):
            raise PhaseFailed("MariaDB did not start", evidence(self.error_log))
        server = DatabaseServer.create(self.base.parent, "127.0.0.1", self.port, self.socket,
                                       "root", "")
        server.version = server.sql("SELECT VERSION();").strip()
        return server

    def stop(self) -> None:
        """Clean shutdown (SIGTERM lets InnoDB flush), so the datadir can be reused."""
        if self.child is not None:
            self.procs.stop(self.child, grace=120)
            self.child = None
        ports.remove_short_socket_dir(self.socket)


def copy_datadir(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src, dest, symlinks=True)
