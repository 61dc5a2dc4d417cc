"""The argument probe: finding function bodies with PHP's tokenizer, inserting the probe call
into a copy, counting distinct (object, arguments) pairs in real PHP, and what the
repeated-call detector makes of the counts."""
import json
import os
import subprocess

import pytest

from lockdown.analyzers.detectors import load_thresholds, repeated_call
from lockdown.analyzers.detectors.repeated_call import apply_probe, candidates, mark_unprobed
from lockdown.analyzers.findings import Evidence, Finding
from lockdown.collectors import arg_probe
from lockdown.errors import LockdownError
from lockdown.harness.probe import ProbeResult
from lockdown.harness.toolchain import tool

LIB = r"""<?php
namespace Shop\Models;

interface Priced { public function price(): int; }
abstract class Base { abstract public function label(string $x); }
$decoy = new class { public function settings() { return 0; } };   // not Shop\Models\settings

final class Item extends Base implements Priced
{
    public function __construct(public int $cents) {}
    public function price(): int { return $this->cents; }
    public function label(string $x) { $s = "{$x} { function settings() }"; return $s; }
    public static function list() { return [1, 2]; }
    public function &refs(array &$a) { return $a; }
}

/** function settings() in a comment is not a definition */
function settings(array $path = [], $ctx = null)
{
    $f = function ($y) { return $y; };
    return \count($path) . $f(1);
}
"""

MAIN = r"""<?php
require __DIR__ . '/lib.php';
use Shop\Models\Item;
use function Shop\Models\settings;
for ($i = 0; $i < 20; $i++) { settings(['a', 'b'], null); }   // 20 calls, 1 pair
for ($i = 0; $i < 10; $i++) { settings([$i]); }               // 10 calls, 10 pairs
$item = new Item(5);
for ($i = 0; $i < 8; $i++) { $item->label('x'); }             // one object, same argument: 1 pair
for ($i = 0; $i < 6; $i++) { (new Item(5))->label('x'); }    // a new object each time, freed at once: 6
$a = [1];
$item->refs($a);
echo "ok\n";
"""

FUNCTIONS = ["Shop\\Models\\settings", "Shop\\Models\\Item::label", "Shop\\Models\\Item::refs",
             "Shop\\Models\\Base::label", "Shop\\Models\\Item::nothing"]


def _app(tmp_path):
    app = tmp_path / "app"
    app.mkdir()
    (app / "lib.php").write_text(LIB)
    (app / "main.php").write_text(MAIN)
    return app


def test_locate_finds_bodies_not_comments_abstracts_or_anonymous_classes(tmp_path):
    app = _app(tmp_path)
    sites = arg_probe.locate(app, FUNCTIONS)
    assert sorted(sites) == ["Shop\\Models\\Item::label", "Shop\\Models\\Item::refs", "Shop\\Models\\settings"]
    lines = LIB.splitlines()
    for fn, (site,) in sites.items():
        assert site.file == app / "lib.php"
        assert LIB.encode()[site.offset - 1:site.offset] == b"{"
        name = fn.rpartition("::")[2].rpartition("\\")[2]
        # the line of the definition (for settings, the brace is on the next one)
        assert f"function {name}(" in lines[site.line - 1] or f"function &{name}(" in lines[site.line - 1]


def test_a_locator_that_cannot_finish_raises_instead_of_finding_nothing(tmp_path):
    """An empty answer would read as "not defined here" and drop every finding unprobed
    without a reason; a failed locator must say what went wrong."""
    app = _app(tmp_path)
    # a file name that is not UTF-8 is left out, not a reason to fail
    (app / os.fsdecode(b"caf\xe9.php")).write_text("<?php function settings() { return 1; }\n")
    assert [s.file for s in arg_probe.locate(app, FUNCTIONS)["Shop\\Models\\settings"]] == [app / "lib.php"]
    with pytest.raises(LockdownError, match=r"locating the probed functions took over 0 s \(1 files\)"):
        arg_probe.locate(app, FUNCTIONS, timeout=0.0001)


