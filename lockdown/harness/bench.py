"""`lockdown bench`: the benchmark as a sequence of named phases, as oss-performance runs it.

start -> sanity -> warmup-single -> warmup-concurrent -> measure (R runs of D seconds at C) ->
stop, with user hooks between the phases. The result records every option and whether any
differed from the defaults (`canonical`).
"""
from __future__ import annotations

import os
import platform
import re
import resource
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import asdict
from pathlib import Path

from ..analyzers.stats import speed_adjusted, summarize
from ..errors import PhaseFailed
# the options and their defaults live below harness and reports, which both read them; named
# here too for the modules that take them from harness.bench
from ..options import DEFAULT_WORKERS, DEFAULT_WORKERS_TEXT, BenchOptions  # noqa: F401
from ..progress import as_reporter
from ..targets.config import Target
from . import cpu, opcache_settle, server_cpu, steady_runs
from .driver import quote_path
from .host_speed import SpeedProbe
from .loadgen import LoadResult, check_run, declared_ok, log_size, run_load
from .logs import evidence
from .mariadb import redact_dsn
from .stack import Stack, StackOptions
from .toolchain import tool

# Sane bounds of the options (docs/bench.md, "Rules"): beyond them a
# command is refused in one line before anything starts.
MAX_WORKERS = 256              # php-fpm workers: each a PHP process of tens of MB
MAX_CONCURRENCY = 10_000       # load generator connections, and no more than the open files allow
MAX_SECONDS = 86_400           # a run's or a warmup's duration: a day
MAX_REQUESTS = 10_000_000      # a capture's requests
_FD_HEADROOM = 64              # files the load generator opens besides its connections


