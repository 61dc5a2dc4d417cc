"""`lockdown report` on a real minicms run, in headless Chromium: every section is there and
displayed, the embedded flame graphs zoom, Copy works without errors, the page loads nothing
from the network; strings from the target holding markup or script are shown as text and never
run; bad input gives one line, a non-zero exit and no file.

One `lockdown run minicms` (a minute or two) serves the whole module."""
import hashlib
import json
import shutil
import struct
import time

import pytest

from browser import headless_chromium, script_errors, wait_until
from conftest import lockdown_runner, stolen_runs
from lockdown.bundle.store import open_bundle
from lockdown.harness.bench import summary_of
from lockdown.analyzers.stacks import stacks
from lockdown.reports.flamegraph import FlameOptions, render_diff_flamegraph
from lockdown.reports.numbers import share as fmt_share

SCRIPT = "<script>window.__pwned=1</script>"
IMG = '<img src=x onerror="window.__pwned=2">'
URL = "/?q=<script>window.__pwned=3</script>"
FUNC = '<img src=y onerror="window.__pwned=4">'
SQL = "SELECT '<script>window.__pwned=5</script>' FROM t WHERE a = '<img src=z onerror=\"window.__pwned=6\">'"


def run_lockdown(home, *args, timeout=120):
    return lockdown_runner(home, timeout)(*args)


@pytest.fixture(scope="module")
def run_dir(minicms_verified):
    """The shared minicms run, with a real `lockdown verify` of db-static-cache in it."""
    v, out, _ = minicms_verified
    assert (out / "verify" / "db-static-cache" / "verify.json").is_file(), v.stdout[-3000:] + v.stderr[-3000:]
    return out


def report_of(home, run, out):
    r = run_lockdown(home, "report", run, "-o", out)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == f"wrote {out}"
    return out


def copy_run(src, dst):
    """The files a report reads (not the runs' configs and logs)."""
    dst.mkdir()
    for name in ("bench.json", "analysis.json", "findings.json", "accounting.json"):
        shutil.copy2(src / name, dst / name)
    for name in ("bundle", "findings"):
        shutil.copytree(src / name, dst / name)
    return dst


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height, len(data)


# One script call per question: a WebDriver round trip per frame made the report test take
# minutes on a graph of thousands of frames.
_WIDTHS = """
const out = {};
for (const g of document.querySelectorAll('#' + arguments[0] + ' g.fg-f')) {
  const name = g.querySelector('title').textContent.replace(/ \\([^(]*$/, '');
  if (!(name in out)) out[name] = parseFloat(g.querySelector('rect').getAttribute('width'));
}
return out;"""
_RECT = """
for (const g of document.querySelectorAll('#' + arguments[0] + ' g.fg-f')) {
  if (g.querySelector('title').textContent.replace(/ \\([^(]*$/, '') === arguments[1])
    return g.querySelector('rect');
}
return null;"""


def frame_widths(driver, svg_id) -> dict:
    """Frame name (first occurrence) -> its rect's width, for one embedded flame graph."""
    return driver.execute_script(_WIDTHS, svg_id)


def center(driver, element):
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)


def zoom_one(driver, svg_id):
    """Click a frame that is neither the root nor full width; it must then span the graph."""
    ws = frame_widths(driver, svg_id)
    total = ws["all"]
    name = max((n for n, w in ws.items() if n != "all" and w < 0.8 * total), key=ws.get)
    assert ws[name] > 0.02 * total, name
    rect = driver.execute_script(_RECT, svg_id, name)
    center(driver, rect)
    rect.click()
    wait_until(lambda: frame_widths(driver, svg_id)[name] > 0.95 * total)
    unzoom = driver.find_element("id", f"{svg_id}-unzoom")
    assert unzoom.is_displayed()
    center(driver, unzoom)
    unzoom.click()
    wait_until(lambda: frame_widths(driver, svg_id)[name] < 0.8 * total)


