"""hotspot (lockdown/analyzers/detectors/hotspot.py, docs/detectors.md): unexplained time under a
PHP function as a finding of its own, on synthetic contexts (tests/contexts.py) whose expected
values are worked out by hand from the rule: the shares, the floors, entry points, the narrowest
of nested candidates, database time left out, the other findings' time left out, the probe's
verdict; and the accounting with hotspot findings in it (they own nothing). No server."""
from __future__ import annotations

import math

import pytest

from contexts import context, request
from lockdown.analyzers import accounting as A
from lockdown.analyzers.detectors import detect, hotspot
from lockdown.analyzers.findings import Finding
from lockdown.bundle.model import ExcimerProfile

MS = 1_000_000
PERIOD = 1.0                   # ms: each synthetic sample is 1 ms


def profile(rid, stacks_weights):
    """One request's Excimer profile: [(folded stack, samples)], 1 ms apart."""
    stacks = [s for s, _ in stacks_weights]
    samples, t = [], 0
    for i, (_, n) in enumerate(stacks_weights):
        for _ in range(n):
            t += 1
            samples.append([t * MS, 1, i])
    return ExcimerProfile(rid, 100, stacks, samples, start_ns=0)


def xh(**calls):
    """An xhprof profile: fn=(caller, calls, callees {name: calls per call}); wt 10 us a call."""
    out = {"main()": {"ct": 1, "wt": 10_000}}
    for fn, (caller, ct, callees) in calls.items():
        out[f"{caller}==>{fn}"] = {"ct": ct, "wt": 100 * ct}
        for c, per in callees.items():
            out[f"{fn}==>{c}"] = {"ct": per * ct, "wt": 10 * per * ct}
    return out


ROWS = [("/app/index.php;page;render", 6),           # render: 6 ms a request, called 2 times
        ("/app/index.php;page;money", 3),            # money: 3 ms, 40 calls
        ("/app/index.php;page", 1)]                  # page: entry point, 1 ms self


def ctx_of(rows=ROWS, n=4, xhprof=None, thresholds=None, wall=10_000):
    reqs = [request(f"r{i}", "/", wall_us=wall) for i in range(n)]
    reqs.append(request("r9", "/", wall_us=wall, instrumented=True))
    c = context(reqs, xhprof={"r9": xhprof if xhprof is not None else xh(
                    page=("main()", 1, {}), render=("page", 2, {"str_replace": 3}),
                    money=("page", 40, {"str_getcsv": 25, "number_format": 1}))},
                capture={"excimer_period_ms": PERIOD, "excimer_clock": "wall", "collect": ["excimer", "xhprof"]},
                thresholds=thresholds)
    c.excimer_profiles = [profile(f"r{i}", rows) for i in range(n)]
    return c


def names(cases):
    return [c.function for c in cases]


def test_candidates_by_share_and_the_entry_point_left_out():
    cases = hotspot.decide(ctx_of(), [])
    # 40 ms sampled over 4 requests: render 60%, money 30%, page 100% inclusive but called once
    # with 10% self... which is >= 5%: page is a candidate by its self time, then replaced by
    # render, which holds 60% of its time (narrow_share 0.5)
    assert names(cases) == ["render", "money"]
    render, money = cases
    assert render.share == pytest.approx(60.0) and render.self_share == pytest.approx(60.0)
    assert render.ms_per_request == pytest.approx(6.0) and render.samples == pytest.approx(24)
    assert render.calls == 2 and money.calls == 40
    assert money.callees[0][:2] == ("str_getcsv", 25.0) and money.uniform
    assert money.callers == [("page", 40.0)]            # calls per profiled request
    assert render.path[0].endswith("index.php") and render.path[1:] == ["page", "render"] and render.path_pct == 100.0
    assert render.request_count == 4 and render.urls == ["/"]
    f = hotspot.describe(render)
    assert f.id == "hotspot" and f.severity == "high" and f.share_pct == 60.0
    assert f.subject == "hotspot:render"
    assert hotspot.describe(money).severity == "high"


