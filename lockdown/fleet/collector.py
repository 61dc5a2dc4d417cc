"""`lockdown fleet collect`: the agents' stream entries into the store, through a consumer group.

One pass of the loop: this consumer's own pending entries first (those a killed run of the
same consumer read and never acknowledged), then entries another consumer has left pending
for `claim_idle` seconds (XAUTOCLAIM: a dead collector's), then new ones (XREADGROUP `>`).
Each batch is appended to the store and fsync'd (store.py) before XACK, so an entry is
acknowledged only once it is durable; one delivered twice is written twice and read once (the
store's reader keeps each entry id once). Several collectors may share the group.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..errors import LockdownError, UsageError
from .store import StoreWriter

GROUP = "lockdown"
DEFAULT_STREAM = "lockdown:fleet"
PASSWORD_ENV = "LOCKDOWN_REDIS_PASSWORD"


@dataclass
class CollectOptions:
    redis_url: str
    store: Path
    streams: tuple[str, ...] = (DEFAULT_STREAM,)
    group: str = GROUP
    consumer: str = field(default_factory=lambda: socket.gethostname().split(".")[0] or "collector")
    batch: int = 500
    block_ms: int = 1000
    claim_idle_s: float = 60.0
    retention_s: float | None = None
    exit_when_idle_s: float | None = None     # stop once nothing came for this long (tests, cron)


@dataclass
class CollectStats:
    written: int = 0
    acked: int = 0
    claimed: int = 0
    damaged: int = 0
    expired: list = field(default_factory=list)


def connect(url: str):
    """redis-py's client for `url`; the password from $LOCKDOWN_REDIS_PASSWORD when the URL has
    none (a command line is readable by every local account)."""
    import redis
    try:
        kwargs = {"socket_timeout": 10, "socket_connect_timeout": 5, "decode_responses": True}
        if os.environ.get(PASSWORD_ENV):
            kwargs["password"] = os.environ[PASSWORD_ENV]
        client = redis.Redis.from_url(url, **kwargs)
        client.ping()
    except ValueError as e:
        raise UsageError(f"--redis {redact(url)!r}: {e}; expected redis://[:PASSWORD@]HOST:PORT/DB "
                         f"or unix:///PATH")
    except redis.RedisError as e:
        raise LockdownError(f"cannot reach Redis at {redact(url)}: {e}")
    return client


def redact(url: str) -> str:
    """The URL with its password replaced by ***."""
    head, sep, rest = url.partition("://")
    if "@" not in rest:
        return url
    cred, _, host = rest.rpartition("@")
    user = cred.split(":", 1)[0]
    return f"{head}{sep}{user}:***@{host}"


def ensure_group(client, stream: str, group: str) -> None:
    import redis
    try:
        client.xgroup_create(stream, group, id="0", mkstream=True)
    except redis.ResponseError as e:
        if "BUSYGROUP" not in str(e):
            raise


def decode(stream: str, entries, stats: CollectStats) -> list[tuple[str, str, dict]]:
    """Stream entries -> (stream, id, record); an entry that is not a record is kept as one
    with `damaged` set, so that it is acknowledged and counted, never retried forever."""
    out = []
    for entry_id, fields in entries:
        if fields is None:            # deleted by MAXLEN while pending
            continue
        try:
            record = json.loads(fields["r"])
            if not isinstance(record, dict):
                raise ValueError
        except (KeyError, ValueError, TypeError):
            stats.damaged += 1
            record = {"damaged": True}
        out.append((stream, entry_id, record))
    return out


def _store_and_ack(client, writer: StoreWriter, opts: CollectOptions, stream: str, entries,
                   stats: CollectStats) -> int:
    batch = decode(stream, entries, stats)
    stats.written += writer.append(batch)           # durable (fsync) before the acknowledgement
    ids = [entry_id for entry_id, _ in entries]
    if ids:
        stats.acked += client.xack(stream, opts.group, *ids)
    return len(ids)


def _pass(client, writer: StoreWriter, opts: CollectOptions, stats: CollectStats, own: bool) -> int:
    """One round over the streams; returns the number of entries handled."""
    handled = 0
    for stream in opts.streams:
        if own:        # this consumer's pending entries (a killed run of it read them)
            got = client.xreadgroup(opts.group, opts.consumer, {stream: "0"}, count=opts.batch)
            for _, entries in got or []:
                handled += _store_and_ack(client, writer, opts, stream, entries, stats)
            claimed = client.xautoclaim(stream, opts.group, opts.consumer,
                                        int(opts.claim_idle_s * 1000), "0-0", count=opts.batch)
            entries = claimed[1] if claimed else []
            stats.claimed += len(entries)
            handled += _store_and_ack(client, writer, opts, stream, entries, stats)
    block = opts.block_ms if len(opts.streams) == 1 else max(1, opts.block_ms // len(opts.streams))
    got = client.xreadgroup(opts.group, opts.consumer, {s: ">" for s in opts.streams},
                            count=opts.batch, block=block)
    for stream, entries in got or []:
        handled += _store_and_ack(client, writer, opts, stream, entries, stats)
    return handled


def _loop(client, writer: StoreWriter, opts: CollectOptions, stats: CollectStats,
          say: Callable[[str], None], stop: Callable[[], bool]) -> None:
    """Passes until stopped; Redis gone away is waited for (what it had pending comes back with
    it, from its AOF), and said once per outage."""
    import redis
    idle_since = time.monotonic()
    last_claim = last_expire = 0.0
    down = False
    while not stop():
        now = time.monotonic()
        own = last_claim == 0.0 or now - last_claim >= min(opts.claim_idle_s, 5.0)
        try:
            if own:
                last_claim = now
            handled = _pass(client, writer, opts, stats, own)
            if down:
                say("[collect] Redis is back")
                down = False
        except (redis.ConnectionError, redis.TimeoutError) as e:
            if not down:
                say(f"[collect] Redis unreachable ({e}); retrying every second")
                down = True
            last_claim = 0.0              # on its return: this consumer's pending entries first
            time.sleep(1)
            handled = 0
            idle_since = time.monotonic()      # an outage is not idleness
            with contextlib.suppress(redis.RedisError):
                for stream in opts.streams:
                    ensure_group(client, stream, opts.group)
        if handled:
            idle_since = time.monotonic()
        elif opts.exit_when_idle_s is not None and time.monotonic() - idle_since >= opts.exit_when_idle_s:
            break
        if opts.retention_s is not None and now - last_expire >= 60:
            last_expire = now
            stats.expired += writer.expire(opts.retention_s)


def collect(opts: CollectOptions, say: Callable[[str], None] = print,
            stop: Callable[[], bool] = lambda: False) -> CollectStats:
    """Run until `stop()` says so, a signal, or `exit_when_idle_s` without an entry."""
    client = connect(opts.redis_url)
    for stream in opts.streams:
        ensure_group(client, stream, opts.group)
    writer = StoreWriter(opts.store, opts.consumer)
    stats = CollectStats()
    say(f"[collect] {', '.join(opts.streams)} -> {opts.store} as {opts.group}/{opts.consumer}")
    try:
        _loop(client, writer, opts, stats, say, stop)
    finally:
        writer.close()
    say(f"[collect] {stats.written} entries written, {stats.acked} acknowledged, "
        f"{stats.claimed} claimed from other consumers, {stats.damaged} damaged")
    return stats
