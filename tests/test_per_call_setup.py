"""per-call-setup (lockdown/analyzers/detectors/per_call_setup.py, docs/detectors.md): the same
setup redone on every call of a function, from xhprof's call graph, on synthetic contexts
(tests/contexts.py) whose expected values are worked out by hand from the rule; ordinary
per-row work (a renderer called once per row) is not flagged. No server."""
from __future__ import annotations

import pytest

from contexts import context, request
from lockdown.analyzers import accounting as A
from lockdown.analyzers.detectors import detect, per_call_setup as P

BUILTINS = ["str_getcsv", "array_combine", "number_format", "explode", "htmlspecialchars", "implode", "trim"]
PHP = {"ini": {}, "extensions": {}, "zend_extensions": ["Zend OPcache"], "internal_functions": BUILTINS}


def xh(fn, caller, calls, callees, self_us=2):
    """An xhprof profile: `fn` called `calls` times by `caller`, each callee {name: (calls in
    all, wt in all)}; fn's wt is its callees' plus `self_us` a call."""
    wt = sum(w for _, w in callees.values()) + self_us * calls
    out = {"main()": {"ct": 1, "wt": 100_000}, "main()==>page": {"ct": 1, "wt": 90_000},
           f"{caller}==>{fn}": {"ct": calls, "wt": wt}}
    for c, (ct, w) in callees.items():
        out[f"{fn}==>{c}"] = {"ct": ct, "wt": w}
    return out


def ctx_of(profiles, excimer=None, thresholds=None):
    """profiles: {request id: (url, xhprof)}; timed requests r1..r4 with Excimer stacks."""
    reqs = [request(f"r{i}", "/", wall_us=10_000) for i in range(1, 5)]
    reqs += [request(rid, url, instrumented=True) for rid, (url, _) in profiles.items()]
    ex = excimer if excimer is not None else {f"r{i}": {"index.php;page;fmt": 60, "index.php;page": 40}
                                              for i in range(1, 5)}
    return context(reqs, xhprof={rid: x for rid, (_, x) in profiles.items()}, excimer=ex, php=PHP,
                   thresholds=thresholds)


def setup(calls):
    """fmt parses a 24-row table on each call: str_getcsv 25 and array_combine 24 times a call."""
    return xh("fmt", "page", calls, {"str_getcsv": (25 * calls, 40 * calls), "array_combine": (24 * calls, 8 * calls),
                                     "number_format": (calls, 1 * calls)})


def test_the_same_loop_on_every_call_is_setup():
    ctx = ctx_of({"r10": ("/", setup(40)), "r11": ("/invoice", setup(12))})
    (c,) = P.decide(ctx)
    assert c.function == "fmt" and c.calls == 26 and c.calls_seen == [12, 40]
    assert c.loops == [("str_getcsv", 25.0), ("array_combine", 24.0)]
    assert c.setup_fraction == pytest.approx(50 / 51)                 # all but number_format's 1 of 51 us a call
    assert c.whole_share == pytest.approx(60.0) and c.basis == "excimer"  # 60 of 100 samples
    assert c.share == pytest.approx(60.0 * 50 / 51 * 25 / 26)
    assert c.urls == ["/", "/invoice"] and c.profiles == ["r10", "r11"]
    f = P.describe(c)
    assert f.id == "per-call-setup" and f.subject == "per-call-setup:fmt" and f.severity == "high"
    assert f.details["loops"][0] == {"builtin": "str_getcsv", "per_call": 25.0}
    assert any(e.value == "str_getcsv (25 per call), array_combine (24 per call)" for e in f.evidence)


def test_a_few_samples_give_way_to_xhprof():
    """A fast page sampled every 2 ms: glossary's CI run had 4 samples in 200 requests, none on
    the slug maker, and its 55% went unreported. Under 50 samples the share is xhprof's."""
    few = {"r1": {"index.php;page": 3}, "r2": {"index.php;page;other": 1}}
    (c,) = P.decide(ctx_of({"r10": ("/", setup(40)), "r11": ("/invoice", setup(12))}, excimer=few,
                           thresholds={"per-call-setup": {"min_share_pct": 0.1}}))
    # the median of the profiled requests' inclusive time over their 100 ms: 2,040 and 612 us
    assert c.basis == "xhprof" and c.function == "fmt" and c.whole_share == pytest.approx((2.04 + 0.612) / 2)


