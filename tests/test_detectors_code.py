"""fs-scan and repeated-call on synthetic xhprof data: the directory-walk variants (opendir,
scandir, glob, RecursiveDirectoryIterator), the boundaries, and exact evidence."""
import pytest
from contexts import context, request

from lockdown.analyzers import detectors
from lockdown.analyzers.detectors import fs_scan, load_thresholds, repeated_call

PHP = {"ini": {}, "extensions": {}, "zend_extensions": ["Zend OPcache"],
       "internal_functions": ["opendir", "readdir", "closedir", "is_dir", "scandir", "glob",
                              "preg_match", "file_get_contents", "json_decode", "array_merge"],
       "internal_classes": ["RecursiveDirectoryIterator", "RecursiveIteratorIterator"]}


def walk_profile(walker="find_plugin", lookup="plugin_path", dirs=120, style="opendir"):
    """One request's xhprof array: main() -> lookup -> walker (recursive) -> the walk builtins."""
    p = {"main()": {"ct": 1, "wt": 90_000}, f"main()==>{lookup}": {"ct": 1, "wt": 60_000},
         f"{lookup}==>{walker}": {"ct": 1, "wt": 59_000},
         f"{walker}==>{walker}@1": {"ct": dirs - 1, "wt": 50_000}}
    if style == "opendir":
        p.update({f"{walker}==>opendir": {"ct": dirs, "wt": 3000},
                  f"{walker}==>readdir": {"ct": dirs * 6, "wt": 4000},
                  f"{walker}==>closedir": {"ct": dirs, "wt": 500},
                  f"{walker}==>is_dir": {"ct": dirs * 4, "wt": 2000}})
    elif style == "scandir":
        p.update({f"{walker}==>scandir": {"ct": dirs, "wt": 5000},
                  f"{walker}==>is_dir": {"ct": dirs * 4, "wt": 2000}})
    elif style == "glob":
        p.update({f"{walker}==>glob": {"ct": dirs, "wt": 6000},
                  f"{walker}==>is_dir": {"ct": dirs, "wt": 900}})
    else:
        p = {"main()": {"ct": 1, "wt": 90_000}, f"main()==>{lookup}": {"ct": 1, "wt": 60_000},
             f"{lookup}==>{walker}": {"ct": 1, "wt": 59_000},
             f"{walker}==>RecursiveDirectoryIterator::__construct": {"ct": 1, "wt": 100},
             f"{walker}==>RecursiveIteratorIterator::next": {"ct": dirs * 5, "wt": 9000},
             "RecursiveIteratorIterator::next==>RecursiveDirectoryIterator::hasChildren": {"ct": dirs * 5, "wt": 3000},
             "RecursiveIteratorIterator::next==>RecursiveDirectoryIterator::getChildren": {"ct": dirs - 1, "wt": 3000}}
    return p


def scan_context(style="opendir", profiled=3, scanning=3, **kw):
    reqs = [request(f"r{i:06d}", "/", instrumented=True) for i in range(profiled)]
    xh = {r.id: walk_profile(style=style, **kw) if i < scanning else {"main()": {"ct": 1, "wt": 9000}}
          for i, r in enumerate(reqs)}
    return context(reqs, xhprof=xh, php=PHP)


def test_opendir_walk_with_exact_counts_and_chain():
    [f] = fs_scan.detect(scan_context(dirs=120))
    assert f.details["walker"] == "find_plugin" and f.details["lookup"] == "plugin_path"
    assert f.details["calls_per_request"]["opendir"] == [120, 120, 120]
    assert f.details["calls_per_request"]["readdir"] == [720] * 3
    assert f.details["directories"] == [120] * 3
    assert f.details["chain"][-3:] == ["plugin_path", "find_plugin", "readdir"]
    # a share's label carries its unit: the value is a bare number
    assert {e.what: e.value for e in f.evidence}["share of request time, %"] == f.share_pct