def test_report_in_chromium(home, run_dir, tmp_path):
    page = report_of(home, run_dir, tmp_path / "report.html")
    html = page.read_text()
    assert len(html) < 3_000_000
    findings = json.loads((run_dir / "findings.json").read_text())["findings"]
    errors = []
    with headless_chromium() as driver:
        driver.get(page.as_uri())
        errors += script_errors(driver)
        shot = tmp_path / "report.png"
        assert driver.save_screenshot(str(shot))
        w, h, size = png_size(shot)
        assert w >= 800 and h >= 600 and size > 20_000, (w, h, size)
        # nothing fetched: no resources, no external references
        assert driver.execute_script("return performance.getEntriesByType('resource').length") == 0
        assert driver.execute_script(
            "return document.querySelectorAll('script[src], link[href], img, iframe, object, embed').length") == 0

        # the time accounting leads, displayed: explained against unexplained, a row per URL
        accounted = json.loads((run_dir / "accounting.json").read_text())
        section = driver.find_element("id", "accounting")
        assert section.location["y"] < driver.find_element("id", "method").location["y"]
        center(driver, section)
        assert section.is_displayed()
        assert (f"The findings explain {fmt_share(accounted['explained_pct'])} of the sampled request time; "
                f"{fmt_share(accounted['unexplained_pct'])} is unexplained") in section.text
        bar = section.find_element("css selector", ".acct-bar .acct-explained")
        assert bar.is_displayed() and bar.size["width"] > 0
        rows = section.find_elements("css selector", "h3 + table tr")
        assert len(rows) == len(accounted["urls"]) + 1
        for row, u in zip(rows[1:], accounted["urls"]):
            cells = row.find_elements("tag name", "td")
            assert [cells[0].text, cells[3].text, cells[4].text] == [
                u["url"], fmt_share(u["explained_pct"]), fmt_share(u["unexplained_pct"])]
        lead = section.find_element("css selector", "p.lead")
        lead.screenshot(str(tmp_path / "accounting.png"))
        assert png_size(tmp_path / "accounting.png")[0] > 300

        # the subsystem chart and the findings are on the page, displayed
        chart = driver.find_element("css selector", "#subsystems svg.chart")
        center(driver, chart)
        assert chart.is_displayed() and chart.size["width"] > 300 and chart.size["height"] > 100
        assert chart.location["y"] > 0
        labels = [t.text for t in chart.find_elements("css selector", ".chart-label")]
        analysis = json.loads((run_dir / "analysis.json").read_text())
        assert labels == list(analysis["subsystems"]["overall"])
        chart.screenshot(str(tmp_path / "subsystems.png"))
        assert png_size(tmp_path / "subsystems.png")[0] > 300
        section = driver.find_element("id", "findings")
        articles = section.find_elements("css selector", "article.finding")
        assert len(articles) == len(findings) > 0
        for art, f in zip(articles, findings):
            center(driver, art)
            assert art.is_displayed()
            assert f["title"] in art.find_element("tag name", "h3").text
        center(driver, articles[0])
        articles[0].screenshot(str(tmp_path / "finding.png"))
        assert png_size(tmp_path / "finding.png")[1] > 100
        for sid in ("bench", "budget", "functions", "queries", "requests", "method"):
            assert driver.find_element("id", sid).is_displayed(), sid
        assert driver.find_element("css selector", "#bench svg.chart").is_displayed()
        assert driver.find_element("css selector", "#budget svg.chart").is_displayed()

        # both flame graphs are embedded and zoom on click
        for svg_id in ("ld-php", "ld-native"):
            zoom_one(driver, svg_id)

        # Copy: the patch text is the remediation's content; clicking never throws
        rem = next(r for f in findings for r in f["remediations"])
        button = driver.find_element("css selector", "button.copy")
        pre = driver.find_element("id", button.get_attribute("data-copy"))
        assert pre.get_attribute("textContent") == rem["content"]
        center(driver, button)
        button.click()
        wait_until(lambda: button.text in ("Copied", "Selected: press Ctrl-C"))

        # drill-down: a finding's example request opens that request's details
        link = driver.find_element("css selector", "#findings a.jump")
        center(driver, link)
        link.click()
        target = driver.find_element("id", link.get_attribute("href").split("#", 1)[1])
        wait_until(lambda: target.get_attribute("open") is not None)
        assert link.text in target.find_element("tag name", "summary").text
        assert target.find_element("css selector", ".req-body table").is_displayed()
        # and clicking a request's row expands it
        other = driver.find_elements("css selector", "#requests details.req")[-1]
        summary = other.find_element("tag name", "summary")
        center(driver, summary)
        summary.click()
        wait_until(lambda: other.get_attribute("open") is not None)
        errors += script_errors(driver)
    assert [e for e in errors] == []


