"""Load generators: wrk (default), siege and ab, each driven for a fixed time at a fixed
concurrency, and their output turned into one `LoadResult` shape.

A run's throughput counts the responses that succeeded only (2xx and 3xx: `driver.ok_status`;
ab tells only 2xx from the rest). A run where more than `MAX_FAILED_SHARE` of the requests
failed (a failing status, or a socket error: connect, read, write, timeout), or where none
succeeded, is no measurement: `check_run` stops the command with one line naming the
statuses and the URLs that answered them (docs/bench.md, "Rules")."""
from __future__ import annotations

import json
import os
import re
import time
import urllib.parse
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import PhaseFailed
from .driver import ok_status, quote_path
from .processes import ProcessGroup
from .render import render_to
from .toolchain import tool

TOOLS = ("wrk", "siege", "ab")

# How finely each tool reports a response's time, in ms: wrk in microseconds, ab's
# percentiles in whole milliseconds, siege each response in hundredths of a second ("0.01
# secs"), so a page served in 2 ms reads as 0.0 there.
LATENCY_RESOLUTION_MS = {"wrk": 0.001, "siege": 10.0, "ab": 1.0}


# A run where more than this share of the requests failed (a failing status or a socket
# error) fails the command: 1%. A page that fails that often is not what the run set out to
# measure, and fast failures (a 502 in 0.1 ms) would count as throughput in any other rule.
MAX_FAILED_SHARE = 0.01


@dataclass
class LoadResult:
    rps: float                  # successful responses (`ok`) per second
    latency_ms: dict
    status_counts: dict
    errors: int                 # socket errors (connect, read, write, timeout)
    bytes: int
    requests: int               # responses of any status
    duration_s: float
    tool: str
    error_detail: dict = field(default_factory=dict)
    latency_resolution_ms: float | None = None
    ok: int | None = None       # responses that succeeded (2xx, 3xx); `requests` less `failed`
    failed: int | None = None   # responses of a failing status (4xx, 5xx; ab: any non-2xx)

    def __post_init__(self):
        if self.latency_resolution_ms is None:
            self.latency_resolution_ms = LATENCY_RESOLUTION_MS.get(self.tool)
        if self.failed is None:
            self.failed = sum(n for code, n in self.status_counts.items() if not status_ok(code))
        if self.ok is None:
            self.ok = max(0, self.requests - self.failed)
        self.rps = self.ok / self.duration_s if self.duration_s > 0 else 0.0

    def to_json(self) -> dict:
        return asdict(self)


def status_ok(code: str | int, declared: frozenset | None = None) -> bool:
    """Whether responses of status `code` (as in `status_counts`: "200", or ab's "2xx" and
    "non-2xx") count as served. `declared`: the statuses a target declares successful, when
    targets can (a target.toml key such as `ok_statuses = [200, 404]`; until there is one,
    2xx and 3xx, `driver.ok_status`)."""
    if declared is not None:
        return str(code) in declared
    if code == "2xx":
        return True
    return ok_status(code)


def declared_ok(target) -> frozenset | None:
    """The statuses `target` declares successful (`Target.ok_statuses`, when target.toml has
    such a key), as strings; None: 2xx and 3xx."""
    codes = getattr(target, "ok_statuses", None)
    return frozenset(str(c) for c in codes) if codes else None


def _lua_safe(path: str) -> str:
    """Percent-encoded as the driver sends it (`driver.quote_path`): no space, quote,
    backslash or non-ASCII character is left, so it is also a safe Lua string literal."""
    return quote_path(path)


def run_load(tool_name: str, procs: ProcessGroup, base_url: str, paths: list[str],
             concurrency: int, duration: float, workdir: Path, label: str,
             declared: frozenset | None = None) -> LoadResult:
    """Run `tool_name` for `duration` s; `declared` (`declared_ok`) overrides which statuses
    count as served."""
    workdir.mkdir(parents=True, exist_ok=True)
    runner = {"wrk": _wrk, "siege": _siege, "ab": _ab}[tool_name]
    r = runner(procs, base_url, paths, concurrency, duration, workdir, label)
    if declared is not None:
        r.failed = sum(n for code, n in r.status_counts.items() if not status_ok(code, declared))
        r.ok = max(0, r.requests - r.failed)
        r.rps = r.ok / r.duration_s if r.duration_s > 0 else 0.0
    return r