def test_severity_by_share_and_the_floors():
    rows = [("/app/index.php;page;render", 90), ("/app/index.php;page;money", 6), ("/app/index.php;page;tax", 4)]
    xhprof = xh(page=("main()", 1, {}), render=("page", 2, {}), money=("page", 40, {}), tax=("page", 3, {}))
    cases = {c.function: c for c in hotspot.decide(ctx_of(rows, xhprof=xhprof), [])}
    # money: 6% (medium from 8? no: low below 8), tax: 4% < min_share_pct 5
    assert set(cases) == {"render", "money"}
    assert hotspot.describe(cases["money"]).severity == "low"
    assert hotspot.describe(cases["render"]).severity == "high"
    # 6 samples of money per request x 4 = 24 >= min_samples 10; raise the floor past it
    assert "money" not in names(hotspot.decide(
        ctx_of(rows, xhprof=xhprof, thresholds={"hotspot": {"min_samples": 25}}), []))
    # ms per request: money takes 6 ms a request; a floor of 7 leaves it out
    assert "money" not in names(hotspot.decide(
        ctx_of(rows, xhprof=xhprof, thresholds={"hotspot": {"min_ms_per_request": 7}}), []))
    # per call: 6 ms / 40 calls = 150 us; a floor of 200 us leaves it out
    assert "money" not in names(hotspot.decide(
        ctx_of(rows, xhprof=xhprof, thresholds={"hotspot": {"min_us_per_call": 200}}), []))
    # ... but not from always_share_pct: render, 90% in 2 calls of 45 ms, stays above a 50 ms floor
    # only while its share reaches always_share_pct
    floor = {"min_us_per_call": 50_000}
    assert "render" in names(hotspot.decide(ctx_of(rows, xhprof=xhprof, thresholds={"hotspot": floor}), []))
    assert "render" not in names(hotspot.decide(
        ctx_of(rows, xhprof=xhprof, thresholds={"hotspot": {**floor, "always_share_pct": 95.0}}), []))


def test_an_entry_point_with_little_self_time_is_not_a_candidate():
    rows = [("/app/index.php;kernel;a", 3), ("/app/index.php;kernel;b", 3), ("/app/index.php;kernel;c", 3),
            ("/app/index.php;kernel;d", 3)]
    xhprof = xh(kernel=("main()", 1, {}), a=("kernel", 1, {}), b=("kernel", 1, {}), c=("kernel", 1, {}),
                d=("kernel", 1, {}))
    # each of a..d: 25% self, called once: candidates by self; kernel: 100%, called once, 0% self
    assert sorted(names(hotspot.decide(ctx_of(rows, xhprof=xhprof), []))) == ["a", "b", "c", "d"]
    xhprof = xh(kernel=("main()", 1, {}), a=("kernel", 1, {}), b=("kernel", 1, {}), c=("kernel", 1, {}),
                d=("kernel", 1, {}))
    rows = [("/app/index.php;kernel;" + "abcdefghijklmnopqrstuvwxyz"[i], 1) for i in range(26)]
    # 26 functions of 1/26 (3.8%) each: none is a hotspot, and kernel, an entry point, is not either
    assert hotspot.decide(ctx_of(rows, xhprof=xhprof), []) == []


def test_the_findings_time_is_not_unexplained():
    found = [Finding(id="repeated-call", title="t", severity="high", share_pct=60.0, summary="",
                     urls=["/"], details={"function": "render", "nested": []}, key="repeated-call")]
    assert names(hotspot.decide(ctx_of(), found)) == ["money"]
    # an informational finding on it explains nothing
    info = [Finding(id="blocking-wait", title="t", severity="info", share_pct=None, summary="", urls=["/"],
                    details={"function": "render"}, key="blocking-wait")]
    assert names(hotspot.decide(ctx_of(), info)) == ["render", "money"]


def test_database_time_is_left_out():
    xhprof = xh(page=("main()", 1, {}), render=("page", 2, {"mysqli::query": 3}),
                money=("page", 40, {"str_getcsv": 25}))
    # render calls a database builtin: the samples ending in it are the statements' time
    assert names(hotspot.decide(ctx_of(xhprof=xhprof), [])) == ["money"]


def test_detect_runs_it_last_on_the_others_findings_and_ranks_it():
    found = detect(ctx_of())
    # money, 40 calls of 150 us with the same callees, is repeated-call's (min_calls_when_costly),
    # and per-call-setup's (str_getcsv 25 times on every call): its time is explained, and only
    # render is left a hotspot
    assert [(f.key, f.details.get("function")) for f in found if f.is_defect] == [
        ("hotspot", "render"), ("repeated-call", "money"), ("per-call-setup", "money")]


