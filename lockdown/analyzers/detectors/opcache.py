"""opcache: PHP files compiled again on every request -- the opcode cache missing, disabled, or
too small for the application (docs/pathologies.md section 5).

Mechanism: without OPcache every include/require runs the scanner, parser and compiler
(`compile_file`, `zendparse`, `zend_compile_*`) before executing a line, on every request; a
framework includes hundreds of files. With OPcache on but too small (shared memory, interned
strings buffer, or number of keys: `opcache.max_accelerated_files`) the cache fills up and
new scripts are compiled per request again, or the cache is restarted.

Signature, three cases (the manifest's php facts; native samples for the cost):
1. not loaded: "Zend OPcache" absent from `php.zend_extensions` and `php.extensions`;
2. disabled: loaded, `opcache.enable` off (enabled with `opcache.file_cache_only=1` counts
   as on: the file cache also avoids compiling);
3. on but compiling: enabled, and at least `min_compile_share_pct` % of the on-CPU native
   samples are in the compiler, and at least `min_compile_samples` of them (fewer cannot be told
   from noise: a fast app gives few samples); or the workers' own counters (engine_state.py:
   opcache_get_status() at each timed request's start and end) show at least
   `min_misses_per_request` scripts compiled per timed request. Settings below
   `min_memory_consumption_mb`, `min_interned_strings_buffer_mb`, `min_max_accelerated_files`,
   a non-zero `opcache.max_file_size` or a blacklist are named as suspects. The counters and
   the scripts the workers did not hold after a miss name the cause (`miss_causes`): every key
   taken; shared memory full (or an out-of-memory restart, or old scripts left out with keys to
   spare: no free block large enough); scripts rewritten on every request (changed within
   opcache.file_update_protection). A full interned strings buffer is shown, not a cause. When
   the workers report OPcache disabled although the configuration enables it (a pool's
   php_admin_value), that is case 2.
"In the compiler" means a compiler frame anywhere on the sample's stack (compile_file,
zendparse, lex_scan, zend_compile_*, the optimizer), not only the leaf: the compiler's own
allocations and hash inserts count too (the `compile` subsystem of subsystems.toml, which
counts leaf frames only and also holds OPcache's cache-hit work, is in the details). Samples compiling eval()'d code
(`compile_string` nearer the leaf than any `compile_file`) are left out: OPcache never caches
eval, so they are not this finding (they are in the details).

Severity: cases 1-2: high when the compiling share of request time is >= 10%, else medium;
low when the compiling share of on-CPU samples is below `min_compile_share_pct` (an app too
small for it to matter); medium without native samples to measure. Case 3: high >= 10%,
medium >= 3%, else low (share of request time); found by the counters alone: low when at
least 10 x `min_compile_samples` samples put it under `min_compile_share_pct`, else medium with
no share (too few samples to measure: 2 compile samples of 10 are not 20%). share_pct: the compiling share of on-CPU
samples x the CPU/wall ratio of the timed requests (what the cache would remove, at most),
None without native samples.

Remediation (`ini`): `opcache.enable=1` (case 2), `zend_extension=opcache.so` too (case 1),
and larger `opcache.memory_consumption` / `opcache.interned_strings_buffer` /
`opcache.max_accelerated_files` when below the thresholds (cases 1-2); in case 3 only the limits
the counters show full, doubled (all three, doubled, in a bundle from before the counters were
recorded). Misses with nothing full are files rewritten during requests (named: the prepend
lists the included files OPcache does not hold after a request that missed) or excluded: only
`opcache.max_file_size=0` / an empty blacklist are proposed when they are set, else no patch
(`no_patch`: the fix is the application's).

Not flagged: `opcache.validate_timestamps=1` with `opcache.revalidate_freq=0` (a stat per
include, not a compile: owned by stat-storm); `opcache.enable_cli` (lockdown serves through
php-fpm); the JIT (`opcache.jit`); small settings when nothing is compiled; a pool's
`php_admin_value[opcache.enable]` (not in the CLI's view of the configuration the manifest
records).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..engine_state import OpcacheState
from ..findings import Evidence, Finding, Remediation, severity_for
from ..subsystems import categorise
from .context import Context
from .hot_builtins import (example_requests, ini_flag, ini_int, ini_value, php_version, request_share,
                           sample_share, share_by_url)

ID = "opcache"
SUBJECT = "case"  # what tells its findings apart (findings.SUBJECT_KEYS)

_FILE_ENTRY = re.compile(r"^compile_file(\.|$)")
_EVAL_ENTRY = re.compile(r"^compile_string(\.|$)")
_COMPILER = re.compile(r"^(compile_file(\.|$)|compile_string(\.|$)|zendparse|zendlex|lex_scan|zend_compile_|"
                       r"zend_optimize_script|zend_optimizer_|zend_accel_script_persist|zend_persist_)")


def compiling(frames: list) -> str | None:
    """"file" when the sample is compiling a PHP file, "eval" for eval()'d code, else None.
    Walks from the leaf: the first compile_file/compile_string decides; compiler frames
    without either (unnamed entry) count as a file."""
    seen = False
    for _, symbol, _, _ in frames:
        if _FILE_ENTRY.match(symbol):
            return "file"
        if _EVAL_ENTRY.match(symbol):
            return "eval"
        seen = seen or _COMPILER.match(symbol) is not None
    return "file" if seen else None


def _loaded(ctx: Context) -> bool:
    names = {n.lower() for n in ctx.php.get("zend_extensions") or []}
    names |= {n.lower() for n in ctx.php.get("extensions") or {}}
    return bool(names & {"zend opcache", "opcache"})


SETTINGS = ("opcache.enable", "opcache.file_cache_only", "opcache.memory_consumption",
            "opcache.interned_strings_buffer", "opcache.max_accelerated_files", "opcache.max_file_size",
            "opcache.blacklist_filename", "opcache.file_update_protection", "opcache.validate_timestamps",
            "opcache.revalidate_freq")


@dataclass
class Case:
    """Which case (not-loaded, disabled, compiling), and the numbers behind it."""
    case: str
    sampled: bool                   # compiling seen in the native samples (else by the counters alone)
    severity: str
    share: float | None             # % of request time
    cpu: float | None               # on-CPU samples compiling files, eval()'d code, in the compile subsystem, %
    eval_cpu: float | None
    subsystem: float | None
    samples: int                    # native samples of the timed requests
    perf_collected: bool
    settings: dict[str, str]        # the OPcache settings as the capture saw them
    small: dict[str, tuple]         # setting -> (value, proposed, threshold), below the threshold
    max_file_size: int              # > 0: larger files are never cached
    blacklist: str                  # opcache.blacklist_filename, when set
    state: OpcacheState | None      # the workers' counters
    state_requests: int             # timed requests they come from
    misses: float | None            # scripts compiled per timed request, by the counters
    causes: list[str] | None        # why they missed (`miss_causes`), compiling only
    lines: list[str]                # the ini lines proposed
    file_only: bool | None
    php_version: str
    urls: list[str]
    requests: list[str]
    by_url: dict[str, float]        # compiling share of on-CPU samples per URL


def decide(ctx: Context) -> list[Case]:
    if ctx.php.get("extensions") is None and ctx.php.get("zend_extensions") is None:
        return []                   # no php facts (the capture could not read them): unknown
    min_share, min_samples = ctx.threshold(ID, "min_compile_share_pct"), ctx.threshold(ID, "min_compile_samples")
    loaded = _loaded(ctx)
    enabled = loaded and ini_flag(ctx, "opcache.enable") is not False
    state = ctx.engine_state.opcache if ctx.engine_state else None
    if state is not None and state.requests == 0:
        state = None            # every request's counters were reset by a restart: nothing to count
    if state is not None and enabled and not state.enabled:
        enabled = False         # the workers say so (a pool's php_admin_value the CLI does not see)
    misses = state.misses_per_request if state is not None and state.requests else None

    def is_file(sample) -> bool:
        return compiling(sample.frames) == "file"

    cpu = sample_share(ctx, is_file)
    sampled = False
    if enabled:
        sampled = cpu is not None and cpu >= min_share and cpu * len(ctx.native) / 100 >= min_samples
        if not sampled and (misses is None or misses < ctx.threshold(ID, "min_misses_per_request")):
            return []               # too little compiling, or too few samples to tell from noise
        case = "compiling"
    else:
        case = "not-loaded" if not loaded else "disabled"
    share = request_share(ctx, cpu)
    severity, share = _severity(case, sampled, cpu, share, len(ctx.native), min_share, min_samples)
    small = _small(ctx)
    max_file_size = ini_int(ctx, "opcache.max_file_size") or 0
    blacklist = (ini_value(ctx, "opcache.blacklist_filename") or "").strip()
    causes = (miss_causes(state, max_file_size > 0 or bool(blacklist)) if state is not None else None) \
        if case == "compiling" else None
    return [Case(
        case=case, sampled=sampled, severity=severity, share=share, cpu=cpu,
        eval_cpu=sample_share(ctx, lambda s: compiling(s.frames) == "eval"),
        subsystem=sample_share(ctx, lambda s: categorise(s.frames) == "compile"), samples=len(ctx.native),
        perf_collected="perf" in (ctx.manifest.get("capture") or {}).get("collect", ()),
        settings={k: ini_value(ctx, k) for k in SETTINGS if ini_value(ctx, k) is not None}, small=small,
        max_file_size=max_file_size, blacklist=blacklist, state=state,
        state_requests=ctx.engine_state.requests if ctx.engine_state else 0, misses=misses, causes=causes,
        lines=_lines(ctx, case, small, state, causes, max_file_size, blacklist),
        file_only=ini_flag(ctx, "opcache.file_cache_only"), php_version=php_version(ctx),
        urls=sorted(ctx.by_url), requests=example_requests(ctx, is_file),
        by_url=share_by_url(ctx, is_file) if ctx.native else {})]


def _severity(case: str, sampled: bool, cpu: float | None, share: float | None, samples: int,
              min_share: float, min_samples: int) -> tuple[str, float | None]:
    """(severity, share) by the module docstring's rules."""
    if case == "compiling" and not sampled:
        # compiling by the workers' own counters: measured small (low), or too few samples to
        # measure at all (medium, no share: 2 compile samples of 10 are not 20% of anything)
        measured_small = cpu is not None and cpu < min_share and samples >= 10 * min_samples
        return ("low", share) if measured_small else ("medium", None)
    if case == "compiling":
        return severity_for(share, high=10, medium=3), share
    if cpu is None:
        return "medium", share
    if cpu < min_share:
        return "low", share
    severity = severity_for(share, high=10, medium=3)
    return ("medium" if severity == "low" else severity), share


