"""`lockdown verify`: the remediation is applied to copies only, measured in interleaved A/B
pairs, and a new capture of the patched copy no longer shows the finding. The fs-scan fix on
minicms-scan (the Drupal case: an app otherwise in order) is measured, and its differential
flame graph shows the scan frames in blue; a diff remediation (db-static-cache) on minicms
is verified on the shared run, with the prepared tree left untouched."""
import json
import re
import shutil

import pytest

from lockdown.analyzers.findings import Finding, Remediation, predicted_ratio
from lockdown.analyzers.stats import compare_paired
from lockdown.cli.verify import publish
from lockdown.errors import LockdownError
from lockdown.harness.ab_bench import arm_order, pair_order
from lockdown.remediation.apply import ini_changes
from lockdown.remediation.verify import new_in, still_there

from conftest import VERIFY_ARGS, lockdown_runner, prepared_root, tree_digest

# --- pure parts -------------------------------------------------------------------------------

def test_pairs_alternate_their_order():
    assert pair_order(3) == ["before", "after", "after", "before", "before", "after"]


def test_rounds_rotate_so_every_arm_leads_equally():
    assert arm_order(("a", "b", "c"), 4) == ["a", "b", "c", "b", "c", "a", "c", "a", "b", "a", "b", "c"]


def test_paired_change_and_its_interval():
    c = compare_paired([100, 110, 90, 105, 100], [200, 215, 185, 210, 190])
    assert c["pairs"] == 5 and 95 < c["change_pct"] < 100
    assert c["ci95_pct"][0] > 0 and c["significant"]
    same = compare_paired([100, 110, 90, 105, 100], [101, 108, 92, 104, 99])
    assert same["ci95_pct"][0] < 0 < same["ci95_pct"][1] and not same["significant"]
    # drift that moves both arms alike does not widen the paired interval
    drift = compare_paired([50, 100, 150, 200, 250], [55, 110, 165, 220, 275])
    assert abs(drift["change_pct"] - 10) < 1e-9 and drift["significant"]


def test_the_design_names_pairs_for_two_arms_and_rounds_for_more():
    from lockdown.harness.ab_bench import _design
    from lockdown.harness.bench import BenchOptions
    opts = BenchOptions(runs=3, duration=5)
    assert _design(opts, ("before", "after"), 3).startswith("3 interleaved pairs of 5 s runs, order flipped each pair")
    assert _design(opts, ("before", "after", "without-a"), 3).startswith(
        "3 rounds of 5 s runs, one per arm (3 arms: before, after, without-a), order rotated each round")
    # the pilot planned more (PairPlan)
    assert _design(opts, ("before", "after"), 7).startswith(
        "7 interleaved pairs of 5 s runs (the first 3 a pilot: more were needed to resolve the change planned "
        "for), order flipped each pair")


def test_the_verdict_takes_the_host_capacity_out_when_every_run_has_one():
    from lockdown.harness.ab_bench import _change
    speeds_b, speeds_a = [60.0, 50.0, 62.0, 52.0], [50.0, 61.0, 51.0, 63.0]
    before = [{"rps": 100 * s / 60, "host_speed": {"speed": s}} for s in speeds_b]
    after = [{"rps": 110 * s / 60, "host_speed": {"speed": s}} for s in speeds_a]
    paired, verdict = _change(before, after)
    assert paired == compare_paired([r["rps"] for r in before], [r["rps"] for r in after])
    assert paired["pairs"] == 4 and not paired["significant"]      # the host's swings hide the 10% ...
    assert verdict["method"].startswith("log RPS regressed") and verdict["pairs"] == 4 and verdict["runs"] == 8
    assert abs(verdict["change_pct"] - 10) < 1e-6 and verdict["significant"]    # ... the capacity shows it
    # one run without a host speed: the verdict is the paired estimate
    old = [{"rps": r["rps"]} for r in before]
    paired, verdict = _change(old, after)
    assert verdict is paired and verdict["method"].startswith("paired")


