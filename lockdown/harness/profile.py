"""`lockdown profile`: start the target as `bench` does, drive it with tagged requests while
the collectors run, and write a bundle (docs/bundle-format.md).

Phases: start -> sanity -> warmup -> baseline (half the requests, nothing collected) ->
capture (timed pass, then the xhprof-instrumented requests) -> baseline (the other half) ->
environment (versions, PHP's settings, the database's) -> stop -> assemble, each a function of
its own, timed by bench's `Phases` into the manifest's `phases`. The two baseline halves give
the overhead recorded in the manifest; with `overhead_slices` K the timed pass is cut into K
slices with uncollected slices between them (inside the capture phase).

The instrumented requests run 2x to 6x slower (docs/pathologies.md section 7). Sent inside
the timed pass they took a core from the requests being timed and cost most of the capture's
measured throughput, so they follow it: the same URLs, captured the same way, on their own
one-worker pool, while nothing else runs.
"""
from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import json
import math
import os
import platform
import re
import statistics
import time
from dataclasses import dataclass, field, replace
from collections import Counter
from pathlib import Path

from .. import __version__
from ..bundle.store import BundleWriter
from ..collectors import assemble, request_log, server_status
from ..collectors import engine_events
from ..collectors.perf import PerfRecorder, build_ids, script
from ..collectors.server_settings import STATEMENT_MEMORY, SlowLogCapture, read_settings
from ..collectors.settings import EXCIMER_SAMPLES_PER_REQUEST, CaptureSettings, auto_excimer_period
from ..errors import LockdownError, UsageError
from ..options import DEFAULT_WORKERS
from ..paths import pid_alive
from ..progress import as_reporter
from ..targets.config import Target
from . import cpu, opcache_settle
from .bench import Phases, capacity, first_line, run_hook, sanity_check, versions
from .driver import DriveResult, SentRequest, drive, instrumented_paths, ok_status, quote_path
from .host_speed import SpeedProbe
from .mariadb import redacted_argv
from .phpfpm import php_facts
from .processes import staging_recorded
from .stack import Stack, StackOptions
from .toolchain import tool

DEFAULT_REQUESTS = 200


@dataclass
class ProfileOptions:
    requests: int | None = None
    duration: float | None = None
    concurrency: int = 1
    workers: int = DEFAULT_WORKERS
    capture: CaptureSettings = field(default_factory=CaptureSettings)
    warmup_requests: int = 20
    overhead_check: bool = True
    overhead_slices: int = 1         # capture cut into K slices between uncollected ones
    urls: tuple = ()                 # paths to drive instead of the target's list
    php_ini: dict = field(default_factory=dict)
    port: int | None = None
    mysql: str | None = None
    hooks: dict = field(default_factory=dict)
    remedy: object = None            # StackOptions.remedy: profile a patched copy (verify)
    applied: list = field(default_factory=list)   # what `remedy` applies, as the manifest names it

    def size(self) -> dict:
        if self.requests is None and self.duration is None:
            return {"requests": DEFAULT_REQUESTS}
        return {"requests": self.requests} if self.requests is not None else {"duration": self.duration}


def _drive_summary(r: DriveResult) -> dict:
    return {"requests": len(r.requests), "seconds": round(r.seconds, 3), "rps": round(r.rps, 3),
            "status_counts": r.status_counts()}


def shown_drive(say, label: str, *args, probe: SpeedProbe | None = None, **kwargs) -> DriveResult:
    """`drive`, with its progress shown (requests sent of `requests`, or seconds of
    `duration`) and, given a `probe`, the host's speed sampled while it runs."""
    report = as_reporter(say)
    with contextlib.ExitStack() as running:
        if probe is not None:
            running.enter_context(probe)
        if kwargs.get("duration") is not None:
            with report.timed(label, kwargs["duration"]):
                return drive(*args, **kwargs)
        with report.counted(label, kwargs.get("requests")) as done:
            return drive(*args, progress=done, **kwargs)