def test_ordinary_per_row_work_is_not_flagged():
    # a renderer called once per row: a few builtin calls per call, the same on every call
    row = xh("fmt", "page", 30, {"htmlspecialchars": (5 * 30, 30 * 30), "implode": (30, 5 * 30)})
    assert P.decide(ctx_of({"r10": ("/", row), "r11": ("/b", row)})) == []
    # ... and a per-row loop over the row's own items: its size per call differs from page to page
    items = {"r10": ("/", xh("fmt", "page", 30, {"htmlspecialchars": (9 * 30, 30 * 30)})),
             "r11": ("/b", xh("fmt", "page", 20, {"htmlspecialchars": (10 * 20, 30 * 20)}))}
    assert P.decide(ctx_of(items)) == []
    # ... or one that is not a whole number of times per call
    uneven = {"r10": ("/", xh("fmt", "page", 30, {"htmlspecialchars": (275, 300 * 30)}))}
    assert P.decide(ctx_of(uneven)) == []
    # the same pages, each a whole and equal 9 per call: that loop does not follow the data
    even = {"r10": ("/", xh("fmt", "page", 30, {"htmlspecialchars": (9 * 30, 30 * 30)})),
            "r11": ("/b", xh("fmt", "page", 20, {"htmlspecialchars": (9 * 20, 30 * 20)}))}
    assert [c.function for c in P.decide(ctx_of(even))] == ["fmt"]


def test_the_floors():
    profiles = {"r10": ("/", setup(40))}
    assert [c.function for c in P.decide(ctx_of(profiles))] == ["fmt"]
    # called once a request: nothing redone
    assert P.decide(ctx_of({"r10": ("/", setup(1))})) == []
    # a loop under min_loop_calls
    assert P.decide(ctx_of(profiles, thresholds={"per-call-setup": {"min_loop_calls": 26}})) == []
    # the per-call part (the other callees) is most of the call: 80 of 122 us a call
    heavy = {"r10": ("/", xh("fmt", "page", 40, {"str_getcsv": (25 * 40, 40 * 40), "number_format": (40, 80 * 40)}))}
    assert P.decide(ctx_of(heavy)) == []
    assert P.decide(ctx_of(heavy, thresholds={"per-call-setup": {"min_setup_fraction": 0.3}}))[0].setup_fraction \
        == pytest.approx(42 / 122)
    # its share: 1 of 10 samples x 0.98 x 39/40 = 9.6%; under a floor of 10%
    small = {f"r{i}": {"index.php;page;fmt": 10, "index.php;page": 90} for i in range(1, 5)}
    assert P.decide(ctx_of(profiles, excimer=small))[0].share == pytest.approx(10.0 * 50 / 51 * 39 / 40)
    assert P.decide(ctx_of(profiles, excimer=small, thresholds={"per-call-setup": {"min_share_pct": 10}})) == []


def test_its_time_is_explained_once_beside_repeated_call():
    ctx = ctx_of({"r10": ("/", setup(40)), "r11": ("/invoice", setup(12))})
    found = [f for f in detect(ctx) if f.is_defect and f.details.get("function") == "fmt"]
    # 40 calls of a costly function: repeated-call's candidate too (the argument probe judges it)
    assert sorted(f.id for f in found) == ["per-call-setup", "repeated-call"]
    assert A.claim_of(next(f for f in found if f.id == "per-call-setup")).frames == frozenset({"fmt"})
    slices = [A.Slice("r1", 1000.0, ("index.php", "page", "fmt")), A.Slice("r1", 1000.0, ("index.php", "page"))]
    acc = A.account(slices, {"r1": "/"}, found)
    assert acc.overall.explained_us == 1000.0 and acc.overlap_us == 1000.0     # owned twice, counted once
    assert acc.overall.explained_us + acc.overall.unexplained_us == acc.overall.total_us