def rewrite_bundle_file(bundle, rel, edit):
    """Change one bundle file and keep its manifest entry true (size and SHA-256)."""
    path = bundle / rel
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    edit(lines)
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    mpath = bundle / "manifest.json"
    manifest = json.loads(mpath.read_text())
    manifest["files"][rel] = {"bytes": path.stat().st_size,
                              "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    mpath.write_text(json.dumps(manifest, indent=1) + "\n")


def inject(run):
    """Hostile strings wherever a report shows text that comes from the target."""
    fpath = run / "findings.json"
    data = json.loads(fpath.read_text())
    f = data["findings"][0]
    f["title"] += " " + SCRIPT
    f["summary"] += " " + IMG
    f["evidence"].append({"what": SCRIPT, "value": IMG, "source": URL})
    f["urls"].append(URL)
    f["requests"].append(SCRIPT)
    f["details"]["hostile"] = [SCRIPT, IMG]
    f["remediations"].append({"kind": "diff", "content": f"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-{SCRIPT}\n+{IMG}\n",
                              "checked": IMG, "file": SCRIPT, "steps": [["php", IMG]], "description": SCRIPT})
    key = f["key"]
    bare = data["findings"][1]          # a finding with no patch, and why (from memoize.py)
    bare["remediations"] = []
    bare["details"]["no_patch"] = f"no per-request memo of {FUNC}: {SQL}"
    data["dismissed"] = [{"id": "repeated-call", "function": FUNC, "defined_at": URL, "reason": SQL}]
    fpath.write_text(json.dumps(data))
    apath = run / "analysis.json"
    a = json.loads(apath.read_text())
    a["budget_by_url"][URL] = a["budget_by_url"].pop(next(iter(a["budget_by_url"])))
    a["subsystems"]["by_url"][URL] = a["subsystems"]["by_url"].pop(next(iter(a["subsystems"]["by_url"])))
    a["php_functions"]["top"][0]["name"] = FUNC
    a["builtins"]["top"][0]["name"] = SCRIPT
    a["queries"]["classes"][0]["fingerprint"] = SQL
    a["queries"]["classes"][0]["example"] = SQL
    slowest = max((r for r in a["by_request"] if not r["instrumented"]), key=lambda r: r["wall_us"])
    slowest["url"] = URL
    apath.write_text(json.dumps(a))
    bpath = run / "bench.json"
    b = json.loads(bpath.read_text())
    b["config"]["urls"][0]["path"] = URL
    b["config"]["versions"]["php"] = IMG
    bpath.write_text(json.dumps(b))
    # the bundle: a statement and a URI in the drill-down, a PHP function in the flame graph
    bundle = run / "bundle"

    def statements(rows):
        first = next(s for s in rows if s["request"] == slowest["id"])
        first["sql"] = SQL

    def requests(rows):
        next(r for r in rows if r["id"] == slowest["id"])["uri"] = URL

    def excimer(rows):
        p = next(p for p in rows if p["request"] == slowest["id"])
        p["stacks"] = [s + ";" + FUNC for s in p["stacks"]]

    # the time accounting: a hotspot's name, call path, requests and URLs, a URL, a finding, a note
    cpath = run / "accounting.json"
    t = json.loads(cpath.read_text())
    h = t["hotspots"]["self"][0]
    h["name"], h["path"], h["urls"] = FUNC, [*h["path"][:-1], FUNC, SCRIPT], [URL]
    h["requests"] = [SCRIPT, *h["requests"][1:]]
    t["hotspots"]["builtin_family"][0]["members"] = [IMG]        # (perf ran: there are builtin families)
    t["urls"][0]["url"] = URL
    t["urls"][0]["top"] = [{**h, "name": SQL}]
    t["findings"][0]["title"], t["findings"][0]["how"] = SCRIPT, IMG
    t["informational"] = [FUNC]
    t["notes"].append(SQL)
    cpath.write_text(json.dumps(t))
    rewrite_bundle_file(bundle, "statements.jsonl", statements)
    rewrite_bundle_file(bundle, "requests.jsonl", requests)
    rewrite_bundle_file(bundle, "excimer.jsonl", excimer)
    # a verification of the finding, with a differential flame graph of the (hostile) stacks
    vdir = run / "verify" / key
    vdir.mkdir(parents=True)
    php = stacks(open_bundle(bundle), "php", counts=True)
    before = {k: v * 2 if FUNC in k else v for k, v in php.items()}
    (vdir / "diff-php.svg").write_text(render_diff_flamegraph(before, php, FlameOptions(title=SCRIPT)))

    def arm(rps: list[float]) -> dict:
        return {"runs": [{"rps": x, "latency_ms": {"p50": 10.0}} for x in rps],
                "summary": {"rps_mean": sum(rps) / len(rps), "rps_stddev": 1.0, "rps_cv": 0.05,
                            "rps_ci95": [min(rps), max(rps)]}}

    (vdir / "verify.json").write_text(json.dumps({
        "format": 1, "finding": {"key": key, "id": f["id"], "title": f["title"]}, "target": "minicms",
        "remediations": [{"kind": "diff", "file": SCRIPT, "content": IMG}],
        "bench": {"design": IMG, "runs_per_arm": 5, "duration": 2, "concurrency": 4,
                  "before": arm([20.0, 21.0, 19.5, 20.5, 20.2]), "after": arm([25.0, 26.0, 24.0, 25.5, 25.1]),
                  "change": {"ratio": 1.24, "change_pct": 24.0, "ci95_pct": [20.1, 27.9], "method": SCRIPT,
                             "significant": True}},
        "reprofile": {"bundle": str(vdir / "bundle"), "gone": True, "remaining": [IMG]},
        "responses": {"urls": 2, "same": 1, "volatile_patterns": 0,
                      "pages": [{"url": SCRIPT, "same": False, "status_before": 200, "status_after": 500}]},
        "confirmed": True, "diff_svg": {"php": "diff-php.svg", "native": None}}))
    return key


def test_target_strings_are_text_never_script(home, run_dir, tmp_path):
    run = copy_run(run_dir, tmp_path / "hostile")
    inject(run)
    page = report_of(home, run, tmp_path / "report.html")
    html = page.read_text()
    for s in (SCRIPT, IMG, URL, FUNC, SQL):
        assert s not in html, s          # only ever escaped
    errors = []
    with headless_chromium() as driver:
        driver.get(page.as_uri())
        time.sleep(0.5)
        errors += script_errors(driver)
        assert driver.execute_script("return typeof window.__pwned") == "undefined"
        body = driver.find_element("tag name", "body").text
        for s in (SCRIPT, IMG, URL, FUNC, SQL):
            assert s in body, s
        # ... the time accounting's among them, as text in its section
        accounting = driver.find_element("id", "accounting").text
        for s in (SCRIPT, IMG, URL, FUNC, SQL):
            assert s in accounting, s
        # every script on the page is ours: the report's and one per flame graph
        scripts = driver.execute_script("return Array.from(document.querySelectorAll('script'), s => s.textContent)")
        graphs = driver.execute_script("return document.querySelectorAll('svg.lockdown-flamegraph').length")
        assert graphs == 4                  # PHP, PHP off the CPU, native, and the verification's differential graph
        assert len(scripts) == graphs + 1
        assert all("__pwned" not in s for s in scripts)
        assert driver.execute_script("return document.querySelectorAll('img').length") == 0
        # the hostile PHP frame is a frame of the flame graph, named as text
        assert FUNC in frame_widths(driver, "ld-php")
        # the verification is shown: before/after chart, change, the differential graph
        v = driver.find_element("css selector", "#findings .verify")
        center(driver, v)
        assert v.is_displayed() and "confirmed" in v.text and "+24.0%" in v.text
        # the page comparison names the page that changed, as text
        assert f"1 of 2 URLs serve a different page after the fix: {SCRIPT} (status 200 -> 500)" in v.text
        assert f"No patch proposed: no per-request memo of {FUNC}: {SQL}." in body
        assert v.find_element("css selector", "svg.chart").is_displayed()
        assert v.find_element("css selector", "svg.lockdown-flamegraph").is_displayed()
        # interacting does not run anything either
        for d in driver.find_elements("css selector", "details"):
            driver.execute_script("arguments[0].open = true", d)
        time.sleep(0.3)
        assert driver.execute_script("return typeof window.__pwned") == "undefined"
        errors += script_errors(driver)
    assert errors == []


def damage_truncate(run, name):
    p = run / name
    p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2])


