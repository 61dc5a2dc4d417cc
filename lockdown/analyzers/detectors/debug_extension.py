"""debug-extension: a debugger, profiler or coverage/test extension loaded in the production
php-fpm configuration (docs/pathologies.md section 5).

Mechanism: Xdebug replaces the engine's execute hook and observes every call and statement;
profilers (xhprof, tideways, SPX, Blackfire) hook every function call; pcov hooks execution for
coverage; uopz overrides opcode handlers. They cost CPU on every request even when idle:
with Xdebug loaded (features off) an HTTP benchmark dropped from ~10,700 to ~3,700 RPS, and
WordPress with `xdebug.mode=develop` spent ~20% of its on-CPU samples inside xdebug.so.

Signature: an extension named in thresholds.toml [debug-extension] `extensions` (compared
case-insensitively) is in the capture's loaded extensions (`php.extensions`, from
get_loaded_extensions()) or Zend extensions (`php.zend_extensions`, e.g. "Xdebug"), and it is
not one lockdown loaded for its own collectors (see `capture_extensions` in hot_builtins.py:
excimer, and tideways_xhprof -- in its one-worker instrumented pool, or in every worker in
bundles of older lockdown versions). It is reported as loaded either by the target's php_ini
overrides (`php.overrides`: target.toml / --php-ini) or by the machine's php-fpm configuration
(php.ini and conf.d, which lockdown copies for the run).

Evidence: the extension and its version, how it is loaded (zend_extension or extension, and
by which configuration), its own share of on-CPU native samples (samples whose CPU was spent in
its .so: the first frame from the leaf outside libc/the kernel/JIT code -- a lower bound,
since hooks also slow the engine's own code paths, e.g. Xdebug forces the non-inlined call
path of the VM), and its ini settings (`xdebug.mode`, `xdebug.start_with_request`, ...).

Severity: high for Xdebug (always; its cost is not only in its own .so) or when its own share
of on-CPU samples is at least `high_share_pct`; medium from `medium_share_pct`; low otherwise
(loaded but no measured cost, or no native samples). share_pct: that on-CPU share turned into
a share of request time (x CPU time / wall time of the timed requests), None without samples.

Remediation (`ini`): the line to remove, e.g. `; remove: zend_extension=xdebug.so`, and where
it usually is (Debian: /etc/php/<v>/fpm/conf.d/20-xdebug.ini, or `phpdismod -s fpm xdebug`),
then a php-fpm restart. A pool's `php_admin_value[...]` can load an extension but never unload
one, so the fix is in the ini files php-fpm loads; if it must stay installed, `xdebug.mode=off`
is the least costly setting.

Not flagged: lockdown's own capture extensions (above); extensions outside the configured list
(apcu, luasandbox, ...); an extension loaded only by a pool's `php_admin_value[extension]` --
the capture records the CLI's view of the configuration, which does not see it; and
excimer/tideways_xhprof loaded by the machine's own configuration, which lockdown's php-fpm
drops before the capture (so the bundle cannot show them).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..findings import Evidence, Finding, Remediation
from .context import Context
from .hot_builtins import (capture_extensions, example_requests, php_version, request_share,
                           sample_share, self_dso)

ID = "debug-extension"
SUBJECT = "extension"  # what tells its findings apart (findings.SUBJECT_KEYS)

_WHAT = {
    "xdebug": "Xdebug replaces the engine's execute hook and observes every call; loaded in production it made "
              "an HTTP benchmark ~3x slower (10,700 -> 3,700 RPS) even with its features off",
    "xhprof": "xhprof hooks every function call to time it",
    "tideways": "the Tideways profiler hooks every function call",
    "tideways_xhprof": "tideways_xhprof hooks every function call, even when it is not profiling",
    "spx": "SPX hooks every function call to profile it",
    "blackfire": "the Blackfire probe hooks every function call",
    "pcov": "pcov instruments execution to record code coverage",
    "uopz": "uopz overrides opcode handlers and functions at run time (a test tool)",
}


def _so_pattern(name: str) -> re.Pattern:
    return re.compile(rf"^{re.escape(name)}([-_.][\w.+-]*)?\.so$", re.I)


def _loaded(ctx: Context, wanted: set[str]) -> dict[str, dict]:
    """Lower-case name -> {"names": as the engine spells them, "zend": bool, "version": str}."""
    out: dict[str, dict] = {}
    for name, version in (ctx.php.get("extensions") or {}).items():
        if name.lower() in wanted:
            e = out.setdefault(name.lower(), {"names": [], "zend": False, "version": None})
            e["names"].append(name)
            e["version"] = version
    for name in ctx.php.get("zend_extensions") or []:
        if name.lower() in wanted:
            e = out.setdefault(name.lower(), {"names": [], "zend": True, "version": None})
            e["zend"] = True
            if name not in e["names"]:
                e["names"].append(name)
    return out


def _loaded_by_overrides(ctx: Context, name: str) -> str | None:
    for key, value in (ctx.php.get("overrides") or {}).items():
        if key.strip().lower() in ("extension", "zend_extension") and _so_pattern(name).match(
                str(value).rsplit("/", 1)[-1] if str(value).endswith(".so") else f"{value}.so"):
            return f"{key}={value}"
    return None


@dataclass
class Case:
    """One debugging or profiling extension loaded by the target's configuration."""
    extension: str                  # lower-case name
    names: list[str]                # as the engine spells them
    version: str | None
    directive: str                  # extension or zend_extension
    override: str | None            # the target's php_ini line that loads it, else the system's configuration
    cpu: float | None               # on-CPU samples in its .so, %
    share: float | None             # % of request time
    severity: str
    settings: dict                  # its ini settings
    samples: int                    # native samples of the timed requests
    php_version: str
    urls: list[str]
    requests: list[str]
    ours: dict[str, str]            # lockdown's own capture extensions, left out

    @property
    def display(self) -> str:
        return next((n for n in self.names if n != self.extension), self.names[0])


