"""Bundles on disk: a real (small) capture, then every kind of damage a reader must reject
with one line naming the file. Most damage is "rehashed": the manifest rewritten to match the
damaged files, so that only the readers' own checks of encoding, JSON and shapes can catch it."""
import hashlib
import json
import math
import re
import shutil

import pytest

from lockdown.bundle.model import ExcimerProfile, PerfSample, RecordError, RequestRecord, Statement
from lockdown.bundle.store import strict_json


def _rehashed(*edits):
    """A damage function: the edits, then the manifest made to match every file of the bundle."""
    def damage(b):
        for edit in edits:
            edit(b)
        m = json.loads((b / "manifest.json").read_text())
        m["files"] = {str(p.relative_to(b)): {"bytes": p.stat().st_size,
                                              "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
                      for p in sorted(b.rglob("*")) if p.is_file() and p.name != "manifest.json"}
        (b / "manifest.json").write_text(json.dumps(m))
    return damage


def _poke(p, offset, byte):
    data = bytearray(p.read_bytes())
    data[offset] = byte
    p.write_bytes(bytes(data))


def _set(rel, field, value, then=None):
    """An edit: `field` of the first record of `rel` set to `value` (deleted for ...), and the
    line's text passed through `then` (for JSON that json.dumps does not write)."""
    def edit(b):
        lines = (b / rel).read_text().splitlines()
        d = json.loads(lines[0])
        if value is ...:
            del d[field]
        else:
            d[field] = value
        lines[0] = then(json.dumps(d)) if then else json.dumps(d)
        (b / rel).write_text("".join(line + "\n" for line in lines))
    return edit


def _write(rel, text):
    """An edit: file `rel` (the first xhprof profile for "xhprof") replaced by `text`."""
    def edit(b):
        p = sorted((b / "xhprof").iterdir())[0] if rel == "xhprof" else b / rel
        p.parent.mkdir(exist_ok=True)
        p.write_text(text)
    return edit


def _manifest(change):
    def edit(b):
        m = json.loads((b / "manifest.json").read_text())
        change(m)
        (b / "manifest.json").write_text(json.dumps(m))
    return edit


# The hello capture has no perf and no statements: those files are written whole.
SAMPLE = {"time_ns": 1, "pid": 2, "tid": 2, "comm": "php-fpm8.2", "period": 10, "request": None,
          "frames": [["2c7780", "_emalloc", 112, "/usr/sbin/php-fpm8.2"]]}
STATEMENT = {"seq": 0, "request": None, "attribution": "none", "thread_id": 1, "schema": "", "sql": "SELECT 1",
             "duration_us": 1, "lock_us": 0, "rows_sent": 1, "rows_examined": 0, "rows_affected": 0,
             "timestamp": 1, "candidates": []}


def _record(rel, base, **fields):
    return _write(rel, json.dumps({**base, **fields}) + "\n")


EXCIMER_INDEX = _rehashed(_set("excimer.jsonl", "stacks", ["a"]), _set("excimer.jsonl", "samples", [[1, 1, 5]]))
BUNDLE_ERRORS = [
    ("truncated", lambda b: _truncate(b / "requests.jsonl"), "requests.jsonl: ", "truncated or damaged"),
    ("missing file", lambda b: (b / "excimer.jsonl").unlink(), "excimer.jsonl: missing from the bundle", ""),
    ("no manifest", lambda b: (b / "manifest.json").unlink(), "manifest.json: missing", ""),
    ("damaged manifest", lambda b: (b / "manifest.json").write_text("{\"format\": "), "manifest.json: damaged", ""),
    ("other version", lambda b: _set_version(b, 99), "bundle format version 99 is not supported", ""),
    ("flipped bytes", lambda b: _flip(b / "requests.jsonl"), "requests.jsonl: content differs", ""),
    # encoding and JSON
    ("not utf-8 in a record", _rehashed(lambda b: _poke(b / "requests.jsonl", 8, 0xFF)),
     "requests.jsonl line 1: not UTF-8 text", "capture it again"),
    ("not utf-8 in xhprof", _rehashed(lambda b: _poke(sorted((b / "xhprof").iterdir())[0], 3, 0xFF)),
     "cannot read the xhprof profile (not UTF-8 text", ""),
    ("not utf-8 in the manifest", lambda b: _poke(b / "manifest.json", 3, 0xFF),
     "manifest.json: damaged (not UTF-8 text", ""),
    ("NaN", _rehashed(_set("requests.jsonl", "wall_us", math.nan)),
     "requests.jsonl line 1: damaged JSON (NaN is not a number)", ""),
    ("float overflow", _rehashed(_set("requests.jsonl", "start_unix", 0.125, lambda t: t.replace("0.125", "1e999"))),
     "requests.jsonl line 1: damaged JSON (number 1e999 is too large)", ""),
    # record fields
    ("null int", _rehashed(_set("requests.jsonl", "wall_us", None)),
     "requests.jsonl line 1: field wall_us is not an int (null)", ""),
    ("int beyond 64 bits", _rehashed(_set("requests.jsonl", "pid", 2**64)), "field pid is not an int", ""),
    ("int for a bool", _rehashed(_set("requests.jsonl", "instrumented", 1)),
     "field instrumented is not true or false (1)", ""),
    ("missing field", _rehashed(_set("requests.jsonl", "id", ...)), "requests.jsonl line 1: field id is missing", ""),
    ("excimer stack index", EXCIMER_INDEX,
     "excimer.jsonl line 1: field samples: item 0 is not [time ns, weight >= 0, stack index < 1]", ""),
    ("excimer negative weight",
     _rehashed(_set("excimer.jsonl", "stacks", ["a"]), _set("excimer.jsonl", "samples", [[1, -1, 0]])),
     "excimer.jsonl line 1: field samples: item 0", ""),
    ("excimer stack not text", _rehashed(_set("excimer.jsonl", "stacks", [5])),
     "field stacks is not a list of strings ([5])", ""),
    ("perf frames null", _rehashed(_record("perf/samples.jsonl", SAMPLE, frames=None)),
     "perf/samples.jsonl line 1: field frames is not a list (null)", ""),
    ("perf address not hex", _rehashed(_record("perf/samples.jsonl", SAMPLE, frames=[["zz", "f", None, "/x.so"]])),
     "field frames: item 0 is not [address hex, symbol, offset or null, dso]", ""),
    ("statement attribution", _rehashed(_record("statements.jsonl", STATEMENT, attribution="maybe")),
     "statements.jsonl line 1: field attribution is \"maybe\", not one of", ""),
    # whole files
    ("xhprof null", _rehashed(_write("xhprof", "null")), "cannot read the xhprof profile (not an object (null))", ""),
    ("xhprof a list", _rehashed(_write("xhprof", "[1, 2]")), "cannot read the xhprof profile (not an object", ""),
    ("xhprof count not a number", _rehashed(_write("xhprof", '{"main()": {"ct": "x", "wt": 1}}')),
     "entry 'main()': ct is not a number", ""),
    ("build ids a list", _rehashed(_write("perf/buildids.json", '["a"]')),
     "perf/buildids.json: not an object of DSO path -> build id strings", ""),
    ("build ids truncated", _rehashed(_write("perf/buildids.json", '{"/usr/sbin/php-fpm8.2": "8e85')),
     "perf/buildids.json: cannot read the build ids (damaged JSON", ""),
    # the manifest
    ("manifest target", _manifest(lambda m: m.update(target="hello")), "manifest.json: target is not an object", ""),
    ("manifest function list", _manifest(lambda m: m["php"].update(internal_functions=[1, 2])),
     "php.internal_functions is not a list of strings or null", ""),
    ("manifest file outside", _manifest(lambda m: m["files"].update({"../x": {"bytes": 1, "sha256": ""}})),
     "files lists '../x', not a path inside the bundle", ""),
    ("manifest version true", _manifest(lambda m: m.update(version=True)), "version true is not a number", ""),
]


def _truncate(p):
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])


