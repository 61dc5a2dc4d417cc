"""The fleet's pure parts and its store, on small inputs: the store's files (append, fsync'd
batches, an entry written twice read once, a torn line, retention), the route table, the
findings production data supports, the URL mix, the agent's pool lines and switch, and the
agent's route normalisation in PHP itself. tests/test_fleet_server.py runs the real thing."""
from __future__ import annotations

import json
import subprocess
import time
import tomllib
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from lockdown.cli.main import main
from lockdown.errors import UsageError
from lockdown.fleet import agent, analysis, report, store
from lockdown.fleet.collector import CollectStats, decode, redact

NOW_MS = 1_795_000_000_000          # 2026-11-18 ... UTC, inside one hour partition


def rec(route="/", uri=None, cpu=0.01, wall=0.02, stmts=3, stacks=None, host="a", status=200,
        method="GET", **more):
    return {"t": NOW_MS / 1000, "host": host, "pool": "www", "script": "/index.php", "route": route,
            "uri": uri or route, "method": method, "status": status, "wall": wall, "cpu": cpu,
            "mem": 1 << 20, "stmts": stmts, "stacks": stacks or {}, **more}


def entries(records, start_ms=NOW_MS):
    return [("lockdown:fleet", f"{start_ms + i}-0", r) for i, r in enumerate(records)]


# -- the store --------------------------------------------------------------------------------

def test_store_appends_and_reads_each_entry_once(tmp_path):
    w = store.StoreWriter(tmp_path, "c1")
    assert w.append(entries([rec("/a"), rec("/b")])) == 2
    assert w.append(entries([rec("/a")])) == 1          # the first entry again: a redelivery
    w.close()
    stats = store.ReadStats()
    got = list(store.read_records(tmp_path, stats=stats))
    assert [r["route"] for r in got] == ["/a", "/b"]
    assert [r["id"] for r in got] == [f"{NOW_MS}-0", f"{NOW_MS + 1}-0"]
    assert (stats.lines, stats.duplicates, stats.damaged) == (3, 1, 0)
    hour = time.strftime("%Y%m%d%H", time.gmtime(NOW_MS / 1000))
    assert [p.name for p in (tmp_path / hour).iterdir()] == ["records-c1.jsonl"]


def test_store_partitions_by_the_entry_hour_and_filters_by_time(tmp_path):
    w = store.StoreWriter(tmp_path, "c1")
    w.append(entries([rec("/old")], NOW_MS - 7200_000) + entries([rec("/new")]))
    w.close()
    assert len(store.hours(tmp_path)) == 2
    assert [r["route"] for r in store.read_records(tmp_path, since=NOW_MS / 1000 - 60)] == ["/new"]
    assert [r["route"] for r in store.read_records(tmp_path, until=NOW_MS / 1000 - 60)] == ["/old"]


def test_a_torn_line_is_skipped_and_the_next_batch_starts_a_new_line(tmp_path):
    w = store.StoreWriter(tmp_path, "c1")
    w.append(entries([rec("/a")]))
    w.close()
    path = next(tmp_path.glob("*/records-c1.jsonl"))
    with open(path, "ab") as f:
        f.write(b'{"id": "17950000')                       # what a kill -9 mid-write leaves
    w = store.StoreWriter(tmp_path, "c1")
    w.append(entries([rec("/b")], NOW_MS + 5))
    w.close()
    stats = store.ReadStats()
    assert [r["route"] for r in store.read_records(tmp_path, stats=stats)] == ["/a", "/b"]
    assert stats.damaged == 1


def test_retention_removes_whole_hours(tmp_path):
    w = store.StoreWriter(tmp_path, "c1")
    w.append(entries([rec("/old")], NOW_MS - 3 * 3600_000) + entries([rec("/new")]))
    gone = w.expire(3600, now=NOW_MS / 1000)
    w.close()
    assert len(gone) == 1 and gone[0] < store.hours(tmp_path)[0]
    assert [r["route"] for r in store.read_records(tmp_path)] == ["/new"]


def test_durations_and_bad_input():
    assert store.parse_duration("24h", "--since") == 86400
    assert store.parse_duration("30m", "--since") == 1800
    for bad in ("24", "h", "-1h", "0h", "1y"):
        with pytest.raises(UsageError, match="--since"):
            store.parse_duration(bad, "--since")
    with pytest.raises(UsageError, match="consumer name"):
        store.StoreWriter(Path("/nonexistent-x"), "a/b")