def _small(ctx: Context) -> dict[str, tuple]:
    """Settings below their threshold: setting -> (value, the size proposed, the threshold)."""
    out = {}
    for key, threshold, floor in (("opcache.memory_consumption", "min_memory_consumption_mb", 256),
                                  ("opcache.interned_strings_buffer", "min_interned_strings_buffer_mb", 16),
                                  ("opcache.max_accelerated_files", "min_max_accelerated_files", 20000)):
        value, least = ini_int(ctx, key), ctx.threshold(ID, threshold)
        if value is not None and value < least:
            out[key] = (value, max(floor, least), least)
    return out


def _lines(ctx: Context, case: str, small: dict, state: OpcacheState | None, causes: list[str] | None,
           max_file_size: int, blacklist: str) -> list[str]:
    """The ini lines that fix the case (none: no setting would, the application's to fix)."""
    if case == "not-loaded":
        return ["zend_extension=opcache.so", "opcache.enable=1",
                f"opcache.memory_consumption={max(256, ctx.threshold(ID, 'min_memory_consumption_mb'))}",
                f"opcache.interned_strings_buffer={max(16, ctx.threshold(ID, 'min_interned_strings_buffer_mb'))}",
                f"opcache.max_accelerated_files={max(20000, ctx.threshold(ID, 'min_max_accelerated_files'))}"]
    if case == "disabled":
        return ["opcache.enable=1"] + [f"{k}={new}" for k, (_, new, _) in small.items()]
    mem, strings, files = (ini_int(ctx, "opcache.memory_consumption"), ini_int(ctx, "opcache.interned_strings_buffer"),
                           ini_int(ctx, "opcache.max_accelerated_files"))
    larger = {"memory": f"opcache.memory_consumption={max(256, 2 * (mem or 128))}",
              "interned": f"opcache.interned_strings_buffer={max(16, 2 * (strings or 8))}",
              "keys": f"opcache.max_accelerated_files={max(20000, 2 * (files or 10000))}"}
    excluding = (["opcache.max_file_size=0"] if max_file_size > 0 else []) + \
        (["opcache.blacklist_filename="] if blacklist else [])
    if not causes and not (state is not None and state.uncached):
        return list(larger.values())            # nothing to tell the limits apart: all, on suspicion
    lines = [larger[c] for c in causes if c in larger]
    if state.uncached_old and not {"keys", "memory"} & set(causes):
        lines += excluding                      # old scripts left out, nothing full: excluded
    return lines


