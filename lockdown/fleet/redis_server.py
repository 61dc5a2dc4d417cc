"""A private Redis for lockdown's tests and benchmarks: loopback only, a random password,
run as the servers' unprivileged account, stopped with its ProcessGroup on every way out.

Its configuration (with the password) is a 0600 file in a 0700 directory of the servers'
account; nothing of it goes on a command line. No RDB snapshots; a stream that
must survive a restart keeps its entries in the append-only file (AOF, fsync'd every second
and on shutdown): `restart` brings back the same server, stream and consumer group, as a
production Redis with AOF does.
"""
from __future__ import annotations

import os
import secrets
import socket
import time
from pathlib import Path

from ..errors import PhaseFailed
from ..harness import ports, service_account
from ..harness.logs import evidence
from ..harness.processes import Child, ProcessGroup
from ..harness.toolchain import tool


class PrivateRedis:
    def __init__(self, procs: ProcessGroup, base: Path, port: int | None = None):
        self.procs = procs
        self.base = base
        self.port = port or ports.free_port()
        self.password = secrets.token_hex(16)
        self.acct = service_account.account()
        self.child: Child | None = None

    @property
    def url(self) -> str:
        """The collector's URL, password included (keep it off command lines: docs/fleet.md)."""
        return f"redis://:{self.password}@127.0.0.1:{self.port}/0"

    @property
    def where(self) -> str:
        """The agent's LOCKDOWN_FLEET_REDIS."""
        return f"tcp://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30, again: bool = False) -> "PrivateRedis":
        if not again:     # the port its clients just left is in TIME_WAIT: Redis binds it with SO_REUSEADDR
            ports.ensure_free(self.port, "Redis", "--redis-port")
        self.base.mkdir(parents=True, exist_ok=True)
        self.base.chmod(0o700)
        log = self.base / "redis.log"
        cnf = self.base / "redis.conf"
        lines = ["bind 127.0.0.1", f"port {self.port}", "protected-mode yes",
                 f'requirepass "{self.password}"', 'save ""', "appendonly yes", "appendfsync everysec",
                 f'dir "{self.base}"', f'logfile "{log}"', "daemonize no", "databases 1", "maxclients 1000"]
        fd = os.open(cnf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write("\n".join(lines) + "\n")
        service_account.give(self.base, self.acct, recursive=True)
        self.child = self.procs.spawn("redis-server", [tool("redis-server"), str(cnf)],
                                      log=self.base / "redis.out", user=self.acct)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.child.alive():
                break
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return self
            except OSError:
                time.sleep(0.05)
        raise PhaseFailed("Redis did not start", evidence(log))

    def restart(self, timeout: float = 30) -> "PrivateRedis":
        """The same server again (port, password, data from its AOF) after `stop`."""
        return self.start(timeout, again=True)

    def stop(self) -> None:
        if self.child is not None:
            self.procs.stop(self.child, grace=10)
            self.child = None
