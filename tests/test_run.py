"""`lockdown run` on minicms (every pathology on) and minicms-clean (the control): each
pathology yields its finding with evidence equal to the app's own ground truth, each defect a
checked patch, and the control no defect finding. Also the builtins table's exact counts."""
import json
import sys
import xml.etree.ElementTree as ET

from lockdown.analyzers.detectors import build_context, load_thresholds
from lockdown.analyzers.detectors.related import REMOVED_BY_FIX, for_statements, statement_senders
from lockdown.analyzers.findings import Finding
from lockdown.bundle.store import open_bundle
from lockdown.reports.numbers import share
from lockdown.rundir.model import TimeAccounting


FETCH = """\
import json, os, sys, urllib.request
truth = {}
for name, path in json.loads(sys.argv[2]).items():
    with urllib.request.urlopen(os.environ["LOCKDOWN_BASE_URL"] + path) as r:
        truth[name] = json.loads(r.headers["X-Minicms-Truth"])
open(sys.argv[1], "w").write(json.dumps(truth))
"""
PAGES = {"home": "/", "list": "/?p=list"}
DEFECTS = {"fs-scan", "db-static-cache", "write-on-read", "n-plus-one", "repeated-query", "repeated-call"}


def ground_truth(lockdown, target, tmp_path):
    (tmp_path / "fetch.py").write_text(FETCH)
    out = tmp_path / f"truth-{target}.json"
    hook = f"{sys.executable} {tmp_path / 'fetch.py'} {out} '{json.dumps(PAGES)}'"
    # 3 s: the hook is the point; a 1 s run got no response once, a page taking over 1 s under load
    r = lockdown("bench", target, "--runs", "1", "--duration", "3", "--warmup-duration", "0",
                 "--warmup-requests", "3", "--exec-after-warmup", hook)
    assert r.returncode == 0, r.stderr
    return json.loads(out.read_text())