def detect(ctx: Context) -> list[Finding]:
    return [describe(c) for c in decide(ctx)]


# -- description ---------------------------------------------------------------------------------

def describe_suspects(c: Case) -> list[str]:
    """Settings that may keep scripts out of the cache (case compiling)."""
    if c.case != "compiling":
        return []
    out = [f"{k}={old} (below {least})" for k, (old, _, least) in c.small.items()]
    if c.max_file_size > 0:
        out.append(f"opcache.max_file_size={c.settings.get('opcache.max_file_size')} "
                   "(larger files are never cached)")
    if c.blacklist:
        out.append(f"opcache.blacklist_filename={c.settings.get('opcache.blacklist_filename')}")
    return out


def describe_evidence(c: Case, suspects: list[str], no_samples: str) -> list[Evidence]:
    evidence = [Evidence("OPcache", {"not-loaded": "not loaded", "disabled": "loaded, opcache.enable off",
                                     "compiling": "loaded and enabled"}[c.case],
                         "manifest php.zend_extensions and php.ini")]
    for k in ("opcache.enable", "opcache.memory_consumption", "opcache.interned_strings_buffer",
              "opcache.max_accelerated_files"):
        if k in c.settings and (c.case != "not-loaded"):
            evidence.append(Evidence(k, c.settings[k], "manifest php.ini (effective value)"))
    if c.cpu is not None:
        evidence.append(Evidence("on-CPU samples compiling PHP files (compiler frame on the stack)",
                                 f"{c.cpu:.2f}%", f"perf samples of the timed requests ({c.samples})"))
        if c.eval_cpu:
            evidence.append(Evidence("on-CPU samples compiling eval()'d code (not cacheable; not counted)",
                                     f"{c.eval_cpu:.2f}%", "perf samples"))
    else:
        evidence.append(Evidence("compile cost", "not measured", no_samples))
    if c.state is not None and c.case == "compiling":
        evidence += describe_state(c.state, c.state_requests)
    for s in suspects:
        evidence.append(Evidence("possible cause", s, "manifest php.ini"))
    return evidence