def test_collector_decodes_and_keeps_damaged_entries_counted():
    stats = CollectStats()
    got = decode("s", [("1-0", {"r": json.dumps(rec("/a"))}), ("2-0", {"x": "1"}), ("3-0", None),
                       ("4-0", {"r": "[1]"})], stats)
    assert [(i, r.get("route"), r.get("damaged")) for _, i, r in got] == [
        ("1-0", "/a", None), ("2-0", None, True), ("4-0", None, True)]
    assert stats.damaged == 2
    assert redact("redis://:secret@127.0.0.1:6379/0") == "redis://:***@127.0.0.1:6379/0"
    assert redact("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"


# -- the analysis -----------------------------------------------------------------------------

def test_route_table_shares_percentiles_and_statements():
    records = ([rec("/a", cpu=0.03, wall=w / 1000, stmts=10) for w in range(1, 101)]
               + [rec("/b", cpu=0.01, wall=0.5, stmts=2, host="b") for _ in range(100)]
               + [rec("/b", method="POST", cpu=0.0, status=503)])
    rows = {r["route"]: r for r in analysis.route_table(records)}
    a, b, post = rows["GET /a"], rows["GET /b"], rows["POST /b"]
    assert [r["route"] for r in analysis.route_table(records)] == ["GET /a", "GET /b", "POST /b"]
    assert a["requests"] == 100 and a["requests_pct"] == pytest.approx(100 * 100 / 201)
    assert a["cpu_pct"] == pytest.approx(75.0) and b["cpu_pct"] == pytest.approx(25.0)
    assert a["wall_p50_ms"] == pytest.approx(50.0) and a["wall_p99_ms"] == pytest.approx(99.0)
    assert a["statements_per_request"] == 10 and b["statements_per_request"] == 2
    assert b["hosts"] == ["b"] and post["errors"] == 1 and a["errors"] == 0
    assert analysis.percentile([], 50) is None and analysis.percentile([3.0], 99) == 3.0


WALK = "index.php;module_bootstrap;drupal_get_filename;drupal_system_listing;file_scan_directory"
GETTER = "index.php;page_home;t;LCStoreDB::get;db_value"


@pytest.mark.parametrize("walk", [WALK, "index.php;boot;find_plugins;scandir",
                                  "index.php;boot;Finder::in;RecursiveDirectoryIterator::next"])
def test_a_directory_walk_dominating_a_route_is_the_top_finding(walk):
    records = ([rec("/", stacks={walk: 6, GETTER: 1, "index.php;page_home": 3}, stmts=4)
                for _ in range(10)]
               + [rec("/about", stacks={"index.php;page_about;render": 5}) for _ in range(10)])
    found = analysis.findings(analysis.served(records))
    top = found[0]
    assert (top["kind"], top["route"]) == ("directory-walk", "GET /")
    assert top["route_share_pct"] == pytest.approx(60.0)
    assert top["fleet_share_pct"] == pytest.approx(60.0 * 100 / 150)
    assert "fs-scan" in top["confirm"]
    assert all(f["kind"] != "many-statements" for f in found)


def test_a_function_dominating_the_samples_outside_a_walk_and_many_statements():
    records = [rec("/", stacks={GETTER: 5, WALK: 3, "index.php;page_home;render": 2}, stmts=150)
               for _ in range(5)]
    found = {f["kind"]: f for f in analysis.findings(records)}
    dom = found["dominant-function"]
    assert (dom["function"], dom["caller"]) == ("LCStoreDB::get", "t")   # db_value is the leaf
    assert dom["route_share_pct"] == pytest.approx(50.0)
    assert found["many-statements"]["statements_per_request"] == 150
    assert found["directory-walk"]["route_share_pct"] == pytest.approx(30.0)


def test_too_few_samples_or_shares_below_the_thresholds_find_nothing():
    few = [rec("/", stacks={WALK: 1}) for _ in range(analysis.MIN_SAMPLES - 1)]
    assert analysis.findings(few) == []
    # the walk holds 1 sample in 21 (under 10%); b and e (below the handlers a and d) 10 each
    spread = [rec("/", stacks={WALK: 1, "index.php;a;b;c": 10, "index.php;d;e;f": 10}, stmts=19)
              for _ in range(5)]
    found = analysis.findings(spread)
    assert [(f["kind"], f["function"]) for f in found] == [("dominant-function", "b")]
    assert found[0]["route_share_pct"] == pytest.approx(100 * 10 / 21)


def test_the_same_finding_on_several_routes_is_one():
    records = [rec(route, stacks={WALK: 8, "index.php;x": 2}) for route in ("/a", "/b", "/b")
               for _ in range(10)]
    walk = [f for f in analysis.findings(records) if f["kind"] == "directory-walk"]
    assert len(walk) == 1
    assert walk[0]["route"] == "GET /b" and walk[0]["routes"] == ["GET /b", "GET /a"]
    assert walk[0]["fleet_share_pct"] == pytest.approx(80.0)


def test_url_mix_is_the_served_gets_by_count():
    records = ([rec("/", uri="/?p=1")] * 6 + [rec("/", uri="/?p=2")] * 3 + [rec("/x")]
               + [rec("/x", method="POST")] * 5 + [rec("/y", status=404)] * 5)
    mix = analysis.url_mix(records)
    assert [(m["path"], m["weight"]) for m in mix] == [("/?p=1", 6), ("/?p=2", 3), ("/x", 1)]
    assert mix[0]["share_pct"] == pytest.approx(60.0)
    assert [m["path"] for m in analysis.url_mix(records, top=1)] == ["/?p=1"]


def test_losses_by_host_and_hot_functions():
    records = [rec(lost=3), rec(host="b", lost=2), rec(host="b", lost=4), rec()]
    assert analysis.losses(records) == {"a/www": 3, "b/www": 6}
    # unsure sends count only when their record never arrived, once however often carried
    records = [rec(rid="r1"), rec(rid="r2", unsure=[["r1", 3], ["r9", 2]]),
               rec(rid="r3", lost=1, unsure=[["r9", 2], ["r4", 5]]), rec(host="b", unsure=[["r5", 1]])]
    assert analysis.losses(records) == {"a/www": 1 + 2 + 5, "b/www": 1}
    hot = analysis.hot_functions(Counter({"m;f;g": 3, "m;f": 1, "m;h;g": 1}))
    assert [(h["function"], h["self"], h["inclusive"]) for h in hot] == [("g", 4, 4), ("f", 1, 4)]


# -- the report and the commands --------------------------------------------------------------

def synthetic_store(root: Path) -> Path:
    w = store.StoreWriter(root, "c1")
    now_ms = int(time.time() * 1000)
    records = ([rec("/", uri="/?p=home", stacks={WALK: 8, "index.php;page_home": 2}, stmts=5)] * 30
               + [rec("/<script>alert(1)</script>", uri="/?q=<b>", stacks={"index.php;x<y>": 3})] * 10)
    w.append(entries(records, now_ms - 60_000))
    w.close()
    return root


def test_fleet_report_writes_an_escaped_report(tmp_path):
    root = synthetic_store(tmp_path / "store")
    out = tmp_path / "rep"
    result = CliRunner().invoke(main, ["fleet", "report", "--store", str(root), "--since", "1h", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "directory-walk     GET /:" in result.output
    html = (out / "index.html").read_text()
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    doc = json.loads((out / "report.json").read_text())
    assert doc["requests"] == 40 and doc["findings"][0]["kind"] == "directory-walk"
    assert sorted(p.name for p in (out / "flamegraphs").iterdir()) == ["fleet.svg", "route-1.svg", "route-2.svg"]
    again = CliRunner().invoke(main, ["fleet", "report", "--store", str(root), "-o", str(out)])
    assert again.exit_code == 2 and "not empty" in again.output
    none = CliRunner().invoke(main, ["fleet", "report", "--store", str(root), "--route", "GET /z",
                                     "-o", str(tmp_path / "rep2")])
    assert none.exit_code == 2 and "no request" in none.output


def test_fleet_urls_prints_a_target_url_list(tmp_path):
    root = synthetic_store(tmp_path / "store")
    result = CliRunner().invoke(main, ["fleet", "urls", "--store", str(root), "--since", "1h"])
    assert result.exit_code == 0, result.output
    urls = tomllib.loads(result.output)["urls"]
    assert urls == [{"path": "/?p=home", "weight": 30}, {"path": "/?q=<b>", "weight": 10}]
    bad = CliRunner().invoke(main, ["fleet", "urls", "--store", str(root), "--since", "soon"])
    assert bad.exit_code == 2 and "--since" in bad.output


def test_report_text_names_the_losses():
    doc = report.build([rec(stacks={WALK: 30}, lost=4), rec(host="b")])
    assert doc["losses"] == {"a/www": 4}
    assert "records counted lost by the agents: 4" in report.text(doc)


# -- the agent --------------------------------------------------------------------------------

def test_snippet_lines_and_refused_values(tmp_path):
    env = agent.pool_env("tcp://127.0.0.1:6390", "lockdown:shop", pool="shop", state=tmp_path,
                         period=0.02, password="s3cret")
    text = agent.snippet(env)
    assert f'php_admin_value[auto_prepend_file] = "{agent.AGENT}"' in text
    assert 'env[LOCKDOWN_FLEET_STREAM] = "lockdown:shop"' in text
    assert 'env[LOCKDOWN_FLEET_PERIOD] = "0.02"' in text and "readable by root only" in text
    assert f'auto_prepend_file = "{agent.AGENT}"' in agent.snippet(env, "ini")
    with pytest.raises(UsageError, match="LOCKDOWN_FLEET_POOL"):
        agent.pool_env("tcp://127.0.0.1:6390", pool='x"; evil')
    result = CliRunner().invoke(main, ["agent", "snippet", "--stream", "s1"], env={"LOCKDOWN_REDIS_PASSWORD": "pw"})
    assert result.exit_code == 0 and 'env[LOCKDOWN_FLEET_AUTH] = "pw"' in result.output
    assert "no --state: records lost are not counted" in result.output
    copied = CliRunner().invoke(main, ["agent", "snippet", "--agent", "/srv/php/agent.php", "--state", str(tmp_path)])
    assert 'php_admin_value[auto_prepend_file] = "/srv/php/agent.php"' in copied.output
    assert "no --state" not in copied.output


def test_collect_refuses_a_store_that_is_a_file(tmp_path):
    (tmp_path / "f").write_text("")
    r = CliRunner().invoke(main, ["fleet", "collect", "--redis", "redis://127.0.0.1:1/0",
                                  "--store", str(tmp_path / "f")])
    assert r.exit_code == 2 and "not a directory" in r.output
    r = CliRunner().invoke(main, ["fleet", "collect", "--redis", "redis://127.0.0.1:1/0",
                                  "--store", str(tmp_path / "s"), "--retention", "forever"])
    assert r.exit_code == 2 and "--retention" in r.output


def test_switch_off_and_on(tmp_path):
    assert CliRunner().invoke(main, ["agent", "off", str(tmp_path)]).exit_code == 0
    assert (tmp_path / agent.SWITCH).is_file()
    assert CliRunner().invoke(main, ["agent", "on", str(tmp_path)]).exit_code == 0
    assert not (tmp_path / agent.SWITCH).exists()
    assert CliRunner().invoke(main, ["agent", "off", str(tmp_path / "none")]).exit_code == 2
    (tmp_path / "lost").write_text("7")
    assert agent.pending_losses(tmp_path) == 7
    (tmp_path / "lost").write_text("7\n0a1b 2\n")          # the agent's sure count, then unsure sends
    assert agent.pending_losses(tmp_path) == 9


NORMALISE = r"""
require $argv[1];
$m = new ReflectionMethod('LockdownFleet\Agent', 'normalise');
$m->setAccessible(true);
foreach (array_slice($argv, 2) as $uri) { echo $m->invoke(null, $uri), "\n"; }
"""


def test_the_agent_normalises_routes_in_php():
    uris = ["/node/12/edit", "/?p=page&id=7", "/f/0123456789abcdef0123/x", "/?q=hello world&x",
            "/a/b", "/?p=list"]
    out = subprocess.run(["php", "-r", NORMALISE, str(agent.AGENT), *uris], capture_output=True,
                         text=True, timeout=30, check=True).stdout.splitlines()
    assert out == ["/node/{n}/edit", "/?p=page&id={n}", "/f/{id}/x", "/?q={s}&x", "/a/b", "/?p=list"]
