"""Hot native functions (analyzers/native_functions.py): perf's samples by native function,
self and inclusive, with each function's engine subsystem; in analyze, the report and
`analyze --baseline`."""
from __future__ import annotations

import json

from conftest import one_page_target

from lockdown.analyzers.native_functions import hot_native
from lockdown.analyzers.versus import versus
from lockdown.bundle.model import PerfSample
from lockdown.reports.analysis_text import native_lines, versus_lines

PHP = "/usr/sbin/php-fpm8.2"
LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"


def sample(*frames, request="r1"):
    """A perf sample whose stack is `frames` (symbol, dso), leaf first."""
    return PerfSample(1, 7, 7, "php-fpm8.2", 1, request, [["0", sym, 0, dso] for sym, dso in frames])


def test_self_inclusive_and_order():
    root = [("execute_ex", PHP), ("php_execute_script", PHP)]
    samples = [sample(("zend_hash_find", PHP), *root) for _ in range(3)]
    samples += [sample(("_emalloc", PHP), *root) for _ in range(3)]      # a tie on self and inclusive: by name
    # recursion: execute_ex three times on one stack counts once toward its inclusive samples
    samples += [sample(("execute_ex", PHP), ("execute_ex", PHP), ("execute_ex", PHP), ("php_execute_script", PHP))]
    samples += [PerfSample(1, 7, 7, "php-fpm8.2", 1, "r1", [])]           # no stack: in the base only
    # an unnamed frame is a function as the leaf only, not as the root unwinding ended in
    samples += [sample(("[unknown]", "[unknown]"), ("[unknown]", "[unknown]"))]
    samples += [sample(("zend_hash_find", PHP), ("[unknown]", "[unknown]"))]
    rows, total = hot_native(samples)
    assert total == 10
    assert [(r.name, r.self_samples, r.inclusive_samples) for r in rows] == [
        ("zend_hash_find", 4, 4), ("_emalloc", 3, 3), ("execute_ex", 1, 7), ("[unknown]", 1, 1),
        ("php_execute_script", 0, 7)]
    assert [r.subsystem for r in rows] == ["hashtable", "memory", "vm", "other", "builtin"]  # toml: php_*
    assert {r.dso for r in rows} == {"php-fpm8.2", "[unknown]"}
    assert [r.name for r in hot_native(samples[:7], top=2)[0]] == ["_emalloc", "zend_hash_find"]
    assert hot_native([]) == ([], 0)


def test_a_libc_function_is_its_own_row_in_the_subsystem_it_was_called_from():
    root = [("execute_ex", PHP)]
    memmove = ("__memmove_avx_unaligned_erms", LIBC)
    samples = [sample(memmove, ("zend_array_dup", PHP), *root), sample(memmove, ("zend_array_dup", PHP), *root),
               sample(memmove, ("_emalloc", PHP), *root),
               # the same name in another file is another function
               sample(("__memmove_avx_unaligned_erms", "[kernel.kallsyms]"), ("zend_array_dup", PHP), *root)]
    rows, _ = hot_native(samples)
    by = {(r.name, r.dso): r for r in rows}
    libc = by[("__memmove_avx_unaligned_erms", "libc.so.6")]
    assert (libc.self_samples, libc.subsystem) == (3, "hashtable")     # 2 under zend_array_dup, 1 under _emalloc
    assert by[("__memmove_avx_unaligned_erms", "[kernel.kallsyms]")].self_samples == 1
    assert by[("zend_array_dup", "php-fpm8.2")].inclusive_samples == 3


def test_each_workers_jit_map_is_one_file_and_ties_of_subsystem_go_by_name():
    jit = [sample(("[PCRE JIT code]", f"/tmp/perf-{pid}.map")) for pid in (4849, 4850, 4850)]
    [row], total = hot_native(jit)
    assert (row.name, row.dso, row.self_samples, row.subsystem, total) == ("[PCRE JIT code]", "perf-PID.map", 3,
                                                                            "regex", 3)
    # called once from the memory manager and once from a hash function: the first by name
    tie = [sample(("memcpy", LIBC), ("_emalloc", PHP)), sample(("memcpy", LIBC), ("zend_hash_find", PHP))]
    assert hot_native(tie)[0][0].subsystem == "hashtable"
    assert hot_native(list(reversed(tie)))[0][0].subsystem == "hashtable"