def test_ini_changes_set_and_unload():
    rems = [Remediation("ini", "; comment\npcre.jit=1\nopcache.revalidate_freq = 60\n")]
    assert ini_changes(rems, {"pcre.jit": "0", "memory_limit": "256M"}) == {
        "pcre.jit": "1", "opcache.revalidate_freq": "60", "memory_limit": "256M"}
    unload = [Remediation("ini", "; remove: zend_extension=xdebug.so\n; (in the ini that loads it)")]
    assert ini_changes(unload, {"zend_extension": "xdebug.so"}) == {}
    with pytest.raises(LockdownError, match="only unload an extension it loaded itself"):
        ini_changes(unload, {})


def test_same_problem_is_matched_by_subject_not_key():
    before = Finding("repeated-call", "t", "high", 10.0, "s", key="repeated-call-2",
                     details={"function": "theme_settings"})
    other = Finding("repeated-call", "t", "high", 12.0, "s", key="repeated-call",
                    details={"function": "parse_blocks"})
    same = Finding("repeated-call", "t", "medium", 4.0, "s", key="repeated-call-3",
                   details={"function": "theme_settings"})
    info = Finding("repeated-call", "t", "info", None, "s", details={"function": "theme_settings"})
    assert still_there(before, [other]) == []
    assert still_there(before, [other, same, info]) == [same]
    # what the re-capture reports that the run did not: parse_blocks, once theme_settings is fixed
    assert new_in([before], [same, other, info]) == [other]
    assert new_in([before, other], [same, other]) == []
    # two repeated-query findings of one statement shape, different literals: each on its own
    shape = "select value from settings where name = ?"
    site, date = (Finding("repeated-query", "t", "low", 1.0, "s", key=k,
                          details={"statement": f"SELECT value FROM settings WHERE name = '{n}'", "fingerprint": shape})
                  for k, n in (("repeated-query", "site_name"), ("repeated-query-2", "date_format")))
    assert site.subject != date.subject and still_there(site, [date]) == [] and new_in([site], [date]) == [date]


# --- bad input --------------------------------------------------------------------------------

def test_bad_run_directory_and_finding_get_one_line(lockdown, tmp_path):
    r = lockdown("verify", tmp_path, "--finding", "fs-scan")
    assert r.returncode == 2 and "has no findings.json" in r.stderr and r.stderr.count("\n") == 1
    (tmp_path / "findings.json").write_text('{"format": 1, "findings": [')
    r = lockdown("verify", tmp_path, "--finding", "fs-scan")
    assert r.returncode == 2 and "findings.json: damaged" in r.stderr and r.stderr.count("\n") == 1
    f = Finding("n-plus-one", "t", "low", 1.0, "s", key="n-plus-one")
    (tmp_path / "findings.json").write_text(json.dumps(
        {"format": 1, "target": "minicms", "findings": [f.to_json()]}))
    r = lockdown("verify", tmp_path, "--finding", "fs-scan")
    assert r.returncode == 2 and "no finding 'fs-scan'" in r.stderr and "n-plus-one" in r.stderr
    r = lockdown("verify", tmp_path, "--finding", "n-plus-one")
    assert r.returncode == 2 and "has no concrete remediation" in r.stderr and "--patch FILE" in r.stderr
    assert r.stderr.count("\n") == 1
    r = lockdown("verify", tmp_path, "--finding", "n-plus-one", "--runs", "4")
    assert r.returncode == 2 and "--runs" in r.stderr
    r = lockdown("verify", tmp_path, "--finding", "fs-scan", "--runs", "8", "--max-runs", "6")
    assert r.returncode == 2 and "--max-runs 6 is fewer than --runs 8" in r.stderr and r.stderr.count("\n") == 1
    r = lockdown("verify", tmp_path, "--all")
    assert r.returncode == 2 and "no finding in" in r.stderr and "concrete remediation" in r.stderr
    for args, words in ((("--all", "--finding", "n-plus-one"), "give --finding KEY (one or more) or --all"),
                        ((), "give --finding KEY (one or more) or --all"),
                        (("--all", "--remediation", "2"), "--remediation picks among one finding's")):
        r = lockdown("verify", tmp_path, *args)
        assert r.returncode == 2 and words in r.stderr, (args, r.stderr)
    assert not (tmp_path / "verify").exists()


