"""debug-extension, opcache, pcre-jit-off, stat-storm and hot-builtins on synthetic contexts:
the engine's configuration (manifest php facts) with native samples and xhprof profiles as
evidence. Positive and negative cases, lockdown's own capture extensions never blamed, the
boundary between stat-storm and fs-scan's directory walks, exact call counts."""
from __future__ import annotations


import pytest

from contexts import context, native, request
from lockdown.analyzers.detectors import (debug_extension, hot_builtins, load_thresholds, opcache,
                                          pcre_jit_off, stat_storm)
from lockdown.analyzers.detectors.opcache import compiling
from lockdown.analyzers.findings import Finding

PHP = "/usr/sbin/php-fpm8.2"
EXT = "/usr/lib/php/20220829"
KERNEL = "[kernel.kallsyms]"
LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"
# the builders' defaults: wall 100 ms, CPU 80 ms per request -> on-CPU share x 0.8 = request share
CPU_RATIO = 0.8

VM = [("execute_ex", PHP), ("zend_execute", PHP), ("php_execute_script", PHP)]
COMPILE = [("_emalloc", PHP), ("zend_hash_add", PHP), ("zend_compile_top_stmt", PHP), ("compile_file", PHP),
           ("compile_filename", PHP)] + VM
EVAL = [("zend_compile_expr", PHP), ("compile_string", PHP), ("zend_eval_stringl", PHP)] + VM
REGEX = [("pcre2_match_8", "/usr/lib/x86_64-linux-gnu/libpcre2-8.so.0.11.2"), ("php_pcre_match_impl", PHP),
         ("php-fpm8.2+0x175520", PHP)] + VM
STAT = [("vfs_statx", KERNEL), ("__do_sys_newfstatat", KERNEL), ("__GI___fstatat64", LIBC), ("php_stat", PHP)] + VM
# OPcache checking an included file's timestamp (opcache.so has no symbols), and an include
# resolving its path through the realpath cache: what the settings act on; STAT above is a
# file_exists()-style builtin's own stat, which reaches the kernel whatever the settings
OPCACHE_SO = "/usr/lib/php/20220829/opcache.so"
INCLUDE_STAT = [("vfs_statx", KERNEL), ("__do_sys_newfstatat", KERNEL), ("__GI___fstatat64", LIBC),
                ("opcache.so+0x1a2b0", OPCACHE_SO), ("compile_filename", PHP)] + VM
RESOLVE = [("vfs_statx", KERNEL), ("__do_sys_newlstat", KERNEL), ("__GI___lstat64", LIBC), ("tsrm_realpath_r", PHP),
           ("virtual_file_ex", PHP), ("tsrm_realpath", PHP), ("php_resolve_path", PHP)] + VM
WALK = [("iterate_dir", KERNEL), ("__GI___getdents64", LIBC), ("__GI___readdir64", LIBC),
        ("_php_stream_readdir", PHP)] + VM


def php(ini=None, extensions=None, zend=("Zend OPcache",), internal=None, **more) -> dict:
    base = {"opcache.enable": "1", "opcache.memory_consumption": "128", "opcache.interned_strings_buffer": "8",
            "opcache.max_accelerated_files": "10000", "opcache.validate_timestamps": "1",
            "opcache.revalidate_freq": "2", "pcre.jit": "1", "realpath_cache_size": "4096K",
            "realpath_cache_ttl": "120"}
    exts = {"Core": "8.2.36", "pcre": "8.2.36", "standard": "8.2.36", "Zend OPcache": "8.2.36"}
    if "Zend OPcache" not in zend:
        exts.pop("Zend OPcache")
    out = {"ini": {**base, **(ini or {})}, "extensions": {**exts, **(extensions or {})},
           "zend_extensions": list(zend), **more}
    if internal is not None:
        out["internal_functions"] = list(internal)
        out["internal_classes"] = []
    return out


CAPTURE = {"collect": ["excimer", "perf", "queries", "xhprof"], "xhprof_every": 50}
NEW_POOL = {"auto_prepend_file": "/x/prepend.php", "instrumented_extension": "tideways_xhprof"}


def timed(n=10, url="/"):
    return [request(f"r{i:06d}", url=url) for i in range(1, n + 1)]


def samples(rids, frames, n):
    """n samples with `frames`, spread round-robin over the request ids."""
    return [native(rids[i % len(rids)], frames) for i in range(n)]


def mix(rids, **counts):
    """Samples: counts per kind name (vm, compile, eval, regex, stat, walk, or (frames, n))."""
    kinds = {"vm": VM, "compile": COMPILE, "eval": EVAL, "regex": REGEX, "stat": STAT, "walk": WALK,
             "include_stat": INCLUDE_STAT, "resolve": RESOLVE}
    out = []
    for k, n in counts.items():
        out += samples(rids, kinds[k], n)
    return out


def ev(finding, what_starts):
    hits = [e.value for e in finding.evidence if e.what.startswith(what_starts)]
    assert len(hits) == 1, (what_starts, [e.what for e in finding.evidence])
    return hits[0]


def well_formed(f: Finding):
    assert f.summary and f.title
    for e in f.evidence:
        assert e.what and e.source, e
    for r in f.remediations:
        assert r.kind == "ini" and r.content.strip() and r.checked
    Finding.from_json(f.to_json())


# ------------------------------------------------------------------------------------------
# debug-extension
# ------------------------------------------------------------------------------------------

