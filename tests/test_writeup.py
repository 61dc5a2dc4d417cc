"""`lockdown writeup` on a minicms run with one verified fix: one markdown issue per finding,
and a SUMMARY.md whose numbers are bench.json's and verify.json's exactly."""
import json
import re
import shutil

from lockdown.reports.numbers import change as fmt_pct, ms, ratio as fmt_ratio, rps as fmt_rps, sd, ms_fine
from lockdown.reports.numbers import share as fmt_share


def test_writeup_numbers_match_bench_and_verification(lockdown, minicms_verified, tmp_path):
    v, run, _ = minicms_verified
    out = tmp_path / "issues"
    r = lockdown("writeup", run, "-o", out)
    assert r.returncode == 0, r.stderr
    findings = json.loads((run / "findings.json").read_text())["findings"]
    assert sorted(p.name for p in out.iterdir()) == sorted([f"{f['key']}.md" for f in findings] + ["SUMMARY.md"])
    summary = (out / "SUMMARY.md").read_text()
    bench = json.loads((run / "bench.json").read_text())
    verified = json.loads((run / "verify" / "db-static-cache" / "verify.json").read_text())

    # the lead: the headline, then explained against unexplained and the top three hotspots,
    # accounting.json's numbers as printed
    t = json.loads((run / "accounting.json").read_text())
    lines = summary.splitlines()
    assert lines[2].startswith("**Headline:** ")
    assert lines[4].startswith(f"**Time accounting:** the findings explain **{fmt_share(t['explained_pct'])}** of the "
                               f"sampled request time; **{fmt_share(t['unexplained_pct'])}** is unexplained (")
    top = t["hotspots"]["self"][:3]
    assert len(top) == 3 and lines[4].endswith("The top unexplained hotspots (PHP functions, self):")
    for line, n, h in zip(lines[6:9], "123", top):
        assert line.startswith(f"{n}. `{h['name']}`: {fmt_share(h['share_pct'])} of the sampled time "
                               f"({ms_fine(h['us_per_request'] / 1000)} ms a request), most of it "), line
        assert f"; requests {', '.join(h['requests'])}" in line
    assert abs(t["explained_pct"] + t["unexplained_pct"] - 100) <= 0.01 + 1e-9
    for u in t["urls"]:
        assert abs(u["explained_pct"] + u["unexplained_pct"] - 100) <= 0.01 + 1e-9
        assert (f"| {u['url']} | {u['requests']} | {ms(u['mean_us'] / 1000)} | {fmt_share(u['explained_pct'])} | "
                f"{fmt_share(u['unexplained_pct'])} | ") in summary, u["url"]

    # methodology and baseline: bench.json's runs and mean, as printed
    # (a loaded host's 5 req/s run has a p99 over a second: "1,031.1", thousands separated)
    rows = re.findall(r"^\| (\d+) \| ([\d,.]+) \| ([\d,.]+) \| ([\d,.]+) \| (\d+) \|$", summary, re.M)
    assert [row[1] for row in rows] == [fmt_rps(x["rps"]) for x in bench["runs"]]
    assert [row[2].replace(",", "") for row in rows] == [f"{x['latency_ms']['p50']:.1f}" for x in bench["runs"]]
    assert f"| **mean** | **{fmt_rps(bench['summary']['rps_mean'])}** |" in summary
    assert f"mean {fmt_rps(bench['summary']['rps_mean'])} req/s, standard deviation " \
           f"{sd(bench['summary']['rps_stddev'])}" in summary
    assert f"{bench['config']['cpus']} CPUs" in summary and bench["config"]["versions"]["mariadb"] in summary
    split = bench["summary"]["server_cpu_by_server_ms"]
    assert (f"the servers spent {ms_fine(bench['summary']['server_cpu_ms_mean'])} ms of CPU per request "
            f"(mariadbd {ms_fine(split['mariadbd'])}, nginx {ms_fine(split['nginx'])}, "
            f"php-fpm {ms_fine(split['php-fpm'])})") in summary

    # results: the verified fix's row is verify.json's numbers: the means, the verdict's ratio
    # (host capacity taken out) and its interval, the paired estimate beside them, and what a
    # request cost the servers in each arm
    b, c, p = verified["bench"], verified["bench"]["change"], verified["bench"]["change_paired"]
    row = re.search(r"^\| \[`db-static-cache`\]\(db-static-cache\.md\) \| (.+) \|$", summary, re.M).group(1)
    cells = [x.strip() for x in row.split("|")]
    assert cells == [fmt_rps(b["before"]["summary"]["rps_mean"]), fmt_rps(b["after"]["summary"]["rps_mean"]),
                     fmt_ratio(c["ratio"]), f"{fmt_pct(c['ci95_pct'][0])} .. {fmt_pct(c['ci95_pct'][1])}",
                     f"{fmt_pct(p['change_pct'])} ({fmt_pct(p['ci95_pct'][0])} .. {fmt_pct(p['ci95_pct'][1])})",
                     f"{ms_fine(b['before']['summary']['server_cpu_ms_mean'])} -> "
                     f"{ms_fine(b['after']['summary']['server_cpu_ms_mean'])}",
                     "yes" if verified["reprofile"]["gone"] else "no",
                     "confirmed" if verified["confirmed"] else "not confirmed"]
    section = "## Optimizations" if verified["confirmed"] else "## Did not pan out"
    assert fmt_pct(c["change_pct"]) in summary.split(section)[1].split("## ")[0]
    # every other defect is listed as not verified, with its command
    for f in findings:
        if f["severity"] != "info" and f["key"] != "db-static-cache":
            assert f"({f['key']}.md)" in summary.split("## Not verified yet")[1]

    # the finding's own issue: measured effect with every run, and how to reproduce
    issue = (out / "db-static-cache.md").read_text()
    assert f"Change: **{fmt_pct(c['change_pct'])}** requests per second with host speed and steal taken out, 95% CI " \
           f"{fmt_pct(c['ci95_pct'][0])} .. {fmt_pct(c['ci95_pct'][1])}" in issue
    for i, (x, y) in enumerate(zip(b["before"]["runs"], b["after"]["runs"]), 1):
        assert f"| run {i} | {fmt_rps(x['rps'])} | {fmt_rps(y['rps'])} |" in issue
    # ... set against what the finding's share predicted: 1 / (1 - share)
    share = next(f["share_pct"] for f in findings if f["key"] == "db-static-cache")
    assert 0 < share < 100
    assert (f"The finding's share, {share:.1f}% of request time, predicted about "
            f"{fmt_ratio(1 / (1 - share / 100))} ({fmt_pct(100 * (1 / (1 - share / 100) - 1))})") in issue
    assert f"lockdown verify {run} --finding db-static-cache" in issue
    assert "Not verified yet: `lockdown verify" in (out / "n-plus-one.md").read_text()


