"""regex-compile and failed-lookups (issue 35, waste signatures from the engine) on synthetic
contexts, and the pure parts of their capture (collectors/engine_events.py, formats/perf_events.py).

The real captures are tested in test_catalog.py (catalog: a class method compiling a
nonce-named pattern, file_exists() along a theme path) and test_notes.py (notes: procedural
code, a uniqid() placeholder pattern in preg_replace_callback, is_file()/is_readable() along
skin and locale paths)."""
from __future__ import annotations

import pytest

from contexts import context, native, request
from lockdown.analyzers.detectors import failed_lookups, regex_compile
from lockdown.collectors import engine_events
from lockdown.formats import perf_events
from lockdown.formats.perf_events import Event

LOOKUP_EVENTS = ["access", "faccessat", "faccessat2", "newstat", "newlstat", "newfstatat", "statx", "open",
                 "openat", "openat2"]
ALL_EVENTS = LOOKUP_EVENTS + ["pcre2_compile"]


def ctx_with(timed: dict[str, tuple[str, dict]], profiles: dict[str, tuple[str, dict]], counted=ALL_EVENTS,
             samples=(), thresholds=None):
    """timed: rid -> (url, engine event counts); profiles: rid -> (url, {"caller==>callee": {ct, wt}})."""
    reqs = [request(rid, url, wall_us=2000, cpu_us=1800) for rid, (url, _) in timed.items()]
    reqs += [request(rid, url, wall_us=4000, cpu_us=3600, instrumented=True) for rid, (url, _) in profiles.items()]
    ctx = context(reqs, xhprof={rid: {"main()": {"ct": 1, "wt": 4000}, **p} for rid, (_, p) in profiles.items()},
                  native_samples=samples, thresholds=thresholds)
    ctx.engine_events = {rid: counts for rid, (_, counts) in timed.items()}
    ctx.manifest["collected"] = {"perf": {"events": {"events": list(counted)}}}
    return ctx


def edge(ct: int, wt: int) -> dict:
    return {"ct": ct, "wt": wt}


# -- regex-compile ---------------------------------------------------------------------------

def badges(n_compiles=120, url="/", method="App\\Text\\Badges::match", preg="preg_match", extra=None):
    timed = {f"r{i}": (url, {"pcre2_compile": n_compiles}) for i in range(1, 4)}
    profile = {f"{method}==>{preg}": edge(120, 3000), "App\\Util::slug==>preg_replace": edge(40, 80),
               "Lockdown\\Capture\\Capture::threadCounters==>preg_match": edge(2, 2), **(extra or {})}
    return timed, {"r10": (url, profile)}


def test_regex_compiled_on_every_call_is_found_with_the_caller_and_counts():
    ctx = ctx_with(*badges())
    [f] = regex_compile.detect(ctx)
    d = f.details
    assert f.id == "regex-compile" and d["function"] == "App\\Text\\Badges::match" and f.subject.endswith("::match")
    assert d["compiled_per_request"] == {"/": {"min": 120, "median": 120, "max": 120}}
    # the capture's own preg_match (lockdown's prepend) is not the app's
    assert d["preg_calls_per_request"] == {"/": 160} and d["compiled_per_call"] == {"/": 0.75}
    assert set(d["callers"]["/"]) == {"App\\Text\\Badges::match", "App\\Util::slug"}
    assert f.urls == ["/"] and "120 patterns per request" in f.title
    # without native samples the share is xhprof's: 3000 us of the 4000 us request, every call compiling
    assert f.share_pct == 75.0 and f.severity == "high"


@pytest.mark.parametrize("preg,method", [("preg_replace_callback", "restore_placeholders"),
                                         ("preg_split", "main()"), ("preg_match_all", "Foo\\Bar::{closure}")])
def test_regex_other_builtins_and_callers(preg, method):
    [f] = regex_compile.detect(ctx_with(*badges(40, "/?page=home", method, preg)))
    assert f.details["function"] == method and f.urls == ["/?page=home"]


def test_regex_boundaries():
    assert regex_compile.detect(ctx_with(*badges(19))) == []
    assert len(regex_compile.detect(ctx_with(*badges(20)))) == 1
    # fewer compilations than a tenth of the preg_* calls: patterns mostly cached
    timed, profiles = badges(120, extra={"App\\Lexer::next==>preg_match": edge(1100, 900)})
    assert regex_compile.detect(ctx_with(timed, profiles)) == []
    # ... unless the threshold says otherwise
    lowered = {"regex-compile": {"min_compile_ratio": 0.05}}
    assert len(regex_compile.detect(ctx_with(timed, profiles, thresholds=lowered)))