def xdebug_so(frames_before=()):
    xdebug = [("xdebug.so+0x1a2b", f"{EXT}/xdebug.so"), ("xdebug_execute_ex", f"{EXT}/xdebug.so")]
    return list(frames_before) + xdebug + VM


def test_xdebug_as_zend_extension_is_high_with_its_share_and_mode():
    reqs = timed()
    rids = [r.id for r in reqs]
    smp = samples(rids, xdebug_so(), 20) + samples(rids, xdebug_so([("__memmove_avx", LIBC)]), 5) + mix(rids, vm=75)
    ctx = context(reqs, native_samples=smp, capture=CAPTURE,
                  php=php({"xdebug.mode": "develop", "xdebug.start_with_request": "default"},
                          extensions={"xdebug": "3.2.0", "excimer": "1.0.4"}, zend=("Zend OPcache", "Xdebug"),
                          pool=NEW_POOL))
    [f] = debug_extension.detect(ctx)
    well_formed(f)
    assert f.id == "debug-extension" and f.severity == "high"
    assert f.details["extension"] == "xdebug" and f.details["directive"] == "zend_extension"
    assert f.details["on_cpu_share_pct"] == 25.0          # libc under xdebug.so counts as xdebug's
    assert f.share_pct == pytest.approx(25.0 * CPU_RATIO)
    assert ev(f, "loaded as").startswith("zend_extension, by the machine's php-fpm configuration")
    assert ev(f, "xdebug.mode") == "develop"
    assert ev(f, "extension loaded").startswith("Xdebug 3.2.0")
    assert "; remove: zend_extension=xdebug.so" in f.remediations[0].content
    assert "php_admin_value" in f.remediations[0].description
    assert any("phpdismod" in s for s in f.remediations[0].steps)
    assert "xdebug.mode='develop'" in f.summary
    assert len(f.requests) == 5 and set(f.requests) <= set(rids)


def test_xdebug_without_native_samples_is_still_high():
    ctx = context(timed(2), php=php(extensions={"xdebug": "3.2.0"}, zend=("Zend OPcache", "Xdebug")))
    [f] = debug_extension.detect(ctx)
    assert (f.severity, f.share_pct) == ("high", None)
    assert ev(f, "on-CPU samples in its .so") == "not measured"


def test_lockdown_own_extensions_are_never_blamed_old_bundle_shape():
    """An older lockdown loaded tideways_xhprof in every worker: the manifest lists it, collect has
    xhprof and the pool records no instrumented_extension. Its samples are capture overhead."""
    reqs = timed()
    rids = [r.id for r in reqs]
    tide = [("tideways_xhprof.so+0x2950", f"{EXT}/tideways_xhprof.so")] + VM
    exc = [("excimer.so+0x6200", f"{EXT}/excimer.so")] + VM
    ctx = context(reqs, native_samples=samples(rids, tide, 30) + samples(rids, exc, 5) + mix(rids, vm=65),
                  capture=CAPTURE,
                  php=php(extensions={"excimer": "1.0.4", "tideways_xhprof": "5.0.4"},
                          pool={"auto_prepend_file": "/x/prepend.php"}))
    assert debug_extension.detect(ctx) == []


def test_lockdown_own_extensions_new_bundle_shape():
    ctx = context(timed(2), capture=CAPTURE,
                  php=php(extensions={"excimer": "1.0.4"}, pool=NEW_POOL))
    assert debug_extension.detect(ctx) == []


def test_tideways_loaded_by_the_target_not_by_lockdown_is_reported():
    """No xhprof collector and the target's own php_ini override loads it: the user's."""
    reqs = timed()
    rids = [r.id for r in reqs]
    tide = [("tideways_xhprof_execute_internal", f"{EXT}/tideways_xhprof.so")] + VM
    ctx = context(reqs, native_samples=samples(rids, tide, 3) + mix(rids, vm=97),
                  capture={"collect": ["excimer", "perf"]},
                  php=php(extensions={"tideways_xhprof": "5.0.4", "excimer": "1.0.4"},
                          overrides={"extension": "tideways_xhprof.so"}))
    [f] = debug_extension.detect(ctx)
    assert f.details["extension"] == "tideways_xhprof" and f.details["loaded_by"] == "overrides"
    assert f.severity == "medium" and f.details["on_cpu_share_pct"] == 3.0
    content = f.remediations[0].content
    assert "target's php_ini" in content and "extension=tideways_xhprof.so" in content


def test_idle_coverage_extension_is_low_and_others_are_ignored():
    reqs = timed()
    rids = [r.id for r in reqs]
    ctx = context(reqs, native_samples=mix(rids, vm=50),
                  php=php({"pcov.enabled": "0"}, extensions={"pcov": "1.0.11", "apcu": "5.1.22", "yaml": "2.2.2"}))
    [f] = debug_extension.detect(ctx)
    assert (f.details["extension"], f.severity, f.share_pct) == ("pcov", "low", 0.0)
    assert ev(f, "pcov.enabled") == "0"
    assert f.remediations[0].content.startswith("; remove: extension=pcov.so")