def describe_text(c: Case, suspects: list[str], cost: str) -> tuple[str, str, str]:
    """(title, summary, what the proposed lines were checked against)."""
    state, causes, cpu = c.state, c.causes, c.cpu
    below = f" Settings below the usual minimum: {', '.join(suspects)}." if suspects else ""
    if c.case == "compiling" and state is not None:
        named = [describe_cause(x, state) for x in causes or ()]
        counted = (f"the workers' OPcache missed {state.misses_per_request:.1f} of the "
                   f"{state.lookups_per_request:.1f} script lookups (include/require) of each timed request")
        restarts = ", ".join(f"{k} {v}" for k, v in sorted(state.restarts.items()))
        summary = (f"OPcache is enabled, yet {counted}"
                   + (f", and {cost}" if cpu is not None else "") + ": those scripts were compiled again. "
                   + (f"The cause, by the workers' counters and the scripts they did not hold: {'; '.join(named)}."
                      if named else
                      "The workers' counters show no full cache"
                      + (f" (restarts during the capture: {restarts})" if state.restarts else "")
                      + ": the scripts are excluded from caching (opcache.max_file_size, a blacklist)"
                      + (f"; the scripts left uncached: {describe_uncached(state)}" if state.uncached else "") + ".")
                   + below)
        checked = ("compiling seen in the workers' own OPcache counters (opcache_get_status() at each timed "
                   "request's start and end)"
                   + (f"; the cause from the same counters: {', '.join(causes)}" if causes
                      else "; no full cache: only the settings that exclude files are changed")
                   + "; the new sizes were not tried (lockdown verify measures them)")
        return "PHP files are compiled on requests although OPcache is on", summary, checked
    if c.case == "compiling":
        summary = (f"OPcache is enabled, yet {cost}: the cache misses. Usual causes: the cache is full "
                   "(opcache.memory_consumption, opcache.interned_strings_buffer) or has more files than keys "
                   "(opcache.max_accelerated_files), files excluded (max_file_size, blacklist), or files "
                   "rewritten during requests." + below
                   + " Check opcache_get_status() in a php-fpm worker (cache_full, oom_restarts, hash_restarts, "
                   "num_cached_keys vs max_cached_keys).")
        checked = ("compile samples seen with OPcache enabled in the capture's configuration; the cause was not "
                   "confirmed (this bundle has no OPcache counters from the workers) and the new sizes were not tried")
        return "PHP files are compiled on requests although OPcache is on", summary, checked
    off = c.case == "not-loaded"
    title = ("OPcache is not loaded: every request compiles its PHP files" if off
             else "OPcache is disabled (opcache.enable=0): every request compiles its PHP files")
    summary = (("The Zend OPcache extension is not loaded" if off else "opcache.enable is off")
               + f" in the php-fpm configuration, so every include/require is scanned, parsed and compiled again "
               f"on every request; {cost}. An opcode cache keeps the compiled scripts in shared memory.")
    checked = (("OPcache absent from the loaded Zend extensions" if off else "opcache.enable off")
               + " in the configuration lockdown ran the capture with (manifest php facts)"
               + ("; compile samples seen in the native profile" if cpu else "")
               + "; the speed-up was not measured")
    return title, summary, checked