def test_after_probe_makes_them_again_with_the_probes_verdict():
    ctx = ctx_of()
    dismissed = [{"id": "repeated-call", "function": "money", "probe": {
        "function": "money", "located": "lib.php:3", "requests": 2, "calls": 80, "repeats": 16,
        "repeat_pct": 20.0, "rows": []}}]
    stale = Finding(id="hotspot", title="old", severity="low", share_pct=1.0, summary="", urls=["/"],
                    details={"function": "gone"}, key="hotspot")
    out = hotspot.after_probe(ctx, [stale], dismissed)
    hot = {f.details["function"]: f for f in out if f.id == "hotspot"}
    assert set(hot) == {"render", "money"}
    money = hot["money"]
    assert money.details["probe"]["repeat_pct"] == 20.0
    assert "cache of results would not help" in money.details["look_at"]
    assert any(e.what.startswith("calls that repeat") and e.value == "16 of 80 (20%)" for e in money.evidence)
    assert hotspot.candidates(out) == {"render": ["/"]}
    # a second probe pass on render: its arguments repeat
    rows = {"render": [{"request": "p1", "uri": "/", "calls": 2, "distinct": 1, "defined_at": "r.php:1"}]}
    hotspot.attach_probe(out, {"render": "r.php:1"}, rows)
    assert hot["render"].details["probe"]["repeat_pct"] == 50.0
    assert "per-request cache" in hot["render"].details["look_at"] and hot["render"].summary.endswith(
        hot["render"].details["look_at"])
    assert hotspot.candidates(out) == {}


# -- the accounting with hotspot findings in it ---------------------------------------------------

def test_hotspot_findings_own_nothing_and_are_noted_on_their_rows():
    ctx = ctx_of()
    plain = A.of_context(ctx, [])
    found = hotspot.after_probe(ctx, [], [])
    acc = A.of_context(ctx, found)
    assert [f.key for f in found] == ["hotspot", "hotspot-2"]
    assert acc.overall.explained_us == plain.overall.explained_us == 0.0
    assert acc.overall.unexplained_pct == 100.0 and acc.findings == []
    assert acc.informational == ["hotspot", "hotspot-2"]
    render = next(h for h in acc.hotspots["inclusive"] if h.name == "render")
    assert render.noted_by == ["hotspot"]
    assert A.claim_of(found[0]) is None
    # with a finding that explains render, the hotspot on money adds nothing to the explained time
    rc = Finding(id="repeated-call", title="t", severity="high", share_pct=60.0, summary="", urls=["/"],
                 details={"function": "render", "nested": []}, key="repeated-call")
    both = A.of_context(ctx, hotspot.after_probe(ctx, [rc], []))
    assert [f.id for f in hotspot.after_probe(ctx, [rc], [])] == ["repeated-call", "hotspot"]
    alone = A.of_context(ctx, [rc])
    assert both.overall.explained_us == alone.overall.explained_us == pytest.approx(24_000)
    o = both.overall
    assert math.isclose(o.explained_us + o.unexplained_us, o.total_us)
    assert o.explained_pct + o.unexplained_pct == pytest.approx(100.0)


# -- builtin families and engine subsystems (perf) ------------------------------------------------

def _f(symbol, dso="/usr/sbin/php-fpm8.2"):
    return ["0", symbol, 0, dso]


VM_ONLY = [_f("ZEND_ADD_SPEC_HANDLER"), _f("execute_ex")]
PREG = [_f("pcre2_match_8", "/usr/lib/libpcre2-8.so"), _f("zif_preg_match"), _f("execute_ex")]
GC = [_f("zend_gc_collect_cycles"), _f("execute_ex")]
HASH = [_f("zend_hash_find"), _f("execute_ex")]
DB = [_f("mysqlnd.so+0x10", "/usr/lib/php/20220829/mysqlnd.so"), _f("execute_ex")]

# one request: (stack, native frames, samples); 25 samples of 1 ms, each wholly on the CPU
NATIVE_ROWS = ([("/app/index.php;page;render", VM_ONLY, 10), ("/app/index.php;page;render", PREG, 2)]
               + [(f"/app/index.php;page;f{i}", PREG, 1) for i in range(1, 7)]       # regex spread: 4% each
               + [(f"/app/index.php;page;g{i}", GC, 1) for i in range(1, 4)]         # gc spread
               + [("/app/index.php;page;query", DB, 2), ("/app/index.php;page;h1", HASH, 1),
                  ("/app/index.php;page;v1", VM_ONLY, 1)])