def test_spx_above_high_share_is_high_and_threshold_is_configurable():
    reqs = timed()
    rids = [r.id for r in reqs]
    spx = [("spx.so+0x100", f"{EXT}/spx.so")] + VM
    smp = samples(rids, spx, 6) + mix(rids, vm=94)
    [f] = debug_extension.detect(context(reqs, native_samples=smp, php=php(extensions={"SPX": "0.4.15"})))
    assert f.severity == "high" and f.details["extension"] == "spx"
    [f] = debug_extension.detect(context(reqs, native_samples=smp, php=php(extensions={"SPX": "0.4.15"}),
                                         thresholds={"debug-extension": {"high_share_pct": 10.0}}))
    assert f.severity == "medium"
    # the bounds are inclusive: 5 of 100 samples is high, 1 of 100 medium, fewer low
    for n, severity in ((5, "high"), (1, "medium"), (0, "low")):
        smp = samples(rids, spx, n) + mix(rids, vm=100 - n)
        [f] = debug_extension.detect(context(reqs, native_samples=smp, php=php(extensions={"SPX": "0.4.15"})))
        assert f.severity == severity, n


# ------------------------------------------------------------------------------------------
# opcache
# ------------------------------------------------------------------------------------------

def test_compiling_classifies_file_and_eval_compiles():
    def as_frames(pairs):
        return [["0", symbol, 0, dso] for symbol, dso in pairs]

    assert compiling(as_frames(COMPILE)) == "file"
    assert compiling(as_frames(EVAL)) == "eval"
    assert compiling(as_frames(VM)) is None
    # an include inside eval()'d code compiles a file
    assert compiling(as_frames(COMPILE[:4] + EVAL)) == "file"
    # opcache's cache hit (persistent_compile_file without compile_file) is not compiling
    assert compiling(as_frames([("opcache.so+0x25390", f"{EXT}/opcache.so"), ("compile_filename", PHP)] + VM)) is None


def test_opcache_not_loaded_with_compile_samples():
    reqs = timed()
    rids = [r.id for r in reqs]
    ctx = context(reqs, native_samples=mix(rids, compile=40, vm=60), php=php(zend=()))
    [f] = opcache.detect(ctx)
    well_formed(f)
    assert f.details["case"] == "not-loaded" and f.severity == "high"
    assert f.details["compile_share_pct"] == 40.0
    assert f.share_pct == pytest.approx(40.0 * CPU_RATIO)
    content = f.remediations[0].content.splitlines()
    assert content[:2] == ["zend_extension=opcache.so", "opcache.enable=1"]
    assert "opcache.max_accelerated_files=20000" in content
    assert ev(f, "on-CPU samples compiling PHP files") == "40.00%"


def test_opcache_disabled_with_compile_samples():
    reqs = timed()
    rids = [r.id for r in reqs]
    ctx = context(reqs, native_samples=mix(rids, compile=5, vm=95),
                  php=php({"opcache.enable": "0", "opcache.memory_consumption": "64"}))
    [f] = opcache.detect(ctx)
    assert f.details["case"] == "disabled" and f.severity == "medium"     # 5% x 0.8 = 4% of request time
    assert f.remediations[0].content.splitlines() == ["opcache.enable=1", "opcache.memory_consumption=256"]
    assert ev(f, "opcache.enable") == "0"


def test_opcache_off_without_native_samples_is_medium_unmeasured():
    [f] = opcache.detect(context(timed(2), php=php({"opcache.enable": ""})))
    assert (f.details["case"], f.severity, f.share_pct) == ("disabled", "medium", None)
    assert ev(f, "compile cost") == "not measured"


def test_opcache_on_is_not_reported():
    reqs = timed()
    rids = [r.id for r in reqs]
    # below min_compile_share_pct (2%), eval()'d compiles (not cacheable) and OPcache's own hit path
    hit = [("opcache.so+0x23200", f"{EXT}/opcache.so"), ("compile_filename", PHP)] + VM
    smp = mix(rids, compile=1, eval=10, vm=79) + samples(rids, hit, 10)
    assert opcache.detect(context(reqs, native_samples=smp, php=php())) == []
    # small sizes alone, with nothing compiled, are not a finding
    assert opcache.detect(context(reqs, native_samples=mix(rids, vm=10),
                                  php=php({"opcache.memory_consumption": "16"}))) == []
    # validate_timestamps=1 + revalidate_freq=0 is stat-storm's, not opcache's
    assert opcache.detect(context(reqs, native_samples=mix(rids, vm=10),
                                  php=php({"opcache.revalidate_freq": "0"}))) == []


def test_opcache_on_but_compiling_names_small_settings():
    reqs = timed()
    rids = [r.id for r in reqs]
    ctx = context(reqs, native_samples=mix(rids, compile=15, vm=85),
                  php=php({"opcache.memory_consumption": "32", "opcache.max_accelerated_files": "2000"}))
    [f] = opcache.detect(ctx)
    assert f.details["case"] == "compiling" and f.severity == "high"     # 15% x 0.8 = 12%
    assert f.details["suspects"] == ["opcache.memory_consumption=32 (below 128)",
                                     "opcache.max_accelerated_files=2000 (below 10000)"]
    assert f.remediations[0].content.splitlines() == [
        "opcache.memory_consumption=256", "opcache.interned_strings_buffer=16", "opcache.max_accelerated_files=20000"]
    assert "opcache_get_status" in f.summary
    # ten compile samples are the least that count, whatever their share
    for n, found in ((9, 0), (10, 1)):
        ctx = context(reqs, native_samples=mix(rids, compile=n, vm=30), php=php())
        assert len(opcache.detect(ctx)) == found, n
    # at the usual minimum nothing is suspect; below it, each setting is named with it
    ctx = context(reqs, native_samples=mix(rids, compile=15, vm=85),
                  php=php({"opcache.interned_strings_buffer": "4"}))
    assert opcache.detect(ctx)[0].details["suspects"] == ["opcache.interned_strings_buffer=4 (below 8)"]
    off = context(reqs, native_samples=mix(rids, compile=15, vm=85),
                  php=php({"opcache.enable": "0", "opcache.interned_strings_buffer": "4",
                           "opcache.max_accelerated_files": "500"}))
    assert opcache.detect(off)[0].remediations[0].content.splitlines() == [
        "opcache.enable=1", "opcache.interned_strings_buffer=16", "opcache.max_accelerated_files=20000"]


