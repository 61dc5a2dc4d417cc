"""pcre-jit-off: PCRE's JIT compiler switched off (`pcre.jit=0`) while the application spends
measurable time matching regular expressions (docs/pathologies.md section 5).

Mechanism: with `pcre.jit=1` (PHP's default) each pattern is compiled once per worker into
machine code; with 0 every match runs in PCRE2's interpreter (`pcre2_match`), several times
slower on the same pattern. Turning the JIT on was a 2-3% win on almost all applications when
PHP 7 did it; regex-heavy code (WordPress' wptexturize, shortcode parsing, Drupal's
file_scan_directory masks) gains more.

Signature: `pcre.jit` off in the capture's effective configuration (manifest php.ini: "0",
"", "Off"; a missing setting is unknown and never flagged) AND regex time at least
`min_regex_share_pct`, measured from the best source the bundle has:
1. native samples: the `regex` subsystem share of on-CPU samples (php_pcre_*, pcre2_* in
   libpcre2, JIT code under them; subsystems.toml);
2. without native samples, xhprof: exclusive time of preg_match, preg_match_all,
   preg_replace, preg_replace_callback(_array), preg_split, preg_grep, preg_filter over the
   instrumented requests' measured wall time (builtins are inflated less than user code by
   instrumentation; indicative). preg_* calls per request are evidence either way.
Excimer's PHP stacks do not show builtins, so they cannot measure regex time.

Decision for pcre.jit=0 without regex time: when the bundle measured regex time (native
samples or xhprof) and it is below the threshold, nothing is reported (turning the JIT on
would not change this application's numbers); when the bundle has neither source, a "low"
finding with share_pct None says the setting is off and the cost was not measured.

Severity: by share of request time, high >= 10, medium >= 3, else low. share_pct: the regex
share of on-CPU samples x the timed requests' CPU/wall ratio (source 1) or the xhprof share
(source 2) -- the whole regex time, an upper bound of what the JIT saves (matching gets
faster; the pattern cache and the PHP glue do not).

Remediation (`ini`): `pcre.jit=1`, with a check that this PHP build has JIT support
(`php -r 'var_dump(PCRE_JIT_SUPPORT);'`); not verified by the capture.

Not flagged: regex-heavy code with the JIT on (a hot-builtins / repeated-call matter);
`pcre.backtrack_limit` / `pcre.recursion_limit`; JIT memory allocation failures.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..findings import Evidence, Finding, Remediation, severity_for
from ..subsystems import categorise
from .context import Context
from .hot_builtins import (callee_calls, example_requests, ini_flag, ini_value, php_version, profiled,
                           request_share, sample_share, share_by_url, sources)

ID = "pcre-jit-off"
SUBJECT = None  # one finding at most
MATCHERS = ("preg_match", "preg_match_all", "preg_replace", "preg_replace_callback",
            "preg_replace_callback_array", "preg_split", "preg_grep", "preg_filter")


@dataclass
class Case:
    """pcre.jit off, and the regex time measured (or not)."""
    setting: str | None             # pcre.jit as the capture saw it
    cpu: float | None               # regex share of on-CPU samples, %
    samples: int                    # native samples of the timed requests
    profiles: list[str]             # the profiled requests
    calls_per_request: float | None # preg_* calls per profiled request
    exclusive_share: float | None   # preg_* exclusive time, % of their wall time
    measured: float | None          # the regex share used, from `source`: "native", "xhprof" or None
    share: float | None             # % of request time
    source: str | None
    version: str                    # PHP major.minor
    urls: list[str]
    requests: list[str]
    by_url: dict[str, float]        # regex share of on-CPU samples per URL


def decide(ctx: Context) -> list[Case]:
    if ini_flag(ctx, "pcre.jit") is not False:
        return []
    min_share = ctx.threshold(ID, "min_regex_share_pct")

    def is_regex(sample) -> bool:
        return categorise(sample.frames) == "regex"

    cpu = sample_share(ctx, is_regex)
    rids = profiled(ctx)
    calls_per_request = excl_share = None
    if rids:
        calls = sum(callee_calls(ctx, rid)[f] for rid in rids for f in MATCHERS)
        excl = sum(ctx.xhprof[rid].get(f, {}).get("exclusive_us", 0) for rid in rids for f in MATCHERS)
        wall = sum(ctx.wall_us(rid) for rid in rids)
        calls_per_request = round(calls / len(rids), 1)
        excl_share = round(100.0 * excl / wall, 2) if wall else None
    if cpu is not None:
        measured, share, source = cpu, request_share(ctx, cpu), "native"
    elif excl_share is not None:
        measured, share, source = excl_share, excl_share, "xhprof"
    else:
        measured, share, source = None, None, None
    if measured is not None and measured < min_share:
        return []
    return [Case(ini_value(ctx, "pcre.jit"), cpu, len(ctx.native), rids, calls_per_request, excl_share, measured,
                 share, source, php_version(ctx), sorted(ctx.by_url), example_requests(ctx, is_regex) or rids[:5],
                 share_by_url(ctx, is_regex) if ctx.native else {})]


def detect(ctx: Context) -> list[Finding]:
    return [describe(c) for c in decide(ctx)]


def describe(c: Case) -> Finding:
    cpu, rids, source, share = c.cpu, c.profiles, c.source, c.share
    severity = "low" if share is None else severity_for(share, high=10, medium=3)
    evidence = [Evidence("pcre.jit", c.setting, "manifest php.ini (effective value)")]
    if cpu is not None:
        evidence.append(Evidence("on-CPU samples in PCRE (regex subsystem)", f"{cpu:.2f}%",
                                 f"perf samples of the timed requests ({c.samples}), subsystems.toml"))
    if c.calls_per_request is not None:
        evidence.append(Evidence("preg_* calls per request", c.calls_per_request, sources(rids)))
        if c.exclusive_share is not None:
            evidence.append(Evidence("preg_* exclusive time, % of the instrumented requests' wall time",
                                     c.exclusive_share, f"{sources(rids)}; requests.jsonl wall_us"))
    if source is None:
        evidence.append(Evidence("regex time", "not measured", "the bundle has no native samples or xhprof profiles"))
    cost = (f"{cpu:.1f}% of the on-CPU samples of the timed requests were in PCRE" if source == "native"
            else f"preg_* builtins took {c.exclusive_share:.1f}% of the instrumented requests' time"
            if source == "xhprof" else "the bundle has no native samples or xhprof profiles to measure regex time")
    return Finding(
        id=ID, title="PCRE JIT is off (pcre.jit=0)" + (f": {c.measured:.1f}% of the time in regular expressions"
                                                       if c.measured is not None else ""),
        severity=severity, share_pct=share,
        summary=(f"pcre.jit is off, so every preg_* match runs in PCRE2's interpreter instead of compiled machine "
                 f"code; {cost}"
                 + (f", with {c.calls_per_request:g} preg_* calls per profiled request" if c.calls_per_request else "")
                 + ". PHP enables the JIT by default; it made almost every application 2-3% faster when PHP 7 "
                   "turned it on, more for regex-heavy code."),
        evidence=evidence,
        remediations=[Remediation(
            kind="ini", content="pcre.jit=1",
            checked=("pcre.jit off in the configuration lockdown ran the capture with (manifest php.ini)"
                     + ("; regex time seen in the profile" if source else "")
                     + "; JIT support of this PHP build and the speed-up were not verified"),
            steps=["php -r 'var_dump(PCRE_JIT_SUPPORT);'   # must print bool(true)",
                   f"systemctl restart php{c.version}-fpm"],
            description="In php.ini or the FPM conf.d (or a pool's php_admin_value[pcre.jit] = 1).")],
        urls=c.urls, requests=c.requests,
        details={"source": source, "regex_on_cpu_pct": None if cpu is None else round(cpu, 2),
                 "regex_share_by_url": c.by_url,
                 "preg_calls_per_request": c.calls_per_request, "preg_exclusive_share_pct": c.exclusive_share})
