"""Load generators: wrk (default), siege and ab, each driven for a fixed time at a fixed
concurrency, and their output turned into one `LoadResult` shape."""
from __future__ import annotations

import json
import os
import re
import urllib.parse
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import PhaseFailed
from .processes import ProcessGroup
from .render import render_to
from .toolchain import tool

TOOLS = ("wrk", "siege", "ab")

# How finely each tool reports a response's time, in ms: wrk in microseconds, ab's
# percentiles in whole milliseconds, siege each response in hundredths of a second ("0.01
# secs"), so a page served in 2 ms reads as 0.0 there.
LATENCY_RESOLUTION_MS = {"wrk": 0.001, "siege": 10.0, "ab": 1.0}


@dataclass
class LoadResult:
    rps: float
    latency_ms: dict
    status_counts: dict
    errors: int
    bytes: int
    requests: int
    duration_s: float
    tool: str
    error_detail: dict = field(default_factory=dict)
    latency_resolution_ms: float | None = None

    def __post_init__(self):
        if self.latency_resolution_ms is None:
            self.latency_resolution_ms = LATENCY_RESOLUTION_MS.get(self.tool)

    def to_json(self) -> dict:
        return asdict(self)


def _lua_safe(path: str) -> str:
    """Percent-encode anything that is not plain URL text, so it is a safe Lua string literal."""
    return urllib.parse.quote(path, safe="/?&=%:;,+@!$'()*[]~-._")


def run_load(tool_name: str, procs: ProcessGroup, base_url: str, paths: list[str],
             concurrency: int, duration: float, workdir: Path, label: str) -> LoadResult:
    workdir.mkdir(parents=True, exist_ok=True)
    runner = {"wrk": _wrk, "siege": _siege, "ab": _ab}[tool_name]
    return runner(procs, base_url, paths, concurrency, duration, workdir, label)


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
        rps=data["requests"] / seconds if seconds else 0.0,
        latency_ms={k: v / 1000.0 for k, v in data["latency_us"].items()},
        status_counts={str(k): v for k, v in sorted(data["status_counts"].items())},
        errors=socket_errors, bytes=data["bytes"], requests=data["requests"],
        duration_s=seconds, tool="wrk", error_detail=errors)


_SIEGE_LINE = re.compile(r"HTTP/\d(?:\.\d)?\s+(\d{3})\s+([\d.]+) secs:\s+(\d+) bytes ==>")


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
    times, total_bytes = [], 0
    for m in _SIEGE_LINE.finditer(out):
        statuses[m.group(1)] = statuses.get(m.group(1), 0) + 1
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
    return LoadResult(
        rps=requests / seconds if seconds else float(rate.group(1)),
        latency_ms={"p50": _percentile(times, 50), "p90": _percentile(times, 90),
                    "p99": _percentile(times, 99), "max": times[-1] if times else 0.0},
        status_counts=dict(sorted(statuses.items())),
        errors=int(failed.group(1)) if failed else 0, bytes=total_bytes, requests=requests,
        duration_s=seconds, tool="siege")


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
    non2xx = int(num(r"^Non-2xx responses:\s+(\d+)", 0))
    failed = int(num(r"^Failed requests:\s+(\d+)", 0))
    pct = {p: num(rf"^\s+{p}%\s+(\d+)", 0.0) for p in (50, 90, 99, 100)}
    counts = {"2xx": complete - non2xx}
    if non2xx:
        counts["non-2xx"] = non2xx
    return LoadResult(
        rps=num(r"^Requests per second:\s+([\d.]+)"),
        latency_ms={"p50": pct[50], "p90": pct[90], "p99": pct[99], "max": pct[100]},
        status_counts=counts, errors=failed, bytes=int(num(r"^Total transferred:\s+(\d+)", 0)),
        requests=complete, duration_s=num(r"^Time taken for tests:\s+([\d.]+)"), tool="ab",
        error_detail={"url": url})