# ------------------------------------------------------------------------------------------
# pcre-jit-off
# ------------------------------------------------------------------------------------------

def test_pcre_jit_off_with_regex_samples():
    reqs = timed()
    rids = [r.id for r in reqs]
    ctx = context(reqs, native_samples=mix(rids, regex=5, vm=95), php=php({"pcre.jit": "0"}))
    [f] = pcre_jit_off.detect(ctx)
    well_formed(f)
    assert f.remediations[0].content == "pcre.jit=1"
    assert f.details["source"] == "native" and f.details["regex_on_cpu_pct"] == 5.0
    assert f.share_pct == pytest.approx(5.0 * CPU_RATIO) and f.severity == "medium"
    assert ev(f, "pcre.jit") == "0"


def test_pcre_jit_off_without_regex_time_is_not_reported():
    reqs = timed()
    rids = [r.id for r in reqs]
    ctx = context(reqs, native_samples=mix(rids, regex=0, vm=100), php=php({"pcre.jit": "0"}))
    assert pcre_jit_off.detect(ctx) == []
    # just below the threshold (1% of on-CPU samples)
    ctx = context(reqs, native_samples=mix(rids, regex=1, vm=199), php=php({"pcre.jit": "0"}))
    assert pcre_jit_off.detect(ctx) == []


def test_pcre_jit_on_is_not_reported():
    reqs = timed()
    rids = [r.id for r in reqs]
    assert pcre_jit_off.detect(context(reqs, native_samples=mix(rids, regex=50, vm=50), php=php())) == []
    # an engine that does not report pcre.jit at all: unknown, not flagged
    p = php()
    del p["ini"]["pcre.jit"]
    assert pcre_jit_off.detect(context(reqs, native_samples=mix(rids, regex=50, vm=50), php=p)) == []


def xh_request(rid, url="/"):
    return request(rid, url=url, instrumented=True)


def test_pcre_jit_off_from_xhprof_when_there_are_no_native_samples():
    prof = {"main()": {"ct": 1, "wt": 100_000}, "main()==>render": {"ct": 1, "wt": 90_000},
            "render==>preg_match": {"ct": 400, "wt": 3_000}, "render==>preg_replace": {"ct": 100, "wt": 2_000},
            "render==>preg_quote": {"ct": 50, "wt": 500}}
    ctx = context([xh_request("r000001")], xhprof={"r000001": prof}, php=php({"pcre.jit": "Off"}))
    [f] = pcre_jit_off.detect(ctx)
    assert f.details["source"] == "xhprof"
    assert f.details["preg_calls_per_request"] == 500.0          # preg_quote does not match
    assert f.details["preg_exclusive_share_pct"] == 5.0           # 5 ms of the 100 ms wall time
    assert f.share_pct == 5.0 and f.severity == "medium"
    # two profiled requests: calls per request and time over both requests' wall time
    fewer = {**prof, "render==>preg_match": {"ct": 200, "wt": 2_000}, "render==>preg_replace": {"ct": 100, "wt": 1_000}}
    ctx = context([xh_request("r000001"), xh_request("r000002")], xhprof={"r000001": prof, "r000002": fewer},
                  php=php({"pcre.jit": "Off"}))
    [g] = pcre_jit_off.detect(ctx)
    assert g.details["preg_calls_per_request"] == 400.0 and g.details["preg_exclusive_share_pct"] == 4.0


def test_pcre_jit_off_unmeasured_is_low():
    [f] = pcre_jit_off.detect(context(timed(2), php=php({"pcre.jit": "0"})))
    assert (f.severity, f.share_pct, f.details["source"]) == ("low", None, None)
    assert ev(f, "regex time") == "not measured"


# ------------------------------------------------------------------------------------------
# stat-storm
# ------------------------------------------------------------------------------------------

def stat_profile(file_exists=300, realpath=100, walk_entries=0, walker_stats=0):
    """A request that checks files from a plugin loader (not a walker) and, optionally, walks a
    directory tree with a file_scan_directory-style function."""
    p = {"main()": {"ct": 1, "wt": 100_000}, "main()==>load_plugins": {"ct": 1, "wt": 20_000},
         "load_plugins==>file_exists": {"ct": file_exists, "wt": 2_000},
         "load_plugins==>realpath": {"ct": realpath, "wt": 1_000},
         "load_plugins==>is_file": {"ct": 0, "wt": 0}}
    if walk_entries:
        p.update({"main()==>file_scan_directory": {"ct": 1, "wt": 50_000},
                  "file_scan_directory==>file_scan_directory@1": {"ct": 50, "wt": 49_000},
                  "file_scan_directory==>opendir": {"ct": 51, "wt": 1_000},
                  "file_scan_directory==>readdir": {"ct": walk_entries, "wt": 5_000},
                  "file_scan_directory==>closedir": {"ct": 51, "wt": 100},
                  "file_scan_directory==>is_dir": {"ct": walker_stats, "wt": 4_000}})
    return p