def native_ctx(n=4, rows=NATIVE_ROWS, thresholds=None):
    from lockdown.bundle.model import PerfSample
    reqs = [request(f"r{i}", "/", wall_us=25_000, pid=100 + i) for i in range(n)]
    reqs.append(request("r9", "/", instrumented=True))
    calls = dict(page=("main()", 1, {}), render=("page", 2, {}), query=("page", 2, {"mysqli::query": 1}),
                 **{f"f{i}": ("page", 1, {"preg_match": 3}) for i in range(1, 7)})
    c = context(reqs, xhprof={"r9": xh(**calls)}, thresholds=thresholds,
                capture={"excimer_period_ms": PERIOD, "excimer_clock": "wall",
                         "collect": ["excimer", "xhprof", "perf"]})
    profiles, perf = [], []
    for i in range(n):
        stacks = sorted({s for s, _, _ in rows})
        samples, t = [], 0
        for stack, frames, k in rows:
            for _ in range(k):
                t += 1
                samples.append([t * MS, 1, stacks.index(stack)])
                perf.append(PerfSample(time_ns=t * MS - MS // 3, pid=100 + i, tid=100 + i, comm="php-fpm",
                                       period=MS, request=f"r{i}", frames=frames))
        profiles.append(ExcimerProfile(f"r{i}", 100 + i, stacks, samples, start_ns=0))
    c.excimer_profiles, c.native = profiles, perf
    return c


def test_builtin_families_and_subsystems_outside_the_function_hotspots():
    cases = hotspot.decide(native_ctx(), [])
    # render: 12 of 25 samples (48%), a function hotspot; f1..f6 (4% each) and g1..g3 are none.
    # Outside render and the database: regex 6 samples (24%), gc 3 (12%), hashtable 1 (4%, under
    # the share), vm (PHP code: never a subsystem hotspot). render's own preg_match is render's.
    assert [(getattr(c, "function", None) or f"{c.kind}:{c.name}") for c in cases] == [
        "render", "builtin family:regex", "subsystem:gc"]
    _, regex, gc = cases
    assert regex.share == pytest.approx(24.0) and regex.samples == 24 and regex.ms_per_request == pytest.approx(6.0)
    assert gc.share == pytest.approx(12.0) and gc.samples == 12
    assert regex.members == [("preg_match", 100.0, 18)]             # 6 callers x 3 calls, xhprof of r9
    assert [f for f, _ in regex.callers] == [f"f{i}" for i in range(1, 6)]    # SHOWN of them, equal: as met
    assert all(p == pytest.approx(100 / 6) for _, p in regex.callers)
    assert regex.path[-1] == "preg_match" and regex.request_count == 4
    f = hotspot.describe(regex)
    assert f.subject == "hotspot:builtin family regex" and f.severity == "high" and f.share_pct == 24.0
    assert f.details["builtins"][0]["name"] == "preg_match" and "pattern" in f.details["look_at"]
    g = hotspot.describe(gc)
    assert g.subject == "hotspot:subsystem gc" and g.severity == "medium" and g.details["subsystem"] == "gc"
    # the hotspot findings' shares never add up to more than the unexplained time: no slice twice
    acc = A.of_context(native_ctx(), [])
    assert sum(c.share for c in cases) <= acc.overall.unexplained_pct + 1e-9
    # the floors: share, perf samples
    assert [c.name for c in hotspot.decide(native_ctx(thresholds={"hotspot": {"native_min_share_pct": 13}}), [])
            if isinstance(c, hotspot.NativeCase)] == ["regex"]
    assert [c.name for c in hotspot.decide(native_ctx(thresholds={"hotspot": {"native_min_samples": 13}}), [])
            if isinstance(c, hotspot.NativeCase)] == ["regex"]
    assert [c.name for c in hotspot.decide(native_ctx(thresholds={"hotspot": {"native_max_findings": 1}}), [])
            if isinstance(c, hotspot.NativeCase)] == ["regex"]


def test_a_family_a_finding_explains_is_no_hotspot_and_the_accounting_adds_up():
    ctx = native_ctx()
    # a finding on f1..f3 explains half the regex time: 3 samples a request left (12%)
    found = [Finding(id="repeated-call", title="t", severity="high", share_pct=12.0, summary="", urls=["/"],
                     details={"function": f"f{i}", "nested": []}, key=f"repeated-call-{i}") for i in range(1, 4)]
    regex = next(c for c in hotspot.decide(ctx, found) if isinstance(c, hotspot.NativeCase) and c.name == "regex")
    assert regex.share == pytest.approx(12.0)
    out = hotspot.after_probe(ctx, found, [])
    acc = A.of_context(ctx, out)
    o = acc.overall
    assert math.isclose(o.explained_us + o.unexplained_us, o.total_us)
    assert o.explained_pct == pytest.approx(12.0)                     # the hotspot findings own nothing
    fam = next(h for h in acc.hotspots["builtin_family"] if h.name == "regex")
    assert fam.noted_by == [next(f.key for f in out if f.details.get("case") == "builtin family regex")]
    sub = next(h for h in acc.hotspots["subsystem"] if h.name == "gc")
    assert sub.noted_by and sub.noted_by[0].startswith("hotspot")
    assert hotspot.candidates(out) == {"render": ["/"]}               # only functions are probed


