"""The engine's caches as the workers report them (engine_state.py), and what the opcache and
stat-storm detectors make of them. Synthetic records shaped as prepend.php writes them; the real
capture is tested in test_frameworks.py (WordPress with too few OPcache keys)."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from contexts import context, request
from lockdown.analyzers.detectors import opcache, stat_storm
from lockdown.analyzers.engine_state import summarize
from lockdown.php_ini import size_bytes
from lockdown.reports.analysis_text import engine_lines
from test_detectors_engine import mix, php, stat_profile, xh_request

MB = 1 << 20


def engine(hits=(0, 300), misses=(0, 0), restarts=(0, 0), keys=(500, 16229), free=100 * MB,
           interned_free=4 * MB, realpath=20_000, full=0, blacklist=(0, 0), oom=0) -> dict:
    """One request's engine record: counters at start and end (hits, misses, restarts)."""
    return {"realpath_cache_bytes": realpath, "opcache_enabled": 1, "opcache_cache_full": full,
            "opcache_restart_pending": 0, "opcache_used_memory": 28 * MB, "opcache_free_memory": free,
            "opcache_wasted_memory": 0, "opcache_interned_size": 8 * MB,
            "opcache_interned_used": 8 * MB - interned_free, "opcache_interned_free": interned_free,
            "opcache_cached_scripts": keys[0], "opcache_cached_keys": keys[0], "opcache_max_cached_keys": keys[1],
            "opcache_hits": hits[1], "opcache_misses": misses[1], "opcache_blacklist_misses": blacklist[1],
            "opcache_oom_restarts": oom + restarts[1], "opcache_hash_restarts": 0, "opcache_manual_restarts": 0,
            "opcache_hits_at_start": hits[0], "opcache_misses_at_start": misses[0],
            "opcache_restarts_at_start": restarts[0], "opcache_blacklist_misses_at_start": blacklist[0]}


def requests_with(states, url="/", instrumented=False):
    return [replace(request(f"r{i:06d}", url=url, instrumented=instrumented, pid=100 + i % 2), engine=e)
            for i, e in enumerate(states, start=1)]


def full_keys(n=6):
    """WordPress with opcache.max_accelerated_files=200: 341 scripts a request, 117 compiled."""
    out, hits, miss = [], 1000, 500
    for _ in range(n):
        out.append(engine(hits=(hits, hits + 224), misses=(miss, miss + 117), keys=(223, 223), full=1,
                          realpath=16_354))
        hits, miss = hits + 224, miss + 117
    return out


def test_lookups_and_misses_are_each_requests_own():
    state = summarize(requests_with(full_keys()), {"realpath_cache_size": "16K"})
    o = state.opcache
    assert (o.requests, o.lookups_per_request, o.misses_per_request, o.requests_with_misses) == (6, 341, 117, 6)
    assert o.keys_full and o.cache_full and not o.memory_full and not o.interned_full
    assert o.misses_by_url == {"/": 117.0}
    assert state.realpath.limit_bytes == 16384 and state.realpath.full and state.realpath.workers == 2
    # a warm cache that fits: every lookup a hit
    fits = summarize(requests_with([engine(hits=(300 * i, 300 * i + 300)) for i in range(4)]), {})
    assert fits.opcache.misses_per_request == 0 and not fits.opcache.keys_full
    assert fits.realpath.limit_bytes is None and not fits.realpath.full


def test_restarts_and_instrumented_requests_are_left_out_of_the_lookups():
    states = full_keys(3)
    # OPcache restarted (out of memory) during the third request: its counters began again
    states.append(engine(hits=(5000, 40), misses=(900, 341), restarts=(0, 1), keys=(223, 223)))
    state = summarize(requests_with(states), {})
    assert state.opcache.requests == 3 and state.opcache.misses_per_request == 117
    assert state.opcache.restarts == {"oom": 1} and state.opcache.memory_full
    assert "1 request(s) left out" in state.notes[0]
    # the xhprof pool has an OPcache of its own: its requests say nothing of the timed pool's
    pool = requests_with(full_keys(2), url="/x", instrumented=True)
    assert summarize(pool, {}) is None
    # bundles from before the engine state: nothing to summarize
    assert summarize([request("r000001")], {}) is None