def _finish(procs: ProcessGroup, name: str, argv: list[str], duration: float, workdir: Path,
            label: str, env: dict | None = None, grace: float = 60.0) -> str:
    log = workdir / f"{label}.log"
    result = procs.run(name, argv, timeout=duration + grace, env=env, cwd=workdir, log=log, capture=True)
    (workdir / f"{label}.out").write_text(result.stdout)
    if result.returncode != 0:
        raise PhaseFailed(f"{name} failed (exit {result.returncode}); see {log}")
    return result.stdout


def _wrk(procs, base_url, paths, concurrency, duration, workdir, label) -> LoadResult:
    script = render_to("wrk.lua.j2", workdir / "wrk.lua", paths=[_lua_safe(p) for p in paths])
    threads = max(1, min(concurrency, 2))
    argv = [tool("wrk"), f"-t{threads}", f"-c{concurrency}", f"-d{duration:g}s", "--timeout", "30s",
            "-s", str(script), base_url]
    out = _finish(procs, "wrk", argv, duration, workdir, label)
    m = re.search(r"^LOCKDOWN-RESULT (.*)$", out, re.M)
    if not m:
        raise PhaseFailed(f"wrk printed no result; its output is in {workdir / (label + '.out')}")
    data = json.loads(m.group(1))
    seconds = data["duration_us"] / 1e6
    errors = data["errors"]
    socket_errors = errors["connect"] + errors["read"] + errors["write"] + errors["timeout"]
    return LoadResult(
        rps=0.0,
        latency_ms={k: v / 1000.0 for k, v in data["latency_us"].items()},
        status_counts={str(k): v for k, v in sorted(data["status_counts"].items())},
        errors=socket_errors, bytes=data["bytes"], requests=data["requests"],
        duration_s=seconds, tool="wrk", error_detail=errors)


_SIEGE_LINE = re.compile(r"HTTP/\d(?:\.\d)?\s+(\d{3})\s+([\d.]+) secs:\s+(\d+) bytes ==>(?:\s+\S+\s+(\S+))?")


def _percentile(sorted_values: list[float], pct: float) -> float:
    if not sorted_values:
        return 0.0
    k = max(0, min(len(sorted_values) - 1, int(round(pct / 100.0 * len(sorted_values) + 0.5)) - 1))
    return sorted_values[k]


def _siege(procs, base_url, paths, concurrency, duration, workdir, label) -> LoadResult:
    """siege 4.0 loses chunked responses on kept-alive connections: it connects per request."""
    rc = workdir / "siegerc"
    rc.write_text("verbose = true\ncolor = off\nlogging = false\nprotocol = HTTP/1.1\n"
                  "connection = close\nshow-logfile = false\nparser = false\n"
                  "failures = 1000000\ntimeout = 10\njson_output = false\n")
    urls = workdir / "urls.txt"
    urls.write_text("".join(base_url + _lua_safe(p) + "\n" for p in paths))
    env = dict(os.environ, HOME=str(workdir))  # siege writes ~/.siege; keep it in the run dir
    argv = [tool("siege"), "-R", str(rc), "-b", "-c", str(concurrency), "-t", f"{max(1, round(duration))}S",
            "-f", str(urls)]
    out = _siege_until_it_exits(procs, argv, duration, workdir, label, env)
    statuses: dict[str, int] = {}
    by_url: dict[str, Counter] = {}
    times, total_bytes = [], 0
    for m in _SIEGE_LINE.finditer(out):
        statuses[m.group(1)] = statuses.get(m.group(1), 0) + 1
        by_url.setdefault(_path_of(m.group(4) or "?", base_url), Counter())[m.group(1)] += 1
        times.append(float(m.group(2)) * 1000)
        total_bytes += int(m.group(3))
    log_text = (workdir / f"{label}.log").read_text(errors="replace")
    rate = re.search(r"Transaction rate:\s+([\d.]+)", log_text)
    elapsed = re.search(r"Elapsed time:\s+([\d.]+)", log_text)
    failed = re.search(r"Failed transactions:\s+(\d+)", log_text)
    if not rate or not elapsed:
        raise PhaseFailed(f"siege printed no summary; see {workdir / (label + '.log')}")
    times.sort()
    requests = len(times)
    seconds = float(elapsed.group(1))
    # siege's "Failed transactions" are socket failures: a 404 is a transaction, not a failure
    return LoadResult(
        rps=0.0,
        latency_ms={"p50": _percentile(times, 50), "p90": _percentile(times, 90),
                    "p99": _percentile(times, 99), "max": times[-1] if times else 0.0},
        status_counts=dict(sorted(statuses.items())),
        errors=int(failed.group(1)) if failed else 0, bytes=total_bytes, requests=requests,
        duration_s=seconds, tool="siege",
        error_detail={"by_url": {u: dict(c) for u, c in sorted(by_url.items())}})