def test_regex_needs_most_requests_of_the_url_and_the_count_itself():
    timed, profiles = badges()
    timed["r2"] = ("/", {})
    timed["r3"] = ("/", {"pcre2_compile": 1})         # a worker's first request compiles its fixed patterns
    assert regex_compile.detect(ctx_with(timed, profiles)) == []
    # a capture that did not count compilations (no uprobe) reports nothing, whatever the counts
    assert regex_compile.detect(ctx_with(*badges(), counted=LOOKUP_EVENTS)) == []


def test_regex_share_from_native_samples_when_there_are_enough():
    pcre = [("pcre2_jit_compile_8", "libpcre2-8.so.0.11.2"), ("pcre_get_compiled_regex_cache_ex", "php-fpm8.2")]
    other = [("execute_ex", "php-fpm8.2")]
    samples = [native("r1", pcre) for _ in range(15)] + [native("r2", other) for _ in range(45)]
    [f] = regex_compile.detect(ctx_with(*badges(), samples=samples))
    assert f.details["compile_on_cpu_pct"] == 25.0
    assert f.share_pct == 22.5                          # 25% of on-CPU samples x CPU/wall 0.9
    assert f.requests[0] == "r1"
    # too few samples: xhprof's estimate, the samples still shown
    [f] = regex_compile.detect(ctx_with(*badges(), samples=samples[:10] + samples[-10:]))
    assert f.share_pct == 75.0 and f.details["compile_on_cpu_pct"] == 50.0


def test_regex_urls_of_one_caller_are_one_finding():
    t1, p1 = badges(120, "/")
    t2, p2 = badges(40, "/b")
    t2 = {f"r{int(k[1:]) + 20}": v for k, v in t2.items()}
    [f] = regex_compile.detect(ctx_with({**t1, **t2}, {"r10": p1["r10"], "r11": p2["r10"]}))
    assert f.urls == ["/", "/b"]
    assert f.details["compiled_per_request"]["/b"]["median"] == 40


# -- failed-lookups --------------------------------------------------------------------------

def templates(misses=204, calls=216, url="/"):
    timed = {f"r{i}": (url, {"access": misses, "openat": 1}) for i in range(1, 4)}
    profile = {"App\\View\\Locator::find==>file_exists": edge(calls, 400),
               "App\\Boot::autoload==>is_file": edge(30, 30)}
    return timed, {"r10": (url, profile)}


def test_failed_lookups_are_credited_to_the_caller_of_the_builtin_that_fails():
    [f] = failed_lookups.detect(ctx_with(*templates()))
    d = f.details
    assert f.id == "failed-lookups" and d["function"] == "App\\View\\Locator::find"
    assert d["failed_per_request"] == {"/": {"min": 205, "median": 205, "max": 205}}
    assert d["failed_by_syscall"] == {"/": {"access": 204, "open": 1}}
    assert d["credited_per_request"] == {"/": 204} and d["estimated"] is False
    assert d["builtins"] == ["file_exists"] and d["calls_per_request"] == {"/": 216}
    # 400 us of file_exists x 204/216 over the request's 4000 us
    assert f.share_pct == pytest.approx(9.44, abs=0.01) and f.severity == "medium"
    assert "204 per request" in f.title


def test_failed_lookups_two_builtins_two_callers_two_findings():
    timed = {f"r{i}": ("/?page=home", {"newfstatat": 648, "access": 60}) for i in range(1, 4)}
    profile = {"partial_path==>is_file": edge(692, 900), "message_file==>is_readable": edge(80, 60),
               "messages==>parse_ini_file": edge(20, 200)}
    ctx = ctx_with(timed, {"r10": ("/?page=home", profile)})
    found = {f.details["function"]: f for f in failed_lookups.detect(ctx)}
    assert set(found) == {"partial_path", "message_file"}
    assert found["partial_path"].details["credited_per_request"] == {"/?page=home": 648}
    assert found["message_file"].details["credited_per_request"] == {"/?page=home": 60}
    assert not any(f.details["estimated"] for f in found.values())


def test_failed_lookups_shared_between_callers_are_estimated():
    timed = {f"r{i}": ("/", {"access": 120}) for i in range(1, 4)}
    profile = {"a==>file_exists": edge(200, 100), "b==>file_exists": edge(100, 50)}
    [f] = failed_lookups.detect(ctx_with(timed, {"r10": ("/", profile)}))
    assert f.details["function"] == "a" and f.details["credited_per_request"] == {"/": 80}
    assert f.details["estimated"] is True                  # b's 40 are under the threshold


def test_failed_lookups_boundaries_and_capture():
    assert failed_lookups.detect(ctx_with(*templates(49))) == []
    assert len(failed_lookups.detect(ctx_with(*templates(50)))) == 1
    assert failed_lookups.detect(ctx_with(*templates(), counted=["pcre2_compile"])) == []
    timed, profiles = templates()
    timed["r2"] = timed["r3"] = ("/", {})
    assert failed_lookups.detect(ctx_with(timed, profiles)) == []