def test_size_bytes():
    assert [size_bytes(v) for v in ("4096K", "16M", "65536", "1g", "", None, "4096KB", "16X")] == [
        4 << 20, 16 << 20, 65536, 1 << 30, None, None, 4 << 20, None]


def test_opcache_names_the_limit_the_workers_hit():
    reqs = requests_with(full_keys(10))
    rids = [r.id for r in reqs]
    ctx = context(reqs, native_samples=mix(rids, compile=15, vm=85),
                  php=php({"opcache.max_accelerated_files": "200"}))
    [f] = opcache.detect(ctx)
    assert f.details["full"] == ["keys"] and f.details["misses_per_request"] == 117
    # only the limit that is full is raised, not all three on suspicion
    assert f.remediations[0].content.splitlines() == ["opcache.max_accelerated_files=20000"]
    assert "every key is taken (opcache.max_accelerated_files)" in f.summary
    assert "missed 117.0 of the 341.0 script lookups" in f.summary
    assert "the cause from the same counters: keys" in f.remediations[0].checked
    keys = next(e for e in f.evidence if e.what.startswith("keys taken"))
    assert keys.value == "223 of 223, full"
    # memory instead: out of shared memory, every key free
    mem = [engine(hits=(i * 400, i * 400 + 300), misses=(i * 50, i * 50 + 40), free=0) for i in range(10)]
    ctx = context(requests_with(mem), native_samples=mix(rids, compile=15, vm=85), php=php())
    assert opcache.detect(ctx)[0].remediations[0].content.splitlines() == ["opcache.memory_consumption=256"]
    # misses with nothing full: a file rewritten on every request. No size would help: no patch,
    # and the file is named (the prepend lists the included files OPcache does not hold, and
    # which of them changed within file_update_protection before the request)
    missing = [engine(hits=(i * 400, i * 400 + 300), misses=(i * 50, i * 50 + 40)) for i in range(10)]
    settings = ["/run/app/cache/settings.php"]
    rewritten = [replace(r, uncached_scripts=settings, uncached_young=settings) for r in requests_with(missing)]
    ctx = context(rewritten, native_samples=mix(rids, compile=15, vm=85), php=php())
    ctx.manifest["run_dir"] = "/run"
    [f] = opcache.detect(ctx)
    assert f.remediations == [] and f.details["causes"] == ["rewritten"]
    assert "cache/settings.php (10 of 10 requests) changed less than opcache.file_update_protection" in f.summary
    assert f.details["no_patch"].startswith("no setting would cache these scripts: OPcache does not cache a file "
                                            "modified less than opcache.file_update_protection")
    # an old script left out with keys to spare: no free block of shared memory was large enough
    # (PHP sets cache_full only below 64 KB free), unless a setting excludes it
    big = [replace(r, uncached_scripts=["/run/app/big.php"], uncached_young=[]) for r in requests_with(missing)]
    ctx = context(big, native_samples=mix(rids, compile=15, vm=85), php=php())
    ctx.manifest["run_dir"] = "/run"
    [f] = opcache.detect(ctx)
    assert f.details["causes"] == ["memory"] and "no free block large enough" in f.summary
    assert f.remediations[0].content == "opcache.memory_consumption=256"
    assert "prime" not in f.remediations[0].description
    ctx = context(big, native_samples=mix(rids, compile=15, vm=85), php=php({"opcache.max_file_size": "4096"}))
    assert opcache.detect(ctx)[0].remediations[0].content == "opcache.max_file_size=0"
    # a full interned strings buffer is no cause of misses (PHP keeps the strings per script)
    interned = requests_with([engine(hits=(i * 400, i * 400 + 300), misses=(i * 50, i * 50 + 40), interned_free=0)
                              for i in range(10)])
    interned = [replace(r, uncached_scripts=["/run/app/c.php"], uncached_young=["/run/app/c.php"]) for r in interned]
    [f] = opcache.detect(context(interned, native_samples=mix(rids, compile=15, vm=85), php=php()))
    assert f.details["causes"] == ["rewritten"] and f.remediations == []