def drop_bundle(run):
    """No bundle in the run directory, nor where findings.json says it was captured."""
    shutil.rmtree(run / "bundle")
    data = json.loads((run / "findings.json").read_text())
    data["bundle"] = str(run / "bundle")
    (run / "findings.json").write_text(json.dumps(data))


@pytest.mark.parametrize("damage, names", [
    (lambda run: damage_truncate(run, "findings.json"), "findings.json"),
    (lambda run: (run / "findings.json").write_text('{"format": 1, "findings": {"a": 1}}'), "findings.json"),
    (lambda run: damage_truncate(run, "analysis.json"), "analysis.json"),
    (lambda run: (run / "analysis.json").write_text('{"budget_by_url": []}'), "analysis.json"),
    (lambda run: damage_truncate(run, "bench.json"), "bench.json"),
    (lambda run: damage_truncate(run, "accounting.json"), "accounting.json"),
    (lambda run: (run / "accounting.json").write_text('{"format": 1, "basis": "none"}'), "accounting.json"),
    (lambda run: (run / "analysis.json").unlink(), "analysis.json"),
    (lambda run: damage_truncate(run, "bundle/requests.jsonl"), "requests.jsonl"),
    (lambda run: drop_bundle(run), "bundle"),
    (lambda run: (run / "findings.json").unlink(), "findings.json"),
    (lambda run: shutil.rmtree(run), "no such directory"),
], ids=["findings-truncated", "findings-shape", "analysis-truncated", "analysis-shape",
        "bench-truncated", "accounting-truncated", "accounting-shape", "analysis-missing", "bundle-truncated",
        "bundle-missing", "not-a-run-dir", "missing-dir"])
