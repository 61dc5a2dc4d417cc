"""file-static-cache on synthetic xhprof data: a store read key by key with fseek/fread (the
shape of MediaWiki's LCStoreCDB over Cdb\\Reader\\PHP), other names and readers (fgets,
SplFileObject), the getter chosen among the store's layers, and what is not flagged."""
import pytest
from contexts import context, request

from lockdown.analyzers.call_graph import attributed
from lockdown.analyzers.detectors import file_static_cache

PHP = {"ini": {}, "extensions": {}, "zend_extensions": ["Zend OPcache"],
       "internal_functions": ["fopen", "fread", "fseek", "fgets", "fwrite", "unserialize", "strlen",
                              "file_get_contents"],
       "internal_classes": ["SplFileObject"]}


def store_profile(getter="Store::get", lookups=120, memo_calls=300, reads_per_lookup=2,
                  reader="fread", writes=0):
    """main() -> page -> Messages::get (a memo: `memo_calls` calls, `lookups` of them miss)
    -> `getter` -> Reader::find -> Reader::read (4 per lookup, buffered: `reads_per_lookup`
    of them call the read builtin) -> `reader`; the file is opened once."""
    p = {"main()": {"ct": 1, "wt": 90_000},
         "main()==>page": {"ct": 1, "wt": 80_000},
         "page==>Messages::get": {"ct": memo_calls, "wt": 30_000},
         "Messages::get==>strlen": {"ct": memo_calls, "wt": 300},
         f"Messages::get==>{getter}": {"ct": lookups, "wt": 24_000},
         f"{getter}==>Reader::open": {"ct": 1, "wt": 100},
         "Reader::open==>fopen": {"ct": 1, "wt": 40},
         f"{getter}==>Reader::find": {"ct": lookups, "wt": 18_000},
         f"{getter}==>unserialize": {"ct": lookups, "wt": 2_000},
         "Reader::find==>Reader::read": {"ct": 4 * lookups, "wt": 12_000},
         f"Reader::read==>{reader}": {"ct": reads_per_lookup * lookups, "wt": 3_000},
         "Reader::read==>fseek": {"ct": reads_per_lookup * lookups, "wt": 1_000}}
    if writes:
        p[f"{getter}==>fwrite"] = {"ct": writes, "wt": 50}
    return p


def store_context(profiles, excimer=None, urls=None):
    reqs = [request(f"r{i:06d}", (urls or ["/"] * len(profiles))[i], instrumented=True, wall_us=100_000)
            for i in range(len(profiles))]
    reqs += [request(f"r{i:06d}", "/") for i in range(100, 100 + len(excimer or {}))]
    xh = {r.id: p for r, p in zip(reqs, profiles)}
    ex = {f"r{100 + i:06d}": stacks for i, stacks in enumerate((excimer or {}).values())}
    return context(reqs, xhprof=xh, excimer=ex, php=PHP)


def test_store_read_per_lookup_with_exact_counts():
    [f] = file_static_cache.detect(store_context([store_profile(), store_profile(lookups=110)]))
    d = f.details
    assert d["function"] == "Store::get"               # not the memo above, not the reader inside
    assert d["lookups_per_request"] == {"min": 110, "median": 115, "max": 120}
    assert d["reads_per_request"] == {"min": 220, "median": 230, "max": 240}
    assert d["reads_per_lookup"] == 2.0
    assert d["opens_per_request"]["median"] == 1
    # one fseek before each fread: each may refill PHP's 8 KB stream buffer
    assert d["seeks_per_request"] == {"min": 220, "median": 230, "max": 240}
    assert d["refill_bytes_per_request"] == 230 * 8192
    assert d["reader_path"] == ["Store::get", "Reader::find", "Reader::read", "fread"]
    assert d["callers"] == [{"function": "Messages::get", "calls_per_request": 115}]
    # 2 x 24 ms over 230 lookups
    assert {e.what: e.value for e in f.evidence}["inclusive time per lookup (instrumented, inflated by xhprof)"] == \
        "208.7 us"
    # fewer seeks than reads: only a read after a seek refills the buffer
    seeking = store_profile()
    seeking["Reader::read==>fseek"] = {"ct": 60, "wt": 1_000}
    [g] = file_static_cache.detect(store_context([seeking, seeking]))
    assert g.details["refill_bytes_per_request"] == 60 * 8192
    # no Excimer: the getter's inclusive xhprof time over the two requests' wall time
    assert f.share_pct == pytest.approx(100 * 2 * 24_000 / 200_000)
    assert f.severity == "high"