def test_opcache_counters_find_compiling_that_samples_miss():
    reqs = requests_with(full_keys(10))
    rids = [r.id for r in reqs]
    # 1% compile samples: under min_compile_share_pct, yet the workers compile 117 scripts a request
    [f] = opcache.detect(context(reqs, native_samples=mix(rids, compile=1, vm=99), php=php()))
    assert f.details["case"] == "compiling" and f.severity == "low"
    # no perf at all: the counters alone, severity unmeasured
    [f] = opcache.detect(context(reqs, php=php()))
    assert f.severity == "medium" and f.share_pct is None
    # 2 compile samples of 10 are no 20%: too few to measure (helper-24 saw "high, ~20%" from them)
    [f] = opcache.detect(context(reqs, native_samples=mix(rids, compile=2, vm=8), php=php()))
    assert f.severity == "medium" and f.share_pct is None
    # a cache that fits, with the same few samples: nothing
    warm = requests_with([engine(hits=(300 * i, 300 * i + 300)) for i in range(10)])
    assert opcache.detect(context(warm, native_samples=mix(rids, compile=1, vm=99), php=php())) == []
    # the workers say OPcache is off although the configuration enables it (a pool override)
    off = [dict(engine(), opcache_enabled=0) for _ in range(10)]
    [f] = opcache.detect(context(requests_with(off), native_samples=mix(rids, compile=15, vm=85), php=php()))
    assert f.details["case"] == "disabled" and "opcache.enable=1" in f.remediations[0].content


def with_realpath(reqs, used):
    return [replace(r, engine={"realpath_cache_bytes": used}) for r in reqs]


def test_stat_storm_uses_the_workers_realpath_fill():
    reqs = [xh_request("r000001"), xh_request("r000002", "/b")]
    xh = {"r000001": stat_profile(realpath=250), "r000002": stat_profile(file_exists=500, realpath=300)}
    # a timed request whose worker filled the 16K cache: flagged, and said so
    full = reqs + with_realpath([request("r000003")], 16_300)
    [f] = stat_storm.detect(context(full, xhprof=xh, php=php({"realpath_cache_size": "16K"})))
    assert "and full: a worker held 15.9K of it" in f.summary
    assert next(e for e in f.evidence if e.what.startswith("realpath cache in use")).value == \
        "16300 bytes of 16384 (99%, full)"
    # the small cache the app does not fill costs nothing: not flagged
    roomy = reqs + with_realpath([request("r000003")], 3_000)
    assert stat_storm.detect(context(roomy, xhprof=xh, php=php({"realpath_cache_size": "16K"}))) == []
    # the default size, filled: doubled
    big = reqs + with_realpath([request("r000003")], 4 << 20)
    [f] = stat_storm.detect(context(big, xhprof=xh, php=php()))
    assert f.remediations[0].content.splitlines() == ["realpath_cache_size=8192K", "realpath_cache_ttl=600"]
    assert "realpath cache of 4096K full" in f.title


def test_engine_lines_say_what_is_full():
    state = summarize(requests_with(full_keys()), {"realpath_cache_size": "16K"}).to_json()
    text = "\n".join(engine_lines(state))
    assert "341.0 script lookups per request (include/require), 117.0 compiled" in text
    assert "keys 223 of 223 (FULL)" in text and "realpath cache: 16.0 KB of 16.0 KB" in text
    assert engine_lines(None) == []