def _path_of(url: str, base_url: str) -> str:
    """siege names each request by its URL, or by its path: the path."""
    return url[len(base_url):] or "/" if url.startswith(base_url) else url


SIEGE_ATTEMPTS = 3
_SIEGE_GRACE_S = 20.0  # its own per-request timeout is 10 s: a run may overrun by that much


def _siege_until_it_exits(procs, argv, duration, workdir, label, env) -> str:
    """siege 4.0.x sometimes hangs forever after printing "Lifting the server siege..." on
    timed runs with more than one user (JoeDog/siege#66). Such a run is thrown away whole and
    run again; any other failure is reported as it is."""
    log = workdir / f"{label}.log"
    for attempt in range(1, SIEGE_ATTEMPTS + 1):
        try:
            return _finish(procs, "siege", argv, duration, workdir, label, env=env, grace=_SIEGE_GRACE_S)
        except PhaseFailed:
            text = log.read_text(errors="replace") if log.exists() else ""
            hung = "Lifting the server siege" in text and "Transaction rate" not in text
            if not hung or attempt == SIEGE_ATTEMPTS:
                raise
            log.rename(log.with_name(f"{label}.hung-{attempt}.log"))
    raise AssertionError("unreachable")


def _ab(procs, base_url, paths, concurrency, duration, workdir, label) -> LoadResult:
    """ab drives one URL only: the heaviest of the list (the first on ties). No -k: ab's
    keep-alive needs Content-Length, which PHP's chunked responses lack."""
    url = base_url + _lua_safe(max(set(paths), key=lambda p: (paths.count(p), -paths.index(p))))
    argv = [tool("ab"), "-l", "-c", str(concurrency), "-t", f"{max(1, round(duration))}",
            "-n", "100000000", "-r", url]
    out = _finish(procs, "ab", argv, duration, workdir, label)

    def num(pattern, default=None):
        m = re.search(pattern, out, re.M)
        if m is None and default is None:
            raise PhaseFailed(f"ab output lacks {pattern!r}; see {workdir / (label + '.out')}")
        return float(m.group(1)) if m else default

    complete = int(num(r"^Complete requests:\s+(\d+)"))
    seconds = num(r"^Time taken for tests:\s+([\d.]+)")
    non2xx = int(num(r"^Non-2xx responses:\s+(\d+)", 0))
    failed = int(num(r"^Failed requests:\s+(\d+)", 0))
    pct = {p: num(rf"^\s+{p}%\s+(\d+)", 0.0) for p in (50, 90, 99, 100)}
    # ab's "Failed requests" (connect, receive, exceptions; lengths vary and -l ignores them)
    # are among its complete requests: those are socket errors, not responses
    responses = max(0, complete - failed)
    counts = {"2xx": max(0, responses - non2xx)}
    if non2xx:
        counts["non-2xx"] = non2xx
    return LoadResult(
        rps=0.0,
        latency_ms={"p50": pct[50], "p90": pct[90], "p99": pct[99], "max": pct[100]},
        status_counts=counts, errors=failed, bytes=int(num(r"^Total transferred:\s+(\d+)", 0)),
        requests=responses, duration_s=seconds, tool="ab",
        error_detail={"url": url})


# -- a run that failed -------------------------------------------------------------------