def max_concurrency() -> tuple[int, str]:
    """The most connections a load generator may open, and why: MAX_CONCURRENCY, or fewer
    when the open-file limit (`ulimit -n`) is lower, as wrk needs one file per connection."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft - _FD_HEADROOM < MAX_CONCURRENCY:
        return max(1, soft - _FD_HEADROOM), f" (the open-file limit, ulimit -n, is {soft})"
    return MAX_CONCURRENCY, ""


def bound_errors(concurrency: int | None = None, workers: int | None = None, duration: float | None = None,
                 warmup_duration: float | None = None, requests: int | None = None) -> list[str]:
    """What is out of bounds among the options given, one phrase each."""
    out = []
    if concurrency is not None:
        most, why = max_concurrency()
        if concurrency > most:
            out.append(f"--concurrency {concurrency} is more than {most:,} connections{why}")
    if workers is not None and workers > MAX_WORKERS:
        out.append(f"--workers {workers} is more than {MAX_WORKERS} php-fpm workers")
    for option, value in (("--duration", duration), ("--warmup-duration", warmup_duration)):
        if value is not None and not value <= MAX_SECONDS:
            shown = value if isinstance(value, int) else f"{value:g}"
            out.append(f"{option} {shown} is more than {MAX_SECONDS:,} s (a day)")
    if requests is not None and requests > MAX_REQUESTS:
        out.append(f"--requests {requests} is more than {MAX_REQUESTS:,}")
    return out


class Phases:
    """Named phases timed in wall seconds, in the order they ran: `timings`, the list bench.json
    and the bundle's manifest record as `phases` ([{"name", "seconds"}]; a name may come twice,
    as profile's two baseline halves do). Given `say`, `run` announces each phase as `[name]`
    first. A phase that raises records nothing: the command stops with it."""

    def __init__(self, say=None):
        self.say = say
        self.timings: list[dict] = []

    def record(self, name: str, started: float) -> None:
        """The phase `name` ran from `started` (time.monotonic()) until now."""
        self.timings.append({"name": name, "seconds": round(time.monotonic() - started, 3)})

    def run(self, name: str, fn, *args):
        """`fn(*args)` as the phase `name`; returns what it returns."""
        if self.say is not None:
            self.say(f"[{name}]")
        started = time.monotonic()
        out = fn(*args)
        self.record(name, started)
        return out


def fetch(url: str, timeout: float = 60) -> tuple[int, bytes]:
    """GET without following redirects; returns (status, body). The URL is percent-encoded
    as the load generators send it (`driver.quote_path`: a space, a non-ASCII character)."""
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *a, **k):
            return None
    url = quote_path(url)
    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def sanity_check(stack: Stack) -> dict:
    t = stack.target
    url = stack.base_url + t.sanity_url
    try:
        status, body = fetch(url)
    except OSError as e:
        status, body = 0, str(e).encode()
    text = body.decode("utf-8", "replace")
    if status != 200 or t.sanity_expect not in text:
        why = f"status {status}" if status != 200 else f"expected text {t.sanity_expect!r} not found"
        excerpt = " ".join(text.split())[:600]
        raise PhaseFailed(
            f"sanity check failed for {url}: {why}; check the target's configuration and the logs "
            f"in {stack.run_dir / 'logs'}",
            f"--- response excerpt ---\n{excerpt}\n"
            + evidence(stack.fpm.error_log, stack.nginx.error_log))
    return {"url": t.sanity_url, "status": status, "bytes": len(body)}


def run_hook(stack: Stack, phase: str, command: str | None, say, **extra_env: str) -> None:
    if not command:
        return
    say(f"[hook] {phase}: {command}")
    env = dict(os.environ, LOCKDOWN_BASE_URL=stack.base_url, LOCKDOWN_RUN_DIR=str(stack.run_dir),
               LOCKDOWN_PHASE=phase, LOCKDOWN_TARGET=stack.target.name, **extra_env)
    result = stack.procs.run(f"hook-{phase}", ["sh", "-c", command], timeout=3600, env=env)
    if result.returncode != 0:
        raise PhaseFailed(f"hook {phase} ({command!r}) failed with exit {result.returncode}; "
                          f"its output is in {stack.run_dir / 'logs' / f'hook-{phase}.out'}")


def first_line(argv: list[str]) -> str | None:
    """First line a tool prints (e.g. for `-v`), or None when it cannot run."""
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=20)
        return (p.stdout or p.stderr).strip().splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return None


def versions() -> dict:
    return {"php": first_line([tool("php-fpm"), "-v"]), "nginx": first_line([tool("nginx"), "-v"]),
            "load": None, "kernel": platform.release(), "python": platform.python_version()}


def run_bench(target: Target, run_dir: Path, opts: BenchOptions, say=print, remedy=None,
              base: str | None = None) -> dict:
    """Run every phase; return the result dict (the `--json` shape). `remedy` patches the
    stack's copies first (`lockdown run --on-top-of` or `--patch`: `base` says what with, in
    words, `Base.describe`); such a bench is not of the target as it ships, so not canonical."""
    stack_opts = StackOptions(workers=opts.workers, port=opts.port, mysql_dsn=opts.mysql,
                              php_ini=dict(opts.php_ini), remedy=remedy)
    # --mysql on a target without a database changes nothing that is measured
    non_default = [k for k in opts.non_default() if k != "mysql" or target.database] \
        + (["on_top_of"] if base else [])
    clock = Phases(say)
    result = {
        "target": target.name,
        "canonical": not non_default,
        "non_default_options": non_default,
        **({"on_top_of": base} if base else {}),
        # the DSN without its password (also one a hook names): bench.json is meant to be shared
        "config": {**asdict(opts), "mysql": opts.mysql and redact_dsn(opts.mysql),
                   "hooks": {k: v and redact_dsn(v) for k, v in opts.hooks.items()},
                   "urls": [asdict(u) for u in target.urls], "cpus": os.cpu_count(),
                   "host": platform.node(), "versions": versions()},
        "run_dir": str(run_dir),
        "phases": clock.timings,
        "runs": [],
    }
    result["config"]["versions"]["load"] = load_version(opts.load)
    paths = target.weighted_paths()

    started = time.monotonic()
    with Stack(target, run_dir, stack_opts, say=say) as stack:
        clock.record("start", started)
        result["base_url"] = stack.base_url
        result["config"]["php_extensions"] = stack.php.extensions
        result["config"]["php_ini_effective_overrides"] = stack.php.overrides
        if stack.db:
            result["config"]["versions"]["mariadb"] = stack.db.version
        served_from = time.time()
        result["sanity"] = clock.run("sanity", sanity_check, stack)
        say(f"[sanity] ok: {target.sanity_url} returned 200 with {target.sanity_expect!r}")
        run_hook(stack, "before-warmup", opts.hooks.get("before-warmup"), say)

        warmed_from = time.time()
        clock.run("warmup-single", warm_single, stack, opts, paths, say)
        clock.run("warmup-concurrent", warm_concurrent, stack, opts, paths, run_dir / "load", say)
        result["opcache_settle_s"] = settle_opcache(stack, paths, served_from, warmed_from, say)
        run_hook(stack, "after-warmup", opts.hooks.get("after-warmup"), say)

        measured: list[dict] = []

        def measure():
            while len(measured) < opts.runs or (len(measured) < 2 * opts.runs and steady_runs.needs_more(
                    capacities_of(measured), opts.runs, opts.tolerance())):
                i = len(measured)
                if i >= opts.runs:
                    say(f"[measure] fewer than {opts.runs} runs within {opts.host_tolerance:g}% of the "
                        f"runs' median host capacity: one more run ({i + 1 - opts.runs} of up to {opts.runs} extra)")
                which = (f"{i + 1}/{opts.runs}" if i < opts.runs else
                         f"{i + 1} (extra {i + 1 - opts.runs} of up to {opts.runs})")
                measured.append(measured_run(stack, opts, paths, run_dir / "load", f"run-{i + 1}", say,
                                             f"measured run {which}", name=f"run {i + 1}"))
                say(f"[measure] run {which}: {run_line(measured[-1])}")
        clock.run("measure", measure)
        run_hook(stack, "after-benchmark", opts.hooks.get("after-benchmark"), say)
        stop_started = time.monotonic()
    clock.record("stop", stop_started)
    keep_runs(result, measured, opts)
    return result


def keep_runs(result: dict, measured: list[dict], opts: BenchOptions) -> None:
    """`runs`: the runs the host did not disturb (steady_runs.select; all of them with
    --keep-disturbed), each numbered as measured; `set_aside`: the others, each with its
    reason; the summary over the runs kept, with the CV over every run beside it."""
    choice = steady_runs.select(capacities_of(measured), opts.runs, opts.tolerance())
    numbered = [{**r, "run": i + 1} for i, r in enumerate(measured)]
    result["runs"] = [numbered[i] for i in choice.kept]
    result["set_aside"] = [{**numbered[i], "set_aside": why} for i, why in sorted(choice.aside.items())]
    result["summary"] = summary_of(result["runs"])
    result["summary"].update({
        "runs_measured": len(measured), "runs_set_aside": len(choice.aside),
        "rps_cv_all_runs": summarize(rps_of(measured))["cv"],
        "host_tolerance": opts.tolerance(),
        "host_unsteady": choice.unsteady})


def summary_of(runs: list[dict]) -> dict:
    """The `summary` of a list of measured runs: RPS mean, deviation, CV and 95% CI; the
    host's speed and steal over the runs, and the CV that is left once the capacity they give
    is taken out (stats.speed_adjusted on capacities_of). The keys keep their first names:
    `rps_cv_speed_adjusted` and `speed_elasticity` are about the capacity since steal joined."""
    s = summarize(rps_of(runs))
    speeds, capacities = speeds_of(runs), capacities_of(runs)
    adjusted = speed_adjusted(rps_of(runs), capacities)
    speed = _summary_if_all(speeds)
    capacity = _summary_if_all(capacities)
    steals = [r.get("host_cpu", {}).get("steal_pct") for r in runs]
    served = _summary_if_all(server_cpu_of(runs))
    return {"rps_mean": s["mean"], "rps_stddev": s["stddev"], "rps_cv": s["cv"],
            "rps_ci95": s["ci95"], "runs": s["n"],
            "host_speed_mean": speed and speed["mean"], "host_speed_cv": speed and speed["cv"],
            "host_steal_pct_max": max((x for x in steals if x is not None), default=None),
            "host_capacity_cv": capacity and capacity["cv"],
            "rps_cv_speed_adjusted": adjusted and adjusted["cv"],
            "speed_elasticity": adjusted and adjusted["elasticity"],
            "server_cpu_ms_mean": served and served["mean"], "server_cpu_cv": served and served["cv"],
            "server_cpu_by_server_ms": served and (by_server_means(runs) or None)}


def by_server_means(runs: list[dict]) -> dict[str, float]:
    """Each server's mean CPU ms per request over the runs (php-fpm, mariadbd, nginx)."""
    split = [r["server_cpu"]["by_server"] for r in runs if r.get("server_cpu", {}).get("by_server")]
    names = sorted({name for s in split for name in s})
    return {name: round(sum(s.get(name, 0.0) for s in split) / len(split), 3) for name in names}