def test_stat_storm_small_realpath_cache_and_many_realpath_calls():
    ctx = context([xh_request("r000001"), xh_request("r000002", "/b")],
                  xhprof={"r000001": stat_profile(realpath=250),
                          "r000002": stat_profile(file_exists=500, realpath=250)},
                  php=php({"realpath_cache_size": "16K", "realpath_cache_ttl": "120"}))
    [f] = stat_storm.detect(ctx)
    well_formed(f)
    assert f.details["stat_calls_per_request"] == {"r000001": 550, "r000002": 750}
    assert ev(f, "stat-family calls per profiled request") == "550..750"
    assert ev(f, "file_exists calls per request") == 400.0
    assert ev(f, "realpath calls per request") == 250.0
    assert f.remediations[0].content.splitlines() == ["realpath_cache_size=4096K", "realpath_cache_ttl=600"]
    assert f.urls == ["/", "/b"] and f.requests == ["r000001", "r000002"]
    # no native samples: the share is realpath()'s exclusive time over the wall time (1 ms of 100)
    assert f.share_pct == 1.0 and f.severity == "low"
    assert "(650 stat calls per request)" in f.title
    assert "Profiled requests made 250 realpath() calls each, each resolving its path" in f.summary
    assert "Their other 400 stat-family calls (file_exists() and the like) reach the kernel" in f.summary
    # a ten-minute TTL is long enough: only the cache size is raised
    ctx = context([xh_request("r000001")], xhprof={"r000001": stat_profile(realpath=250)},
                  php=php({"realpath_cache_size": "16K", "realpath_cache_ttl": "600"}))
    assert stat_storm.detect(ctx)[0].remediations[0].content.splitlines() == ["realpath_cache_size=4096K"]


def test_stat_storm_is_not_the_applications_own_file_exists():
    """file_exists() and the like stat the file every time, whatever the realpath cache holds:
    1,200 of them a request and their samples are no evidence for a bigger cache (helper-24's
    false positive: 'high, ~99.6%' from samples under file_exists). With open_basedir every
    one of them resolves its path through the cache, and then they are."""
    reqs = timed()
    rids = [r.id for r in reqs]
    xh = {"r000001": stat_profile(file_exists=1200, realpath=0)}
    small = php({"realpath_cache_size": "16K"})
    assert stat_storm.detect(context(reqs + [xh_request("r000001")], xhprof=xh,
                                     native_samples=mix(rids, stat=30, vm=70), php=small)) == []
    basedir = php({"realpath_cache_size": "16K", "open_basedir": "/srv"})
    basedir_stat = [("vfs_statx", KERNEL), ("__do_sys_newlstat", KERNEL), ("tsrm_realpath", PHP),
                    ("expand_filepath", PHP), ("php_check_open_basedir", PHP), ("php_stat", PHP)] + VM
    [f] = stat_storm.detect(context(reqs + [xh_request("r000001")], xhprof=xh,
                                    native_samples=mix(rids, vm=70) + samples(rids, basedir_stat, 30), php=basedir))
    assert f.details["native_evidence_used"] and f.details["stat_on_cpu_pct"] == 30.0
    # path resolution of includes (the realpath cache's own work) is evidence without open_basedir
    [f] = stat_storm.detect(context(reqs, native_samples=mix(rids, resolve=10, vm=90), php=small))
    assert f.details["stat_on_cpu_pct"] == 10.0


def test_calls_from_top_level_code_count():
    """tideways records a call made by a file's top-level code without a caller (key
    "file_exists", not "main()==>file_exists"): such calls are main()'s, and count."""
    prof = {"main()": {"ct": 1, "wt": 100_000}, "file_exists": {"ct": 1200, "wt": 6_000},
            "realpath": {"ct": 100, "wt": 500}, "main()==>render": {"ct": 1, "wt": 90_000}}
    ctx = context([xh_request("r000001")], xhprof={"r000001": prof}, php=php({"realpath_cache_size": "16K"}))
    assert ctx.xhprof_edges["r000001"] == {("main()", "file_exists"): {"ct": 1200, "wt": 6_000},
                                           ("main()", "realpath"): {"ct": 100, "wt": 500},
                                           ("main()", "render"): {"ct": 1, "wt": 90_000}}
    assert stat_storm.request_counts(ctx, "r000001")["stat_calls"] == 1300


def test_stat_storm_needs_a_configuration_problem():
    ctx = context([xh_request("r000001")], xhprof={"r000001": stat_profile(file_exists=5000)}, php=php())
    assert stat_storm.detect(ctx) == []
    # ... and the cost: a small cache with few stat calls is not a storm
    ctx = context([xh_request("r000001")], xhprof={"r000001": stat_profile(file_exists=50, realpath=10)},
                  php=php({"realpath_cache_size": "16K"}))
    assert stat_storm.detect(ctx) == []


