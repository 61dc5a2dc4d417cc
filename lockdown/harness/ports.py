"""Loopback ports: pick a free one, or check that the one asked for is free."""
from __future__ import annotations

import hashlib
import random
import shutil
import socket
import time
from pathlib import Path

from ..errors import UsageError


# Ports below the kernel's ephemeral range, where servers are picked from
SERVER_PORTS_FROM = 20000
_random = random.SystemRandom()


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for outgoing connections' local ports (Linux default 32768-60999)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_port() -> int:
    """A free loopback port for a server lockdown starts, below the ephemeral range. A port the
    kernel hands out for bind(0) comes from that range, where any outgoing connection (a load
    generator opens thousands, MariaDB clients more) may take it between the pick and the
    server's own bind, seconds later: a clean-clone CI run failed with nginx's port 'already in
    use'. Random, so that concurrent commands rarely try the same one; bind(0) when the range
    below is too small."""
    low = ephemeral_range()[0]
    if low - SERVER_PORTS_FROM >= 1000:
        for port in _random.sample(range(SERVER_PORTS_FROM, low), 50):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ensure_free(port: int, what: str, option: str) -> None:
    """Fail with one clear line when `port` on 127.0.0.1 is taken."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            raise UsageError(f"port {port} on 127.0.0.1 (for {what}) is already in use: "
                                f"pass another {option}, or leave {option} out to use a free port")


def wait_connectable(address, timeout: float, alive=lambda: True) -> bool:
    """Poll a TCP (host, port) or unix socket path until it accepts a connection."""
    family = socket.AF_UNIX if isinstance(address, str) else socket.AF_INET
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive():
            return False
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.settimeout(1.0)
            try:
                s.connect(address)
                return True
            except OSError:
                pass
        time.sleep(0.05)
    return False


SHORT_SOCKET_PREFIX = "lockdown-sock-"


def unix_socket_path(preferred: Path) -> str:
    """`preferred`, or a short path under /tmp when it exceeds what sockaddr_un holds (107
    bytes): deep run directories (e.g. under pytest's tmp) would otherwise fail to bind."""
    if len(str(preferred).encode()) <= 100:
        return str(preferred)
    short = short_socket_dir(preferred.parent)
    short.mkdir(mode=0o700, exist_ok=True)
    return str(short / preferred.name)


def short_socket_dir(directory: Path) -> Path:
    """The /tmp directory standing in for `directory`'s sockets (named by a hash of it)."""
    return Path("/tmp") / f"{SHORT_SOCKET_PREFIX}{hashlib.sha1(str(directory).encode()).hexdigest()[:12]}"


def remove_short_socket_dir(path: str | None) -> None:
    """Remove the /tmp directory `unix_socket_path` made for a socket, if it made one."""
    if path and Path(path).parent.name.startswith(SHORT_SOCKET_PREFIX):
        shutil.rmtree(Path(path).parent, ignore_errors=True)