def describe(c: Case) -> Finding:
    suspects = describe_suspects(c)
    no_samples = ("perf caught no sample of the timed requests" if c.perf_collected
                  else "the bundle has no native samples")
    cost = (f"{c.cpu:.1f}% of the on-CPU samples of the timed requests were compiling PHP files"
            if c.cpu is not None else f"{no_samples} to measure the compile cost")
    title, summary, checked = describe_text(c, suspects, cost)
    content = "\n".join(c.lines)
    steps = ([f"phpenmod -v {c.php_version} -s fpm opcache   # Debian/Ubuntu, instead of the zend_extension line"]
             if c.case == "not-loaded" else []) + [f"systemctl restart php{c.php_version}-fpm"]
    no_patch = None
    if not c.lines:
        no_patch = ("no setting would cache these scripts: OPcache does not cache a file modified less than "
                    "opcache.file_update_protection seconds before the request, and "
                    + (describe_uncached(c.state, 3, young=True) if c.state.uncached_young else "these")
                    + " are rewritten on every request; the fix is in the application (write such a file only "
                    "when its content changes)")

    def r2(x: float | None) -> float | None:
        return None if x is None else round(x, 2)

    return Finding(
        id=ID, title=title, severity=c.severity, share_pct=c.share, summary=summary,
        evidence=describe_evidence(c, suspects, no_samples),
        remediations=[Remediation(
            kind="ini", content=content, checked=checked, steps=steps,
            description=("php.ini (or the FPM conf.d) lines; restart php-fpm so the shared memory is sized again."
                         + (" opcache.max_accelerated_files is rounded up by PHP to the next prime of its table "
                            "(20000 -> 32531)." if "opcache.max_accelerated_files=" in content else "")))]
        if c.lines else [],
        urls=c.urls, requests=c.requests,
        details={"case": c.case, "settings": c.settings, "compile_share_pct": r2(c.cpu),
                 "eval_share_pct": r2(c.eval_cpu), "compile_subsystem_pct": r2(c.subsystem),
                 "compile_share_by_url": c.by_url, "file_cache_only": c.file_only, "suspects": suspects,
                 "misses_per_request": r2(c.misses),
                 "full": full_caches(c.state) if c.state is not None else None,
                 "causes": c.causes,
                 **({"no_patch": no_patch} if no_patch else {})})


def _mb(n: int) -> str:
    return f"{n / (1 << 20):.1f} MB"