def test_stat_storm_leaves_directory_walks_to_fs_scan():
    """A file_scan_directory-style walk does thousands of is_dir calls: they are the walk's
    (fs-scan), and the walk's native stat/readdir samples are not evidence either."""
    reqs = timed()
    rids = [r.id for r in reqs]
    walk = {"r000001": stat_profile(file_exists=20, realpath=10, walk_entries=3000, walker_stats=2900)}
    ctx = context(reqs + [xh_request("r000001")], xhprof=walk,
                  native_samples=mix(rids, stat=20, walk=20, vm=60), php=php({"realpath_cache_size": "16K"}))
    assert stat_storm.detect(ctx) == []
    # the same request with a real stat storm outside the walker is still reported, on the calls alone
    walk = {"r000001": stat_profile(file_exists=20, realpath=400, walk_entries=3000, walker_stats=2900)}
    ctx = context(reqs + [xh_request("r000001")], xhprof=walk,
                  native_samples=mix(rids, stat=20, walk=20, vm=60), php=php({"realpath_cache_size": "16K"}))
    [f] = stat_storm.detect(ctx)
    assert f.details["stat_calls_per_request"] == {"r000001": 420}
    assert f.details["walkers"] == ["file_scan_directory"]
    assert ev(f, "stat calls made by directory walkers") == 2900.0
    assert f.details["native_evidence_used"] is False
    assert "not used" in ev(f, "on-CPU samples in path resolution")


def test_stat_storm_revalidate_freq_zero_with_native_stat_samples():
    reqs = timed()
    rids = [r.id for r in reqs]
    ctx = context(reqs, native_samples=mix(rids, include_stat=8, walk=2, stat=5, vm=85),
                  php=php({"opcache.validate_timestamps": "1", "opcache.revalidate_freq": "0"}))
    [f] = stat_storm.detect(ctx)
    # neither the readdir samples nor file_exists()'s own stats count: OPcache's checks do
    assert f.details["stat_on_cpu_pct"] == 8.0
    assert f.share_pct == pytest.approx(8.0 * CPU_RATIO) and f.severity == "medium"
    lines = f.remediations[0].content.splitlines()
    assert lines[0] == "opcache.revalidate_freq=60" and lines[-1] == "; opcache.validate_timestamps=0"
    assert "realpath_cache_size" not in f.remediations[0].content
    # below min_stat_share_pct (3%): no evidence, no finding
    ctx = context(reqs, native_samples=mix(rids, include_stat=2, vm=98),
                  php=php({"opcache.validate_timestamps": "1", "opcache.revalidate_freq": "0"}))
    assert stat_storm.detect(ctx) == []
    # OPcache not loaded: no timestamp checks (that is opcache's finding)
    ctx = context(reqs, native_samples=mix(rids, include_stat=8, vm=92), php=php(
        {"opcache.validate_timestamps": "1", "opcache.revalidate_freq": "0"}, zend=()))
    assert stat_storm.detect(ctx) == []


# ------------------------------------------------------------------------------------------
# hot-builtins
# ------------------------------------------------------------------------------------------

INTERNAL = ["is_array", "str_replace", "strlen", "implode", "getrusage", "hrtime", "register_shutdown_function",
            "tideways_xhprof_disable", "array_map"]


def builtin_profiles():
    a = {"main()": {"ct": 1, "wt": 1}, "main()==>render": {"ct": 1, "wt": 60_000},
         "render==>is_array": {"ct": 200, "wt": 4_000}, "helper==>is_array": {"ct": 100, "wt": 2_000},
         # tideways_xhprof 5 on PHP 8 counts every builtin call twice: as a self-edge too
         "is_array==>is_array@1": {"ct": 300, "wt": 1_000},
         "render==>helper": {"ct": 100, "wt": 10_000},
         "render==>str_replace": {"ct": 40, "wt": 3_000},
         "render==>array_map": {"ct": 2, "wt": 9_000}, "array_map==>helper": {"ct": 10, "wt": 8_000},
         # lockdown's prepend, after enabling xhprof
         "main()==>hrtime": {"ct": 1, "wt": 1}, "main()==>getrusage": {"ct": 1, "wt": 3},
         "main()==>register_shutdown_function": {"ct": 1, "wt": 2},
         "main()==>tideways_xhprof_disable": {"ct": 1, "wt": 1}}
    b = {"main()": {"ct": 1, "wt": 1}, "main()==>render": {"ct": 1, "wt": 30_000},
         "render==>is_array": {"ct": 50, "wt": 1_000}, "render==>strlen": {"ct": 7, "wt": 10},
         "main()==>hrtime": {"ct": 2, "wt": 1}}
    return {"r000001": a, "r000002": b}