def check_run(r: LoadResult, what: str, paths: list[str], *, access_log: Path | None = None,
              since: int = 0, declared: frozenset | None = None, logs: Path | None = None) -> None:
    """Raise PhaseFailed, one line, when run `r` is no measurement: more than
    MAX_FAILED_SHARE of its requests failed (a failing status, or a socket error), or none
    succeeded. `what` names the run ("run 1 of hello"); the line names the failing statuses
    and the URLs that answered them: siege's own log says which, ab drives one URL, and for
    wrk (whose Lua script hears a response without its request) nginx's access log from
    offset `since` on does. `logs` is the run's log directory, named in the hint."""
    total = r.requests + r.errors
    bad = r.failed + r.errors
    if r.ok > 0 and bad <= MAX_FAILED_SHARE * total:
        return
    hint = _hint(r, declared, logs)
    if total == 0:
        raise PhaseFailed(f"{what}: no response at all in {round(r.duration_s, 1):g} s; {hint}")
    parts = []
    if r.failed:
        parts.append(", ".join(f"{code} x{n:,}" for code, n in _failing(r.status_counts, declared)))
    if r.errors:
        detail = {k: v for k, v in r.error_detail.items()
                  if k in ("connect", "read", "write", "timeout") and isinstance(v, int) and v}
        parts.append(f"{r.errors:,} socket error{'s' if r.errors != 1 else ''}"
                     + (f" ({', '.join(f'{k} {v:,}' for k, v in detail.items())})" if detail else ""))
    noun = "requests" if r.errors else "responses"
    urls = failing_urls(r, paths, access_log, since, declared) if r.failed else []
    at = ""
    if urls:
        at = " at " + ", ".join(urls[:3]) + (f" and {len(urls) - 3} more URLs" if len(urls) > 3 else "")
    raise PhaseFailed(f"{what}: {_share(bad, total)} of {total:,} {noun} failed ({'; '.join(parts)}){at}; {hint}")


def _share(bad: int, total: int) -> str:
    pct = 100 * bad / total
    if bad == total:
        return "100%"
    return f"{pct:.0f}%" if 10 <= pct < 99.5 else f"{pct:.1f}%"


def _failing(counts: dict, declared: frozenset | None) -> list[tuple[str, int]]:
    """The failing statuses of `counts`, most frequent first."""
    return sorted(((str(c), n) for c, n in counts.items() if n and not status_ok(c, declared)),
                  key=lambda x: (-x[1], x[0]))


def _hint(r: LoadResult, declared: frozenset | None, logs: Path | None) -> str:
    """What to do about it, from the most frequent failure, and where the logs are."""
    where = f"; logs in {logs}" if logs else ""
    failing = _failing(r.status_counts, declared)
    if r.ok + r.failed + r.errors == 0:
        return f"the pages take longer than the run: raise --duration{where}"
    if r.errors > (failing[0][1] if failing else 0):
        d = r.error_detail
        if d.get("connect", 0) * 2 > r.errors:
            return f"the server refused connections: lower --concurrency{where}"
        if d.get("timeout", 0) * 2 > r.errors:
            return f"requests timed out: lower --concurrency, or raise --workers{where}"
        return f"connections were cut: lower --concurrency{where}"
    code = failing[0][0]
    if code in ("502", "503", "504"):
        return f"the pool is overloaded: lower --concurrency (or raise --workers){where}"
    if code in ("404", "410"):
        return "the URL is not served: check the target's [[urls]]"
    if code == "non-2xx":
        return f"ab tells no more than that: run it with --load wrk to see the statuses{where}"
    if code.startswith("5"):
        return f"the application failed: see php-fpm's and nginx's logs{where}"
    return "the server refused the requests: check the target's [[urls]]"


_ACCESS_LINE = re.compile(r'"[A-Z]+ (\S+) HTTP/[\d.]+" (\d{3}) ')
_FLUSH_S = 1.5      # nginx writes its access log from a buffer at least once a second (flush=1s)


def failing_urls(r: LoadResult, paths: list[str], access_log: Path | None, since: int,
                 declared: frozenset | None) -> list[str]:
    """The URLs of the run that answered a failing status, the most failing first, named as
    the target lists them."""
    named = {quote_path(p): p for p in paths}
    counts: Counter = Counter()
    if r.tool == "siege":
        for url, statuses in (r.error_detail.get("by_url") or {}).items():
            counts[url] = sum(n for code, n in statuses.items() if not status_ok(code, declared))
    elif r.tool == "ab":       # one URL only
        parts = urllib.parse.urlsplit(str(r.error_detail.get("url", "")))
        counts[parts.path + (f"?{parts.query}" if parts.query else "")] = r.failed
    elif access_log is not None:
        time.sleep(_FLUSH_S)
        try:
            with open(access_log, "rb") as f:
                f.seek(since)
                text = f.read().decode("utf-8", "replace")
        except OSError:
            text = ""
        for m in _ACCESS_LINE.finditer(text):
            # 499: nginx's word for a request whose client left, as the load generator does at the end
            if m.group(2) != "499" and not status_ok(m.group(2), declared):
                counts[m.group(1)] += 1
    return [named.get(u, u) for u, n in counts.most_common() if n]


def log_size(path: Path | None) -> int:
    """Where a log ends now: a run's part of it starts there."""
    try:
        return path.stat().st_size if path is not None else 0
    except OSError:
        return 0
