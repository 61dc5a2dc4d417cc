"""The time accounting where a run shows it (issue 35): accounting.json (written by `lockdown
run`) read into report.html's "Time accounting" section at the top, SUMMARY.md's lead and each
finding's write-up, and `lockdown run`'s one line; a run directory without it shows none of it.
Everything from the target in it (function names, call paths, URLs, request ids, notes) is
text, never markup. A hand-made run directory (tests/test_report_numbers.py), no server."""
from __future__ import annotations

import json
import re
from html import unescape

import pytest

from lockdown.analyzers import accounting as A
from lockdown.pipeline.run import accounting_line
from lockdown.reports.html_report import report_html
from lockdown.reports.run_results import load_results
from lockdown.reports.writeup import writeups
from lockdown.rundir.model import TimeAccounting
from lockdown.rundir.store import ACCOUNTING, write_document
from test_report_numbers import make_run

US = 10_000.0
FUNC = '<img src=x onerror="window.__pwned=1">'
URL = "/?q=<script>window.__pwned=2</script>"
NOTE = "a note about <script>window.__pwned=3</script>"


def sl(request, *stack):
    return A.Slice(request, US, ("index.php", "page", *stack))


def account(run, leaf="odd", url="/?p=2", notes=()) -> dict:
    """accounting.json of six 10 ms slices against the run's findings (make_run's, fs-scan given
    its walker: it owns the function fs-scan, n-plus-one the function n-plus-one, hot-builtins
    nothing): on `/` two of three slices explained, on `url` one of three; unexplained: render,
    helper and `leaf`."""
    data = json.loads((run / "findings.json").read_text())
    data["findings"][0]["details"]["walker"] = "fs-scan"
    (run / "findings.json").write_text(json.dumps(data))
    found = A.findings_from_json(data)
    slices = [sl("r000001", "fs-scan"), sl("r000001", "fs-scan", "is_dir"), sl("r000001", "render"),
              sl("r000002", "n-plus-one"), sl("r000002", "render", "helper"), sl("r000002", leaf)]
    got = A.account(slices, {"r000001": "/", "r000002": url}, found)
    got.findings_source = "the run's findings (findings.json), after the argument probe"
    got.notes += list(notes)
    doc = TimeAccounting.of(got)
    write_document(run, ACCOUNTING, doc)
    return doc.to_json()


def words(html: str) -> str:
    """The page's text, one space between cells."""
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html)))


@pytest.fixture
def run(tmp_path):
    return make_run(tmp_path / "run dir")


def test_the_report_leads_with_the_time_accounting(run):
    t = account(run)
    assert (t["explained_pct"], t["unexplained_pct"]) == (50.0, 50.0)
    html = report_html(run)
    # the section comes first, linked first, with a card
    assert html.index('id="accounting"') < html.index('id="method"') < html.index('id="findings"')
    assert '<nav class="toc">\n<a href="#accounting">Time accounting</a>' in html
    text = words(html)
    assert ('<b>50.0%</b><span>of the sampled request time <a href="#accounting">explained by the findings</a>, '
            '50.0% unexplained</span>') in html
    assert ("The findings explain 50.0% of the sampled request time; 50.0% is unexplained (its largest parts: "
            "helper 16.7%, odd 16.7%, render 16.7%).") in text
    section = words(html[html.index('id="accounting"'):html.index('id="method"')])
    assert "From accounting.json (docs/analysis.md, \"Time accounting\"): Excimer's wall-clock samples, of 2 timed " \
           "request(s) with samples (2 timed; xhprof-instrumented ones left out), 30.0 ms sampled a request." in section
    # per URL: the shares as accounting.json has them, and each URL's own top
    assert "/ 1 30.0 66.7% 33.3% render 33.3%" in section
    assert "/?p=2 1 30.0 33.3% 66.7% helper 33.3%, odd 33.3%" in section
    # each finding's own part, linked to the finding; the informational one named apart
    assert re.search(r'<a href="#finding-1"><code>fs-scan</code></a> title of fs-scan</td>', html)
    assert "33.3% 56.2% fs-scan title of fs-scan samples with fs-scan on the PHP stack" in section
    assert "16.7% 0.9% n-plus-one title of n-plus-one samples with n-plus-one on the PHP stack" in section
    assert "Informational, explaining nothing by rule (they describe time, with no fix): hot-builtins" in section
    # the hotspots: kind by kind, with the call path and the requests linked to their drill-down
    assert "PHP functions, self" in section and "PHP functions, inclusive (the entry script left out)" in section
    assert "builtin families" not in section                      # no perf: no native kinds
    assert re.search(r'<td class="name mono" title="index.php &gt; page &gt; render &gt; helper">'
                     r'index.php &gt; page &gt; render &gt; helper \(100%\)</td>', html)
    assert re.search(r'<a href="#req-\d+">r000002</a>', html[html.index('id="accounting"'):html.index('id="method"')])


def test_a_run_without_accounting_shows_none_of_it(run):
    html = report_html(run)
    assert 'id="accounting"' not in html and "#accounting" not in html and "Time accounting" not in html
    files = writeups(load_results(run))
    assert not any("Time accounting" in text for text in files.values())


