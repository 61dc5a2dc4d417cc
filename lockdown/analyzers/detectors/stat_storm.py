"""stat-storm: path lookups and stat() calls on every request that the engine's caches should
absorb -- a small realpath cache, or OPcache re-checking every included file's timestamp on
every include (docs/pathologies.md section 5).

Mechanism: PHP resolves the path of every include/require, realpath() and (with open_basedir)
every file function through its realpath cache, which remembers each path component for
`realpath_cache_ttl` seconds in `realpath_cache_size` bytes; when the cache is too small for
the application's files, entries are evicted and each lookup lstat()s every component again.
With `opcache.validate_timestamps=1` and `opcache.revalidate_freq=0` OPcache stat()s each
included file on every include to see whether it changed. Both turn one request into hundreds
or thousands of stat/lstat/access system calls. (file_exists/is_file/... themselves always
reach the kernel: PHP's stat cache holds one path; such calls are the application's to
memoize, and the evidence says how many there are.)

This detector owns the OPcache timestamp check (`validate_timestamps=1` with
`revalidate_freq=0`); the opcache detector does not report it.

Signature: a configuration problem AND evidence of the cost.
Configuration (manifest php.ini, effective values; the workers' fill level when the bundle has
it, `engine_state.py`):
- `realpath_cache_size` below `min_realpath_cache_size_kb` (PHP's default is 4096K) -- unless
  the workers' caches never filled it (then it costs nothing: not flagged) -- or any size the
  workers filled (>= 90%: PHP adds no entry to a full cache; the fix doubles it), and/or
- OPcache enabled with `opcache.validate_timestamps=1` and `opcache.revalidate_freq=0`.
Cost (either), of the work these settings act on:
- calls: at least `min_stat_calls_per_request` realpath() calls in one profiled request (each
  goes through the realpath cache), or, with `open_basedir` set, stat-family builtins
  (file_exists, is_file, is_dir, is_link, is_readable, is_writable/is_writeable,
  is_executable, file*time, filesize, fileperms, fileinode, fileowner, filegroup, filetype,
  stat, lstat, realpath: each resolves its path to check it), excluding calls made by
  directory walkers (below). Without open_basedir, file_exists() and the like stat the file
  whatever the settings: they are listed in the evidence as the application's, not counted;
- native: at least `min_stat_share_pct` % of the on-CPU samples in path resolution or stat
  system calls (php_stat, tsrm_realpath, virtual_file_ex, realpath_cache_*, zend_resolve_path,
  php_resolve_path, expand_filepath, php_check_open_basedir, the kernel's stat/access/readlink
  entry points) -- samples inside a directory read (opendir/readdir/getdents/glob/scandir) left
  out, and samples inside a stat-family builtin (php_stat, zif_file_exists...) that resolve no
  path (no open_basedir): helper-24's false positive, 1,200 file_exists() a request and a full
  16K cache, was 'high, ~99.6%' from 7 such samples. (subsystems.toml's fs-io also holds socket
  reads of mysqlnd, so it is not used.)

Boundary with fs-scan (directory WALKS repeated on every request are fs-scan's): a function
that calls opendir/readdir/closedir/rewinddir/scandir/glob/dir() or a directory iterator
method in a profiled request is a walker, and its own stat-family calls (the per-entry is_dir
of file_scan_directory) are not counted here. A profiled request with at least
`max_dir_ops_per_request` walk calls makes the native evidence inadmissible (its stat samples
are the walk's); only the call evidence, walkers excluded, can then fire.

Severity: by share of request time, high >= 10, medium >= 3, else low (low too when only
xhprof counts are available). share_pct: the native stat share x the timed requests'
CPU/wall ratio, else the stat builtins' exclusive xhprof time over the instrumented
requests' wall time.

Remediation (`ini`), only the lines for the problems found: `realpath_cache_size=4096K` and
`realpath_cache_ttl=600`; `opcache.revalidate_freq=60` (changes seen within a minute), or
`opcache.validate_timestamps=0` for deploys that replace the code and reload php-fpm (then
nothing is re-checked; a code change needs a reload or opcache_reset()).

Not flagged: many stat calls with a healthy configuration (the application's own calls; see
hot-builtins / repeated-call); directory walks (fs-scan); `realpath_cache_ttl` alone.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from ..engine_state import RealpathState
from ..findings import Evidence, Finding, Remediation, severity_for
from .context import Context
from .hot_builtins import (example_requests, ini_bytes, ini_flag, ini_int, ini_value, php_version, profiled,
                           request_share, sample_share, share_by_url, sources)
from .fs_scan import is_walk_call   # the walk calls are fs-scan's
from .opcache import _loaded as opcache_loaded

ID = "stat-storm"
SUBJECT = None  # one finding at most
STAT_CALLS = frozenset((
    "file_exists", "is_file", "is_dir", "is_link", "is_readable", "is_writable", "is_writeable",
    "is_executable", "filemtime", "filectime", "fileatime", "filesize", "fileperms", "fileinode",
    "fileowner", "filegroup", "filetype", "stat", "lstat", "realpath"))
_STAT_FRAME = re.compile(
    r"^(php_stat|tsrm_realpath|virtual_file_ex|realpath_cache_|zend_resolve_path|php_resolve_path|"
    r"expand_filepath|php_check_open_basedir|__do_sys_newfstatat|__do_sys_newstat|__do_sys_newlstat|"
    r"__do_sys_statx|do_statx|vfs_statx|vfs_fstatat|do_faccessat|do_readlinkat|__x64_sys_(newfstatat|newstat|"
    r"newlstat|statx|access|faccessat2?|readlink)\b)")
_WALK_FRAME = re.compile(r"^(_?php_stream_opendir|_?php_stream_readdir|_?php_stream_scandir|php_plain_files_dirstream|"
                         r"__opendir|__readdir|__GI___readdir|__GI___getdents|__getdents|iterate_dir|"
                         r"__x64_sys_getdents|php_glob|glob(64)?$|spl_filesystem_dir)")


# Path resolution through the realpath cache (include/require, realpath(), open_basedir checks)
_RESOLVE_FRAME = re.compile(r"^(tsrm_realpath|virtual_file_ex|realpath_cache_|zend_resolve_path|php_resolve_path|"
                            r"expand_filepath|php_check_open_basedir)")
# A stat-family builtin's own work (file_exists, is_file, filemtime...: php_stat, or the handler
# named from PHP's function tables, symbols.py): it reaches the kernel whatever the settings
_APP_STAT_FRAME = re.compile(r"^(php_stat$|zif_(" + "|".join(sorted(STAT_CALLS - {"realpath"})) + r")$)")


def stat_sample(frames: list) -> bool:
    """A native sample in path resolution or a stat-family system call that the engine's caches
    could absorb: not in a directory read (fs-scan's), and not inside a stat-family builtin
    unless that builtin resolves its path (open_basedir): file_exists() and the like stat the
    file every time whatever the realpath cache holds (PHP's stat cache keeps one path), so
    their samples are the application's calls, not evidence for these settings."""
    names = [f[1] for f in frames]
    if not any(_STAT_FRAME.match(n) for n in names) or any(_WALK_FRAME.match(n) for n in names):
        return False
    return not (any(_APP_STAT_FRAME.match(n) for n in names) and not any(_RESOLVE_FRAME.match(n) for n in names))


def request_counts(ctx: Context, rid: str) -> dict:
    """One profiled request: stat calls (walkers' own left out), walk calls, the walkers."""
    edges = ctx.xhprof_edges.get(rid, {})
    walkers = {p for (p, c) in edges if p != c and is_walk_call(c)}
    stats: Counter = Counter()
    every: Counter = Counter()          # all calls of each stat builtin, walkers' included
    by_walkers = 0
    walk = 0
    excl_us = 0.0
    for (p, c), e in edges.items():
        if p == c:
            continue                    # tideways' double count of a builtin
        if is_walk_call(c):
            walk += e["ct"]
        if c.lower() in STAT_CALLS:
            every[c] += e["ct"]
            if p in walkers:
                by_walkers += e["ct"]
            else:
                stats[c.lower()] += e["ct"]
    totals = ctx.xhprof.get(rid, {})
    resolving_us = 0.0
    for f, n in every.items():
        # the exclusive time of the non-walker calls, in proportion to their count
        mine = sum(e["ct"] for (p, c), e in edges.items() if c == f and p != c and p not in walkers)
        if n and f in totals:
            excl_us += totals[f]["exclusive_us"] * mine / n
            if f.lower() == "realpath":
                resolving_us += totals[f]["exclusive_us"] * mine / n
    return {"stats": stats, "stat_calls": sum(stats.values()), "by_walkers": by_walkers, "walk_calls": walk,
            "walkers": sorted(walkers), "stat_exclusive_us": excl_us, "resolving_calls": stats["realpath"],
            "resolving_exclusive_us": resolving_us}


@dataclass
class Config:
    """The configuration problems: the realpath cache ("small", "full" or None) and OPcache's
    per-include timestamp check."""
    realpath: str | None
    cache_setting: str | None       # realpath_cache_size as written, and the size proposed (K)
    cache_kb_new: int | None
    min_cache_kb: int
    ttl_low: bool                   # realpath_cache_ttl below 600 (raised with the cache)
    used: RealpathState | None      # the workers' fill level
    revalidate: bool                # validate_timestamps=1 with revalidate_freq=0


def configuration(ctx: Context) -> Config | None:
    """What is wrong in the configuration, or None: a realpath cache below
    `min_realpath_cache_size_kb` the workers filled (or whose fill is unknown), one of any size
    they filled, and OPcache re-checking every include."""
    min_cache_kb = ctx.threshold(ID, "min_realpath_cache_size_kb")
    cache = ini_bytes(ctx, "realpath_cache_size")
    ttl = ini_int(ctx, "realpath_cache_ttl")
    # the workers' own fill level, when the bundle has it: a small cache the app does not fill
    # costs nothing, and a default-sized one it fills costs as much as a small one
    used = ctx.engine_state.realpath if ctx.engine_state else None
    realpath = new_kb = None
    if cache is not None and cache < min_cache_kb * 1024 and (used is None or used.full):
        realpath, new_kb = "small", max(4096, min_cache_kb)
    elif cache is not None and used is not None and used.full:
        realpath, new_kb = "full", 2 * cache // 1024
    opcache_on = opcache_loaded(ctx) and ini_flag(ctx, "opcache.enable") is not False
    revalidate = (opcache_on and ini_flag(ctx, "opcache.validate_timestamps") is True
                  and ini_int(ctx, "opcache.revalidate_freq") == 0)
    if realpath is None and not revalidate:
        return None
    return Config(realpath, ini_value(ctx, "realpath_cache_size"), new_kb, min_cache_kb,
                  realpath is not None and ttl is not None and ttl < 600, used, revalidate)


@dataclass
class Case:
    """A configuration problem and the cost it shows."""
    config: Config
    settings: dict[str, str]        # the settings shown, as the capture saw them
    basedir: bool                   # open_basedir set: every stat-family call resolves its path
    profiles: list[str]
    counts: dict[str, dict]         # per profiled request (`request_counts`)
    storming: list[str]             # profiled requests with enough resolving calls
    walking: bool                   # a profiled request walks directories: native evidence not used
    cpu: float | None               # on-CPU samples in path resolution / stat system calls, %
    samples: int
    native_ok: bool
    share: float | None
    by_native: bool                 # the share from native samples (else xhprof)
    mean_resolving: int             # realpath() (or, with open_basedir, stat-family) calls per request
    php_version: str
    urls: list[str]
    requests: list[str]
    by_url: dict[str, float]


def decide(ctx: Context) -> list[Case]:
    config = configuration(ctx)
    if config is None:
        return []
    rids = profiled(ctx)
    counts = {rid: request_counts(ctx, rid) for rid in rids}
    # the calls these settings act on: realpath() (through the realpath cache), and, with
    # open_basedir, every stat-family call (each resolves its path to check it)
    basedir = bool((ini_value(ctx, "open_basedir") or "").strip())
    resolving = {rid: counts[rid]["stat_calls"] if basedir else counts[rid]["resolving_calls"] for rid in rids}
    storming = [rid for rid in rids if resolving[rid] >= ctx.threshold(ID, "min_stat_calls_per_request")]
    walking = [rid for rid in rids if counts[rid]["walk_calls"] >= ctx.threshold(ID, "max_dir_ops_per_request")]
    cpu = sample_share(ctx, lambda s: stat_sample(s.frames))
    native_ok = cpu is not None and cpu >= ctx.threshold(ID, "min_stat_share_pct") and not walking
    if not storming and not native_ok:
        return []
    by_native = cpu is not None and not walking
    if by_native:
        share = request_share(ctx, cpu)
    else:
        wall = sum(ctx.wall_us(r) for r in rids)
        key = "stat_exclusive_us" if basedir else "resolving_exclusive_us"
        share = round(100.0 * sum(counts[r][key] for r in rids) / wall, 2) if wall else None
    settings = {k: ini_value(ctx, k) for k in ("realpath_cache_size", "realpath_cache_ttl",
                                               "opcache.validate_timestamps", "opcache.revalidate_freq",
                                               "open_basedir")}
    return [Case(
        config=config, settings={k: v for k, v in settings.items() if v not in (None, "")}, basedir=basedir,
        profiles=rids, counts=counts, storming=storming, walking=bool(walking), cpu=cpu, samples=len(ctx.native),
        native_ok=native_ok, share=share, by_native=by_native,
        mean_resolving=round(sum(resolving.values()) / len(resolving)) if resolving else 0,
        php_version=php_version(ctx),
        urls=sorted({ctx.url_of.get(r, "?") for r in storming}) or sorted(ctx.by_url),
        requests=storming[:5] or example_requests(ctx, lambda s: stat_sample(s.frames)),
        by_url=share_by_url(ctx, lambda s: stat_sample(s.frames)) if ctx.native else {})]


def detect(ctx: Context) -> list[Finding]:
    return [describe(c) for c in decide(ctx)]


# -- description ---------------------------------------------------------------------------------

def describe_problems(config: Config) -> tuple[list[str], list[str], list[str]]:
    """(the problems, their short labels, the ini lines that fix them)."""
    problems, labels, lines = [], [], []
    used = config.used
    fill = (f" and full: a worker held {used.bytes_max / 1024:.1f}K of it"
            if used is not None and used.full else "")
    if config.realpath == "small":
        problems.append(f"realpath_cache_size={config.cache_setting} (below {config.min_cache_kb}K){fill}")
        labels.append(f"realpath cache of {config.cache_setting}")
    elif config.realpath == "full":
        problems.append(f"realpath_cache_size={config.cache_setting}{fill}")
        labels.append(f"realpath cache of {config.cache_setting} full")
    if config.realpath is not None:
        lines.append(f"realpath_cache_size={config.cache_kb_new}K")
        if config.ttl_low:
            lines.append("realpath_cache_ttl=600")
    if config.revalidate:
        problems.append("opcache.validate_timestamps=1 with opcache.revalidate_freq=0 (a stat per include)")
        labels.append("OPcache re-checks every include")
        lines += ["opcache.revalidate_freq=60",
                  "; or, for deploys that replace the code and reload php-fpm (immutable releases):",
                  "; opcache.validate_timestamps=0"]
    return problems, labels, lines


def describe_evidence(c: Case, problems: list[str]) -> list[Evidence]:
    rids, counts, used = c.profiles, c.counts, c.config.used
    evidence = [Evidence("configuration", "; ".join(problems), "manifest php.ini (effective values)")]
    evidence += [Evidence(k, v, "manifest php.ini") for k, v in c.settings.items()]
    if rids:
        per_request = [counts[r]["stat_calls"] for r in rids]
        lo, hi = min(per_request), max(per_request)
        evidence.append(Evidence("stat-family calls per profiled request (directory walkers' own left out)",
                                 lo if lo == hi else f"{lo}..{hi}", sources(rids)))
        top = Counter()
        for r in rids:
            top.update(counts[r]["stats"])
        for f, n in [(f, n) for f, n in top.most_common() if n > 0][:5]:
            evidence.append(Evidence(f"{f} calls per request", round(n / len(rids), 1), sources(rids)))
        walked = sum(counts[r]["by_walkers"] for r in rids)
        if walked:
            evidence.append(Evidence("stat calls made by directory walkers (fs-scan's, not counted)",
                                     round(walked / len(rids), 1), sources(rids)))
    if c.cpu is not None:
        evidence.append(Evidence("on-CPU samples in path resolution / stat system calls", f"{c.cpu:.2f}%"
                                 + (" (not used: a profiled request walks directories)" if c.walking else ""),
                                 f"perf samples of the timed requests ({c.samples})"))
    if used is not None:
        evidence.append(Evidence("realpath cache in use, largest of the workers",
                                 f"{used.bytes_max} bytes of {used.limit_bytes}"
                                 + (f" ({used.used_pct:.0f}%, full)" if used.full else ""),
                                 f"realpath_cache_size() in {used.workers} workers after each timed request"))
    share_source = ("native samples in path resolution/stat system calls x CPU/wall of the timed requests"
                    if c.by_native else (("stat builtins'" if c.basedir else "realpath()'s")
                                         + " exclusive xhprof time over the instrumented requests' wall time"))
    evidence.append(Evidence("share of request time, %", c.share, share_source))
    return evidence


def describe_summary(c: Case, problems: list[str], labels: list[str]) -> str:
    per_request = [c.counts[r]["stat_calls"] for r in c.profiles]
    mean_calls = round(sum(per_request) / len(per_request)) if per_request else None
    basedir, cpu, mean_resolving = c.basedir, c.cpu, c.mean_resolving
    return ("Every request resolves paths and stat()s files that the engine's caches should remember: "
            + "; ".join(problems) + ". "
            + (f"Profiled requests made {mean_resolving} {'stat-family' if basedir else 'realpath()'} calls each, "
               f"each resolving its path{' (open_basedir)' if basedir else ''}" if mean_resolving else "")
            + (f"{'; ' if mean_resolving else ''}{cpu:.1f}% of the on-CPU samples were resolving paths or in "
               "OPcache's timestamp checks (file_exists()-style calls left out)" if cpu is not None and not c.walking
               else "")
            + "."
            + (" A larger realpath cache serves include/require, realpath() and open_basedir lookups from "
               "memory; PHP adds no entry to a full one, so every path it cannot hold is resolved "
               "again, component by component." if labels[0].startswith("realpath") else "")
            + (" A non-zero opcache.revalidate_freq lets OPcache skip the per-include stat." if c.config.revalidate
               else "")
            + (f" Their other {mean_calls - mean_resolving} stat-family calls (file_exists() and the like) reach "
               "the kernel every time whatever these settings: the application's to memoize."
               if mean_calls and not basedir and mean_calls > mean_resolving
               else " Calls such as file_exists() still reach the kernel every time and are the application's "
                    "to memoize." if not basedir else ""))


def describe(c: Case) -> Finding:
    problems, labels, lines = describe_problems(c.config)
    per_request = [c.counts[r]["stat_calls"] for r in c.profiles]
    mean_calls = round(sum(per_request) / len(per_request)) if per_request else None
    used, rids = c.config.used, c.profiles
    return Finding(
        id=ID, title=("Stat storm: " + ", ".join(labels)
                      + (f" ({mean_calls} stat calls per request)" if mean_calls else "")),
        severity=severity_for(c.share, high=10, medium=3), share_pct=c.share,
        summary=describe_summary(c, problems, labels),
        evidence=describe_evidence(c, problems),
        remediations=[Remediation(
            kind="ini", content="\n".join(lines),
            checked=("the settings were read from the configuration lockdown ran the capture with (manifest "
                     "php.ini)"
                     + ("; the workers' realpath caches were full (realpath_cache_size() after each timed request)"
                        if used is not None and used.full else "")
                     + "; the number of stat system calls they save was not measured"),
            steps=[f"systemctl restart php{c.php_version}-fpm"],
            description=("In php.ini or the FPM conf.d, then restart php-fpm."
                         + (" revalidate_freq=60: changed files are seen within a minute. validate_timestamps=0: "
                            "never re-checked, so every deploy must reload php-fpm or call opcache_reset()."
                            if c.config.revalidate else "")))],
        urls=c.urls, requests=c.requests,
        details={"problems": problems,
                 "realpath_cache_used_pct": None if used is None or used.used_pct is None else round(used.used_pct, 1),
                 "stat_calls_per_request": {r: c.counts[r]["stat_calls"] for r in rids},
                 "walk_calls_per_request": {r: c.counts[r]["walk_calls"] for r in rids},
                 "walkers": sorted({w for r in rids for w in c.counts[r]["walkers"]}),
                 "stat_on_cpu_pct": None if c.cpu is None else round(c.cpu, 2),
                 "stat_share_by_url": c.by_url,
                 "native_evidence_used": bool(c.native_ok)})
