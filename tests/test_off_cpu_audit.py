"""Off the CPU by PHP function (analyzers/off_cpu.py) on the real stack, beyond a sleep: a wait
on a socket (an HTTP call to a local server that replies after 30 ms) is named on the PHP
function that made it, and a helper that sleeps for several callers is one row, the sum of
their waits, whose stack is the call site that waited most, while the off-CPU flame graph
splits it by call site. Waits here are all longer than the Excimer period (5 ms), so that
none of them spreads over the functions sampled after it; bounds are lower bounds (a loaded
host only lengthens waits) or orderings."""
from __future__ import annotations

import http.server
import json
import threading
import time

from conftest import one_page_target

SLOW_S = 0.030


class _Slow(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        time.sleep(SLOW_S)
        body = b"slow reply"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


PAGE = """<?php
function fetch_remote() { return strlen(file_get_contents('http://127.0.0.1:%d/slow')); }
function wait_ms($ms) { usleep($ms * 1000); return $ms; }
function long_call() { return wait_ms(60); }
function mid_call() { return wait_ms(25); }
function compute() { $x = 0; for ($i = 0; $i < 300000; $i++) { $x = ($x + $i * 7) %% 1000003; } return $x; }
function page() { return long_call() + compute() + fetch_remote() + compute() + mid_call() + compute(); }
echo 'audit ok ', page();
"""


def test_a_socket_wait_lands_on_its_caller_and_a_shared_helper_is_split_by_call_site(lockdown, tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Slow)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        target = one_page_target(tmp_path, "offaudit", "Waits on a socket and in a shared helper",
                                 PAGE % server.server_address[1], "audit ok")
        out = tmp_path / "b"
        r = lockdown("profile", target, "-o", out, "-n", "30", "--collect", "excimer,perf",
                     "--excimer-period", "5", "--no-overhead-check")
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
    a = lockdown("analyze", out, "--json")
    assert a.returncode == 0, a.stderr
    o = json.loads(a.stdout)["off_cpu"]
    by = {f["name"]: f for f in o["functions"]}
    # the helper's 60 + 25 ms first, then the 30 ms socket wait
    assert [f["name"] for f in o["functions"][:2]] == ["wait_ms", "fetch_remote"], o
    fetch = by["fetch_remote"]
    assert 0.8 * SLOW_S * 1e6 <= fetch["blocked_us"] <= fetch["off_cpu_us"] <= fetch["wall_us"], fetch
    assert fetch["stack"] == "index.php;page;fetch_remote" and not fetch["sql"]
    helper = by["wait_ms"]
    assert helper["blocked_us"] >= 0.8 * 85_000, helper          # both call sites' waits, summed
    assert helper["stack"] == "index.php;page;long_call;wait_ms"  # the call site that waited most
    # the off-CPU flame graph keeps the call sites apart
    r = lockdown("flamegraph", out, "--kind", "php-offcpu", "-o", tmp_path / "off.folded")
    assert r.returncode == 0, r.stderr
    folded = {k: int(v) / o["requests"] for k, v in
              (line.rsplit(" ", 1) for line in (tmp_path / "off.folded").read_text().splitlines())}
    long_us, mid_us = folded["index.php;page;long_call;wait_ms"], folded["index.php;page;mid_call;wait_ms"]
    assert long_us >= 0.8 * 60_000 and mid_us >= 0.8 * 25_000 and long_us > mid_us, folded
    assert folded["index.php;page;fetch_remote"] >= 0.8 * SLOW_S * 1e6, folded