def test_walk_share_from_excimer_when_the_walker_is_sampled():
    reqs = [request(f"r{i:06d}", "/", instrumented=True) for i in range(3)] + \
        [request("r000010", "/"), request("r000011", "/")]
    excimer = {"r000010": {"main;plugin_path;find_plugin;opendir": 3, "main;x": 7}, "r000011": {"main;y": 10}}
    [f] = fs_scan.detect(context(reqs, xhprof={r.id: walk_profile() for r in reqs[:3]}, excimer=excimer, php=PHP))
    assert f.share_pct == 15.0 and f.severity == "high"        # 3 of the 20 timed samples
    assert {e.what: e.source for e in f.evidence}["share of request time, %"].startswith("Excimer samples")
    # without samples: xhprof's time entering the walker (59 ms) over the 100 ms requests
    assert fs_scan.detect(scan_context())[0].share_pct == 59.0
    # requests that walk different trees: medians, and each builtin's range
    xh = {r.id: walk_profile(dirs=d) for r, d in zip(reqs, (100, 120, 110))}
    [g] = fs_scan.detect(context(reqs[:3], xhprof=xh, php=PHP))
    values = {e.what: e.value for e in g.evidence}
    assert values["opendir calls per request"] == "100..120" and values["readdir calls per request"] == "600..720"
    assert values["directories walked per request (median)"] == 110
    assert values["walker (user function) calls per request"] == 110
    assert g.title == "Every request walks 110 directories to discover what they hold (find_plugin)"
    assert "1320 directory calls per request, driven by find_plugin called from plugin_path." in g.summary


def test_walk_variants_other_names():
    for style, opener in (("scandir", "scandir"), ("glob", "glob"),
                          ("iterator", "RecursiveDirectoryIterator::getChildren")):
        [f] = fs_scan.detect(scan_context(style=style, walker="locate_template", lookup="theme_lookup", dirs=80))
        assert f.details["walker"] == "locate_template", style
        assert opener in f.details["calls_per_request"], style
        assert f.details["directories"] == [80] * 3, style


def test_small_or_occasional_walks_are_not_flagged():
    assert fs_scan.detect(scan_context(dirs=5)) == []                   # 60 calls: under 100
    assert fs_scan.detect(scan_context(profiled=5, scanning=1)) == []   # a walk in 1 of 5 requests


def memo_profile(calls=60, per_call=300, callees=(("file_get_contents", 1), ("json_decode", 1)),
                 fn="theme_settings", extra=None):
    p = {"main()": {"ct": 1, "wt": 50_000}, f"page==>{fn}": {"ct": calls, "wt": calls * per_call},
         "main()==>page": {"ct": 1, "wt": 40_000}}
    for c, n in callees:
        p[f"{fn}==>{c}"] = {"ct": calls * n, "wt": calls * 50}
    p.update(extra or {})
    return p


def memo_context(profile, wall_us=50_000):
    reqs = [request("r000000", "/", instrumented=True, wall_us=wall_us)]
    return context(reqs, xhprof={"r000000": profile}, php=PHP)


def test_repeated_call_found_with_exact_counts():
    [f] = repeated_call.detect(memo_context(memo_profile()))
    assert f.details["function"] == "theme_settings"
    assert f.details["rows"][0]["calls"] == 60
    assert f.details["rows"][0]["callees"] == 2
    # 60 calls of 300 us over a 50 ms request; a cache keeps one call: 59 x 300 us = 35.4%
    assert f.share_pct == 35.4


def test_repeated_call_per_call_time_comes_from_the_timed_requests():
    """xhprof's inclusive time is the instrumented request's; the per-call cost quoted first is
    the timed requests' (Excimer share x wall / calls), with xhprof's beside it, named."""
    reqs = [request("r000000", "/", instrumented=True, wall_us=50_000),
            request("r000001", "/", wall_us=20_000), request("r000002", "/", wall_us=30_000),
            request("r000003", "/other", wall_us=90_000)]
    # on / the function is on 40% and 60% of the samples: 8 ms and 18 ms, 13 ms per request
    excimer = {"r000001": {"main;page;theme_settings;json_decode": 4, "main;page": 6},
               "r000002": {"main;page;theme_settings": 6, "main": 4},
               "r000003": {"main;theme_settings": 10}}           # another URL: not counted
    ctx = context(reqs, xhprof={"r000000": memo_profile()}, excimer=excimer, php=PHP)
    [f] = repeated_call.detect(ctx)
    values = {e.what: e.value for e in f.evidence}
    assert values["inclusive time per call in timed requests (us)"] == round(13_000 / 60)
    assert values["inclusive time per call under xhprof (us, median)"] == 300
    assert {e.what: e.source for e in f.evidence}["calls per request"] == "xhprof of 1 request: r000000"
    assert "about 217 us per call in the timed requests (300 us under xhprof's instrumentation)" in f.summary
    # the share a cache saves: 20 of the 30 timed samples have it on the stack, 59 of 60 calls go
    assert f.share_pct == round(100 * 20 / 30 * 59 / 60, 2)
    # on 4% of the timed samples (a cache would save 3.9%), but 0.04 x 25 ms / 60 = 17 us a call
    # there, 25 us under xhprof: under min_us_per_call (20) where it counts, no finding
    slow_only_under_xhprof = {"r000001": {"main;page;theme_settings": 40, "main;page": 960},
                              "r000002": {"main;page;theme_settings": 40, "main": 960}}
    assert repeated_call.detect(context(reqs, xhprof={"r000000": memo_profile(per_call=25)},
                                        excimer=slow_only_under_xhprof, php=PHP)) == []
    # without Excimer samples only xhprof's figure is left, and it says where it comes from
    [g] = repeated_call.detect(memo_context(memo_profile()))
    assert "300 us per call under xhprof's instrumentation" in g.summary
    assert "inclusive time per call in timed requests (us)" not in {e.what for e in g.evidence}