# --- real runs --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def scan_verified(home, tmp_path_factory):
    """`lockdown run minicms-scan`, then `lockdown verify --finding fs-scan` on it."""
    lockdown = lockdown_runner(home, 900)
    out = tmp_path_factory.mktemp("scan") / "run"
    r = lockdown("run", "minicms-scan", "-o", out, "--no-bench", "--requests", "30")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    prepared = prepared_root("minicms-scan")
    digest = tree_digest(prepared)
    v = lockdown("verify", out, "--finding", "fs-scan", *VERIFY_ARGS)
    return out, v, prepared, digest


def test_fs_scan_fix_is_measured_and_the_finding_is_gone(scan_verified):
    out, v, prepared, digest = scan_verified
    assert v.returncode == 0, v.stdout[-3000:] + v.stderr[-3000:]
    result = json.loads((out / "verify" / "fs-scan" / "verify.json").read_text())
    assert result["confirmed"] and result["reprofile"]["gone"] and result["reprofile"]["remaining"] == []
    assert [r["kind"] for r in result["remediations"]] == ["sql"]
    bench = result["bench"]
    assert len(bench["before"]["runs"]) == len(bench["after"]["runs"]) == 5
    assert bench["order"][:4] == ["before", "after", "after", "before"]
    change = bench["change"]
    assert change["pairs"] == 5 and change["ci95_pct"][0] > 0 and change["significant"]
    # the verdict's estimate takes the host's speed out; the plain paired one is kept beside it
    assert "elasticity" in change and change["runs"] == 10
    assert bench["change_paired"]["pairs"] == 5 and bench["change_paired"]["change_pct"] > 0
    assert all(r["status_counts"] == {"200": sum(r["status_counts"].values())}
               for arm in ("before", "after") for r in bench[arm]["runs"])
    assert "CONFIRMED" in v.stdout and "gone from the re-capture" in v.stdout
    # deleting the zombie rows changes no page: each URL served the same before and after
    assert result["responses"]["urls"] == 5 == result["responses"]["same"]
    assert "pages: all 5 URLs serve the same page before and after" in v.stdout
    # the measurement is set against what the finding's share predicts, 1 / (1 - share)
    share = result["finding"]["share_pct"]
    assert f"expected: the finding's share, {share:.1f}% of request time, predicts about " \
           f"{1 / (1 - share / 100):.2f}x" in v.stdout
    # the SQL ran on the run's copy of the database only: the prepared tree is byte-identical
    assert tree_digest(prepared) == digest
    # nothing half-written is left beside the result
    assert sorted(p.name for p in (out / "verify").iterdir()) == ["fs-scan"]


def test_fs_scan_differential_flame_graph_shows_the_scan_shrinking(scan_verified):
    out, v, _, _ = scan_verified
    result = json.loads((out / "verify" / "fs-scan" / "verify.json").read_text())
    svg = (out / "verify" / "fs-scan" / result["diff_svg"]["php_before_widths"]).read_text()
    scans = re.findall(r'<g class="([^"]*)"[^>]*>\s*<title>(file_scan_directory[^<]*)</title>\s*'
                       r'<rect [^>]*fill="rgb\((\d+),(\d+),(\d+)\)"', svg)
    assert scans, "no file_scan_directory frame in the before-widths diff"
    for cls, title, r, g, b in scans:
        assert "fg-shrank" in cls.split() and "change gone" in title
        assert int(b) == 255 and int(r) < 100 and int(g) < 100, (r, g, b)   # deep blue
    # in the after-widths picture the scan has no width at all
    after = (out / "verify" / "fs-scan" / result["diff_svg"]["php"]).read_text()
    assert "<title>file_scan_directory" not in after
    # colours compare time per request, not shares: the whole page got cheaper (shares kept
    # the root at +0% and turned what survived a much faster page red)
    for picture in (svg, after):
        assert "red grew, blue shrank in time per request" in picture
        [root] = re.findall(r"<title>all \(([^<]*)\)</title>", picture)
        change = float(re.search(r"change (-[\d.]+)%", root).group(1))
        assert change < -30, root