def test_probe_counts_distinct_object_and_argument_pairs_in_real_php(tmp_path):
    app = _app(tmp_path)
    original = (app / "lib.php").read_bytes()
    linked = tmp_path / "original-lib.php"
    os.link(app / "lib.php", linked)            # as in a hard-linked app copy
    sites = arg_probe.locate(app, FUNCTIONS)
    numbers = arg_probe.instrument([site for defs in sites.values() for site in defs])
    assert linked.read_bytes() == original      # written anew, never through the link
    patched = (app / "lib.php").read_text()
    assert patched.count("LockdownArgProbe::hit(") == 3
    assert len(patched.splitlines()) == len(LIB.splitlines())     # line numbers unchanged
    prepend = arg_probe.install(tmp_path / "probe")
    run = subprocess.run([tool("php"), "-d", f"auto_prepend_file={prepend}", str(app / "main.php")],
                         capture_output=True, text=True, env=dict(os.environ, HTTP_X_LOCKDOWN_PROBE="1"))
    assert run.returncode == 0 and run.stdout == "ok\n", run.stderr
    rows = arg_probe.results(tmp_path / "probe", numbers, app)
    (settings,) = rows["Shop\\Models\\settings"]
    assert (settings["calls"], settings["distinct"], settings["distinct_arguments"]) == (30, 11, 11)
    (label,) = rows["Shop\\Models\\Item::label"]
    # seven objects (freed ones are not confused with new ones), one argument list
    assert (label["calls"], label["distinct"], label["distinct_arguments"]) == (14, 7, 1)
    assert rows["Shop\\Models\\Item::refs"][0]["calls"] == 1


def test_every_definition_of_a_name_is_probed_and_the_one_that_ran_is_named(tmp_path):
    """WordPress defines site_url() twice: the real one, and a stub in
    wp-admin/includes/noop.php that only its installer loads. Probing the first file found (the
    stub) saw no call and left the finding unprobed; every definition is probed instead."""
    app = tmp_path / "app"
    (app / "admin").mkdir(parents=True)
    (app / "admin" / "noop.php").write_text("<?php\nfunction site_url() {}\n")
    (app / "link.php").write_text("<?php\n\nfunction site_url($path = '')\n{\n    return 'http://x/' . $path;\n}\n")
    (app / "main.php").write_text("<?php\nrequire __DIR__ . '/link.php';\n"
                                  "foreach (['a', 'a', 'b', 'a'] as $p) { site_url($p); }\necho \"ok\\n\";\n")
    sites = arg_probe.locate(app, ["site_url"])
    assert [(s.file.relative_to(app).as_posix(), s.line) for s in sites["site_url"]] == \
        [("admin/noop.php", 2), ("link.php", 3)]
    numbers = arg_probe.instrument(sites["site_url"])
    prepend = arg_probe.install(tmp_path / "probe")
    run = subprocess.run([tool("php"), "-d", f"auto_prepend_file={prepend}", str(app / "main.php")],
                         capture_output=True, text=True, env=dict(os.environ, HTTP_X_LOCKDOWN_PROBE="1"))
    assert run.returncode == 0 and run.stdout == "ok\n", run.stderr
    rows = arg_probe.results(tmp_path / "probe", numbers, app)
    assert [(r["calls"], r["distinct"], r["defined_at"]) for r in rows["site_url"]] == [(4, 2, "link.php:3")]
    result = ProbeResult(definitions={"site_url": ["admin/noop.php:2", "link.php:3"], "unused": ["u.php:1"]},
                         rows=rows)
    # the definition that ran; both, when none did
    assert result.located == {"site_url": "link.php:3", "unused": "u.php:1"}
    assert ProbeResult(definitions=result.definitions).located["site_url"] == "admin/noop.php:2, link.php:3"


def test_probe_records_nothing_without_its_header(tmp_path):
    app = _app(tmp_path)
    numbers = arg_probe.instrument([site for defs in arg_probe.locate(app, FUNCTIONS).values() for site in defs])
    prepend = arg_probe.install(tmp_path / "probe")
    env = {k: v for k, v in os.environ.items() if k != "HTTP_X_LOCKDOWN_PROBE"}
    run = subprocess.run([tool("php"), "-d", f"auto_prepend_file={prepend}", str(app / "main.php")],
                         capture_output=True, text=True, env=env)
    assert run.returncode == 0 and run.stdout == "ok\n", run.stderr
    assert arg_probe.results(tmp_path / "probe", numbers, app) == {}


def _finding(fn, share=8.0, calls=100, nested=()):
    return Finding("repeated-call", f"{fn} runs {calls} times per request doing the same work", "medium",
                   share, "s", evidence=[Evidence("calls per request", calls, "xhprof of r1"),
                                         Evidence(repeated_call.SAVE_LABEL, share, "xhprof")],
                   urls=["/"], details={"function": fn, "nested": list(nested)})


