"""A loopback TCP proxy in front of a real Redis that can hold back the replies to XADD.

Why: the agent must count a send exactly when its reply times out although Redis took the
entry. Redis itself cannot be made to answer PING at once and XADD late (a busy script stalls
both, and phpredis checks a reused connection with a round trip first), so the test puts this
between the agents and Redis and sets `slow` for the phase that needs it. Everything else is
forwarded as it comes, and a connection Redis closes (or refuses) is closed on the agent's side.
"""
from __future__ import annotations

import socket
import threading


class SlowReplies:
    def __init__(self, upstream_port: int, delay: float = 0.2):
        self.upstream_port = upstream_port
        self.delay = delay
        self.slow = threading.Event()
        self.delayed = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def where(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    def close(self) -> None:
        self._closed.set()
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=2)
                upstream.settimeout(None)
            except OSError:
                client.close()               # Redis down: the agent's connection fails at once
                continue
            pending = threading.Event()      # an XADD went up whose reply is to be held back
            threading.Thread(target=self._up, args=(client, upstream, pending), daemon=True).start()
            threading.Thread(target=self._down, args=(upstream, client, pending), daemon=True).start()

    def _up(self, client: socket.socket, upstream: socket.socket, pending: threading.Event) -> None:
        self._pump(client, upstream, lambda chunk: pending.set()
                   if self.slow.is_set() and b"XADD" in chunk.upper() else None)

    def _down(self, upstream: socket.socket, client: socket.socket, pending: threading.Event) -> None:
        def hold(_chunk: bytes) -> None:
            if pending.is_set():
                pending.clear()
                self.delayed += 1
                self._closed.wait(self.delay)
        self._pump(upstream, client, hold)

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, before) -> None:
        try:
            while chunk := src.recv(65536):
                before(chunk)
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