def _flip(p):
    data = bytearray(p.read_bytes())
    data[10] = ord("#") if data[10] != ord("#") else ord("!")
    p.write_bytes(bytes(data))


def _set_version(b, v):
    m = json.loads((b / "manifest.json").read_text())
    m["version"] = v
    (b / "manifest.json").write_text(json.dumps(m))


@pytest.fixture(scope="module")
def hello_bundle(tmp_path_factory, home):
    import os
    import subprocess
    from conftest import REPO, lockdown_argv
    b = tmp_path_factory.mktemp("bundles") / "hello"
    r = subprocess.run(lockdown_argv("profile", "hello", "--requests", "20", "-o", b,
                                     "--collect", "excimer,xhprof", "--xhprof-every", "3",
                                     "--xhprof-flags", "memory_alloc",
                                     "--no-overhead-check"),
                       capture_output=True, text=True, timeout=300, cwd=REPO,
                       env={**os.environ, "LOCKDOWN_HOME": str(home)})
    assert r.returncode == 0, r.stderr
    return b


def test_bundle_layout(hello_bundle):
    m = json.loads((hello_bundle / "manifest.json").read_text())
    assert (m["format"], m["version"]) == ("lockdown-bundle", 1)
    assert set(m["files"]) >= {"requests.jsonl", "excimer.jsonl"}
    assert any(f.startswith("xhprof/") for f in m["files"])
    assert m["php"]["extensions"]["excimer"]
    # tideways_xhprof is loaded only in the one-worker pool that serves instrumented requests
    assert "tideways_xhprof" not in m["php"]["extensions"]
    assert m["php"]["pool"]["instrumented_extension"] == "tideways_xhprof"
    requests = [json.loads(line) for line in (hello_bundle / "requests.jsonl").read_text().splitlines()]
    instrumented = [r for r in requests if r["instrumented"]]
    assert instrumented and len({r["pid"] for r in instrumented}) == 1
    assert not {r["pid"] for r in instrumented} & {r["pid"] for r in requests if not r["instrumented"]}
    # --xhprof-flags memory_alloc: allocation counts per function
    profile = json.loads((hello_bundle / "xhprof" / f"{instrumented[0]['id']}.json").read_text())
    assert all({"ct", "wt", "mem.na", "mem.nf", "mem.aa"} <= set(v) for v in profile.values())
    assert m["php"]["pool"]["auto_prepend_file"].endswith("capture/prepend.php")
    assert "ffi.enable" not in m["php"]["pool"]           # one request at a time needs no ports
    assert not list(hello_bundle.parent.glob(".*partial*"))   # no staging left behind