def decide(ctx: Context) -> list[Case]:
    wanted = {e.lower() for e in ctx.threshold(ID, "extensions")}
    high, medium = ctx.threshold(ID, "high_share_pct"), ctx.threshold(ID, "medium_share_pct")
    ours = capture_extensions(ctx.manifest)
    cases = []
    for key, info in sorted(_loaded(ctx, wanted).items()):
        if key in ours:
            continue
        so = _so_pattern(key)

        def in_ext(s, so=so) -> bool:
            d = self_dso(s.frames)
            return d is not None and so.match(d) is not None
        cpu = sample_share(ctx, in_ext)
        if key == "xdebug" or (cpu is not None and cpu >= high):
            severity = "high"
        elif cpu is not None and cpu >= medium:
            severity = "medium"
        else:
            severity = "low"
        cases.append(Case(
            extension=key, names=info["names"], version=info["version"],
            directive="zend_extension" if info["zend"] else "extension", override=_loaded_by_overrides(ctx, key),
            cpu=cpu, share=request_share(ctx, cpu), severity=severity,
            settings={k: v for k, v in sorted(ctx.ini.items()) if k.lower().startswith(key + ".")},
            samples=len(ctx.native), php_version=php_version(ctx), urls=sorted(ctx.by_url),
            requests=example_requests(ctx, in_ext), ours=ours))
    return cases


def detect(ctx: Context) -> list[Finding]:
    return [describe(c) for c in decide(ctx)]


def describe(c: Case) -> Finding:
    key, display, directive, override, cpu, settings, version = (
        c.extension, c.display, c.directive, c.override, c.cpu, c.settings, c.php_version)
    line = f"{directive}={key}.so"
    where = ("the target's php_ini overrides (target.toml or --php-ini): " + override if override
             else "the machine's php-fpm configuration (php.ini or conf.d)")
    evidence = [
        Evidence("extension loaded in php-fpm", f"{display} {c.version or ''}".strip(),
                 "manifest php.extensions / php.zend_extensions (get_loaded_extensions)"),
        Evidence("loaded as", f"{directive}, by {where}", "manifest php.zend_extensions, php.overrides"),
    ]
    if cpu is not None:
        evidence.append(Evidence(f"on-CPU samples in {key}.so (own code; lower bound of its cost)",
                                 f"{cpu:.2f}%", f"perf samples of the timed requests ({c.samples})"))
    else:
        evidence.append(Evidence("on-CPU samples in its .so", "not measured", "the bundle has no native samples"))
    for k in ("xdebug.mode", "xdebug.start_with_request", "pcov.enabled"):
        if k in settings:
            evidence.append(Evidence(k, settings[k], "manifest php.ini (effective value)"))
    if override:
        content = f"; remove from the target's php_ini (target.toml) or --php-ini: {override}"
        steps = []
    else:
        content = (f"; remove: {line}\n"
                   f"; (in the php-fpm ini file that loads it, e.g. /etc/php/{version}/fpm/conf.d/*-{key}.ini)")
        steps = [f"phpdismod -v {version} -s fpm {key}   # Debian/Ubuntu: the same as deleting the line",
                 f"systemctl restart php{version}-fpm"]
    fallback = (" If it has to stay installed, set xdebug.mode=off (Xdebug 3), the least costly mode."
                if key == "xdebug" else "")
    cost = (f"{cpu:.1f}% of the on-CPU samples of the timed requests were in its own code"
            if cpu is not None else "the bundle has no native samples to measure its cost")
    mode = f" (xdebug.mode={settings['xdebug.mode']!r})" if "xdebug.mode" in settings else ""
    return Finding(
        id=ID, title=f"{display} is loaded in production php-fpm",
        severity=c.severity, share_pct=c.share,
        summary=(f"{display}{mode} is loaded ({directive}) by {where}. "
                 f"{_WHAT.get(key, 'It hooks the engine')}; {cost}. "
                 "Debuggers, profilers and coverage tools belong in development images, not in the "
                 "serving pool."),
        evidence=evidence,
        remediations=[Remediation(
            kind="ini", content=content, steps=steps,
            checked=(f"{display} seen loaded in the php-fpm configuration lockdown ran the capture with "
                     "(manifest php.extensions/zend_extensions), and it is not one of lockdown's own "
                     "capture extensions; the speed-up of removing it was not measured"),
            description=("Extensions are loaded when php-fpm starts, from php.ini and the conf.d files; a "
                         "pool's php_admin_value[...] can load one but cannot unload it, so delete (or "
                         "comment out) the line that loads it and restart php-fpm." + fallback))],
        urls=c.urls, requests=c.requests,
        details={"extension": key, "names": c.names, "version": c.version,
                 "directive": directive, "loaded_by": "overrides" if override else "system",
                 "on_cpu_share_pct": None if cpu is None else round(cpu, 2), "ini": settings,
                 "capture_extensions_ignored": c.ours})
