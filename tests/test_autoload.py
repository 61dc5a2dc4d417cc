"""autoload (lockdown/analyzers/detectors/autoload.py): an autoloader that tests several files per
class, on synthetic contexts (tests/contexts.py) with the counts worked out by hand: how an
autoloader is recognised (called by class_exists or spl_autoload_call, or named so), file tests
under it and under the functions it calls, the PSR-4 single candidate left out, the share from
Excimer or xhprof. The real capture is tests/test_ledger.py's."""
from __future__ import annotations

import pytest

from contexts import context, request
from lockdown.analyzers.detectors import autoload


def xh(edges):
    """xhprof array from {(caller, callee): calls}, 10 us a call; main() 10 ms."""
    out = {"main()": {"ct": 1, "wt": 10_000}}
    for (a, b), ct in edges.items():
        out[f"{a}==>{b}" if a else b] = {"ct": ct, "wt": 10 * ct}
    return out


def ctx_of(edges, n=2, excimer=None, thresholds=None, url="/"):
    """n xhprof-profiled requests, and the timed requests `excimer` names (r10, r11...)."""
    reqs = [request(f"r{i}", url, wall_us=10_000, instrumented=True) for i in range(n)]
    reqs += [request(rid, url, wall_us=10_000) for rid in sorted(excimer or {})]
    return context(reqs, xhprof={f"r{i}": xh(edges) for i in range(n)}, excimer=excimer, thresholds=thresholds)


WALK = {("main()", "spl_autoload_register"): 1, ("main()", "shop_loader"): 30, ("page", "shop_loader"): 10,
        ("main()", "page"): 1, ("main()", "class_exists"): 2, ("class_exists", "shop_loader"): 2,
        ("shop_loader", "get_include_path"): 42, ("shop_loader", "file_exists"): 210,
        ("shop_loader", "str_replace"): 42}


def test_a_loader_walking_an_include_path():
    cases = autoload.decide(ctx_of(WALK))
    assert [c.function for c in cases] == ["shop_loader"]
    c = cases[0]
    assert c.calls == 42 and c.tests == {"file_exists": 210} and c.per_class == 5.0
    assert c.include_path_reads == 42 and c.urls == ["/"] and c.profiles == ["r0", "r1"]
    assert c.callers == ["main()", "page", "class_exists"]
    # no Excimer: the share is xhprof's inclusive time, 42 calls x 10 us of 10 ms
    assert not c.by_excimer and c.share == pytest.approx(4.2)
    f = autoload.describe(c)
    assert f.id == "autoload" and f.subject == "autoload:shop_loader" and f.severity == "medium"
    assert f.details["tests_per_class"] == 5.0 and "composer dump-autoload -o" in f.summary


def test_tests_in_the_functions_it_calls_count_and_the_name_is_enough():
    edges = {("main()", "Vendor\\Loader::loadClass"): 20, ("Vendor\\Loader::loadClass", "Vendor\\Loader::find"): 20,
             ("Vendor\\Loader::find", "is_file"): 50, ("Vendor\\Loader::find", "stream_resolve_include_path"): 10}
    c = autoload.decide(ctx_of(edges))[0]
    assert c.function == "Vendor\\Loader::loadClass" and c.tests == {"is_file": 50, "stream_resolve_include_path": 10}
    assert c.per_class == 3.0


def test_one_candidate_per_class_is_no_walk():
    psr4 = {("main()", "class_exists"): 1, ("class_exists", "app_loader"): 40, ("app_loader", "is_file"): 40}
    assert autoload.decide(ctx_of(psr4)) == []
    # the threshold decides: at 1.0 a class, the same loader is reported
    assert [c.function for c in autoload.decide(ctx_of(psr4, thresholds={"autoload": {"min_lookups_per_class": 1.0}}))] \
        == ["app_loader"]


def test_not_an_autoloader_and_too_small():
    # the same calls by a function PHP does not run as an autoloader, with no such name
    other = {("main()", "find_template"): 40, ("find_template", "file_exists"): 200}
    assert autoload.decide(ctx_of(other)) == []
    assert autoload.decide(ctx_of(WALK, thresholds={"autoload": {"min_share_pct": 5.0}})) == []


def test_share_from_excimer_when_it_names_the_loader():
    excimer = {f"r1{i}": {"/app/index.php;page;shop_loader;/app/lib/core/Shop/Cart.php": 3,
                         "/app/index.php;page;shop_loader": 2, "/app/index.php;page": 15} for i in range(2)}
    c = autoload.decide(ctx_of(WALK, excimer=excimer))[0]
    assert c.by_excimer and c.share == pytest.approx(25.0)
    assert c.found_in == ["/app/lib/core/Shop"]
    assert autoload.describe(c).severity == "high"