@pytest.mark.parametrize("name,damage,message,also", BUNDLE_ERRORS, ids=[e[0] for e in BUNDLE_ERRORS])
def test_damaged_bundle_is_one_line(lockdown, hello_bundle, tmp_path, name, damage, message, also):
    b = tmp_path / "b"
    shutil.copytree(hello_bundle, b)
    damage(b)
    r = lockdown("validate", b)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith("lockdown: error: ") and message in r.stderr and also in r.stderr


def test_not_a_bundle(lockdown, tmp_path):
    r = lockdown("validate", tmp_path / "nothing")
    assert r.returncode == 2 and "no such bundle directory" in r.stderr


def test_validate_takes_a_request_without_a_receive_time(lockdown, hello_bundle, tmp_path):
    b = tmp_path / "b"
    shutil.copytree(hello_bundle, b)
    # int | None: well typed; the perf check (client windows) reads it
    _rehashed(_set("requests.jsonl", "client_end_ns", None),
              _manifest(lambda m: m["capture"]["collect"].append("perf")))(b)
    r = lockdown("validate", b)
    assert r.returncode in (0, 3) and "Traceback" not in r.stderr, r.stderr


READERS = {"analyze": lambda b, out: ("analyze", b),
           "flamegraph": lambda b, out: ("flamegraph", b, "-o", out / "php.svg"),
           "export": lambda b, out: ("export", b, "-o", out / "export")}
READER_ERRORS = [
    # analyze, flamegraph and export check only sizes: damage that keeps them must still be one line
    (command, *case) for case in [
        ("not utf-8, same size", lambda b: _poke(b / "requests.jsonl", 8, 0xFF),
         "requests.jsonl line 1: not UTF-8 text"),
        ("no requests", _rehashed(_write("requests.jsonl", "")), "requests.jsonl holds no requests; capture again"),
    ] for command in READERS
] + [(command, "excimer stack index", EXCIMER_INDEX, "excimer.jsonl line 1: field samples: item 0")
     for command in ("analyze", "flamegraph")]