def test_hot_builtins_exact_calls_per_request():
    reqs = [xh_request("r000001", "/"), xh_request("r000002", "/b")] + timed(2)
    ctx = context(reqs, xhprof=builtin_profiles(), php=php(internal=INTERNAL))
    [f] = hot_builtins.detect(ctx)
    well_formed(f)
    assert (f.severity, f.share_pct, f.remediations) == ("info", None, [])
    rows = {r["name"]: r for r in f.details["builtins"]}
    assert [r["name"] for r in f.details["builtins"]] == ["is_array", "str_replace", "array_map", "strlen", "hrtime"]
    assert rows["is_array"]["calls"] == 350 and rows["is_array"]["calls_per_request"] == 175.0
    assert rows["is_array"]["exclusive_us"] == 7_000              # 4000 + 2000 in a, 1000 in b
    assert rows["array_map"]["exclusive_us"] == 1_000              # its callback's 8 ms is helper's
    assert (rows["str_replace"]["calls"], rows["strlen"]["calls"]) == (40, 7)
    # one hrtime/getrusage/register_shutdown_function per profile is lockdown's prepend
    assert rows["hrtime"]["calls"] == 1 and "getrusage" not in rows and "register_shutdown_function" not in rows
    assert "tideways_xhprof_disable" not in rows and "render" not in rows and "helper" not in rows
    assert f.details["builtin_source"].startswith("the engine's internal")
    # its callers, by their share of its inclusive time (render 4000 + 1000 us, helper 2000;
    # tideways' doubled self-edge is not a caller)
    assert ev(f, "is_array: calls per request") == "175, 3500; render 71%, helper 29%"
    assert rows["is_array"]["callers"] == [{"name": "render", "share_pct": 71.4}, {"name": "helper", "share_pct": 28.6}]
    assert rows["array_map"]["callers"] == [{"name": "render", "share_pct": 100.0}]
    # render takes most of the time of several rows: named once as their common cause
    assert f.details["shared_callers"][0]["caller"] == "render"
    assert f.details["shared_callers"] == [{"caller": "render", "builtins": ["is_array", "str_replace", "array_map",
                                                                            "strlen"],
                                            "min_share_pct": 71.4, "max_share_pct": 100.0}]
    assert ("Calls from render take most of the time of is_array, str_replace, array_map, strlen (71-100% each): "
            "one function to look at for 4 of the top builtins.") in f.summary

    # exclusive share over the instrumented requests' measured wall time (2 x 100 ms)
    assert rows["is_array"]["exclusive_share_pct"] == 3.5
    exclusive_us = 7000 + 1000 + 3000 + 10 + 1
    assert f.details["top_exclusive_share_pct"] == pytest.approx(100 * exclusive_us / 200_000, abs=0.01)
    assert any("double count" in n for n in f.details["notes"])
    # is_array and strlen are VM opcodes outside the instrumented worker (tideways_xhprof sets
    # ZEND_COMPILE_NO_BUILTINS): kept in the table, marked, and not put first
    assert {r["name"] for r in f.details["builtins"] if r["compiled_to_opcode"]} == {"is_array", "strlen"}
    assert any(n.startswith("is_array, strlen: the engine compiles") for n in f.details["notes"])
    assert f.title == "Hot builtins: str_replace, array_map, hrtime"
    assert "(xhprof, per request): str_replace 20 calls" in f.summary
    assert ("Not listed: is_array, strlen: outside the instrumented worker PHP compiles these to VM opcodes"
            in f.summary)


def test_shared_callers_need_half_the_time_of_two_rows():
    def row(name, *callers):
        return {"name": name, "callers": [{"name": c, "share_pct": p} for c, p in callers]}

    rows = [row("a", ("f", 60.0), ("g", 40.0)), row("b", ("f", 50.0)), row("c", ("g", 90.0), ("f", 10.0)),
            row("d", ("g", 49.9)), row("e", ("h", 70.0), ("k", None)), row("x", ("h", 80.0))]
    assert hot_builtins.shared_callers(rows) == [
        {"caller": "f", "builtins": ["a", "b"], "min_share_pct": 50.0, "max_share_pct": 60.0},
        {"caller": "h", "builtins": ["e", "x"], "min_share_pct": 70.0, "max_share_pct": 80.0}]
    assert hot_builtins.shared_callers(rows[2:4]) == [] and hot_builtins.shared_callers([]) == []


def test_hot_builtins_top_is_a_threshold():
    reqs = [xh_request("r000001"), xh_request("r000002")]
    ctx = context(reqs, xhprof=builtin_profiles(), php=php(internal=INTERNAL), thresholds={"hot-builtins": {"top": 2}})
    [f] = hot_builtins.detect(ctx)
    assert [r["name"] for r in f.details["builtins"]] == ["is_array", "str_replace"]


def test_hot_builtins_heuristic_without_internal_lists():
    reqs = [xh_request("r000001"), xh_request("r000002")]
    [f] = hot_builtins.detect(context(reqs, xhprof=builtin_profiles(), php=php()))
    names = [r["name"] for r in f.details["builtins"]]
    # leaves: is_array, str_replace, strlen, hrtime (helper/array_map/render call others)
    assert names == ["is_array", "str_replace", "strlen", "hrtime"]
    assert {r["name"]: r["calls"] for r in f.details["builtins"]}["is_array"] == 350
    assert f.details["builtin_source"].startswith("heuristic")


def test_hot_builtins_engine_subsystems_and_capture_overhead():
    reqs = timed(4)
    rids = [r.id for r in reqs]
    exc = [("excimer_log_add", f"{EXT}/excimer.so")] + VM
    hashes = [("zend_hash_find", PHP)] + VM
    smp = mix(rids, vm=50, regex=10) + samples(rids, hashes, 30) + samples(rids, exc, 10)
    [f] = hot_builtins.detect(context(reqs, native_samples=smp, capture=CAPTURE,
                                      php=php(extensions={"excimer": "1.0.4"}, pool=NEW_POOL)))
    assert f.details["subsystems"] == {"vm": 50.0, "hashtable": 30.0, "regex": 10.0, "profiler-ext": 10.0}
    assert f.details["profiler_ext"] == {"excimer": 10.0}
    assert any("lockdown's own capture" in n for n in f.details["notes"])
    assert f.title == "Engine CPU by subsystem" and f.severity == "info"
    assert set(f.details["subsystems_by_url"]) == {"/"}