def test_writeup_shows_target_strings_as_text(lockdown, minicms_run, tmp_path):
    _, run = minicms_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("bundle", "*-run", "verify"))
    data = json.loads((copy / "findings.json").read_text())
    evil = "<script>alert(1)</script>"
    f = data["findings"][0]
    f["title"] = f"{evil} `x` [link](javascript:alert(2))"
    f["evidence"][0]["value"] = f"{evil} | cell"
    f["urls"] = [f"/?q={evil}"]
    bare = data["findings"][1]
    bare["remediations"] = []
    bare["details"]["no_patch"] = f"no per-request memo of {evil}: it prints output"
    (copy / "findings.json").write_text(json.dumps(data))
    t = json.loads((copy / "accounting.json").read_text())
    t["hotspots"]["self"][0]["name"] = f"{evil}`x`"
    t["hotspots"]["self"][1]["path"].append(evil)
    t["urls"][0]["url"] = f"/?q={evil}"
    t["urls"][0]["top"] = [{**t["hotspots"]["self"][0], "name": f"{evil} | cell"}]
    t["notes"].append(f"{evil} [link](javascript:alert(3))")
    (copy / "accounting.json").write_text(json.dumps(t))
    r = lockdown("writeup", copy, "-o", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    for md in (tmp_path / "out").glob("*.md"):
        text = md.read_text()
        for line in text.splitlines():
            # raw markup only ever inside a code span or fence
            if "<script>" in line:
                assert line.startswith(("```", "URLs: `")) or re.search(r"`[^`]*<script>[^`]*`", line), line
        assert "](javascript:" not in text.replace("\\](javascript:", "")
    summary = (tmp_path / "out" / "SUMMARY.md").read_text()
    assert "1. `<script>alert(1)</script>'x'`: " in summary             # a backtick cannot end the span
    assert "| /?q=&lt;script&gt;alert(1)&lt;/script&gt; |" in summary and "&lt;/script&gt; \\| cell " in summary
    bare_md = (tmp_path / "out" / f"{bare['key']}.md").read_text()
    assert ("No patch proposed: no per-request memo of &lt;script&gt;alert(1)&lt;/script&gt;: it prints output."
            in bare_md)


def test_writeup_bad_input_and_replacing_earlier_writeups(lockdown, minicms_run, tmp_path):
    _, run = minicms_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("bundle", "*-run", "verify"))
    out = tmp_path / "out"
    assert lockdown("writeup", copy, "-o", out).returncode == 0
    (out / "stale.md").write_text("from an earlier run")
    assert lockdown("writeup", copy, "-o", out).returncode == 0 and not (out / "stale.md").exists()
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    r = lockdown("writeup", copy, "-o", other)
    assert r.returncode == 2 and "not empty" in r.stderr and r.stderr.count("\n") == 1
    assert (other / "notes.txt").read_text() == "mine"
    # earlier write-ups with something else beside them: replacing the directory would delete it
    (out / "notes.txt").write_text("mine too")
    r = lockdown("writeup", copy, "-o", out)
    assert r.returncode == 2 and "notes.txt" in r.stderr and r.stderr.count("\n") == 1
    assert (out / "notes.txt").read_text() == "mine too" and (out / "SUMMARY.md").is_file()
    # the run directory itself, or a directory that holds it, is never the output; a new
    # directory inside it is (make demo writes DIR/issues)
    r = lockdown("writeup", copy, "-o", copy / "issues")
    assert r.returncode == 0 and (copy / "issues" / "SUMMARY.md").is_file(), r.stderr
    for target in (copy, tmp_path):
        r = lockdown("writeup", copy, "-o", target)
        assert r.returncode == 2 and "which this command reads" in r.stderr and r.stderr.count("\n") == 1
    assert (copy / "findings.json").is_file()
    (copy / "verify" / "fs-scan").mkdir(parents=True)
    (copy / "verify" / "fs-scan" / "verify.json").write_text('{"finding": ')
    r = lockdown("writeup", copy, "-o", tmp_path / "o2")
    assert r.returncode == 2 and "verify.json: damaged" in r.stderr and r.stderr.count("\n") == 1
    assert not (tmp_path / "o2").exists()
    # fixes verified together, without which finding each re-capture still showed
    (copy / "verify" / "fs-scan").rename(copy / "verify" / "all")
    (copy / "verify" / "all" / "verify.json").write_text(json.dumps(
        {"finding": {"key": "all"}, "findings": [{"key": "fs-scan"}, {"key": "n-plus-one"}],
         "bench": {}, "reprofile": {"gone": True}}))
    r = lockdown("writeup", copy, "-o", tmp_path / "o3")
    assert r.returncode == 2 and "no reprofile.gone_by_finding" in r.stderr and r.stderr.count("\n") == 1
    assert not (tmp_path / "o3").exists()