def test_a_repeated_call_inside_another_says_their_shares_overlap():
    """WordPress: wp_get_registered_image_subsizes runs through get_default_block_editor_settings,
    which wp_get_global_settings calls and other code calls too: two findings, and the inner
    one says how much of its time the outer one's cache takes away, until the probe dismisses
    the outer one."""
    profile = {"main()": {"ct": 1, "wt": 50_000}, "main()==>page": {"ct": 1, "wt": 45_000},
               "page==>outer": {"ct": 60, "wt": 18_000}, "outer==>file_get_contents": {"ct": 60, "wt": 3000},
               "outer==>editor": {"ct": 60, "wt": 12_000}, "page==>editor": {"ct": 40, "wt": 8000},
               "editor==>subsizes": {"ct": 100, "wt": 20_000}, "editor==>array_merge": {"ct": 37, "wt": 100},
               "subsizes==>json_decode": {"ct": 100, "wt": 2000}}
    reqs = [request("r000000", "/", instrumented=True, wall_us=50_000), request("r000001", "/", wall_us=20_000)]
    excimer = {"r000001": {"main;page;outer;editor;subsizes": 6, "main;page;editor;subsizes": 4,
                           "main;page;outer": 10, "main;page": 30}}
    ctx = context(reqs, xhprof={"r000000": profile}, excimer=excimer, php=PHP)
    found = {f.details["function"]: f for f in detectors.detect(ctx) if f.id == "repeated-call"}
    assert set(found) == {"outer", "subsizes"}
    inner = found["subsizes"]
    assert inner.details["inside"]["function"] == "outer" and inner.details["inside"]["pct"] == 60.0
    assert "60% of its time is spent inside calls of outer, also flagged" in inner.summary
    assert {e.what: e.value for e in inner.evidence}["time spent inside calls of outer, flagged too"] == "60%"
    assert "inside" not in found["outer"].details
    # the probe finds outer called on different data each time: the overlap is no longer said
    rows = {"outer": [{"request": "p1", "uri": "/", "calls": 60, "distinct": 60, "distinct_arguments": 60}],
            "subsizes": [{"request": "p1", "uri": "/", "calls": 100, "distinct": 1, "distinct_arguments": 1}]}
    kept, dismissed = repeated_call.apply_probe(list(found.values()), {"outer": "a.php:1", "subsizes": "b.php:2"},
                                                rows, load_thresholds())
    assert [d["function"] for d in dismissed] == ["outer"] and [f.details["function"] for f in kept] == ["subsizes"]
    assert "outer" not in kept[0].summary and "inside" not in kept[0].details
    assert not any("outer" in e.what for e in kept[0].evidence)


def test_repeated_call_boundaries():
    # uneven child calls: a dispatcher-like function, different work per call
    assert repeated_call.detect(memo_context(memo_profile(callees=(("json_decode", 1), ("array_merge", 1)),
        extra={"theme_settings==>array_merge": {"ct": 61, "wt": 100}}))) == []
    # runs callbacks: a dispatcher
    assert repeated_call.detect(memo_context(memo_profile(callees=(("call_user_func_array", 1),)))) == []
    # sends a query on every call: left to the query detectors
    assert repeated_call.detect(memo_context(memo_profile(callees=(("db_get", 1),),
        extra={"db_get==>mysqli::query": {"ct": 60, "wt": 900}}))) == []
    # ... by any builtin that sends a statement (one list with the round trip's), or a prepare
    for sender in ("mysqli_execute_query", "mysqli::multi_query", "mysqli_stmt::prepare", "PDOStatement::execute"):
        assert repeated_call.detect(memo_context(memo_profile(callees=(("db_get", 1),),
            extra={f"db_get==>{sender}": {"ct": 60, "wt": 900}}))) == [], sender
    # a builtin that sends nothing does not make it a query pattern
    assert repeated_call.detect(memo_context(memo_profile(callees=(("db_get", 1),),
        extra={"db_get==>mysqli_escape_string": {"ct": 60, "wt": 900}})))
    # cheap: under min_us_per_call
    assert repeated_call.detect(memo_context(memo_profile(per_call=5, calls=1000))) == []
    # recursive (xhprof saw it re-entered): a walk, not a repeat
    doubled = memo_profile(extra={"theme_settings==>theme_settings@1": {"ct": 5, "wt": 10}})
    assert repeated_call.detect(memo_context(doubled)) == []