def test_bad_input_one_line_no_file(home, run_dir, tmp_path, damage, names):
    run = copy_run(run_dir, tmp_path / "run")
    damage(run)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    r = run_lockdown(home, "report", run, "-o", out_dir / "report.html")
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lockdown: error: "), r.stderr
    assert names in lines[0] and "Traceback" not in r.stderr
    assert list(out_dir.iterdir()) == []
    # without -o (DIR/report.html): the report already there is left as it was
    if run.is_dir():
        (run / "report.html").write_text("the earlier report")
        r = run_lockdown(home, "report", run)
        assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1
        assert (run / "report.html").read_text() == "the earlier report"


def test_the_report_is_never_written_over_what_it_reads(home, run_dir, tmp_path):
    run = copy_run(run_dir, tmp_path / "run")
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    for out in (run / "analysis.json", run / "bundle" / "report.html", run / "findings" / "x.html"):
        r = run_lockdown(home, "report", run, "-o", out)
        assert r.returncode == 2 and r.stderr.startswith(f"lockdown: error: -o {out} would write over ")
        assert r.stderr.count("\n") == 1
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


def test_run_writes_the_report_and_verify_updates_it(home, run_dir, tmp_path):
    """`lockdown run` leaves DIR/report.html; `lockdown verify` rewrites it, so the copy in the
    run directory is what `lockdown report DIR` makes now, verification included."""
    own = (run_dir / "report.html").read_text()
    assert own == report_of(home, run_dir, tmp_path / "again.html").read_text()
    # `lockdown report DIR` alone rewrites that one, the same
    r = run_lockdown(home, "report", run_dir)
    assert r.returncode == 0 and r.stdout.strip() == f"wrote {run_dir / 'report.html'}"
    assert (run_dir / "report.html").read_text() == own
    # every finding with a patch but the verified one says how to verify it; the
    # informational ones (no patch) do not
    findings = json.loads((run_dir / "findings.json").read_text())["findings"]
    assert "<h4>Verification: " in own and own.count("Not verified") == sum(
        1 for f in findings if f["remediations"] and f["key"] != "db-static-cache")