def _summary_if_all(values: list[float | None]) -> dict | None:
    known = [x for x in values if x]
    return summarize(known) if values and len(known) == len(values) else None


def rps_of(runs: list[dict]) -> list[float]:
    return [r["rps"] for r in runs]


def server_cpu_of(runs: list[dict]) -> list[float | None]:
    """Each run's server CPU ms per request (None where unknown: a server restarted, or a run
    recorded before it was measured)."""
    return [r.get("server_cpu", {}).get("ms_per_request") for r in runs]


def speeds_of(runs: list[dict]) -> list[float | None]:
    """Each run's host speed (None for runs recorded before the probe existed)."""
    return [r.get("host_speed", {}).get("speed") for r in runs]


def capacities_of(runs: list[dict]) -> list[float | None]:
    """Each run's host capacity: the probe's speed (how fast a core ran while the VM had it)
    times the share of the CPU time it wanted that the hypervisor did not steal (how long the
    VM had it; cpu.unstolen_share). The probe times itself on its thread's CPU clock, which
    stolen time does not advance, so it cannot see steal; on this VM steal went from 6% to
    17% between runs with the speed steady, and RPS followed 1 - steal (docs/bench.md). A run
    without CPU figures counts its speed alone."""
    return [capacity(speed, r.get("host_cpu")) for r, speed in zip(runs, speeds_of(runs))]