def settle_opcache(stack, say, paths: list[str], since: float, warmed_from: float, xhprof: bool) -> None:
    """Files of the app tree changed shortly before it was served or since (a cache the app
    writes on its first request, or files edited just before the command) are not in OPcache
    until they are older than opcache.file_update_protection (opcache_settle.py): wait that out,
    then serve each URL once more on each pool, so the capture does not compile them on every
    request."""
    young = opcache_settle.young_files(stack.app_dir, stack.php.overrides, since, warmed_from)
    if young is None:
        return
    written, wait = young
    time.sleep(wait)
    distinct = list(dict.fromkeys(paths))
    again = shown_drive(say, "warmup after OPcache's file_update_protection", stack.base_url, distinct, 1,
                        requests=len(distinct))
    if xhprof:
        shown_drive(say, "warmup of the xhprof pool, again", stack.base_url, distinct, 1,
                    requests=len(distinct), xhprof=True)
    say(opcache_settle.settled_line(stack.app_dir, written, wait, again.status_counts()))


def _split(size: dict, k: int) -> list[dict]:
    """`size` ({"requests": n} or {"duration": s}) in `k` near-equal parts."""
    if "requests" in size:
        n = size["requests"]
        return [{"requests": max(1, n // k + (1 if i < n % k else 0))} for i in range(k)]
    return [{"duration": size["duration"] / k} for _ in range(k)]


def _half(size: dict) -> dict:
    return ({"requests": max(1, size["requests"] // 2)} if "requests" in size
            else {"duration": size["duration"] / 2})


def _mean(values: list) -> float | None:
    return round(statistics.fmean(values), 3) if values else None


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _overhead(chunks: list[DriveResult], baseline: list[DriveResult], speeds: dict, cpus: dict) -> dict:
    """Throughput with collection over throughput without. Each capture slice is compared with
    the uncollected slices just before and after it; the ratio is their geometric mean. Each
    pair also has the host capacity of both sides (speed x CPU share not stolen,
    bench.capacity) for bench/overhead.py's adjustment."""
    pairs = []
    for i, c in enumerate(chunks):
        around = DriveResult.joined(baseline[i:i + 2])
        if around.rps > 0 and c.rps > 0:
            base_probes = speeds["baseline"][i].samples + speeds["baseline"][i + 1].samples
            cap_speed, base_speed = _mean(speeds["capture"][i].samples), _mean(base_probes)
            cap_cpu = cpu.summarize(cpus["capture"][i])
            base_cpu = cpu.summarize(cpu.summed(cpus["baseline"][i:i + 2]))
            pairs.append({"capture_rps": round(c.rps, 3), "baseline_rps": round(around.rps, 3),
                          "ratio": round(c.rps / around.rps, 4),
                          "capture_host_speed": cap_speed, "baseline_host_speed": base_speed,
                          "capture_host_cpu": cap_cpu, "baseline_host_cpu": base_cpu,
                          "capture_host_capacity": _round(capacity(cap_speed, cap_cpu)),
                          "baseline_host_capacity": _round(capacity(base_speed, base_cpu))})
    ratio = math.exp(statistics.fmean(math.log(p["ratio"]) for p in pairs)) if pairs else 0.0
    base_speed = [x for p in speeds["baseline"] for x in p.samples]
    cap_speed = [x for p in speeds["capture"] for x in p.samples]
    per_slice = {"baseline": [_mean(p.samples) for p in speeds["baseline"]],
                 "capture": [_mean(p.samples) for p in speeds["capture"]]}
    captured, base = DriveResult.joined(chunks), DriveResult.joined(baseline)
    return {"baseline_rps": round(base.rps, 3), "capture_rps": round(captured.rps, 3),
            "ratio": round(ratio, 4), "slices": pairs,
            "baseline_slices_rps": [round(b.rps, 3) for b in baseline], "slice_host_speed": per_slice,
            "baseline_host_speed": _mean(base_speed), "capture_host_speed": _mean(cap_speed),
            "note": "each capture slice vs the uncollected slices just before and after it, on the "
                    "same stack (geometric mean over slices); bench/overhead.py repeats it"}


def run_profile(target: Target, run_dir: Path, dest: Path, opts: ProfileOptions, say=print) -> Path:
    writer = claim_output(dest)
    try:
        with staging_recorded(writer.staging):    # a kill -9 leaves it to the next command
            return _profile(target, run_dir, writer, opts, say)
    except BaseException:
        writer.abandon()
        raise


_STAGING = r"\.{name}\.partial-(\d+)"


def claim_output(dest: Path) -> BundleWriter:
    """The writer of the bundle `dest`, refused in one line while another lockdown stages the
    same -o (two `profile -o b` at once: the second's final rename failed with a traceback).
    The check and the staging directory's creation are one step under a lock on the parent
    directory, so of two commands started together exactly one gets it."""
    dest = Path(dest)
    try:
        fd = os.open(dest.parent, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return BundleWriter(dest)          # it names the directory that is missing
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        pattern = re.compile(_STAGING.format(name=re.escape(dest.name)))
        for entry in os.listdir(dest.parent):
            m = pattern.fullmatch(entry)
            if m and int(m.group(1)) != os.getpid() and pid_alive(int(m.group(1))):
                raise UsageError(f"{dest} is being written by another lockdown (pid {m.group(1)}); "
                                    f"wait for it to finish, or choose another -o")
        return BundleWriter(dest)
    finally:
        os.close(fd)                        # and the lock with it


def _finished(writer: BundleWriter, manifest: dict) -> Path:
    """The bundle renamed into place; one line if `-o` appeared meanwhile (made by hand)."""
    try:
        return writer.finish(manifest)
    except OSError as e:
        if e.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
            raise LockdownError(f"{writer.dest} appeared while the capture ran (something else wrote it); "
                                f"capture again with another -o")
        raise


def check_logged(sent: list[SentRequest], logged: set[str], error_log: Path) -> None:
    """Fail, in one line naming the cause, when fewer requests were logged than sent: a
    request that could not be sent (the error), one the server answered without running PHP
    or with a failure (its status and URL: nginx's 404 for a file that is not there, a 502),
    or one served but not logged (the request log could not be written)."""
    lost = [s for s in sent if s.id not in logged]
    if not lost:
        return
    causes = []
    unsent = [s for s in lost if s.error is not None]
    if unsent:
        causes.append(f"{len(unsent)} could not be sent to {_urls(unsent)} ({unsent[0].error})")
    refused = [s for s in lost if s.error is None and not ok_status(s.status)]
    if refused:
        causes.append(f"the server answered {_statuses(refused)} at {_urls(refused)}; check --url or the "
                      f"target's [[urls]], and the logs in {error_log.parent}")
    served = [s for s in lost if s.error is None and ok_status(s.status)]
    if served:
        causes.append(f"{len(served)} were served ({_statuses(served)}) but PHP did not log them: the "
                      f"capture directory was not writable, or the disk is full; see {error_log}")
    raise LockdownError(f"{len(lost)} of {len(sent)} requests were not logged: {'; '.join(causes)}")


def _statuses(requests: list[SentRequest]) -> str:
    return ", ".join(f"{code} x{n}" for code, n in Counter(str(r.status) for r in requests).most_common())


def _urls(requests: list[SentRequest]) -> str:
    urls = [u for u, _ in Counter(r.url for r in requests).most_common()]
    return ", ".join(urls[:3]) + (f" and {len(urls) - 3} more" if len(urls) > 3 else "")


@contextlib.contextmanager
def _password_dropped(cap: request_log.CaptureDir):
    """The capture's config.json gives the prepend the database password for its marker
    connection; it is taken out when the capture's stack stops, however it stops, so that the
    run directory keeps no password (only a kill -9 leaves it, in that 0600 file)."""
    try:
        yield
    finally:
        path = cap.root / "config.json"
        try:
            config = json.loads(path.read_text())
        except (OSError, ValueError):
            config = None
        if isinstance(config, dict) and isinstance(config.get("db"), dict) and config["db"].get("password"):
            config["db"]["password"] = "***"
            tmp = path.with_name(f".config.json.{os.getpid()}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(config, f)
            os.replace(tmp, path)


@dataclass
class _Capture:
    """What the phases of one profile share: the plan made before the stack starts, then what
    each phase leaves for the next (the stack, the slices measured, the requests sent)."""
    target: Target
    run_dir: Path
    opts: ProfileOptions
    say: object
    settings: CaptureSettings
    paths: list[str]                 # as sent (percent-encoded), which the request log records
    cap: request_log.CaptureDir
    pool_ini: dict
    resolve_ports: bool
    stack_opts: StackOptions
    size: dict
    manifest: dict
    clock: Phases
    stack: Stack | None = None
    db_cfg: dict | None = None
    every: int = 0                   # 1 in `every` requests of each URL xhprof-instrumented
    instrumented: list[str] = field(default_factory=list)
    k: int = 1                       # capture slices
    parts: list[dict] = field(default_factory=list)
    base_part: dict = field(default_factory=dict)
    baseline: list[DriveResult] = field(default_factory=list)
    chunks: list[DriveResult] = field(default_factory=list)
    # the host's speed during the uncollected and the collected passes (harness/host_speed.py)
    speeds: dict = field(default_factory=lambda: {"baseline": [], "capture": []})
    # and /proc/stat over each (busy and steal: the capacity the host gave each pass)
    cpus: dict = field(default_factory=lambda: {"baseline": [], "capture": []})
    status: list[dict] = field(default_factory=list)   # the database server's counters per slice
    perf: PerfRecorder | None = None
    events: engine_events.EventRecorder | None = None   # counted alongside perf
    workers: list[int] = field(default_factory=list)
    slow_plans: object = None
    captured: DriveResult | None = None
    profiled: DriveResult | None = None

    @property
    def hook_env(self) -> dict:
        return {"LOCKDOWN_CAPTURE_DIR": str(self.cap.out)}

    @property
    def xhprof_pool(self) -> bool:
        return bool(self.stack_opts.instrumented_extension and self.settings.xhprof_every > 0)


def _profile(target: Target, run_dir: Path, writer: BundleWriter, opts: ProfileOptions, say) -> Path:
    """The phases in order, each timed into the manifest's `phases`: start, sanity, warmup,
    baseline, capture, baseline, environment (inside the stack), stop, assemble."""
    run = _plan(target, run_dir, opts, say)
    say(f"[start] collectors: {', '.join(sorted(run.settings.collect)) or 'none (request log only)'}")
    started = time.monotonic()
    with Stack(target, run_dir, run.stack_opts, say=say) as stack, _password_dropped(run.cap):
        run.stack = stack
        _configure_capture(run)
        run.clock.record("start", started)
        _served(run)
        stopping = time.monotonic()
    run.clock.record("stop", stopping)
    say("[stop] everything stopped; assembling the bundle")
    run.clock.run("assemble", _assemble, run, writer)
    return _finished(writer, run.manifest)


def _plan(target: Target, run_dir: Path, opts: ProfileOptions, say) -> _Capture:
    """What is decided before anything starts: the collectors the target allows, the URLs,
    the capture directory and the pool's settings, the manifest's first sections."""
    settings = opts.capture
    notes = []
    if "queries" in settings.collect and not target.database:
        settings = replace(settings, collect=settings.collect - {"queries"})
        notes.append("queries not collected: the target has no database")
    # as sent (percent-encoded: `/a b` is `/a%20b`), which the request log then records
    paths = [quote_path(p) for p in (list(opts.urls) or target.weighted_paths())]
    overrides = {**target.php_ini, **opts.php_ini}
    cap = request_log.install(run_dir / "capture", overrides.get("auto_prepend_file"))
    resolve_ports = "queries" in settings.collect and opts.concurrency > 1
    pool_ini = request_log.pool_ini(cap, resolve_ports)
    stack_opts = StackOptions(workers=opts.workers, port=opts.port, mysql_dsn=opts.mysql,
                              php_ini=dict(opts.php_ini), extensions=settings.extensions(),
                              instrumented_extension=settings.instrumented_extension(),
                              pool_ini=pool_ini, remedy=opts.remedy)
    size = opts.size()
    clock = Phases()
    manifest = _first_manifest(target, run_dir, opts, settings, notes, paths, size, clock)
    return _Capture(target=target, run_dir=run_dir, opts=opts, say=say, settings=settings, paths=paths,
                    cap=cap, pool_ini=pool_ini, resolve_ports=resolve_ports, stack_opts=stack_opts,
                    size=size, manifest=manifest, clock=clock)


def _first_manifest(target: Target, run_dir: Path, opts: ProfileOptions, settings: CaptureSettings,
                    notes: list[str], paths: list[str], size: dict, clock: Phases) -> dict:
    """The manifest's sections known before the capture; the phases fill in the rest."""
    return {
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "lockdown_version": __version__, "command": redacted_argv(),
        "target": {"name": target.name, "directory": str(target.directory),
                   # the changes the copy served was patched with (run --on-top-of/--patch, verify)
                   **({"applied": opts.applied} if opts.applied else {})},
        "capture": {**settings.to_json(), "notes": notes},
        "driver": {**size, "concurrency": opts.concurrency, "workers": opts.workers, "urls": paths,
                   "warmup_requests": opts.warmup_requests},
        "clock": {"name": "CLOCK_MONOTONIC", "unit": "ns",
                  "note": "request log (hrtime), perf (-k CLOCK_MONOTONIC), Excimer and the "
                          "driver share it"},
        "run_dir": str(run_dir),
        "phases": clock.timings,        # filled in as they run
    }


def _configure_capture(run: _Capture) -> None:
    """The prepend's configuration, with the marker connection to the database once the stack
    has one."""
    stack = run.stack
    if "queries" in run.settings.collect:
        db = stack.db
        # a private server's marker login is the workers' own, by socket (mariadb.py)
        user, password = (stack.mysql.workers_user, "") if stack.mysql else (db.user, db.password)
        run.db_cfg = {"host": "localhost" if db.socket else db.host, "port": db.port,
                      "socket": db.socket or "", "user": user, "password": password,
                      "resolve_ports": run.resolve_ports, "app_db": stack.db_name}
    request_log.write_config(run.cap, run.settings, run.db_cfg)


def _served(run: _Capture) -> None:
    """The phases while the stack serves, with the user's hooks between them."""
    stack, opts, clock, say = run.stack, run.opts, run.clock, run.say
    served_from = time.time()       # files the app writes from its first request on
    clock.run("sanity", _sanity, run)
    run_hook(stack, "before-warmup", opts.hooks.get("before-warmup"), say, **run.hook_env)
    warmed_from = time.time()
    clock.run("warmup", _warmup, run, served_from, warmed_from)
    run_hook(stack, "after-warmup", opts.hooks.get("after-warmup"), say, **run.hook_env)
    _plan_slices(run)
    if opts.overhead_check:
        clock.run("baseline", _baseline_slice, run)
    clock.run("capture", _capture, run)
    if opts.overhead_check:
        clock.run("baseline", _last_baseline, run)
    run_hook(stack, "after-capture", opts.hooks.get("after-capture"), say, **run.hook_env)
    clock.run("environment", _environment, run)


def _sanity(run: _Capture) -> None:
    sanity_check(run.stack)
    run.say(f"[sanity] ok: {run.target.sanity_url} returned 200 with {run.target.sanity_expect!r}")


def _warmup(run: _Capture, served_from: float, warmed_from: float) -> None:
    """Requests one at a time (which also set Excimer's period when it is automatic), the
    xhprof pool's own warmup, and OPcache settled."""
    stack, opts, say = run.stack, run.opts, run.say
    warm = shown_drive(say, "warmup, one at a time", stack.base_url, run.paths, 1,
                       requests=opts.warmup_requests)
    say(f"[warmup] {opts.warmup_requests} requests, one at a time: {warm.status_counts()}")
    if "excimer" in run.settings.collect and run.settings.excimer_period_ms is None:
        _auto_excimer_period(run, warm)
    if run.xhprof_pool:
        # The xhprof pool is its own php-fpm master with its own opcode cache: unwarmed,
        # its first requests compile every file, and that (not xhprof) was most of the
        # capture's measured cost on WordPress.
        distinct = list(dict.fromkeys(run.paths))
        warm_x = shown_drive(say, "warmup of the xhprof pool", stack.base_url, distinct, 1,
                             requests=2 * len(distinct), xhprof=True)
        say(f"[warmup] xhprof pool: {len(warm_x.requests)} requests: {warm_x.status_counts()}")
    settle_opcache(stack, say, run.paths, served_from, warmed_from, xhprof=run.xhprof_pool)


def _auto_excimer_period(run: _Capture, warm: DriveResult) -> None:
    """Excimer's period from the warmup's latencies, written to the prepend's config and the
    manifest."""
    latencies = [(r.client_end_ns - r.client_start_ns) / 1e6 for r in warm.requests
                 if r.error is None]
    run.settings = replace(run.settings, excimer_period_ms=auto_excimer_period(latencies))
    request_log.write_config(run.cap, run.settings, run.db_cfg)
    run.manifest["capture"].update(excimer_period_ms=run.settings.excimer_period_ms,
                                   excimer_period_auto=True)
    run.say(f"[warmup] Excimer period {run.settings.excimer_period_ms:g} ms: about "
            f"{EXCIMER_SAMPLES_PER_REQUEST} samples per request of the warmup's median latency")


def _plan_slices(run: _Capture) -> None:
    """The requests to instrument, and the timed pass cut into its slices.

    The uncollected baseline runs before and after the capture, so that drift - a database
    still warming up, a noisy neighbour - does not bias the ratio. With `overhead_slices` K > 1
    the capture is cut into K slices with uncollected slices of the same size between them
    (perf and the slow log paused), and each capture slice is compared with its two
    neighbours: the host's speed, which swings by tens of percent within a minute on a shared
    VM, then cancels out."""
    size, opts = run.size, run.opts
    run.every = run.settings.xhprof_every if "xhprof" in run.settings.collect else 0
    run.instrumented = instrumented_paths(run.paths, size["requests"], run.every) if "requests" in size else []
    timed_size = ({"requests": max(1, size["requests"] - len(run.instrumented))} if "requests" in size
                  else size)
    run.k = max(1, opts.overhead_slices) if opts.overhead_check else 1
    run.parts = _split(timed_size, run.k)
    run.base_part = _half(run.parts[0]) if run.k == 1 else run.parts[0]


def _baseline_slice(run: _Capture) -> None:
    """One uncollected slice, with the host's speed and CPU use over it."""
    probe = SpeedProbe()
    run.speeds["baseline"].append(probe)
    n, k = len(run.baseline) + 1, run.k
    before = cpu.snapshot()
    r = shown_drive(run.say, f"uncollected baseline ({n}/{k + 1})", run.stack.base_url, run.paths,
                    run.opts.concurrency, probe=probe, **run.base_part)
    run.cpus["baseline"].append(cpu.delta(before, cpu.snapshot()))
    run.baseline.append(r)
    run.say(f"[baseline] {len(r.requests)} requests at concurrency {run.opts.concurrency}, nothing "
            f"collected ({n}/{k + 1}): {r.rps:.1f} req/s")


def _last_baseline(run: _Capture) -> None:
    _baseline_slice(run)
    run.manifest["baseline"] = _drive_summary(DriveResult.joined(run.baseline))


def _capture(run: _Capture) -> None:
    """The collectors on, the timed slices (with uncollected ones between them), then the
    xhprof-instrumented requests; the request log settled."""
    stack, settings, say = run.stack, run.settings, run.say
    workers = stack.fpm.worker_pids()
    run.perf = PerfRecorder(stack.procs, run.run_dir / "perf", settings.perf_freq)
    run.events = engine_events.EventRecorder(stack.procs, run.run_dir / "perf")
    run.workers = workers
    footprint = server_status.own_footprint(stack.db) if stack.db else {}
    with contextlib.ExitStack() as during:
        slow, collectors = _start_collectors(run, during, workers)
        for i, part in enumerate(run.parts):
            _capture_slice(run, i, part, collectors, footprint)
        # the capture slices only, not the uncollected ones between
        run.manifest["host_cpu"] = cpu.summarize(cpu.summed(run.cpus["capture"]))
        run.captured = captured = DriveResult.joined(run.chunks)
        say(f"[capture] {len(captured.requests)} requests at concurrency {run.opts.concurrency}: "
            f"{captured.rps:.1f} req/s, statuses {captured.status_counts()}")
        _instrumented_requests(run)
    profiled = run.profiled
    request_log.settle(run.cap, len(captured.requests) + (len(profiled.requests) if profiled else 0))
    run.manifest["driver"].update(_drive_summary(captured))
    if profiled is not None:
        run.manifest["driver"]["instrumented"] = {**_drive_summary(profiled),
                                                  "note": "sent after the timed pass; not in its rps"}
    run.slow_plans = slow is not None and slow.plans
    if slow is not None:
        say("[capture] MariaDB settings restored")


def _start_collectors(run: _Capture, during: contextlib.ExitStack, workers: list[int]) -> tuple:
    """The slow log and perf on, each stopped when `during` closes; (the slow log's capture or
    None, the collectors an overhead slice pauses)."""
    stack, settings, say = run.stack, run.settings, run.say
    slow = None
    if "queries" in settings.collect:
        slow = during.enter_context(SlowLogCapture(stack.db, run.run_dir, private=not run.opts.mysql))
        say(f"[capture] slow log on at {stack.db.where()} (settings restored afterwards)")
    if "perf" in settings.collect:
        run.perf.start(workers, controlled=run.k > 1)
        during.callback(run.perf.stop)
        say(f"[capture] perf record at {settings.perf_freq} Hz on workers "
            f"{', '.join(map(str, workers))}")
        run.events.start(workers, controlled=run.k > 1)
        during.callback(run.events.stop)
        say(f"[capture] engine events counted: {', '.join(run.events.events) or 'none'}"
            + "".join(f"; {n}" for n in run.events.notes))
    collectors = ([slow] if slow is not None else []) + \
        ([run.perf, run.events] if "perf" in settings.collect else [])
    return slow, collectors


def _capture_slice(run: _Capture, i: int, part: dict, collectors: list, footprint: dict) -> None:
    """Capture slice `i` (the collectors resumed after the first), with the host's speed and
    CPU use and the database server's counters over it; then, but after the last, the
    collectors paused for an uncollected slice."""
    stack, k = run.stack, run.k
    if i:
        for c in collectors:
            c.resume()
    probe = SpeedProbe()
    run.speeds["capture"].append(probe)
    status_before = server_status.read_status(stack.db) if stack.db else None
    before = cpu.snapshot()
    run.chunks.append(shown_drive(run.say, "capture" if k == 1 else f"capture ({i + 1}/{k})",
                                  stack.base_url, run.paths, run.opts.concurrency, capture=True,
                                  probe=probe, first_seq=sum(len(c.requests) for c in run.chunks),
                                  **part))
    run.cpus["capture"].append(cpu.delta(before, cpu.snapshot()))
    if status_before is not None:
        run.status.append(server_status.without(
            server_status.difference(status_before, server_status.read_status(stack.db)), footprint))
    if i < k - 1:
        for c in collectors:
            c.pause()
        _baseline_slice(run)


def _instrumented_requests(run: _Capture) -> None:
    """The xhprof-instrumented requests, one at a time after the timed ones."""
    every = run.every
    if every and "duration" in run.size:
        run.instrumented = instrumented_paths(run.paths, len(run.captured.requests), every)
    if not run.instrumented:
        return
    run.profiled = shown_drive(run.say, "xhprof-instrumented requests", run.stack.base_url,
                               run.instrumented, 1, requests=len(run.instrumented), capture=True,
                               xhprof=True, first_seq=len(run.captured.requests))
    run.say(f"[capture] {len(run.instrumented)} xhprof-instrumented requests (1 in {every} of "
            f"each URL, and at least one of each), one at a time after the timed ones: "
            f"{run.profiled.status_counts()}")


def _environment(run: _Capture) -> None:
    """What the capture ran on, into the manifest: versions, PHP's extensions and settings,
    the host, the database server's settings and counters."""
    stack, manifest = run.stack, run.manifest
    facts = php_facts(stack.php)
    manifest["versions"] = {**versions(), "mariadb": stack.db.version if stack.db else None,
                            "perf": first_line([tool("perf"), "--version"]),
                            "lockdown": __version__}
    manifest["php"] = {"extensions": facts.get("extensions"),
                       "zend_extensions": facts.get("zend_extensions"),
                       "ini": facts.get("ini"),
                       "internal_functions": facts.get("internal_functions"),
                       "internal_classes": facts.get("internal_classes"),
                       "pool": {**run.pool_ini,
                                "instrumented_extension": run.settings.instrumented_extension()},
                       "overrides": stack.php.overrides}
    manifest["host"] = {"node": platform.node(), "cpus": os.cpu_count(),
                        "kernel": platform.release(), "machine": platform.machine()}
    manifest["database"] = ({"where": stack.db.where(), "name": stack.db_name,
                             "private": not run.opts.mysql,
                             "variables": read_settings(stack.db, STATEMENT_MEMORY),
                             # how the slow log's statement texts quote (slowlog.parse)
                             "sql_mode": read_settings(stack.db, ("sql_mode",)).get("sql_mode", ""),
                             "status": {"requests": len(run.captured.requests),
                                        "counters": server_status.summed(run.status)}} if stack.db else None)


def _assemble(run: _Capture, writer: BundleWriter) -> None:
    """The overhead, the request log checked against what was sent, and each collector's raw
    output written into the bundle."""
    manifest = run.manifest
    if "baseline" in manifest and manifest["baseline"]["rps"] > 0:
        manifest["overhead"] = _overhead(run.chunks, run.baseline, run.speeds, run.cpus)
    sent = run.captured.requests + (run.profiled.requests if run.profiled is not None else [])
    records, manifest["requests"] = assemble.requests(run.cap.out / "requests.jsonl", sent, writer)
    check_logged(sent, {r.id for r in records}, run.stack.fpm.error_log)
    manifest["collected"] = _collected(run, records, writer)


def _collected(run: _Capture, records: list, writer: BundleWriter) -> dict:
    """Each collector's records written through `writer`; their counts, by collector."""
    collect, out, stack, say = run.settings.collect, run.cap.out, run.stack, run.say
    collected = {}
    if "perf" in collect:
        say("[assemble] perf script (DWARF unwinding)")
        text = run.run_dir / "perf" / "script.txt"
        with as_reporter(say).counted("perf script (DWARF unwinding)", None):
            script(stack.procs, run.perf.data, text)
        collected["perf"] = assemble.perf(run.perf.data, text, build_ids(stack.procs, run.perf.data),
                                          records, writer)
        collected["perf"]["events"] = _engine_events(run, records, writer)
    if "excimer" in collect:
        collected["excimer"] = assemble.excimer(out / "excimer.jsonl", records, writer)
    if "xhprof" in collect:
        collected["xhprof"] = assemble.xhprof(out / "xhprof", records, writer)
    if "queries" in collect:
        sql_mode = (run.manifest.get("database") or {}).get("sql_mode", "")
        collected["queries"] = assemble.statements(run.run_dir / "capture" / "slow.log", records,
                                                   run.opts.concurrency, writer, plans=run.slow_plans,
                                                   sql_mode=sql_mode)
    return collected


def _engine_events(run: _Capture, records: list, writer: BundleWriter) -> dict:
    """The engine events counted alongside perf (collectors/engine_events.py), per request."""
    ev = run.events
    if ev is None or not ev.events:
        return ev.summary() if ev is not None else {"events": [], "notes": ["not started"]}
    text = run.run_dir / "perf" / "events.txt"
    engine_events.script(run.stack.procs, ev.data, text)
    return engine_events.assemble(text, ev.summary(), run.workers, records, writer)