def test_text_lines_and_the_baseline_rows():
    n = {"samples": 200, "top": [{"name": "zend_hash_find", "dso": "php-fpm8.2", "subsystem": "hashtable",
                                  "self_samples": 41, "inclusive_samples": 48},
                                 {"name": "execute_ex", "dso": "php-fpm8.2", "subsystem": "vm",
                                  "self_samples": 30, "inclusive_samples": 190}]}
    lines = native_lines(n, top=1)
    assert lines[1].startswith("hot native functions (perf, 200 samples of the timed requests;")
    assert lines[2:] == ["   20.5  24.0  hashtable    zend_hash_find [php-fpm8.2]"]
    assert native_lines(None) == native_lines({"samples": 0, "top": []}) == []
    budget = {"wall_us": 1000, "cpu_us": 800, "db_wait_us": 0, "other_wait_us": 200, "requests": 1}
    base = {"bundle": "b", "target": "t", "budget_by_url": {}, "budget_overall": budget, "by_request": [],
            "native_functions": n}
    new = {**base, "native_functions": {"samples": 100, "top": [
        {"name": "zend_hash_find", "dso": "php-fpm8.2", "subsystem": "hashtable", "self_samples": 5,
         "inclusive_samples": 6},
        {"name": "execute_ex", "dso": "php-fpm8.2", "subsystem": "vm", "self_samples": 15, "inclusive_samples": 90}]}}
    v = versus(base, new, {}, {})
    assert v["native_self_pct"] == [{"function": "zend_hash_find [php-fpm8.2]", "before": 20.5, "after": 5.0},
                                    {"function": "execute_ex [php-fpm8.2]", "before": 15.0, "after": 15.0}]
    assert versus_lines(v)[-1] == ("  native functions, self % of samples: zend_hash_find [php-fpm8.2] 20.5 -> 5.0, "
                                   "execute_ex [php-fpm8.2] 15.0 -> 15.0")


REGEX = """<?php
$s = str_repeat('lorem ipsum dolor sit amet ', 40);
$n = 0;
for ($i = 0; $i < 3000; $i++) {{ $n += preg_match_all('/(\\w+)\\s+(?=\\w*m)/', $s . $i); }}
echo 'regex ok ', $n;
"""


def test_a_regex_page_is_led_by_pcre_on_the_real_stack(lockdown, tmp_path):
    """The real stack, PCRE's JIT off: the page's CPU goes to libpcre2's interpreter, so the
    first native function is in the regex subsystem (PCRE2's, or libc's under it); the
    analysis and its text agree, and the rows rest on the subsystems' samples."""
    target = one_page_target(tmp_path / "t", "regex", "A page that matches", REGEX, "regex ok")
    out = tmp_path / "cap"
    r = lockdown("profile", target, "-o", out, "--collect", "perf", "-n", "25", "--no-overhead-check",
                 "--warmup-requests", "3", "--php-ini", "pcre.jit=0")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    a = json.loads(lockdown("analyze", out, "--json").stdout)
    n = a["native_functions"]
    assert n["samples"] == a["subsystems"]["samples"] > 50
    # the first is PCRE2's interpreter, or libc's memmove copying its backtracking frames (seen on
    # one run: 485 of the samples): either way in the regex subsystem, with libpcre2 listed
    first = n["top"][0]
    assert first["dso"].split(".so")[0] in ("libpcre2-8", "libc") and first["subsystem"] == "regex", n["top"][:3]
    assert any(f["dso"].startswith("libpcre2-8.so") and f["subsystem"] == "regex" for f in n["top"][:5]), n["top"][:5]
    assert sum(f["self_samples"] for f in n["top"]) <= n["samples"]
    assert all(f["inclusive_samples"] >= f["self_samples"] for f in n["top"])
    text = lockdown("analyze", out, "--top", "3").stdout
    assert f"  regex        {first['name']} [{first['dso']}]" in text