def full_caches(state: OpcacheState) -> list[str]:
    """Which of OPcache's limits the workers hit: "memory", "interned", "keys"."""
    return [name for name, full in (("memory", state.memory_full), ("interned", state.interned_full),
                                    ("keys", state.keys_full)) if full]


def miss_causes(state: OpcacheState, excluding: bool) -> list[str]:
    """Why the workers' OPcache missed, from its counters and the scripts it did not hold after
    a miss: "keys" (every key taken), "memory" (shared memory full, an out-of-memory restart,
    or scripts that are not new left uncached with keys to spare and nothing excluding them: no
    free block was large enough -- PHP calls the cache full only below 64 KB free), "rewritten"
    (scripts modified within opcache.file_update_protection before the request, which OPcache
    does not cache). A full interned strings buffer is no cause of misses: PHP then keeps a
    script's strings with the script."""
    out = []
    if state.keys_full:
        out.append("keys")
    if state.memory_full or (state.uncached_old and not state.keys_full and not excluding):
        out.append("memory")
    if state.uncached_young:
        out.append("rewritten")
    return out


def describe_cause(cause: str, state: OpcacheState) -> str:
    if cause == "keys":
        return "every key is taken (opcache.max_accelerated_files): scripts beyond them are never cached"
    if cause == "memory" and state.memory_full:
        return "the shared memory is full or ran out (opcache.memory_consumption)"
    if cause == "memory":
        return (f"scripts that are not new stay uncached with keys to spare ({describe_uncached(state, 3, old=True)}): "
                f"the shared memory has no free block large enough for them ({_mb(state.free_memory)} "
                "free in all; opcache.memory_consumption)")
    return (f"{describe_uncached(state, 3, young=True)} changed less than opcache.file_update_protection "
            "seconds before the request, which OPcache does not cache: rewritten on every request")


def describe_state(state: OpcacheState, requests: int) -> list[Evidence]:
    """The workers' OPcache counters that show the misses and what is full."""
    src = f"opcache_get_status() in the workers, at the start and end of {requests} timed requests"
    rows = [Evidence("script lookups (include/require) per timed request, compiled (missed)",
                     f"{state.lookups_per_request:.1f}, {state.misses_per_request:.1f}", src),
            Evidence("timed requests that compiled scripts", f"{state.requests_with_misses} of {state.requests}", src),
            Evidence("keys taken (opcache.max_accelerated_files, rounded up to a prime)",
                     f"{state.cached_keys} of {state.max_cached_keys}" + (", full" if state.keys_full else ""),
                     src + "; cache_full " + ("true" if state.cache_full else "false")),
            Evidence("shared memory used, free, wasted",
                     f"{_mb(state.used_memory)}, {_mb(state.free_memory)}, {_mb(state.wasted_memory)}"
                     + (", full" if state.memory_full else ""), src),
            Evidence("interned strings used of the buffer",
                     f"{_mb(state.interned_used)} of {_mb(state.interned_size)}"
                     + (", full" if state.interned_full else ""),
                     src)]
    if state.uncached:
        rows.append(Evidence("scripts OPcache did not hold after a request that missed (in how many requests)",
                             describe_uncached(state), "get_included_files() and opcache_is_script_cached() in the "
                             "workers, after each timed request that missed"))
    if state.restarts:
        rows.append(Evidence("OPcache restarts during the capture",
                             ", ".join(f"{k} {v}" for k, v in sorted(state.restarts.items())), src))
    if state.blacklist_misses_per_request:
        rows.append(Evidence("blacklisted scripts compiled per request",
                             f"{state.blacklist_misses_per_request:.1f}", src))
    return rows


def describe_uncached(state: OpcacheState, shown: int = 5, young: bool = False, old: bool = False) -> str:
    """The most often uncached scripts: "cache/tpl.php (40 of 40 requests), ..."; `young`: only
    those modified within the protection before the request, `old`: only the others."""
    items = [(p, n) for p, n in state.uncached.items()
             if (not young or p in state.uncached_young) and (not old or p not in state.uncached_young)]
    text = ", ".join(f"{path} ({n} of {state.requests} requests)" for path, n in items[:shown])
    return text + (f" and {len(items) - shown} more" if len(items) > shown else "")