def test_files_written_while_served_wait_out_the_protection(tmp_path):
    """opcache_settle: which files the app wrote since it was first served, and how long OPcache
    keeps them uncached (file_update_protection after the newest)."""
    import os
    import time
    from lockdown.harness import opcache_settle as settle
    old, new = tmp_path / "app" / "index.php", tmp_path / "app" / "cache" / "l10n_en.php"
    new.parent.mkdir(parents=True)
    old.write_text("<?php")
    new.write_text("<?php return [];")
    now = time.time()
    os.utime(old, (now - 60, now - 60))
    os.utime(new, (now - 0.5, now - 0.5))
    found = settle.written_since([tmp_path / "app"], now - 10)
    assert [p for _, p in found] == [new]
    assert settle.wait_needed(found, 2.0, now=now) == pytest.approx(1.7)
    assert settle.wait_needed(found, 0.0, now=now) == 0 and settle.wait_needed([], 2.0) == 0
    assert settle.wait_needed(found, 2.0, now=now + 5) == 0
    # the profile's question: changed within the protection before it was served, or since;
    # none when all were already old as the warmup began (its first requests cached them)
    assert [p for _, p in settle.pending(tmp_path / "app", now - 1, now - 1, 2.0)] == [new]
    assert settle.pending(tmp_path / "app", now - 1, now + 2, 2.0) == []
    assert settle.pending(tmp_path / "app", now + 10, now + 10, 2.0) == []
    assert settle.protection_seconds({}) == 2.0 and settle.protection_seconds(
        {"opcache.file_update_protection": "0"}) == 0.0


def test_cycle_collector_runs_are_each_requests_own():
    """gc_status() at each timed request's start and end: its runs and the values they freed."""
    gc = [{"gc_runs_at_start": 0, "gc_runs": 2, "gc_collected_at_start": 0, "gc_collected": 20_000,
           "gc_threshold": 10_001, "gc_roots": 9_999},
          {"gc_runs_at_start": 0, "gc_runs": 0, "gc_collected_at_start": 0, "gc_collected": 0,
           "gc_threshold": 20_001, "gc_roots": 3_085}]
    state = summarize(requests_with([dict(engine(), **g) for g in gc]), {})
    g = state.gc
    assert (g.requests, g.runs_per_request, g.collected_per_request, g.requests_with_runs) == (2, 1.0, 10_000.0, 1)
    assert (g.threshold, g.roots_max) == (20_001, 9_999)
    text = "\n".join(engine_lines(state.to_json()))
    assert "cycle collector: 1.00 runs per request (in 1 of 2), 10,000 values freed per request" in text
    # bundles from before gc_status() was recorded
    assert summarize(requests_with(full_keys(2)), {}).gc is None


REWRITE_PHP = """<?php
$data = [];
for ($i = 0; $i < 200; $i++) { $data["k$i"] = str_repeat('x', $i); }
$file = __DIR__ . '/cache/settings.php';
@mkdir(__DIR__ . '/cache');
file_put_contents($file, '<?php return ' . var_export($data, true) . ';');
$settings = include $file;
echo 'cached ok ', count($settings);
"""


def test_a_php_file_rewritten_on_every_request_is_named_and_gets_no_ini_fix(lockdown, tmp_path):
    """The real stack: an app that writes its cache file on every request and includes it.
    OPcache cannot keep a file whose timestamp changes, and no size would help: the workers'
    counters show one miss a request with nothing full, the prepend names the file, and the
    finding proposes no php.ini change. (Also checks the warmup's wait for files written while
    served, which this app triggers: it does not hide a file rewritten every time.)"""
    from conftest import one_page_target, processes_mentioning
    target = one_page_target(tmp_path, "rewrite", "Writes a PHP cache file on every request, then includes it",
                             REWRITE_PHP, "cached ok")
    out = tmp_path / "out"
    r = lockdown("run", target, "--no-bench", "--no-probe", "--requests", "20", "-o", out)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert ("1 file(s) of the app tree changed just before it was served or since (newest cache/settings.php)"
            in r.stdout)
    o = json.loads((out / "analysis.json").read_text())["engine_state"]["opcache"]
    assert o["misses_per_request"] == 1.0 and o["requests_with_misses"] == o["requests"] > 5, o
    assert o["uncached"] == o["uncached_young"] == {"cache/settings.php": o["requests"]} and not o["keys_full"], o
    [f] = [f for f in json.loads((out / "findings.json").read_text())["findings"] if f["id"] == "opcache"]
    assert f["remediations"] == [] and "cache/settings.php" in f["details"]["no_patch"]
    assert "no patch proposed: no setting would cache these scripts" in r.stdout
    assert processes_mentioning(str(out)) == []