def test_no_perf_no_native_hotspots():
    ctx = native_ctx()
    ctx.native = []
    ctx.manifest["capture"]["collect"] = ["excimer", "xhprof"]
    assert [getattr(c, "function", None) for c in hotspot.decide(ctx, [])] == ["render"]


def test_a_dispatcher_hotspot_is_not_told_to_cache_its_result():
    """A hook runner (WordPress's WP_Hook::apply_filters: 36% of a page) runs what it is given:
    its calls repeat their arguments, yet a cache of its result would skip its callbacks' work.
    The finding points at the callbacks instead, whatever the probe counted."""
    rows = [("/app/index.php;page;hooks", 6), ("/app/index.php;page", 1)]
    xhprof = xh(page=("main()", 1, {}), hooks=("page", 20, {"call_user_func_array": 1}))
    xhprof.update({"call_user_func_array==>cb_one": {"ct": 10, "wt": 100},
                   "call_user_func_array==>cb_two": {"ct": 10, "wt": 100},
                   "page==>cb_three": {"ct": 1, "wt": 10}})
    [c] = hotspot.decide(ctx_of(rows, xhprof=xhprof), [])      # no other finding explains it
    assert c.function == "hooks" and c.dispatcher
    c.probe = {"repeat_pct": 54.0}
    look = hotspot.describe_look(c)
    assert "cache of its result would skip" in look and "first thing to try" not in look
    [d] = hotspot.decide(ctx_of(rows, xhprof=xh(page=("main()", 1, {}), hooks=("page", 20, {"str_repeat": 3}))), [])
    assert not d.dispatcher
    # ... and after the argument probe too (the finding is described again from its details)
    c.probe = None
    f = hotspot.describe(c)
    hotspot.describe_probed(f, {"function": "hooks", "located": "h.php:1", "requests": 1, "calls": 20,
                                "repeats": 11, "repeat_pct": 55.0, "rows": []})
    assert "callbacks it is given" in f.details["look_at"] and "first thing to try" not in f.details["look_at"]


def test_a_hotspot_that_changes_state_on_every_call_is_not_told_to_cache_its_result():
    """DokuWiki's tpl_flush(): no arguments (every call "repeats"), no result, and each call
    flushes the output buffer. Its time is output handed to the web server; a cache would only
    stop the flushing. Told so, before and after the probe."""
    rows = [("/app/index.php;page;tpl_flush", 6), ("/app/index.php;page", 1)]
    xhprof = xh(page=("main()", 1, {}), tpl_flush=("page", 12, {"ob_flush": 1, "flush": 1}))
    [c] = hotspot.decide(ctx_of(rows, xhprof=xhprof), [])
    assert c.state_change in ("flush", "ob_flush")
    f = hotspot.describe(c)
    hotspot.describe_probed(f, {"function": "tpl_flush", "located": "t.php:1", "requests": 1, "calls": 12,
                                "repeats": 11, "repeat_pct": 92.0, "rows": []})
    look = f.details["look_at"]
    assert "changes state" in look and "flush less often" in look and "first thing to try" not in look


CLOSURE = "{closure:/app/src/Db.php(12)}"        # Excimer's name; xhprof's is Db::{closure}
CLOSURE_ROWS = [(f"/app/index.php;page;Db::run;{CLOSURE}", 6), ("/app/index.php;page;money", 3),
                ("/app/index.php;page", 1)]


@pytest.mark.parametrize("callee, hot", [("PDOStatement::execute", ["money"]),
                                         ("str_replace", [CLOSURE, "money"])])
def test_a_closure_is_joined_to_its_xhprof_name(callee, hot):
    """Laravel runs every statement in a closure: its samples are the database's time once
    Excimer's name of it is joined to xhprof's; a closure that runs no query is a hotspot with
    its calls counted."""
    xhprof = xh(page=("main()", 1, {}), money=("page", 40, {"str_getcsv": 25}),
                **{"Db::run": ("page", 2, {}), "Db::{closure}": ("Db::run", 2, {callee: 1})})
    c = ctx_of(CLOSURE_ROWS, xhprof=xhprof)
    assert c.closure_names == {CLOSURE: "Db::{closure}"} and c.xhprof_name(CLOSURE) == "Db::{closure}"
    cases = hotspot.decide(c, [])
    assert names(cases) == hot
    assert cases[0].calls == (2 if hot[0] == CLOSURE else 40)