def test_a_report_that_cannot_be_rebuilt_costs_a_warning_not_the_verdict(scan_verified, tmp_path, capsys):
    """verify.json is written before the run's report is rebuilt: when the report cannot be
    (here analysis.json is damaged), the verdict is still shown and is still the exit status,
    the old report.html is left as it was, and one line says what to run once it is fixed."""
    out, v, _, _ = scan_verified
    run = tmp_path / "run"
    shutil.copytree(out, run)
    (run / "analysis.json").write_text('{"subsystems": ')
    before = (run / "report.html").read_bytes()
    result = json.loads((run / "verify" / "fs-scan" / "verify.json").read_text())
    assert publish(run, "fs-scan", result, None) == (0 if result["confirmed"] else 3)
    shown = capsys.readouterr()
    warning = shown.err.strip().splitlines()
    assert len(warning) == 1 and warning[0].startswith("lockdown: warning: report.html not updated: ")
    assert "analysis.json" in warning[0] and f"lockdown report {run}" in warning[0]
    assert "CONFIRMED" in shown.out and "report NOT updated" in shown.out
    assert (run / "report.html").read_bytes() == before
    # --json: the document says so too
    doc = tmp_path / "v.json"
    assert publish(run, "fs-scan", result, doc) == (0 if result["confirmed"] else 3)
    written = json.loads(doc.read_text())
    assert written["report"] is None and "analysis.json" in written["report_error"]
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    # once analysis.json is whole again, the same call rebuilds the report
    shutil.copy(out / "analysis.json", run / "analysis.json")
    assert publish(run, "fs-scan", result, None) == (0 if result["confirmed"] else 3)
    assert capsys.readouterr().err == "" and (run / "report.html").read_bytes() != before


def test_diff_remediation_applies_to_a_copy_and_removes_the_finding(minicms_verified):
    v, out, digest = minicms_verified
    assert v.returncode in (0, 3), v.stdout[-3000:] + v.stderr[-3000:]
    result = json.loads((out / "verify" / "db-static-cache" / "verify.json").read_text())
    assert result["remediations"][0]["kind"] == "diff" and result["remediations"][0]["file"] == "config.php"
    assert result["reprofile"]["gone"], result["reprofile"]
    # the exit status is the verdict
    assert (v.returncode == 0) == result["confirmed"] == (result["bench"]["change"]["significant"]
                                                          and result["bench"]["change"]["change_pct"] > 0)
    # messages from the PHP array instead of the table: the same pages (minicms's truth
    # trailer, which names the configuration, is masked by the target's volatile pattern)
    assert result["responses"]["same"] == result["responses"]["urls"] == 5
    # the pairs were planned for the change the finding's share predicts, from the noise of
    # the first 5 (the pilot), and measured as planned
    share = result["finding"]["share_pct"]
    plan, bench = result["bench"]["plan"], result["bench"]
    assert plan["planned_change_pct"] == pytest.approx(100 * (predicted_ratio(share) - 1))
    assert plan["pilot_runs"] == 5 and plan["max_runs"] == 5        # VERIFY_ARGS: no more than the pilot
    assert plan["runs_needed"] is None or plan["runs_needed"] >= 5
    assert plan["runs"] == 5 == plan["measured_runs"]
    assert len(bench["before"]["runs"]) == len(bench["after"]["runs"]) == plan["runs"] == bench["runs_per_arm"]
    assert 0 < bench["change"]["power"] <= 1 and bench["change"]["resolvable_pct"] > 0
    # the servers' CPU per request, each server apart: most of MariaDB's is the 126 lookups a
    # request the fix removed; the change in it is paired as the RPS is
    cpu = {arm: bench[arm]["summary"]["server_cpu_by_server_ms"] for arm in ("before", "after")}
    assert set(cpu["before"]) == set(cpu["after"]) == {"mariadbd", "nginx", "php-fpm"}, cpu
    assert cpu["after"]["mariadbd"] < 0.5 * cpu["before"]["mariadbd"], cpu
    assert bench["change_server_cpu"]["pairs"] == 5 and bench["change_server_cpu"]["change_pct"] < 0
    assert all(run["server_cpu"]["ms_per_request"] > 0 for arm in ("before", "after") for run in bench[arm]["runs"])
    assert "CPU per request</th><td>" in (out / "report.html").read_text()
    # the other findings are still there in the re-capture: only this one was fixed
    ids = {f["id"] for f in result["reprofile"]["findings"]}
    assert {"fs-scan", "repeated-call", "write-on-read"} <= ids and "db-static-cache" not in ids
    # the patch went to the run's private copy: the prepared app tree is byte-identical
    assert tree_digest(prepared_root("minicms") / "app") == digest
    # --json: quiet, and stdout is exactly the document verify.json holds
    assert json.loads(v.stdout) == {**result, "verify_json": str(out / "verify" / "db-static-cache" / "verify.json"),
                                    "report": str(out / "report.html")}
    assert v.stderr == ""