def test_without_bench_or_verify(home, run_dir, tmp_path):
    """`lockdown run --no-bench` writes no bench.json: the report says so and has the rest; a
    run directory written before accounting.json has no time accounting section, and no error."""
    run = copy_run(run_dir, tmp_path / "run")
    (run / "bench.json").unlink()
    html = report_of(home, run, tmp_path / "report.html").read_text()
    assert "No benchmark in this run" in html and 'id="ld-php"' in html and "Not verified" in html
    assert 'id="accounting"' in html
    (run / "accounting.json").unlink()
    html = report_of(home, run, tmp_path / "older.html").read_text()
    assert 'id="accounting"' not in html and 'id="ld-php"' in html


def test_bench_section_names_the_host_under_the_runs(home, run_dir, tmp_path):
    """Each run's host speed, and the CV with the host's capacity taken out, as bench.json has
    them: the runs of a bench where steal, not speed, moved (tests/test_stats.py)."""
    run = copy_run(run_dir, tmp_path / "run")
    bench = json.loads((run / "bench.json").read_text())
    bench["runs"] = [{**bench["runs"][0], **r} for r in stolen_runs()]
    bench["summary"] = summary_of(bench["runs"])
    (run / "bench.json").write_text(json.dumps(bench))
    html = report_of(home, run, tmp_path / "report.html").read_text()
    assert "steal took up to 17.0% of the CPU" in html
    assert f"coefficient of variation is {100 * bench['summary']['rps_cv_speed_adjusted']:.2f}%" in html
    assert "<td class=\"n\">33.8</td></tr>" in html              # run 1's host speed, 33.765


def test_chart_axis_and_bars_are_layout_only():
    from lockdown.reports.charts import Bar, bar_chart, nice_ticks
    assert nice_ticks(48.6) == [0, 10, 20, 30, 40, 50]
    assert nice_ticks(0.37) == [0, 0.1, 0.2, 0.3, 0.4]
    assert nice_ticks(0) == [0.0, 1.0]
    svg = bar_chart([Bar("a<b>", 10.0, 8.0, 12.0, points=[9.0, 11.0], text="10")], "t&t", "req/s")
    assert "a&lt;b&gt;" in svg and "t&amp;t" in svg and "<b>" not in svg
    assert svg.count("<circle") == 2 and svg.count('class="chart-err"') == 1