def test_share_from_excimer_when_the_getter_is_sampled():
    excimer = {"a": {"/srv/index.php;page;Messages::get;Store::get;Reader::find": 6,
                     "/srv/index.php;page;render": 94}}
    [f] = file_static_cache.detect(store_context([store_profile()] * 2, excimer=excimer))
    assert f.share_pct == 6.0 and f.severity == "medium"
    assert any("excimer" in e.source for e in f.evidence)


def test_other_names_and_readers():
    for reader in ("fgets", "SplFileObject::fgets", "stream_get_line"):
        [f] = file_static_cache.detect(store_context([store_profile(getter="Config\\Dba::fetch",
                                                                    reader=reader)] * 3))
        assert f.details["function"] == "Config\\Dba::fetch", reader
        assert f.details["reader_path"][-1] == reader


def test_what_is_not_flagged():
    detect = file_static_cache.detect
    # fewer lookups than min_lookups_per_request (50)
    assert detect(store_context([store_profile(lookups=40, memo_calls=40)] * 3)) == []
    # a file read once and kept: under min_reads_per_lookup per call
    assert detect(store_context([store_profile(reads_per_lookup=0)] * 3)) == []
    assert detect(store_context([store_profile(lookups=200, memo_calls=200, reads_per_lookup=0.25)] * 3)) == []
    # a store that is written while serving (a cache being filled)
    assert detect(store_context([store_profile(writes=3)] * 3)) == []
    # seen in one profiled request only: repetition is not seen
    assert detect(store_context([store_profile()])) == []
    # in 1 of a URL's 3 profiled requests
    assert detect(store_context([store_profile(), {"main()": {"ct": 1, "wt": 9}},
                                 {"main()": {"ct": 1, "wt": 9}}])) == []


def test_thresholds_are_configurable():
    ctx = store_context([store_profile(lookups=40, memo_calls=40)] * 2)
    ctx.thresholds["file-static-cache"]["min_lookups_per_request"] = 30
    [f] = file_static_cache.detect(ctx)
    assert f.details["lookups_per_request"]["median"] == 40


def test_a_dense_outer_layer_is_the_getter():
    """A wrapper whose every call goes to the store reads as densely as the store: the
    outermost such layer is reported (the lookup the application makes)."""
    p = store_profile(memo_calls=120)          # Messages::get misses on every call now
    [f] = file_static_cache.detect(store_context([p, p]))
    assert f.details["function"] == "Messages::get"


def test_reads_attributed_through_deep_and_recursive_graphs():
    """Calls are credited in proportion to the calls each caller made; a cycle is credited
    one call deep; a call graph deeper than Python's recursion limit is no error."""
    edges = {("main()", "a"): {"ct": 1}, ("main()", "b"): {"ct": 3}, ("a", "get"): {"ct": 10},
             ("b", "get"): {"ct": 30}, ("get", "fread"): {"ct": 80}, ("get", "b"): {"ct": 1}}
    got = attributed(edges, lambda f: f == "fread")
    # a and b: 10 and 30 of the 40 calls get receives; get's one call back into b adds
    # nothing (going round the cycle would count get's reads again)
    assert got["get"] == 80 and got["a"] == pytest.approx(20) and got["b"] == pytest.approx(60)
    assert got["main()"] == pytest.approx(20 + 3 / 4 * 60)
    deep = {(f"f{i}", f"f{i + 1}"): {"ct": 1} for i in range(5000)} | {("f5000", "fread"): {"ct": 2}}
    assert attributed(deep, lambda f: f == "fread")["f0"] == 2
