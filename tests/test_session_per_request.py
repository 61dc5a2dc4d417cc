"""session-per-request (lockdown/analyzers/detectors/session_per_request.py): a PHP session
started on every request, a new session file for every visitor without a cookie. Synthetic
contexts for the rule, then the real stack: a one-page app that starts a session on every
request, and its control that starts none."""
from __future__ import annotations

import json

import pytest

from conftest import one_page_target
from contexts import context, native, request
from lockdown.analyzers.detectors import session_per_request as spr

PHP = "/usr/sbin/php-fpm8.2"


def ctx_of(starting=(True, True, True), samples=(), other_url_samples=0):
    """3 timed requests and 3 profiled ones of "/", each profiled one calling session_start from
    init_session when `starting` says so; `samples`: native samples of r1 (leaf first)."""
    reqs = [request(f"r{i}", "/", wall_us=10_000, cpu_us=8_000) for i in (1, 2, 3)]
    reqs += [request("r7", "/other", wall_us=10_000, cpu_us=8_000)]
    reqs += [request(f"r{i}", "/", wall_us=12_000, instrumented=True) for i in (11, 12, 13)]
    xhprof = {f"r{i}": {"main()": {"ct": 1, "wt": 12_000}, "main()==>init_session": {"ct": 1, "wt": 900},
                        **({"init_session==>session_start": {"ct": 1, "wt": 600}} if s else {})}
              for i, s in zip((11, 12, 13), starting)}
    nat = [native("r1", frames) for frames in samples]
    nat += [native("r7", [("execute_ex", PHP)]) for _ in range(other_url_samples)]
    return context(reqs, xhprof=xhprof, native_samples=nat)


SESSION = [("ext4_create", "[kernel.kallsyms]"), ("ps_files_open", PHP), ("ps_open_files", PHP),
           ("php_session_initialize", PHP), ("zif_session_start", PHP)]
OTHER = [("execute_ex", PHP), ("php_execute_script", PHP)]


def test_a_session_started_on_every_request_is_found_with_its_caller():
    # 60 native samples of "/", 12 in the session code: 20% of CPU x CPU/wall (0.8) x the URL's
    # part of the timed wall time (30,000 of 40,000 us)
    [f] = spr.detect(ctx_of(samples=[SESSION] * 12 + [OTHER] * 48, other_url_samples=5))
    assert f.id == "session-per-request" and f.details["function"] == "init_session"
    assert f.urls == ["/"] and f.details["profiled"] == {"/": [3, 3]}
    assert f.share_pct == pytest.approx(20 * 0.8 * 0.75, abs=0.01) and f.severity == "high"
    assert f.details["session_samples"] == 12 and f.details["native_samples"] == 60
    assert "no_patch" in f.details and "init_session starts a PHP session on every request" in f.summary


def test_without_enough_samples_the_share_is_xhprofs_session_start():
    # 600 us of 12,000 in session_start (5%), x the URL's part of the timed wall time (0.75)
    [f] = spr.detect(ctx_of(samples=[OTHER] * 3))
    assert f.share_pct == pytest.approx(3.75, abs=0.01)


def test_not_every_request_or_too_little_is_no_finding():
    assert spr.detect(ctx_of(starting=(True, True, False))) == []        # 2 of 3: under 90%
    assert spr.detect(ctx_of(starting=(False, False, False))) == []
    assert spr.detect(ctx_of(samples=[OTHER] * 60)) == []                 # perf sees no session work


PAGE_SESSION = """<?php
session_start();
$_SESSION['seen'] = ($_SESSION['seen'] ?? 0) + 1;
$rows = [];
for ($i = 0; $i < 40; $i++) { $rows[] = str_repeat('x', 50) . $i; }
echo "sessions ok ", count($rows), "\\n";
"""
PAGE_NONE = (PAGE_SESSION.replace("session_start();\n", "")
             .replace("$_SESSION['seen'] = ($_SESSION['seen'] ?? 0) + 1;\n", ""))


@pytest.mark.server
def test_on_the_stack_a_session_per_request_is_found_and_its_control_is_not(lockdown, tmp_path):
    found = {}
    for name, page in (("sessions", PAGE_SESSION), ("nosessions", PAGE_NONE)):
        target = one_page_target(tmp_path, name, "a page starting a session", page, "sessions ok")
        r = lockdown("run", target, "-o", tmp_path / f"{name}-run", "--no-bench", "--requests", "120", timeout=900)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        data = json.loads((tmp_path / f"{name}-run" / "findings.json").read_text())
        found[name] = [f for f in data["findings"] if f["id"] == "session-per-request"]
    [f] = found["sessions"]
    assert f["details"]["function"] == "main()" and f["urls"] == ["/"]
    assert f["details"]["profiled"]["/"][0] == f["details"]["profiled"]["/"][1] > 0
    assert f["share_pct"] > 0
    if f["details"]["native_samples"] >= spr.MIN_SAMPLES:      # perf at 99 Hz on a 1 ms page: few or none
        assert f["details"]["session_samples"] > 0
    assert found["nosessions"] == []