def test_fewer_calls_are_enough_when_they_cost_a_lot():
    """A theme getter called 39 times at 700 us (27% of a 100 ms page: an audit app's theme_get,
    verify +20% RPS with its memo) is a candidate; 39 calls that would save under
    costly_share_pct, or fewer than min_calls_when_costly, are not."""
    [f] = repeated_call.detect(memo_context(memo_profile(calls=39, per_call=700), wall_us=100_000))
    assert f.details["rows"][0]["calls"] == 39 and f.share_pct == 26.6          # 38 x 700 us
    assert repeated_call.detect(memo_context(memo_profile(calls=39, per_call=100), wall_us=100_000)) == []
    assert repeated_call.detect(memo_context(memo_profile(calls=19, per_call=2000), wall_us=100_000)) == []


def loader_context(under_fn):
    """`module_load` called 60 times per request (each call: `module_path`, then an include),
    profiled by xhprof in one request and sampled by Excimer in another; `under_fn` is the
    Excimer frames right under it."""
    profile = memo_profile(fn="module_load", callees=(("module_path", 1),), extra={
        "module_path==>file_exists": {"ct": 60, "wt": 600}})
    profile["module_load==>module_path"]["wt"] = 60 * 120
    reqs = [request("r000000", "/", instrumented=True), request("r000001", "/")]
    excimer = {"r000001": {f"/srv/app/index.php;page;module_load;{f}": n for f, n in under_fn.items()}
               | {"/srv/app/index.php;page": 40}}
    return context(reqs, xhprof={"r000000": profile}, excimer=excimer, php=PHP)


def test_loaders_are_not_memoization_candidates():
    """A function that spends its time in files it includes loads a different one on each call
    (xhprof keeps no arguments and no includes; Excimer shows the included script frames)."""
    loader = loader_context({"/srv/app/modules/m1/m1.module": 30, "module_path;file_exists": 10,
                             "/srv/app/modules/m2/m2.module;m2_init": 5})
    assert repeated_call.include_share_pct(loader, "module_load") == pytest.approx(100 * 35 / 45)
    assert repeated_call.detect(loader) == []            # neither the loader nor its helper
    # the same call shape with its time in functions is reported, with the Excimer share
    [f] = repeated_call.detect(loader_context({"module_path;file_exists": 10, "json_decode": 35}))
    assert f.details["function"] == "module_load" and repeated_call.include_share_pct(
        loader_context({"json_decode": 1}), "module_load") == 0
    # the limit is a threshold
    loose = loader_context({"/srv/app/modules/m1/m1.module": 30, "module_path;file_exists": 10})
    loose.thresholds["repeated-call"]["max_include_share_pct"] = 80.0
    assert [f.details["function"] for f in repeated_call.detect(loose)] == ["module_load"]


def test_walk_share_counts_recursion_once():
    [f] = fs_scan.detect(scan_context(dirs=120))
    assert f.share_pct == 59.0         # 59 ms entering the walker, of a 100 ms request


def test_inside_pct_counts_an_outer_function_above_the_innermost_call_in_timed_requests():
    from lockdown.analyzers.detectors.related import inside_pct
    reqs = [request("r000001", "/"), request("r000002", "/", instrumented=True)]
    excimer = {"r000001": {"main;outer;fn;x": 1, "main;fn;outer": 1,      # outer called by fn: not inside
                           "main;fn;outer;fn": 1, "main;other": 5, "main;fn": 1},
               "r000002": {"main;outer;fn": 50}}                           # instrumented: left out
    ctx = context(reqs, excimer=excimer)
    assert inside_pct(ctx, "fn", "outer") == 50.0          # 2 of the 4 samples with fn
    assert inside_pct(ctx, "nothing", "outer") is None
    # the shares over all samples: timed requests only
    assert ctx.excimer_total == 9 and ctx.php_share_pct(lambda f: f == "outer") == pytest.approx(300 / 9)
    assert context(reqs[1:], excimer=excimer).php_share_pct(lambda f: True) == 0.0      # none timed
    assert ctx.wall_us("r000002") == 100_000 and ctx.wall_us("nope") == 0
    assert context(reqs[1:]).server_share_of([]) == 0.0