def test_all_fixes_together_are_measured_as_one_change(lockdown, minicms_run, minicms_verified, tmp_path):
    """`verify --all` on a copy of the shared minicms run: the first remediation of every
    defect finding, applied to one copy (the two repeated-query findings propose the same
    diff: applied once), measured against the unpatched site as one change, every finding gone
    from the re-capture; the report and SUMMARY.md show it as the lockdown's headline."""
    _, src = minicms_run
    run = tmp_path / "run"
    shutil.copytree(src, run, ignore=shutil.ignore_patterns("*-run", "verify", "report.html"))
    v = lockdown("verify", run, "--all", *VERIFY_ARGS, timeout=900)
    assert v.returncode in (0, 3), v.stdout[-3000:] + v.stderr[-3000:]
    result = json.loads((run / "verify" / "all" / "verify.json").read_text())
    assert (v.returncode == 0) == result["confirmed"]
    findings = json.loads((run / "findings.json").read_text())["findings"]
    defects = [f for f in findings if f["severity"] != "info" and f["remediations"]]
    assert [f["key"] for f in result["findings"]] == [f["key"] for f in defects] and len(defects) >= 6
    firsts = {(f["remediations"][0]["kind"], f["remediations"][0]["content"]) for f in defects}
    assert len(result["remediations"]) == len(firsts) < len(defects)
    assert result["finding"]["key"] == "all" and result["reprofile"]["gone"]
    assert result["reprofile"]["gone_by_finding"] == {f["key"]: True for f in defects}
    assert result["reprofile"]["new"] == []          # nothing else became worth reporting
    # the re-capture of a site made ~20x faster (pages of a few ms) passes validate's checks,
    # which allow for the fixed cost outside the request window and for pages shorter than
    # two Excimer periods; verify.json carries them
    checks = {c["name"]: c for c in result["reprofile"]["checks"]}
    assert {"perf samples attributed", "PHP stacks per request"} <= set(checks)
    assert all(c["ok"] for c in checks.values()), [c for c in checks.values() if not c["ok"]]
    assert "[reprofile] warning" not in v.stdout
    assert result["responses"]["same"] == result["responses"]["urls"] == 5
    # together they buy far more than the one fix verified alone on the same run
    single = json.loads(minicms_verified[0].stdout)["bench"]["change"]["change_pct"]
    together = result["bench"]["change"]
    assert together["significant"] and together["change_pct"] > max(100.0, 2 * single)
    assert f"fixed together: {', '.join(f['key'] for f in defects)}" in v.stdout
    assert f"findings gone from the re-capture: {len(defects)} of {len(defects)}" in v.stdout
    html = (run / "report.html").read_text()
    assert f"<h3>{len(defects)} fixes together (<code>all</code>)</h3>" in html
    assert f'</b><span>req/s with <a href="#verify-1">{len(defects)} fixes together</a> (' in html   # a card
    assert f"findings gone: {len(defects)} of {len(defects)}" in html
    first = next(i for i, f in enumerate(findings, 1) if f["key"] == defects[0]["key"])
    assert f'<a href="#finding-{first}"><code>{defects[0]["key"]}</code></a>' in html
    w = lockdown("writeup", run, "-o", tmp_path / "issues")
    assert w.returncode == 0, w.stderr
    summary = (tmp_path / "issues" / "SUMMARY.md").read_text()
    assert summary.splitlines()[2].startswith(f"**Headline:** {len(defects)} fixes together (`all`): **+")
    assert f"lockdown verify {run} --all --runs 5 --duration 1 --max-runs 5" in summary    # the pilot, as asked
    issue = (tmp_path / "issues" / f"{defects[0]['key']}.md").read_text()
    assert f"Measured together with {len(defects) - 1} other fix(es) (`lockdown verify {run} --all`" in issue
    assert "this finding is gone from that re-capture" in issue