def test_no_samples_is_said_not_divided_by(run):
    found = A.findings_from_json(json.loads((run / "findings.json").read_text()))
    got = A.account([], {}, found, requests=["r000001"], basis="none")
    doc = TimeAccounting.of(got)
    write_document(run, ACCOUNTING, doc)
    assert "No samples of timed requests to account for (1 timed request(s)" in words(report_html(run))
    summary = writeups(load_results(run))["SUMMARY.md"]
    assert "**Time accounting:** no samples of timed requests to account for" in summary
    assert accounting_line(doc).startswith("findings explain none of the sampled request time: no samples")


def test_summary_leads_with_explained_against_unexplained_and_the_top_three(run):
    account(run)
    files = writeups(load_results(run))
    lines = files["SUMMARY.md"].splitlines()
    assert lines[0] == "# Performance lockdown: `wordpress`" and lines[2].startswith("**Headline:** ")
    assert lines[4].startswith("**Time accounting:** the findings explain **50.0%** of the sampled request time; "
                               "**50.0%** is unexplained (")
    assert lines[4].endswith("The top unexplained hotspots (PHP functions, self):")
    assert lines[6:9] == [
        "1. `helper`: 16.7% of the sampled time (5.00 ms a request), most of it (100%) on "
        "`index.php > page > render > helper`; requests r000002.",
        "2. `odd`: 16.7% of the sampled time (5.00 ms a request), most of it (100%) on `index.php > page > odd`; "
        "requests r000002.",
        "3. `render`: 16.7% of the sampled time (5.00 ms a request), most of it (100%) on `index.php > page > render`; "
        "requests r000001."]
    assert lines[10].startswith("Run directory: ")
    summary = files["SUMMARY.md"]
    assert "| / | 1 | 30.0 | 66.7% | 33.3% | render 33.3% |" in summary
    assert "| /?p=2 | 1 | 30.0 | 33.3% | 66.7% | helper 33.3%, odd 33.3% |" in summary
    # each finding's write-up says its own part beside the whole, before its summary
    fs = files["fs-scan.md"].splitlines()
    assert fs[4] == ("**Time accounting:** this finding owns **33.3%** of the sampled request time (its own estimate: "
                     "56.2%); the findings together explain 50.0%, 50.0% is unexplained (top unexplained: `helper` "
                     "16.7%, `odd` 16.7%, `render` 16.7%).")
    assert fs[6] == "summary of fs-scan"
    assert files["hot-builtins.md"].splitlines()[4].startswith(
        "**Time accounting:** informational, it explains none of the sampled request time")


def test_run_prints_one_line_of_it(run):
    doc = TimeAccounting.from_json(account(run))
    assert accounting_line(doc) == ("findings explain 50.0% of the sampled request time; top unexplained: "
                                    "helper (16.7%), odd (16.7%), render (16.7%)")


def test_target_strings_in_the_accounting_are_text(run):
    account(run, leaf=FUNC, url=URL, notes=[NOTE])
    html = report_html(run)
    for s in (FUNC, URL, "<script>window.__pwned=3"):
        assert s not in html, s
    section = html[html.index('id="accounting"'):html.index('id="method"')]
    assert "&lt;img src=x onerror=&#34;window.__pwned=1&#34;&gt;" in section
    assert "/?q=&lt;script&gt;window.__pwned=2&lt;/script&gt;" in section
    assert "Note: a note about &lt;script&gt;window.__pwned=3&lt;/script&gt;" in section
    for name, text in writeups(load_results(run)).items():
        for line in text.splitlines():
            # raw markup only ever inside a code span
            if "<img" in line or "<script>" in line:
                assert re.search(r"`[^`]*<(img|script)[^`]*`", line), (name, line)
    summary = writeups(load_results(run))["SUMMARY.md"]
    assert ('| /?q=&lt;script&gt;window.__pwned=2&lt;/script&gt; | 1 | 30.0 | 33.3% | 66.7% | '
            '&lt;img src=x onerror="window.__pwned=1"&gt; 33.3%, helper 33.3% |') in summary
    assert "\nNote: a note about &lt;script&gt;window.__pwned=3&lt;/script&gt;\n" in summary


def test_hotspot_findings_are_named_apart_and_own_nothing(run):
    from lockdown.reports.analysis_text import accounting_lines
    data = json.loads((run / "findings.json").read_text())
    data["findings"].append({**data["findings"][0], "id": "hotspot", "key": "hotspot", "severity": "high",
                             "share_pct": 33.3, "title": "render: 33.3% that no finding explains",
                             "details": {"function": "render", "no_patch": "no known fix"}, "remediations": []})
    (run / "findings.json").write_text(json.dumps(data))
    t = account(run)
    assert (t["explained_pct"], t["unexplained_pct"]) == (50.0, 50.0)      # as without it
    assert t["informational"] == ["hot-builtins", "hotspot"] and "hotspot" not in t["by_finding_pct"]
    section = words(report_html(run))
    assert "Informational, explaining nothing by rule (they describe time, with no fix): hot-builtins ." in section
    assert ("Hotspot findings, owning none of the time by rule (they point at the unexplained time below): "
            "hotspot .") in section
    lines = accounting_lines(t)
    assert "  informational, explaining nothing: hot-builtins" in lines
    assert "  hotspot findings, owning none of it (they point at the unexplained time): hotspot" in lines
    md = writeups(load_results(run))["hotspot.md"].splitlines()
    assert "holds **33.3%** of the sampled request time, which no finding explains" in md[2]
    assert md[4].startswith("**Time accounting:** a hotspot, it owns none of the sampled request time")