def test_failed_lookups_without_a_profile_name_no_function():
    timed, _ = templates()
    [f] = failed_lookups.detect(ctx_with(timed, {}))
    assert f.details["function"] == "(unknown)" and f.share_pct is None and f.severity == "low"
    assert f.details["credited_per_request"] == {"/": 205}


def test_failed_lookups_spread_over_several_callers_are_one_finding():
    """DokuWiki: 111 misses a page, from a farm config probe, a plugin lister and template hooks,
    none making 50 alone. One finding for the URL, naming the heaviest callers; no cache of one
    function is generated for it."""
    timed = {f"r{i}": ("/doku.php", {"access": 60, "newfstatat": 45}) for i in range(1, 4)}
    profile = {"conf_path==>file_exists": edge(45, 90), "tpl_includeFile==>file_exists": edge(20, 40),
               "PluginController::getListByType==>is_dir": edge(60, 120)}
    [f] = failed_lookups.detect(ctx_with(timed, {"r10": ("/doku.php", profile)}))
    d = f.details
    assert d["function"] == "(several functions)"
    assert d["callers"] == ["PluginController::getListByType", "conf_path", "tpl_includeFile"]
    assert d["credited_per_request"] == {"/doku.php PluginController::getListByType": 45,
                                         "/doku.php conf_path": 41.5, "/doku.php tpl_includeFile": 18.5}
    assert "105 per request, spread over several functions" in f.title and f.urls == ["/doku.php"]
    # the shares of the three add up: (120 x 45/60 + 90 x 41.5/45 + 40 x 18.5/20) us over 4000 us
    assert f.share_pct == pytest.approx(100 * (90 + 83 + 37) / 4000, abs=0.01)
    from lockdown.remediation import generate
    assert generate.propose(f, ["*.php"], __import__("pathlib").Path("/nonexistent")) == []
    assert d["no_patch"].startswith("the misses come from several functions")
    # below the floor in all, nothing
    timed = {f"r{i}": ("/doku.php", {"access": 30, "newfstatat": 15}) for i in range(1, 4)}
    assert failed_lookups.detect(ctx_with(timed, {"r10": ("/doku.php", profile)})) == []


# -- the capture's pure parts ------------------------------------------------------------------

def test_perf_events_text_and_per_request_counts():
    text = ["19429/19429  8574.124998023:     syscalls:sys_exit_access: \n",
            "  19430/19430  8574.2:    lockdown_77:pcre2_compile_77: \n", "\n"]
    got = list(perf_events.parse(text))
    assert got == [Event(19429, 8574124998023, "syscalls:sys_exit_access"),
                   Event(19430, 8574200000000, "lockdown_77:pcre2_compile_77")]
    with pytest.raises(perf_events.PerfEventsError, match="line 1"):
        list(perf_events.parse(["php-fpm 19429/19429 8574.1: 1 cpu-clock:\n"]))
    assert [engine_events.event_key(e.name) for e in got] == ["access", "pcre2_compile"]

    a = request("r1", "/", wall_us=1000, pid=7)            # 1.000000000 .. 1.001000000 s
    b = request("r2", "/", wall_us=1000, pid=8)
    c = request("r3", "/", wall_us=1000, pid=9)            # a worker perf did not watch
    events = [Event(7, 1_000_000_500, "syscalls:sys_exit_newfstatat"), Event(7, 1_000_999_000, "x:pcre2_compile_1"),
              Event(7, 1_002_000_000, "syscalls:sys_exit_access"), Event(8, 5, "syscalls:sys_exit_access")]
    records, outside = engine_events.per_request(events, [a, b, c], {7, 8})
    assert [(r.request, r.counts) for r in records] == [("r1", {"newfstatat": 1, "pcre2_compile": 1}), ("r2", {})]
    assert outside == 2


def test_regex_caller_is_the_slowest_in_the_least_of_the_profiles():
    """Calls that compile are slow in every profile; a cached pattern's caller is slow only in a
    request the host preempted: the least of the profiled requests decides."""
    timed = {f"r{i}": ("/", {"pcre2_compile": 40}) for i in range(1, 4)}
    fresh, cached = "restore_placeholders==>preg_replace_callback", "protect_code==>preg_replace_callback"
    profiles = {"r10": ("/", {fresh: edge(40, 900), cached: edge(40, 5000)}),     # preempted in protect_code
                "r11": ("/", {fresh: edge(40, 1000), cached: edge(40, 80)})}
    [f] = regex_compile.detect(ctx_with(timed, profiles))
    assert f.details["function"] == "restore_placeholders"
    assert f.details["callers"]["/"]["protect_code"] == {"calls": 40, "wall_us": 2540, "min_us": 80}