BIG_PHP = """<?php
$n = 0;
for ($i = 0; $i < 30; $i++) {
    $n += count(require sprintf('%s/lib/big%02d.php', __DIR__, $i));
}
echo 'big ok ', $n;
"""


def big_script(seed: int, entries: int = 23_000) -> str:
    """A literal array of `entries` int => int pairs, sparse keys (a hash, not a packed list).
    OPcache keeps it in the script's own memory, never in the interned strings buffer: 32 bytes
    a bucket plus the hash slots, 998,808 bytes of opcache_get_status()'s memory_consumption on
    PHP 8.2 (string literals would go to the interned strings buffer while it has room: the first
    scripts would be smaller). 30 of them in 8 MB, 1 MB of it the interned strings buffer (PHP's
    default of 8 MB does not fit in 8: php-fpm refuses to start): 6 fit, about 500 KB stays free."""
    return "<?php\nreturn [" + ",".join(f"{i * 7 + seed}=>{i}" for i in range(entries)) + "];\n"


def test_scripts_too_big_for_opcache_memory_are_named_and_get_a_memory_fix(lockdown, tmp_path):
    """The real stack: an app that includes 30 scripts of about 1 MB each with
    opcache.memory_consumption=8. The first few fill the shared memory; the rest are compiled on
    every request, with keys to spare and about 500 KB still free, so PHP never sets cache_full
    (only below 64 KB free) and the memory is not "full" by the counters either. The cause is
    the old scripts OPcache does not hold after a request that missed: the finding names the
    shared memory and raises opcache.memory_consumption only, not max_accelerated_files."""
    import os
    import time
    from conftest import one_page_target, processes_mentioning
    target = one_page_target(tmp_path, "bigscripts", "Includes 30 scripts of about 1 MB of OPcache memory "
                             "each into 8 MB of it", BIG_PHP, "big ok",
                             {"opcache.memory_consumption": "8", "opcache.interned_strings_buffer": "1"})
    (target / "app" / "lib").mkdir()
    hour_ago = time.time() - 3600        # old: past opcache.file_update_protection, not "rewritten"
    for i in range(30):
        script = target / "app" / "lib" / f"big{i:02d}.php"
        script.write_text(big_script(i))
        os.utime(script, (hour_ago, hour_ago))
    out = tmp_path / "out"
    r = lockdown("run", target, "--no-bench", "--no-probe", "--requests", "20", "-o", out)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    o = json.loads((out / "analysis.json").read_text())["engine_state"]["opcache"]
    # every request includes index.php and the 30 scripts; 8 MB holds only a handful of them
    assert o["lookups_per_request"] == 31 and o["misses_per_request"] >= 20, o
    assert o["requests_with_misses"] == o["requests"] > 5 and o["cached_scripts"] <= 10, o
    assert not o["keys_full"] and o["cached_keys"] < o["max_cached_keys"] and o["restarts"] == {}, o
    # not full by PHP's flag nor by the free memory: the uncached scripts alone name the cause
    assert not o["cache_full"] and not o["memory_full"] and o["free_memory"] > 64 << 10, o
    assert o["uncached_young"] == {} and len(o["uncached"]) == 10, o
    assert all(p.startswith("lib/big") and n == o["requests"] for p, n in o["uncached"].items()), o
    [f] = [f for f in json.loads((out / "findings.json").read_text())["findings"] if f["id"] == "opcache"]
    assert f["details"]["case"] == "compiling" and f["details"]["causes"] == ["memory"], f["details"]
    assert f["details"]["full"] == [] and "no_patch" not in f["details"], f["details"]
    assert "scripts that are not new stay uncached with keys to spare (lib/big" in f["summary"], f["summary"]
    assert "the shared memory has no free block large enough for them" in f["summary"], f["summary"]
    [fix] = f["remediations"]
    assert fix["kind"] == "ini" and fix["content"].splitlines() == ["opcache.memory_consumption=256"], fix
    assert "max_accelerated_files" not in fix["content"] + fix["description"], fix
    assert "the cause from the same counters: memory" in fix["checked"], fix
    assert processes_mentioning(str(out)) == []