def capacity(speed: float | None, usage: dict | None) -> float | None:
    share = cpu.unstolen_share(usage)
    return speed * share if speed and share else speed


def warm_single(stack: Stack, opts: BenchOptions, paths: list[str], say) -> dict:
    """`warmup_requests` requests one at a time: caches filled, opcache compiled."""
    statuses: dict[str, int] = {}
    with as_reporter(say).counted("warmup, one at a time", opts.warmup_requests) as done:
        for i in range(opts.warmup_requests):
            status, _ = fetch(stack.base_url + paths[i % len(paths)])
            statuses[str(status)] = statuses.get(str(status), 0) + 1
            done(i + 1)
    say(f"[warmup-single] {opts.warmup_requests} requests, one at a time: {statuses}")
    return statuses


def warm_concurrent(stack: Stack, opts: BenchOptions, paths: list[str], load_dir: Path, say):
    """The load generator at full concurrency for `warmup_duration` s, not measured."""
    if opts.warmup_duration <= 0:
        return None
    with as_reporter(say).timed(f"warmup at concurrency {opts.concurrency}", opts.warmup_duration):
        r = run_load(opts.load, stack.procs, stack.base_url, paths, opts.concurrency,
                     opts.warmup_duration, load_dir, "warmup", declared_ok(stack.target))
    say(f"[warmup-concurrent] {opts.warmup_duration:g} s at concurrency "
        f"{opts.concurrency}: {r.rps:.1f} req/s")
    return r