def run(lockdown, target, out):
    r = lockdown("run", target, "-o", out, "--runs", "1", "--duration", "2", "--requests", "60",
                 timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r, json.loads((out / "findings.json").read_text())


def test_minicms_findings_match_the_ground_truth(lockdown, tmp_path, minicms_run):
    truth = ground_truth(lockdown, "minicms", tmp_path)
    home, listing = truth["home"], truth["list"]
    r, out = minicms_run
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert not (out / "incomplete.json").exists()        # finished: the claim is gone
    data = json.loads((out / "findings.json").read_text())
    by_id = {}
    for f in data["findings"]:
        by_id.setdefault(f["id"], []).append(f)
    assert DEFECTS <= set(by_id), sorted(by_id)
    assert not {"debug-extension", "opcache", "pcre-jit-off", "stat-storm"} & set(by_id)
    # fs-scan: xhprof's exact call counts are the app's own
    fs = by_id["fs-scan"][0]
    calls = fs["details"]["calls_per_request"]
    assert set(calls["opendir"]) == {home["fs"]["opendir"]} == {listing["fs"]["opendir"]}
    assert set(calls["readdir"]) == {home["fs"]["readdir"]}
    assert set(calls["is_dir"]) == {home["fs"]["is_dir"]}
    assert home["fs"]["dirs"] >= 500 and fs["details"]["walker"] == "file_scan_directory"
    sql = next(x for x in fs["remediations"] if x["kind"] == "sql")
    missing = sorted(home["modules"]["missing"])
    assert sql["content"].count("DELETE FROM modules") == len(missing) > 0
    assert all(f"name = '{m}'" in sql["content"] for m in missing) and "l10n" not in sql["content"]
    # db-static-cache: one query per message
    l10n = by_id["db-static-cache"][0]
    assert l10n["details"]["table"] == "l10n_cache"
    assert l10n["details"]["queries_per_request"]["max"] >= home["l10n"]["queries"] >= 150
    # write-on-read: one UPDATE per view
    assert any(e["value"] == "60 of 60" or e["value"].startswith(("5", "6")) for e in
               by_id["write-on-read"][0]["evidence"] if e["what"] == "GET requests that sent it")
    # n-plus-one: one authors query per listed row
    n1 = by_id["n-plus-one"][0]
    assert listing["listing"]["rows"] == 30
    assert any(e["value"] == "30/30/30" for e in n1["evidence"] if e["what"].startswith("executions per request"))
    # repeated-call: the theme settings, called as often as the app counted
    rc = by_id["repeated-call"][0]
    assert rc["details"]["function"] == "theme_settings"
    assert home["theme"]["calls"] in {row["calls"] for row in rc["details"]["rows"]}
    # ... and the argument probe saw every call of a home page pass the same theme
    probe = rc["details"]["probe"]
    assert probe["located"] == "includes/theme.php:42"
    home_rows = [row for row in probe["rows"] if row["uri"] == "/"]
    assert home_rows and all((row["calls"], row["distinct"]) == (home["theme"]["calls"], 1)
                             for row in home_rows)
    assert rc["title"].startswith("theme_settings runs") and "already had" in rc["title"]
    # ... and not linked to the query findings: no call of it is made for their statements.
    # On the same capture, the escaping helper db_escape (not flagged) is: twice per l10n
    # lookup (LCStoreDB::get: db-static-cache) and once per setting() (repeated-query), each
    # of those senders found by its counts (related.py)
    assert "for_statements" not in rc["details"]
    ctx = build_context(open_bundle(out / "bundle"), load_thresholds())
    senders = statement_senders(ctx)
    assert senders["LCStoreDB::get"] == ("shape", l10n["details"]["fingerprint"])
    assert senders["setting"] == ("shape", "select value from settings where name = ?")
    queries = [Finding.from_json(f) for f in data["findings"] if f["id"] in REMOVED_BY_FIX]
    pct, _, by_sender = for_statements(ctx, "db_escape", sorted(ctx.xhprof), queries, senders)
    assert pct >= 90 and set(by_sender) == {"LCStoreDB::get", "setting"}, (pct, by_sender)
    # every defect has a checked patch; write-ups on disk; a summary on the terminal
    for f in data["findings"]:
        if f["severity"] != "info":
            assert f["remediations"] and all(x["checked"] for x in f["remediations"]), f["key"]
        assert (out / "findings" / f"{f['key']}.md").is_file()
    assert "finding(s), most costly first" in r.stdout and (out / "bench.json").is_file()
    # ... and the report and flame graphs, named on the line before the next steps
    last, steps = r.stdout.strip().splitlines()[-2:]
    assert steps == (f"next: lockdown verify {out} --finding KEY (one fix) or --all (every fix at once); "
                     f"lockdown writeup {out} -o {out / 'issues'}")
    assert last.startswith(f"report: {out / 'report.html'};") and (out / "report.html").is_file()
    # the benchmark's runs carry the servers' CPU per request, MariaDB's part among them (the
    # l10n lookups and the module scan's registry reads), and the report tabulates it
    bench = json.loads((out / "bench.json").read_text())
    for run in bench["runs"]:
        assert run["server_cpu"]["by_server"]["mariadbd"] > 1.0, run["server_cpu"]
    cpu_ms = bench["runs"][0]["server_cpu"]["ms_per_request"]
    assert f'<td class="n">{cpu_ms:,.2f}</td>' in (out / "report.html").read_text()
    for kind in ("php", "php-offcpu", "native"):
        assert str(out / "flamegraphs" / f"{kind}.svg") in last
    php_svg = ET.parse(out / "flamegraphs" / "php.svg").getroot()
    titles = {t.text.rsplit(" (", 1)[0] for t in php_svg.iter("{http://www.w3.org/2000/svg}title")}
    assert {"file_scan_directory", "theme_settings"} <= titles
    native_svg = ET.parse(out / "flamegraphs" / "native.svg").getroot()
    assert any("execute_ex" in (t.text or "") for t in native_svg.iter("{http://www.w3.org/2000/svg}title"))
    check_accounting(r, out, data)
    # the builtins table (lockdown analyze) reports the app's own directory call counts
    a = json.loads(lockdown("analyze", out / "bundle", "--json", "--url", "/", "--top", "50").stdout)
    rows = {b["name"]: b for b in a["builtins"]["top"]}
    for name in ("opendir", "readdir", "is_dir", "closedir"):
        assert rows[name]["calls_per_request"] == home["fs"][name], name


def check_accounting(r, out, data):
    """accounting.json: the run's findings (after the probe: a dismissed candidate is not
    among them) over its capture; explained + unexplained = the sampled time, overall and per
    URL, the shares 100% within rounding; on the terminal in one line."""
    t = TimeAccounting.from_json(json.loads((out / "accounting.json").read_text()))
    assert t.basis == "excimer-wall" and t.perf and t.sampled_requests > 0
    assert "after the argument probe" in t.findings_source
    assert sorted(f.key for f in t.findings) == sorted(f["key"] for f in data["findings"] if f["severity"] != "info")
    assert t.informational == [f["key"] for f in data["findings"] if f["severity"] == "info"]
    for part in [t, *t.urls]:
        assert abs(part.explained_us + part.unexplained_us - part.total_us) <= 0.2, part
        assert part.total_us > 0 and abs(part.explained_pct + part.unexplained_pct - 100.0) <= 0.01 + 1e-9, part
    assert {u.url for u in t.urls} == set(json.loads((out / "analysis.json").read_text())["budget_by_url"])
    # every pathology is on: the findings explain most of the time, the directory walk most of all
    owned = {f.key: f.owned_pct for f in t.findings}
    assert t.explained_pct > 50 and owned["fs-scan"] > 20, (t.explained_pct, owned)
    assert t.hotspots.self and t.hotspots.subsystem and t.urls[0].top
    top = ", ".join(f"{h.name} ({share(h.share_pct)})" for h in t.hotspots.self[:3])
    line = f"findings explain {share(t.explained_pct)} of the sampled request time; top unexplained: {top}"
    assert line in r.stdout.splitlines(), r.stdout[-3000:]


def test_minicms_clean_has_no_defect(lockdown, tmp_path):
    _, data = run(lockdown, "minicms-clean", tmp_path / "out")
    defects = [f["key"] for f in data["findings"] if f["severity"] != "info"]
    assert defects == []
    assert [f["id"] for f in data["findings"]] == ["hot-builtins"]


def test_minicms_files_store_read_per_key_matches_the_ground_truth(lockdown, tmp_path):
    """minicms-clean with its messages in a hashed file read with fseek/fread per key: one
    file-static-cache finding naming the store's getter, whose calls and reads per request are
    the app's own counts, with the config.php patch; no other defect."""
    truth = ground_truth(lockdown, "minicms-files", tmp_path)
    out = tmp_path / "out"
    # The message getters cost 10-17 us per call here, just under repeated-call's 20 us floor;
    # with the other test worker busy they cross it, on /?p=list their keys repeat (one label
    # per post), and the probe confirms them. Which URLs cross depends on the host's speed, so
    # this test of the file store keeps repeated-call out (floor 1 ms); the probe's verdicts
    # are tested in test_probe_dismisses_candidates_called_on_different_data.
    thresholds = tmp_path / "thresholds.toml"
    thresholds.write_text("[repeated-call]\nmin_us_per_call = 1000\n")
    r = lockdown("run", "minicms-files", "-o", out, "--no-bench", "--no-probe", "--requests", "40",
                 "--thresholds", thresholds, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    data = json.loads((out / "findings.json").read_text())
    assert [f["id"] for f in data["findings"] if f["severity"] != "info"] == ["file-static-cache"], \
        [(f["title"], f["details"].get("probe")) for f in data["findings"]]
    [f] = [f for f in data["findings"] if f["id"] == "file-static-cache"]
    d = f["details"]
    assert d["function"] == "LCStoreHashFile::get"
    assert d["reader_path"] == ["LCStoreHashFile::get", "LCStoreHashFile::read", "fread"]
    for page, url in PAGES.items():
        counts = truth[page]["l10n"]
        assert counts["store_gets"] == counts["lookups"] + 2 >= 100       # + deps and preload
        assert set(d["per_url"][url]["lookups_per_request"].values()) == {counts["store_gets"]}, url
        assert set(d["per_url"][url]["reads_per_request"].values()) == {counts["file_reads"]}, url
    [diff] = f["remediations"]
    assert diff["file"] == "config.php" and diff["checked"]
    assert "+    'l10n_store' => 'php'," in diff["content"]


def test_probe_dismisses_candidates_called_on_different_data(lockdown, tmp_path):
    """With the cost thresholds off, helpers called on different data each time pass xhprof's
    "same child calls" test on minicms-clean: drupal_load (another module each call) and
    template_preprocess (another template's variables). The argument probe sees their arguments differ
    and dismisses them; whatever repeated-call finding is left really repeats."""
    limits = tmp_path / "limits.toml"
    limits.write_text("[repeated-call]\nmin_inclusive_share_pct = 0.0\nmin_us_per_call = 0\n")
    out = tmp_path / "out"
    r = lockdown("run", "minicms-clean", "-o", out, "--no-bench", "--requests", "30",
                 "--thresholds", limits, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    data = json.loads((out / "findings.json").read_text())
    dismissed = {d["function"]: d for d in data["dismissed"]}
    # which helpers pass the (sampled) cost test varies a little from run to run; these two
    # did in every run seen
    where = {"drupal_load": "includes/bootstrap.php:38", "template_preprocess": "includes/render.php:24"}
    assert set(where) & set(dismissed), sorted(dismissed)
    for fn, line in where.items():
        if fn not in dismissed:
            continue
        d = dismissed[fn]
        assert d["defined_at"] == line and d["probe"]["repeat_pct"] < 25 and d["probe"]["calls"] > 0
        assert f"- repeated-call: {fn} ({line}):" in r.stdout
    for f in data["findings"]:
        if f["id"] == "repeated-call":
            assert f["details"]["probe"]["repeat_pct"] >= 25, f["title"]


def test_minicms_queries_has_only_the_query_findings(lockdown, tmp_path):
    """The variant with only the query pathologies on: exactly their findings, each with its
    checked patch, at shares that a verification can measure. Run with --json: stdout is the
    document alone, and it is findings.json plus the paths and the benchmark summary."""
    out = tmp_path / "out"
    r = lockdown("run", "minicms-queries", "-o", out, "--runs", "1", "--duration", "2",
                 "--warmup-duration", "1", "--requests", "45", "--json", timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    data = json.loads((out / "findings.json").read_text())
    assert {k: doc[k] for k in data} == data and doc["findings_json"] == str(out / "findings.json")
    assert doc["report"] == str(out / "report.html") and (out / "report.html").is_file()
    assert doc["flamegraphs"] == [str(out / "flamegraphs" / f"{k}.svg") for k in ("php", "php-offcpu", "native")]
    assert doc["bench"]["summary"]["rps_mean"] > 0
    assert json.loads((out / "bench.json").read_text())["config"]["warmup_duration"] == 1.0
    ids = sorted(f["id"] for f in data["findings"] if f["severity"] != "info")
    assert ids == ["n-plus-one", "repeated-query", "repeated-query", "write-on-read"], ids
    for f in data["findings"]:
        if f["severity"] != "info":
            assert f["remediations"] and f["remediations"][0]["checked"], f["key"]
            assert f["share_pct"] > 1.0, (f["key"], f["share_pct"])     # a fast page: a real share


def test_bad_thresholds_file_gets_one_line(lockdown, tmp_path):
    bad = tmp_path / "t.toml"
    bad.write_text("[fs-scan]\nnot_a_threshold = 3\n")
    r = lockdown("run", "minicms", "-o", tmp_path / "o", "--thresholds", bad)
    assert r.returncode == 2 and "has no threshold 'not_a_threshold'" in r.stderr
    assert r.stderr.count("\n") == 1 and not (tmp_path / "o").exists()