@pytest.mark.parametrize("command,name,damage,message", READER_ERRORS,
                         ids=[f"{e[0]}-{e[1]}" for e in READER_ERRORS])
def test_readers_reject_damage_in_one_line(lockdown, hello_bundle, tmp_path, command, name, damage, message):
    b = tmp_path / "b"
    shutil.copytree(hello_bundle, b)
    damage(b)
    r = lockdown(*READERS[command](b, tmp_path))
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith("lockdown: error: ") and message in r.stderr, r.stderr


# --- records, without a capture ----------------------------------------------------------------

REQUEST = {"id": "r1", "pid": 1, "method": "GET", "uri": "/", "status": 200, "start_ns": 0, "end_ns": 10,
           "start_unix": 1.5, "wall_us": 10, "cpu_us": 5, "peak_memory": 1, "instrumented": False}


@pytest.mark.parametrize("kind,base,changes,message", [
    (RequestRecord, REQUEST, {"status": True}, "field status is not an int (true)"),
    (RequestRecord, REQUEST, {"wall_us": 1.0}, "field wall_us is not an int (1.0)"),
    (RequestRecord, REQUEST, {"start_ns": -2**63 - 1}, "field start_ns is not an int"),
    (RequestRecord, REQUEST, {"start_unix": math.inf}, "field start_unix is not a number"),
    (RequestRecord, REQUEST, {"start_unix": 1e30}, "field start_unix is not a time in seconds since 1970"),
    (RequestRecord, REQUEST, {"url": 5}, "field url is not a string or null (5)"),
    (RequestRecord, REQUEST, {"db_threads": [1, "2"]}, "field db_threads is not a list of ints or null"),
    (Statement, STATEMENT, {"candidates": "r1"}, "field candidates is not a list of strings"),
    (PerfSample, SAMPLE, {"frames": [["ff", "f", -1, "/x.so"]]}, "field frames: item 0 is not [address hex"),
    (PerfSample, SAMPLE, {"frames": [["ff f", "f", None, "/x.so"]]}, "field frames: item 0"),
    (PerfSample, SAMPLE, {"frames": [["f" * 17, "f", None, "/x.so"]]}, "field frames: item 0"),
    (PerfSample, SAMPLE, {"frames": [["ff", "f", None]]}, "field frames: item 0"),
    (ExcimerProfile, {"request": "r1", "pid": 1, "stacks": ["a"]}, {"samples": [[1, 1, 0], [2, math.nan, 0]]},
     "field samples: item 1 is not"),
    (ExcimerProfile, {"request": "r1", "pid": 1, "stacks": ["a"]}, {"samples": [[1, 2**63, 0]]},
     "field samples: item 0 is not"),
    (ExcimerProfile, {"request": "r1", "pid": 1, "stacks": ["a"]}, {"samples": [[1, 1, True]]},
     "field samples: item 0 is not"),
])
def test_records_reject_wrong_types(kind, base, changes, message):
    with pytest.raises(RecordError, match=re.escape(message)):
        kind.from_json({**base, **changes})


def test_records_take_what_writers_write():
    r = RequestRecord.from_json({**REQUEST, "start_unix": 2, "url": None, "db_threads": [7], "later": "x"})
    assert (r.start_unix, r.url, r.db_threads) == (2, None, [7])       # an int is a number; unknown fields ignored
    p = ExcimerProfile.from_json({"request": "r1", "pid": 1, "stacks": ["a", "a;b"],
                                  "samples": [[1, 1, 0], [2, 2.5, 1]]})
    assert p.folded() == {"a": 1, "a;b": 2.5}
    top = ["ffffffffffffffff", "[unknown]", None, "[unknown]"]
    s = PerfSample.from_json({**SAMPLE, "frames": [top, *SAMPLE["frames"]]})
    assert len(s.frames) == 2 and PerfSample.from_json({**SAMPLE, "frames": []}).frames == []


