"""The engine's caches during the capture: is OPcache missing, full or restarting, is the
realpath cache full? The configuration says how big a cache may grow; only the running workers
say whether the application fits. The prepend records both caches as each timed request leaves
them (`RequestRecord.engine`, prepend.php), with OPcache's lookup counters at the request's
start, so each request's own hits and misses are a difference.

At concurrency 1 (the capture's default) a request's difference is its own lookups; with
overlapping requests it also holds its neighbours'. Counters reset when OPcache restarts: such a
request's lookups are unknown and left out, and the restart is counted. xhprof-instrumented
requests run in a pool of their own, with an OPcache of its own: left out."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..bundle.model import RequestRecord
from ..paths import run_copies
from ..php_ini import size_bytes

REALPATH_FULL_PCT = 90.0       # of realpath_cache_size in use: full (PHP stops adding entries)
NEARLY_EMPTY_PCT = 1.0         # free shared memory / interned strings below this %: exhausted
_RESTARTS = ("opcache_oom_restarts", "opcache_hash_restarts", "opcache_manual_restarts")


@dataclass
class OpcacheState:
    """OPcache as the timed requests saw it. Sizes are the last request's (the steadiest);
    lookups and misses are means per request over the requests whose counters held."""
    enabled: bool
    requests: int                       # timed requests whose lookups are known
    lookups_per_request: float          # hits + misses: the scripts each request included
    misses_per_request: float           # scripts compiled by each request
    requests_with_misses: int
    misses_by_url: dict[str, float]     # per request, URLs with misses only
    restarts: dict[str, int]            # during the capture: oom, hash, manual
    cache_full: bool
    cached_scripts: int
    cached_keys: int
    max_cached_keys: int
    used_memory: int
    free_memory: int
    wasted_memory: int
    interned_size: int
    interned_used: int
    interned_free: int
    blacklist_misses_per_request: float
    jit_buffer_size: int | None = None
    jit_buffer_free: int | None = None
    # included files OPcache did not hold after a request that missed -> in how many timed
    # requests (at most UNCACHED_SHOWN, most frequent first); paths relative to the app tree
    uncached: dict[str, int] = field(default_factory=dict)
    # of those, the ones modified within opcache.file_update_protection before the request:
    # OPcache will not cache them (rewritten on every request)
    uncached_young: dict[str, int] = field(default_factory=dict)

    @property
    def uncached_old(self) -> list[str]:
        """Uncached scripts that were not new: they did not fit, or are excluded."""
        return [path for path in self.uncached if path not in self.uncached_young]

    @property
    def keys_full(self) -> bool:
        """Every key of the hash table is taken (opcache.max_accelerated_files)."""
        return self.max_cached_keys > 0 and self.cached_keys >= self.max_cached_keys

    @property
    def memory_full(self) -> bool:
        """Shared memory is out (opcache.memory_consumption), or ran out during the capture."""
        total = self.used_memory + self.free_memory + self.wasted_memory
        return bool(self.restarts.get("oom")) or (
            total > 0 and 100.0 * self.free_memory / total < NEARLY_EMPTY_PCT)

    @property
    def interned_full(self) -> bool:
        """The interned strings buffer is out (opcache.interned_strings_buffer)."""
        return self.interned_size > 0 and 100.0 * self.interned_free / self.interned_size < NEARLY_EMPTY_PCT


@dataclass
class RealpathState:
    """The workers' realpath caches: the largest seen, against realpath_cache_size."""
    bytes_max: int
    limit_bytes: int | None
    workers: int

    @property
    def used_pct(self) -> float | None:
        return 100.0 * self.bytes_max / self.limit_bytes if self.limit_bytes else None

    @property
    def full(self) -> bool:
        return self.used_pct is not None and self.used_pct >= REALPATH_FULL_PCT


@dataclass
class GcState:
    """PHP's cycle collector during the timed requests (gc_status()): each run scans the
    possible roots (threshold: 10,001 at first, raised by PHP when a run frees little)."""
    requests: int                       # timed requests whose counters are known
    runs_per_request: float
    collected_per_request: float        # values freed by the runs
    requests_with_runs: int
    threshold: int                      # the last request's
    roots_max: int                      # most possible roots left in the buffer at a request's end


@dataclass
class EngineState:
    requests: int                       # timed requests with an engine record
    realpath: RealpathState
    opcache: OpcacheState | None = None  # None: OPcache not loaded, or its API restricted
    notes: list[str] = field(default_factory=list)
    gc: GcState | None = None           # None: a bundle from before it was recorded

    def to_json(self) -> dict:
        out = {"requests": self.requests,
               "realpath": {"bytes_max": self.realpath.bytes_max, "limit_bytes": self.realpath.limit_bytes,
                            "used_pct": _round(self.realpath.used_pct), "full": self.realpath.full,
                            "workers": self.realpath.workers},
               "opcache": None, "notes": self.notes,
               "gc": None if self.gc is None else _rounded(self.gc)}
        o = self.opcache
        if o is not None:
            out["opcache"] = _rounded(o)
            out["opcache"].update(keys_full=o.keys_full, memory_full=o.memory_full, interned_full=o.interned_full)
        return out


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 1)


def _rounded(record) -> dict:
    """A state's fields as JSON, floats to two places."""
    return {k: (round(v, 2) if isinstance(v, float) else v) for k, v in vars(record).items()}


UNCACHED_SHOWN = 10