def test_files_of_the_wrong_shape_are_one_line_for_writeup_and_report(lockdown, minicms_run, tmp_path):
    """JSON that parses but is not what lockdown wrote (a string where a number was, a list of
    the wrong things, a key that is a path) is one line naming the run directory, for the
    write-ups and the report alike; nothing is written."""
    _, run = minicms_run

    def bench_runs(d):
        d["runs"] = [1, "x"]

    def share(d):
        d["findings"][0]["share_pct"] = "x"

    def key(d):
        d["findings"][0]["key"] = "../escape"

    for name, damage in (("bench.json", bench_runs), ("findings.json", share), ("findings.json", key)):
        copy = tmp_path / f"run-{damage.__name__}"
        shutil.copytree(run, copy, ignore=shutil.ignore_patterns("*-run", "verify", "issues"))
        data = json.loads((copy / name).read_text())
        damage(data)
        (copy / name).write_text(json.dumps(data))
        out = tmp_path / f"issues-{damage.__name__}"
        r = lockdown("writeup", copy, "-o", out)
        assert r.returncode == 2 and r.stderr.startswith("lockdown: error: "), (damage.__name__, r.stderr)
        assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
        assert not out.exists()
    # the report: analysis.json's query classes with the wrong types
    copy = tmp_path / "run-classes"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("*-run", "verify", "issues"))
    analysis = json.loads((copy / "analysis.json").read_text())
    analysis["queries"]["classes"] = [{"count": "x", "time_total": [], "example": None}]
    (copy / "analysis.json").write_text(json.dumps(analysis))
    before = (copy / "report.html").read_bytes()
    r = lockdown("report", copy)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "unexpected content" in r.stderr, r.stderr
    assert (copy / "report.html").read_bytes() == before


def test_a_copied_run_reads_its_own_bundle(tmp_path):
    """findings.json names the bundle where it was captured; a copy of the run directory
    reads the copy beside it, and the named one only when it has none."""
    from lockdown.reports.run_results import run_bundle
    named = tmp_path / "original" / "bundle"
    named.mkdir(parents=True)
    copy = tmp_path / "copy"
    (copy / "bundle").mkdir(parents=True)
    assert run_bundle(copy, {"bundle": str(named)}) == copy / "bundle"
    (copy / "bundle").rmdir()
    assert run_bundle(copy, {"bundle": str(named)}) == named
    assert run_bundle(copy, {"bundle": 5}) == copy / "bundle"