@pytest.mark.parametrize("text", [b'{"a": NaN}', b'[Infinity]', b'[-Infinity]', b'[1e999]', b'["\xff"]'])
def test_strict_json_rejects_what_no_writer_writes(text):
    with pytest.raises(ValueError):
        strict_json(text)


class _Captured:
    """What coverage_checks reads of a bundle, for requests of a chosen length."""
    def __init__(self, walls_us, period_ms, outside_us, samples_in, samples_out, stacks=True):
        self.manifest = {"requests": {"sent": len(walls_us)},
                         "capture": {"collect": ["perf", "excimer"], "excimer_period_ms": period_ms}}
        self._requests, self._perf, self._excimer = [], [], []
        t = 1_000_000_000
        for i, wall in enumerate(walls_us):
            rid = f"r{i:06d}"
            start, end = t + outside_us * 500, t + outside_us * 500 + wall * 1000
            self._requests.append(RequestRecord(id=rid, pid=7, method="GET", uri="/", status=200, start_ns=start,
                                                end_ns=end, start_unix=1.7e9, wall_us=wall, cpu_us=wall, peak_memory=1,
                                                instrumented=False,
                                                client_start_ns=t, client_end_ns=t + wall * 1000 + outside_us * 1000))
            for k in range(samples_in):
                self._perf.append(PerfSample(start + k, 7, 7, "php-fpm", 1, rid, []))
            for k in range(samples_out):
                self._perf.append(PerfSample(t + k, 7, 7, "php-fpm", 1, None, []))
            if stacks and wall >= 3 * period_ms * 1000:
                self._excimer.append(ExcimerProfile(request=rid, pid=7, stacks=["main"], samples=[[start, 1, 0]]))
            t += 10 * (wall + outside_us) * 1000

    def requests(self):
        return self._requests

    def perf_samples(self):
        return iter(self._perf)

    def excimer(self):
        return self._excimer


def test_fast_pages_are_judged_by_what_their_windows_can_hold():
    """A verify re-capture of a patched minicms (4.75 ms pages): PHP's request start-up and the
    capture's bookkeeping, outside the request window, were a quarter of each request, and
    pages shorter than two Excimer periods may get no sample; neither is a broken capture."""
    from lockdown.bundle.validate import coverage_checks
    fast = {c.name: c for c in coverage_checks(_Captured([4750] * 10, 4.0, 1500, 3, 1))}
    assert fast["perf samples attributed"].ok, fast["perf samples attributed"].detail
    assert "cover 76% of the client's, so at least 68% is expected" in fast["perf samples attributed"].detail
    assert fast["PHP stacks per request"].ok
    assert ("10 shorter than three 4 ms sampling periods (their wait for a CPU not counted) have none"
            in fast["PHP stacks per request"].detail)
    # the same losses on 200 ms pages are a broken capture
    slow = {c.name: c for c in coverage_checks(_Captured([200_000] * 10, 4.0, 1500, 3, 1, stacks=False))}
    assert not slow["perf samples attributed"].ok and "expected" not in slow["perf samples attributed"].detail
    assert not slow["PHP stacks per request"].ok and "missing: r000000" in slow["PHP stacks per request"].detail
    # 3 of 4 is no evidence of a broken attribution; 30 of 40 is (95% Wilson interval)
    few = {c.name: c for c in coverage_checks(_Captured([200_000], 4.0, 1500, 3, 1))}
    assert few["perf samples attributed"].ok


class _Small:
    """A bundle as coverage_checks reads it, from a manifest and records."""
    def __init__(self, manifest, requests, perf=(), excimer=(), xhprof=(), statements=()):
        self.manifest, self._r, self._p, self._e, self._x, self._s = \
            manifest, requests, list(perf), list(excimer), list(xhprof), list(statements)

    def requests(self):
        return self._r

    def perf_samples(self):
        return iter(self._p)

    def excimer(self):
        return self._e

    def xhprof_ids(self):
        return self._x

    def statements(self):
        return self._s


def _rq(i, status=200, client=None, instrumented=False):
    a, b = client or (None, None)
    return RequestRecord(id=f"r{i}", pid=7, method="GET", uri="/", status=status, start_ns=(a or 0) + 1,
                         end_ns=(b or 0), start_unix=1.7e9, wall_us=1, cpu_us=1, peak_memory=1,
                         instrumented=instrumented, client_start_ns=a, client_end_ns=b)


