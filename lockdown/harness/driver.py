"""lockdown's own HTTP client for captures: each request carries its id, so the server-side
log, the profiles and the client's view of the same request can be joined.

Unlike wrk it can send exactly N requests and tag each one; it is plain Python threads with
keep-alive connections, fast enough for PHP pages (it is not the throughput benchmark:
`lockdown bench` is).
"""
from __future__ import annotations

import http.client
import re
import threading
import time
import urllib.parse
from collections import Counter
from dataclasses import dataclass
from typing import Callable


# What a path keeps as it is when percent-encoded: the characters of a URL's path and query
# (RFC 3986), and '%' where it already starts an escape. A space, a control character, '"',
# '#', '<', '>', '\\', '`', '{', '|', '}' and every non-ASCII character (as UTF-8) are encoded.
URL_SAFE = "/?&=%:;,+@!$'()*[]~-._"


def quote_path(path: str) -> str:
    """`path` as it goes on the request line: percent-encoded where HTTP needs it (`/a b` ->
    `/a%20b`, `/café` -> `/caf%C3%A9`), escapes already there kept, a '%' that starts none
    encoded. A path that needs nothing comes back unchanged, so quoting twice changes nothing."""
    return re.sub(r"%(?![0-9A-Fa-f]{2})", "%25", urllib.parse.quote(path, safe=URL_SAFE))


def ok_status(status: int | str) -> bool:
    """Whether a response counts as served: 2xx and 3xx (a redirect is the page's answer)."""
    try:
        return 200 <= int(status) < 400
    except (TypeError, ValueError):
        return False


@dataclass
class SentRequest:
    seq: int
    id: str
    url: str
    xhprof: bool
    status: int = 0
    client_start_ns: int = 0
    client_end_ns: int = 0
    bytes: int = 0
    echoed_id: str | None = None
    error: str | None = None


@dataclass
class DriveResult:
    requests: list[SentRequest]
    seconds: float

    @property
    def rps(self) -> float:
        """Successful responses (2xx, 3xx) per second: a 404 or a 502 served fast is no throughput."""
        ok = sum(1 for r in self.requests if r.error is None and ok_status(r.status))
        return ok / self.seconds if self.seconds > 0 else 0.0

    @classmethod
    def joined(cls, results: list["DriveResult"]) -> "DriveResult":
        """Several passes as one: their requests in order, their seconds added."""
        return cls([r for x in results for r in x.requests], sum(x.seconds for x in results))

    def status_counts(self) -> dict:
        counts: dict = {}
        for r in self.requests:
            key = str(r.status) if r.error is None else "error"
            counts[key] = counts.get(key, 0) + 1
        return counts


def xhprof_selected(url_index: int, occurrence: int, every: int) -> bool:
    """1 in `every` requests of each URL, staggered across URLs so that short captures still
    get profiles of several URLs."""
    return every > 0 and occurrence % every == url_index % every


def instrumented_paths(paths: list[str], n: int, every: int) -> list[str]:
    """The URLs of the instrumented requests of a capture of `n` requests cycling through the
    weighted `paths`: 1 in `every` of each URL's requests (`xhprof_selected`, staggered by the
    URL's first position in the list), then one of each URL they missed, while the instrumented
    stay at most half of the capture: a 40-request WordPress capture at 1 in 10 had left five
    of its ten URLs without call counts."""
    if every <= 0:
        return []
    index = {u: i for i, u in enumerate(dict.fromkeys(paths))}
    sent: Counter = Counter()
    picked = []
    for seq in range(n):
        u = paths[seq % len(paths)]
        if xhprof_selected(index[u], sent[u], every):
            picked.append(u)
        sent[u] += 1
    missed = [u for u in index if sent[u] and u not in picked]
    return picked + missed[:max(0, n // 2 - len(picked))]


def drive(base_url: str, paths: list[str], concurrency: int, *, requests: int | None = None,
          duration: float | None = None, capture: bool = False, xhprof: bool = False,
          id_prefix: str = "r", first_seq: int = 0, timeout: float = 120,
          progress: Callable[[int], None] | None = None, headers: dict | None = None) -> DriveResult:
    """Send `requests` requests (or for `duration` seconds) over `concurrency` connections,
    cycling through `paths` in order; `progress` hears how many were sent, a few times a second.
    `xhprof` sends every request to the instrumented (xhprof) pool: captured and profiled with
    `capture`, or only to warm that pool without. Request ids count from `first_seq`;
    `headers` go with every request. Paths are percent-encoded (`quote_path`), and each
    request records its path as sent; a request that cannot be sent records why in `error`."""
    parts = urllib.parse.urlsplit(base_url)
    paths = [quote_path(p) for p in paths]
    lock = threading.Lock()
    sent: list[SentRequest] = []
    deadline = None if duration is None else time.monotonic() + duration

    def next_request() -> SentRequest | None:
        with lock:
            seq = len(sent)
            if requests is not None and seq >= requests:
                return None
            if deadline is not None and time.monotonic() >= deadline:
                return None
            number = first_seq + seq
            r = SentRequest(number, f"{id_prefix}{number:06d}", paths[seq % len(paths)],
                            capture and xhprof)
            sent.append(r)
            return r

    def worker():
        conn = None
        while (r := next_request()) is not None:
            sent_headers = {"Host": parts.netloc, "User-Agent": "lockdown-driver", **(headers or {})}
            if capture:
                sent_headers.update({"X-Lockdown-Capture": "1", "X-Lockdown-Request": r.id})
            if xhprof:
                sent_headers["X-Lockdown-Xhprof"] = "1"
            r.client_start_ns = time.monotonic_ns()
            try:
                if conn is None:
                    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
                conn.request("GET", r.url, headers=sent_headers)
                resp = conn.getresponse()
                body = resp.read()
                r.status, r.bytes = resp.status, len(body)
                r.echoed_id = resp.getheader("X-Lockdown-Request")
                if resp.getheader("Connection", "").lower() == "close":
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException, ValueError) as e:
                # ValueError: a request line http.client refuses to encode; never a thread's traceback
                r.error = f"{type(e).__name__}: {e}"
                if conn is not None:
                    conn.close()
                conn = None
            r.client_end_ns = time.monotonic_ns()
        if conn is not None:
            conn.close()

    started = time.monotonic()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.2)      # short joins keep Ctrl-C and --timeout responsive
            if progress is not None:
                progress(len(sent))
    return DriveResult(sent, time.monotonic() - started)