def test_each_fix_is_also_left_out_once(lockdown, minicms_run, tmp_path):
    """`verify --finding fs-scan --finding db-static-cache --each`: besides the two together,
    each is left out once and "all but it" measured against "all", what it adds to the other;
    the terminal, the report and SUMMARY.md show the rows verify.json holds."""
    _, src = minicms_run
    run = tmp_path / "run"
    shutil.copytree(src, run, ignore=shutil.ignore_patterns("*-run", "verify", "report.html"))
    v = lockdown("verify", run, "--finding", "fs-scan", "--finding", "db-static-cache", "--each",
                 *VERIFY_ARGS, "--no-probe", timeout=900)
    assert v.returncode in (0, 3), v.stdout[-3000:] + v.stderr[-3000:]
    result = json.loads((run / "verify" / "fs-scan+db-static-cache" / "verify.json").read_text())
    each = {tuple(e["findings"]): e for e in result["each"]}
    assert set(each) == {("fs-scan",), ("db-static-cache",)}
    # one benchmark of four arms, in rounds: each left-out arm is paired with the after arm's runs
    bench = result["bench"]
    assert len(bench["order"]) == 20 and set(bench["others"]) == {"without-1", "without-2"}
    assert all(len(bench[arm]["runs"]) == 5 for arm in ("before", "after"))
    assert all(len(o["runs"]) == 5 and "change_pct" in o["change"] for o in bench["others"].values())
    assert all(e["all_rps"] == bench["after"]["summary"]["rps_mean"] for e in result["each"])
    assert {e["without_rps"] for e in result["each"]} == {o["summary"]["rps_mean"] for o in bench["others"].values()}
    assert "4 arms: before, after, without-1, without-2" in bench["design"]
    scan = each[("fs-scan",)]
    assert scan["remediation"]["kind"] == "sql" and each[("db-static-cache",)]["remediation"]["file"] == "config.php"
    # the module scan is most of a request even with the messages cached: leaving it out costs a lot
    assert scan["change"]["significant"] and scan["change"]["change_pct"] > 50 and scan["all_rps"] > scan["without_rps"]
    assert all(e["pages"]["same"] == e["pages"]["urls"] == 5 for e in result["each"])
    assert "  what each fix adds to the others (all but it -> all):" in v.stdout
    assert f"    fs-scan: {scan['without_rps']:.1f} -> {scan['all_rps']:.1f} req/s" in v.stdout
    # each row's change is the estimate the main one is, and named as it is
    assert all(e["change"] == {k: bench["others"][e["arm"]]["change"][k] for k in e["change"]}
               and set(e["change"]) >= {"method", "pairs"} for e in result["each"])
    named = "with host speed and steal taken out" if "elasticity" in scan["change"] else "from the paired ratios"
    assert f"    fs-scan: {scan['without_rps']:.1f} -> {scan['all_rps']:.1f} req/s, change" in v.stdout
    assert named in v.stdout.split("    fs-scan:")[1].splitlines()[0]
    html = (run / "report.html").read_text()
    assert "<h4>What each fix adds to the others</h4>" in html and "<td><code>db-static-cache</code></td>" in html
    w = lockdown("writeup", run, "-o", tmp_path / "issues")
    assert w.returncode == 0, w.stderr
    summary = (tmp_path / "issues" / "SUMMARY.md").read_text()
    assert "| [`fs-scan`](fs-scan.md) | " in summary.split("What each fix adds to the others")[1]
    assert "--finding fs-scan --finding db-static-cache --each --runs 5" in summary
    # --each alone is a usage error
    r = lockdown("verify", run, "--finding", "fs-scan", "--each")
    assert r.returncode == 2 and "--each needs several findings" in r.stderr