def settle_opcache(stack: Stack, paths: list[str], served_from: float, warmed_from: float, say) -> float | None:
    """After the warmups: files of the app tree changed shortly before it was served or since
    (a remediation's rebuild step, a cache the app writes on its first requests) are compiled
    on every request, not cached, until they are older than opcache.file_update_protection
    (opcache_settle.py). Wait that out and serve each URL once more, so the measured runs see
    the cache the application has a few seconds after it starts. The seconds waited, or None
    when no file was that young."""
    young = opcache_settle.young_files(stack.app_dir, stack.php.overrides, served_from, warmed_from)
    if young is None:
        return None
    written, wait = young
    time.sleep(wait)
    statuses: dict[str, int] = {}
    for path in dict.fromkeys(paths):
        status, _ = fetch(stack.base_url + path)
        statuses[str(status)] = statuses.get(str(status), 0) + 1
    say(opcache_settle.settled_line(stack.app_dir, written, wait, statuses))
    return round(wait, 2)


def access_log(stack: Stack) -> Path:
    """nginx's access log of the stack: which URL answered which status."""
    return getattr(stack.nginx, "access_log", None) or stack.run_dir / "logs" / "nginx-access.log"


def measured_run(stack: Stack, opts: BenchOptions, paths: list[str], load_dir: Path, label: str,
                 say=print, title: str | None = None, name: str | None = None) -> dict:
    """One measured run of `duration` s at `concurrency`, with the host's CPU use during it
    and the servers' CPU time per request served. A run whose failed requests are more than
    loadgen.MAX_FAILED_SHARE, or that served nothing, stops the command (`check_run`: one
    line naming the run, `name`, e.g. "run 2", the statuses and the URLs)."""
    servers = {c.name: c.pid for c in stack.procs.children if c.alive()}
    declared = declared_ok(stack.target)
    log = access_log(stack)
    since = log_size(log)
    before, started, served_before = cpu.snapshot(), time.time(), server_cpu.snapshot(servers)
    with as_reporter(say).timed(title or label, opts.duration), SpeedProbe() as speed:
        r: LoadResult = run_load(opts.load, stack.procs, stack.base_url, paths, opts.concurrency,
                                 opts.duration, load_dir, label, declared)
    check_run(r, f"{name or label.replace('-', ' ')} of {stack.target.name}", paths, access_log=log,
              since=since, declared=declared, logs=stack.run_dir / "logs")
    served = server_cpu.usage(served_before, server_cpu.snapshot(servers), r.requests)
    # wall-clock bounds, to line a run up with outside monitoring (sar, the hypervisor's graphs)
    return {**r.to_json(), "started_at": round(started, 3), "ended_at": round(time.time(), 3),
            "host_cpu": cpu.usage(before, cpu.snapshot()), "host_speed": speed.summary(),
            "server_cpu": served}


def run_line(run: dict) -> str:
    return (f"{run['rps']:.1f} req/s, p50 {run['latency_ms']['p50']:.1f} ms, p99 "
            f"{run['latency_ms']['p99']:.1f} ms, statuses {run['status_counts']}, errors {run['errors']}")


def load_version(name: str) -> str | None:
    """The load generator's version line, e.g. "wrk debian/4.1.0-3+b2 ..."."""
    return _tool_version(name, {"wrk": ["-v"], "siege": ["-V"], "ab": ["-V"]}[name],
                         {"wrk": "wrk", "siege": "siege", "ab": "apachebench"}[name])


def _tool_version(name: str, args: list[str], called: str) -> str | None:
    """The line naming the tool (`called`) with a number in it: siege prints a complaint about
    its configuration file (with a line number) before its version."""
    try:
        p = subprocess.run([tool(name), *args], capture_output=True, text=True, timeout=20,
                           env=dict(os.environ, HOME="/nonexistent"))
    except OSError:
        return None
    lines = (p.stdout + p.stderr).strip().splitlines()
    named = re.compile(rf"(^|\s){called}[\s,/]", re.IGNORECASE)
    line = next((candidate for candidate in lines
                 if named.search(candidate) and any(c.isdigit() for c in candidate)), None)
    # "wrk debian/4.1.0-3+b2 [epoll] Copyright (C) 2012 Will Glozer": the version, not the notice
    return None if line is None else re.split(r"\s+Copyright\b", line)[0]