def test_coverage_checks_count_what_each_collector_should_have_left():
    from lockdown.bundle.validate import _client_windows, coverage_checks, wilson_upper

    def checks(manifest, requests, **records):
        return {c.name: c for c in coverage_checks(_Small(manifest, requests, **records))}
    # Wilson's upper end u solves n (hits/n - u)^2 = z^2 u (1 - u), above hits/n
    for hits, n in ((3, 4), (30, 40), (0, 5), (5, 5)):
        u = wilson_upper(hits, n)
        assert hits / n <= u <= 1 + 1e-12 and n * (hits / n - u) ** 2 == pytest.approx(1.96 ** 2 * u * (1 - u))
    assert wilson_upper(0, 0) == 0.0
    # requests logged, responses
    c = checks({"requests": {"sent": 3, "lost": 1}}, [_rq(1), _rq(2, 500)])
    assert not c["requests logged"].ok and c["requests logged"].detail == "2 of 3 requests logged; 1 lost"
    assert not c["responses"].ok and c["responses"].detail == "1 requests with status 5xx or none"
    c = checks({"requests": {"sent": 4}}, [_rq(1, 499), _rq(2, 404), _rq(3, 0), _rq(4, 501)])
    assert c["requests logged"].ok and c["requests logged"].detail == "4 of 4 requests logged"
    assert c["responses"].detail == "2 requests with status 5xx or none"
    c = checks({"requests": {"sent": 0}}, [])
    assert not c["requests logged"].ok and c["responses"].ok and c["responses"].detail == "no 5xx among 0 requests"
    # the driver's windows: overlapping ones merged, a request without a send time left out
    rs = [_rq(1, client=(10, 50)), _rq(2, client=(20, 30)), _rq(3, client=(40, 60)), _rq(4, client=(100, 110)),
          _rq(5, client=(None, 200))]
    assert _client_windows(rs) == [(10, 60), (100, 110)]
    assert _client_windows(rs + [_rq(6, client=(105, 120))]) == [(10, 60), (100, 120)]
    perf = [PerfSample(t, 7, 7, "php-fpm", 1, rid, []) for t, rid in
            ((10, "r1"), (60, "r3"), (100, "r4"), (110, None), (61, None), (5, None), (300, None))]
    c = checks({"capture": {"collect": ["perf"]}}, rs, perf=perf)["perf samples attributed"]
    assert c.ok and c.detail == "3 of 4 samples inside request windows attributed (75.0%; 7 samples in all)"
    c = checks({"capture": {"collect": ["perf"]}}, [_rq(1)], perf=perf[-1:])["perf samples attributed"]
    assert not c.ok and c.detail == "0 of 0 samples inside request windows attributed (0.0%; 1 samples in all)"
    assert set(checks({"requests": {"sent": 1}}, [_rq(1)])) == {"requests logged", "responses"}
    # requests without the driver's times: nothing to scale the expectation by
    c = checks({"capture": {"collect": ["perf"]}}, [_rq(1)], perf=[PerfSample(5, 7, 7, "php-fpm", 1, "r1", [])])
    assert not c["perf samples attributed"].ok and "expected" not in c["perf samples attributed"].detail
    assert checks({"requests": {"sent": 1}}, [_rq(1)])["requests logged"].ok
    # Excimer: a request without stacks is missing unless shorter than three sampling periods
    def timed(i, wall_us, run_delay_us=None):
        return RequestRecord(id=f"r{i}", pid=7, method="GET", uri="/", status=200, start_ns=0, end_ns=1,
                             start_unix=1.7e9, wall_us=wall_us, cpu_us=1, peak_memory=1, instrumented=False,
                             sched=None if run_delay_us is None else {"run_delay_us": run_delay_us})
    ex = {"capture": {"collect": ["excimer"], "excimer_period_ms": 2}}
    stacks = [ExcimerProfile(request="r1", pid=7, stacks=["main"], samples=[[1, 1, 0]])]
    c = checks(ex, [timed(1, 50_000), timed(2, 5_999)], excimer=stacks)["PHP stacks per request"]
    assert c.ok and c.detail == ("1 of 2 requests have Excimer stacks; 1 shorter than three 2 ms sampling "
                                 "periods (their wait for a CPU not counted) have none, as can happen")
    c = checks(ex, [timed(1, 50_000), timed(2, 6_000)], excimer=stacks)["PHP stacks per request"]
    assert not c.ok and c.detail == "1 of 2 requests have Excimer stacks (missing: r2)"
    # the run queue's wait is taken out (a 7.4 ms page queued for 5.5 ms had no sample), and only it
    assert checks(ex, [timed(1, 50_000), timed(2, 7_356, 5_507)], excimer=stacks)["PHP stacks per request"].ok
    assert not checks(ex, [timed(1, 50_000), timed(2, 7_356, 1_356)], excimer=stacks)["PHP stacks per request"].ok
    c = checks(ex, [timed(1, 50_000)], excimer=stacks)["PHP stacks per request"]
    assert c.ok and c.detail == "1 of 1 requests have Excimer stacks"
    assert not checks({"capture": {"collect": ["excimer"]}}, [timed(2, 1)])["PHP stacks per request"].ok
    # xhprof: every instrumented request has its profile; none instrumented only without --xhprof-every
    cap = {"capture": {"collect": ["xhprof"], "xhprof_every": 10}}
    assert checks(cap, [_rq(1, instrumented=True), _rq(2)], xhprof=["r1"])["xhprof profiles"].ok
    assert not checks(cap, [_rq(1, instrumented=True), _rq(2, instrumented=True)], xhprof=["r1"])["xhprof profiles"].ok
    assert not checks(cap, [_rq(1)])["xhprof profiles"].ok
    assert checks({"capture": {"collect": ["xhprof"], "xhprof_every": 0}}, [_rq(1)])["xhprof profiles"].ok
    assert checks({"capture": {"collect": ["xhprof"]}}, [_rq(1)])["xhprof profiles"].ok
    # statements: all tied to a request at concurrency 1; above it, only none left unplaced
    def st(request, attribution):
        return Statement(1, request, attribution, 5, "db", "q", 10, 0, 1, 1, 0, 0)
    q = {"capture": {"collect": ["queries"]}, "driver": {"concurrency": 1}}
    ok = checks(q, [_rq(1)], statements=[st("r1", "order"), st("r1", "order")])["statements attributed"]
    assert ok.ok and ok.detail == "2 of 2 statements tied to a request at concurrency 1 (order 2)"
    assert not checks(q, [_rq(1)], statements=[st("r1", "order"), st(None, "ambiguous")])["statements attributed"].ok
    assert not checks(q, [_rq(1)])["statements attributed"].ok
    q4 = {"capture": {"collect": ["queries"]}, "driver": {"concurrency": 4}}
    c = checks(q4, [_rq(1)], statements=[st("r1", "connection"), st(None, "ambiguous")])["statements attributed"]
    assert c.ok and c.detail == "1 of 2 statements tied to a request at concurrency 4 (ambiguous 1, connection 1)"
    c = checks({"capture": {"collect": ["queries"]}}, [_rq(1)], statements=[st(None, "ambiguous")])
    assert c["statements attributed"].detail.endswith("at concurrency 1 (ambiguous 1)")      # no driver: 1
    assert not checks(q4, [_rq(1)], statements=[st("r1", "connection"), st(None, "none")])["statements attributed"].ok


def test_integrity_is_each_listed_files_hash(tmp_path):
    from lockdown.bundle.store import BundleError, BundleWriter, open_bundle
    from lockdown.bundle.validate import check_integrity
    w = BundleWriter(tmp_path / "b")
    w.write_jsonl("requests.jsonl", [_rq(1)])
    w.finish({"target": {"name": "t"}, "requests": {"sent": 1}})
    check_integrity(open_bundle(tmp_path / "b"))
    path = tmp_path / "b" / "requests.jsonl"
    path.write_bytes(path.read_bytes().replace(b'"r1"', b'"r2"'))       # same size, other content
    with pytest.raises(BundleError, match=r"requests.jsonl: content differs from manifest.json"):
        check_integrity(open_bundle(tmp_path / "b"))