def test_apply_probe_keeps_repeats_rescaled_and_dismisses_different_data():
    limits = load_thresholds()
    memo, varied, hidden, other = (_finding("theme_settings"), _finding("Message::isDisabled"),
                                   _finding("evaled"), Finding("fs-scan", "t", "high", 30.0, "s"))
    rows = {"theme_settings": [{"request": "p1", "uri": "/", "calls": 100, "distinct": 1, "distinct_arguments": 1},
                               {"request": "p2", "uri": "/", "calls": 100, "distinct": 51, "distinct_arguments": 1}],
            "Message::isDisabled": [{"request": "p1", "uri": "/", "calls": 100, "distinct": 100,
                                     "distinct_arguments": 1}]}
    located = {"theme_settings": "inc/theme.php:42", "Message::isDisabled": "Message.php:7"}
    kept, dismissed = apply_probe([memo, varied, hidden, other], located, rows, limits)
    assert [f.details.get("function") for f in kept] == ["theme_settings", "evaled", None]
    # 148 repeats of the 198 the detector assumed (every call but one per request)
    assert kept[0].share_pct == round(8.0 * 148 / 198, 2)
    assert kept[0].details["probe"]["repeat_pct"] == 74.0
    assert kept[0].summary.endswith(f"a cache would save about {kept[0].share_pct:.1f}% of the request.")
    values = {e.what: e.value for e in kept[0].evidence}
    assert values["calls of theme_settings that repeat an earlier (object, arguments) pair"] == "148 of 200 (74%)"
    assert values["distinct (object, arguments) pairs per request"] == "1..51"
    assert values["defined at"] == "inc/theme.php:42"
    # the evidence row of the share says what the finding says, and how it was rescaled
    assert values[repeated_call.SAVE_LABEL] == kept[0].share_pct
    sources = {e.what: e.source for e in kept[0].evidence}
    assert "x 148 repeats measured / 198 assumed" in sources[repeated_call.SAVE_LABEL]
    assert "not probed" in {e.what: e.value for e in kept[1].evidence}["arguments"]
    (d,) = dismissed
    assert d["function"] == "Message::isDisabled" and d["defined_at"] == "Message.php:7"
    assert "0% of its 100 probed calls" in d["reason"]
    json.dumps(d)        # goes into findings.json as it is
    # half the calls repeat, but what a cache would save is below the detector's share floor
    small = _finding("parse_blocks", share=2.6, calls=100)
    rows = {"parse_blocks": [{"request": "p1", "uri": "/", "calls": 100, "distinct": 51, "distinct_arguments": 51}]}
    kept, (d,) = apply_probe([small], {"parse_blocks": "blocks.php:9"}, rows, limits)
    assert kept == [] and d["saved_pct"] == round(2.6 * 49 / 99, 2)
    assert "a cache would save about 1.3% of the request" in d["reason"]


def test_apply_probe_moves_the_cache_to_a_nested_function_that_repeats():
    """wp_get_global_settings gets a different path on most calls; get_merged_data under it
    has no arguments and one object: the cache belongs there."""
    limits = load_thresholds()
    f = _finding("wp_get_global_settings", share=20.0, calls=54, nested=["Resolver::get_merged_data"])
    assert candidates([f]) == {"wp_get_global_settings": ["/"], "Resolver::get_merged_data": ["/"]}
    rows = {"wp_get_global_settings": [{"request": "p1", "uri": "/", "calls": 54, "distinct": 49,
                                        "distinct_arguments": 49}],
            "Resolver::get_merged_data": [{"request": "p1", "uri": "/", "calls": 54, "distinct": 1,
                                           "distinct_arguments": 1}]}
    located = {"wp_get_global_settings": "a.php:1", "Resolver::get_merged_data": "b.php:2"}
    (kept,), dismissed = apply_probe([f], located, rows, limits)
    assert dismissed == [] and kept.details["cache_at"] == "Resolver::get_merged_data"
    assert kept.title.startswith("Resolver::get_merged_data runs 54 times per request, 98%")
    assert kept.share_pct == 20.0
    values = {e.what: e.value for e in kept.evidence}
    assert values["calls of wp_get_global_settings that repeat an earlier pair"] == "5 of 54 (9%)"
    assert values["defined at"] == "b.php:2"
    # without the nested repeat, the outer one is dismissed
    f2 = _finding("wp_get_global_settings", share=20.0, calls=54, nested=["Resolver::get_merged_data"])
    rows["Resolver::get_merged_data"][0]["distinct"] = 54
    kept2, (d,) = apply_probe([f2], located, rows, limits)
    assert kept2 == [] and d["function"] == "wp_get_global_settings"


def test_a_failed_probe_keeps_the_findings_and_says_so():
    f, other = _finding("theme_settings"), Finding("fs-scan", "t", "high", 30.0, "s")
    (kept, same) = mark_unprobed([f, other], "the probe failed: port in use")
    assert same is other and same.evidence == []
    assert {e.what: e.value for e in kept.evidence}["arguments"] == "not probed: the probe failed: port in use"
    assert kept.share_pct == 8.0 and kept.details["probe"]["requests"] == 0
    assert kept.details["probe"]["not_probed"] == "the probe failed: port in use"