def test_hot_builtins_nothing_without_profiles_or_samples():
    assert hot_builtins.detect(context(timed(2), php=php())) == []


# ------------------------------------------------------------------------------------------
# all five on a healthy configuration: only the informational map
# ------------------------------------------------------------------------------------------

def test_no_php_facts_no_engine_findings():
    """A capture whose PHP facts failed (manifest php = {"error": ...}) says nothing about the engine."""
    reqs = timed()
    rids = [r.id for r in reqs]
    ctx = context(reqs, native_samples=mix(rids, compile=40, regex=10, stat=10, vm=40), php={"error": "php: not found"})
    for m in (debug_extension, opcache, pcre_jit_off, stat_storm):
        assert m.detect(ctx) == [], m.ID


def test_healthy_configuration_only_hot_builtins():
    reqs = timed() + [xh_request("r000099")]
    rids = [r.id for r in reqs[:-1]]
    ctx = context(reqs, native_samples=mix(rids, vm=80, regex=5, compile=1, stat=2),
                  xhprof={"r000099": stat_profile(file_exists=900)},
                  capture=CAPTURE, php=php(extensions={"excimer": "1.0.4"}, pool=NEW_POOL))
    found = {m.ID: m.detect(ctx) for m in (debug_extension, opcache, pcre_jit_off, stat_storm, hot_builtins)}
    assert {k: len(v) for k, v in found.items()} == {"debug-extension": 0, "opcache": 0, "pcre-jit-off": 0,
                                                      "stat-storm": 0, "hot-builtins": 1}


def test_sample_shares_per_url_and_as_request_time():
    from lockdown.analyzers.detectors.hot_builtins import (cpu_fraction, example_requests, request_share,
                                                           sample_share, share_by_url)
    php = "/usr/sbin/php-fpm8.2"
    hot, vm = [("zend_hash_find", php), ("execute_ex", php)], [("execute_ex", php)]
    reqs = [request("r000001", "/"), request("r000002", "/b", wall_us=100_000, cpu_us=20_000)]
    samples = [native("r000001", hot), native("r000001", vm), native("r000001", vm),
               native("r000002", hot), native("r000002", hot), native(None, vm)]
    ctx = context(reqs, native_samples=samples)

    def hashing(sample) -> bool:
        return sample.frames[0][1] == "zend_hash_find"

    assert share_by_url(ctx, hashing) == {"/": 33.33, "/b": 100.0, "?": 0.0}
    assert sample_share(ctx, hashing) == 50.0 and example_requests(ctx, hashing) == ["r000002", "r000001"]
    # 100 ms CPU of 200 ms wall: half of the on-CPU share is a share of request time
    assert cpu_fraction(ctx) == 0.5 and request_share(ctx, 50.0) == 25.0 and request_share(ctx, None) is None
    assert cpu_fraction(context([request("r000001", "/", wall_us=10, cpu_us=20)])) == 1.0      # capped
    assert cpu_fraction(context([request("r000001", "/", wall_us=10, cpu_us=0)])) == 1.0       # unknown
    assert sample_share(context(reqs), hashing) is None
    # the engine breakdown, overall and per URL
    [f] = hot_builtins.detect(ctx)
    assert f.title == "Engine CPU by subsystem" and f.details["native_samples"] == 6
    assert f.details["subsystems"] == {"hashtable": 50.0, "vm": 50.0}
    assert f.details["subsystems_by_url"] == {"/": {"vm": 66.67, "hashtable": 33.33}, "/b": {"hashtable": 100.0},
                                              "?": {"vm": 100.0}}


def test_thresholds_override_and_recorded_runs(tmp_path):
    from lockdown.analyzers.detectors import rank, with_defaults
    from lockdown.errors import LockdownError
    over = tmp_path / "t.toml"
    over.write_text('[fs-scan]\nmin_repeat_share = 0.25\n')
    t = load_thresholds(over)
    assert t["fs-scan"]["min_repeat_share"] == 0.25 and t["fs-scan"].keys() == load_thresholds()["fs-scan"].keys()
    for text, message in (("[fs-scan]\nnot_a_threshold = 3\n", "has no threshold 'not_a_threshold'"),
                          ("[no-such-detector]\nx = 1\n", r"unknown detector \[no-such-detector\]"),
                          ("fs-scan = 3\n", r"unknown detector \[fs-scan\]"),
                          ("[fs-scan\n", "cannot read thresholds")):
        over.write_text(text)
        with pytest.raises(LockdownError, match=message):
            load_thresholds(over)
    # a run recorded before a threshold existed gets today's default for it
    recorded = {"fs-scan": {"min_repeat_share": 0.9}, "gone-detector": {"x": 1}, "junk": 3}
    merged = with_defaults(recorded)
    assert merged["fs-scan"]["min_repeat_share"] == 0.9 and merged["gone-detector"] == {"x": 1}
    assert set(merged["fs-scan"]) == set(load_thresholds()["fs-scan"]) and "junk" not in merged
    assert with_defaults(None) == load_thresholds()
    # keys: one finding of an id keeps the id, further ones are numbered in rank order
    fs = [Finding("repeated-call", "t", "high", s, "s") for s in (5.0, 9.0, 1.0)]
    assert [(f.key, f.share_pct) for f in rank(fs)] == [("repeated-call", 9.0), ("repeated-call-2", 5.0),
                                                        ("repeated-call-3", 1.0)]