def summarize(requests: list[RequestRecord], ini: dict | None, app_root: str | None = None) -> EngineState | None:
    """The engine state of the timed requests, in capture order; None when none has one
    (a bundle written before lockdown recorded it). `app_root`: the served app tree, which
    script paths are shown relative to."""
    timed = sorted((r for r in requests if not r.instrumented and r.engine), key=lambda r: (r.seq is None, r.seq or 0))
    if not timed:
        return None
    ini = ini or {}
    realpath = RealpathState(bytes_max=max(r.engine.get("realpath_cache_bytes", 0) for r in timed),
                             limit_bytes=size_bytes(ini.get("realpath_cache_size")),
                             workers=len({r.pid for r in timed}))
    state_gc = _gc([r for r in timed if "gc_runs_at_start" in r.engine])
    with_opcache = [r for r in timed if "opcache_hits" in r.engine]
    state = EngineState(requests=len(timed), realpath=realpath, gc=state_gc)
    if with_opcache:
        state.opcache = _opcache(with_opcache)
        state.opcache.uncached = uncached_scripts(with_opcache, app_root)
        state.opcache.uncached_young = uncached_scripts(with_opcache, app_root, young=True)
        if state.opcache.requests < len(with_opcache):
            state.notes.append(f"{len(with_opcache) - state.opcache.requests} request(s) left out of the lookup "
                               "counts: OPcache restarted during them, or they lack the start counters")
    return state


def _opcache(timed: list[RequestRecord]) -> OpcacheState:
    lookups: list[int] = []
    misses: list[int] = []
    blacklisted: list[int] = []
    by_url: dict[str, list[int]] = {}
    for r in timed:
        e = r.engine
        restarts = sum(e.get(k, 0) for k in _RESTARTS)
        if "opcache_hits_at_start" not in e or restarts != e.get("opcache_restarts_at_start"):
            continue
        hits = e["opcache_hits"] - e["opcache_hits_at_start"]
        miss = e["opcache_misses"] - e.get("opcache_misses_at_start", e["opcache_misses"])
        if hits < 0 or miss < 0:
            continue            # counters reset (a restart that had not been counted yet)
        lookups.append(hits + miss)
        misses.append(miss)
        blacklisted.append(max(0, e.get("opcache_blacklist_misses", 0) - e.get("opcache_blacklist_misses_at_start", 0)))
        by_url.setdefault(r.url or r.uri, []).append(miss)
    first, last = timed[0].engine, timed[-1].engine
    # between the end of the first timed request and the end of the last
    restarts = {k.split("_")[1]: last.get(k, 0) - first.get(k, 0) for k in _RESTARTS}
    n = len(lookups)

    def mean(xs: list) -> float:
        return sum(xs) / len(xs) if xs else 0.0

    return OpcacheState(
        enabled=bool(last.get("opcache_enabled")), requests=n,
        lookups_per_request=mean(lookups), misses_per_request=mean(misses),
        requests_with_misses=sum(1 for m in misses if m > 0),
        misses_by_url={u: round(mean(ms), 2) for u, ms in sorted(by_url.items()) if any(ms)},
        restarts={k: v for k, v in restarts.items() if v},
        cache_full=bool(last.get("opcache_cache_full")),
        cached_scripts=last.get("opcache_cached_scripts", 0), cached_keys=last.get("opcache_cached_keys", 0),
        max_cached_keys=last.get("opcache_max_cached_keys", 0),
        used_memory=last.get("opcache_used_memory", 0), free_memory=last.get("opcache_free_memory", 0),
        wasted_memory=last.get("opcache_wasted_memory", 0),
        interned_size=last.get("opcache_interned_size", 0), interned_used=last.get("opcache_interned_used", 0),
        interned_free=last.get("opcache_interned_free", 0),
        blacklist_misses_per_request=mean(blacklisted),
        jit_buffer_size=last.get("opcache_jit_buffer_size"), jit_buffer_free=last.get("opcache_jit_buffer_free"))


def _gc(timed: list[RequestRecord]) -> GcState | None:
    if not timed:
        return None
    runs = [max(0, r.engine["gc_runs"] - r.engine["gc_runs_at_start"]) for r in timed]
    freed = [max(0, r.engine.get("gc_collected", 0) - r.engine.get("gc_collected_at_start", 0)) for r in timed]
    return GcState(requests=len(timed), runs_per_request=sum(runs) / len(runs),
                   collected_per_request=sum(freed) / len(freed), requests_with_runs=sum(1 for n in runs if n),
                   threshold=timed[-1].engine.get("gc_threshold", 0),
                   roots_max=max(r.engine.get("gc_roots", 0) for r in timed))


def uncached_scripts(timed: list[RequestRecord], app_root: str | None, young: bool = False) -> dict[str, int]:
    """Script -> timed requests that left it uncached (the prepend lists them after a miss);
    `young`: only those modified within opcache.file_update_protection before the request."""
    counts: dict[str, int] = {}
    prefix = app_root.rstrip("/") + "/" if app_root else None
    for r in timed:
        for path in set((r.uncached_young if young else r.uncached_scripts) or ()):
            shown = path[len(prefix):] if prefix and path.startswith(prefix) else path
            counts[shown] = counts.get(shown, 0) + 1
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:UNCACHED_SHOWN]
    return dict(top)


def app_tree(manifest: dict) -> str | None:
    """The app tree the capture served (RUN/app, paths.run_copies), from the manifest."""
    run_dir = manifest.get("run_dir")
    return str(run_copies(Path(run_dir))[0]) if run_dir else None
