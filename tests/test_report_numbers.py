"""What the report layer says about its numbers, on a small hand-made run directory (no
stack, seconds): the measured change is named for what it is and set beside the paired one,
commands are ones that work and reproduce the run, the drill-down and subsystem texts say
their base, a req/s interval below zero is flagged, and each kind of number reads the same
on the terminal, in report.html and in the write-ups."""
import copy
from html import unescape
import json
import re
import shlex
from pathlib import Path

import pytest

from contexts import request, statement
from lockdown.analyzers.detectors import load_thresholds
from lockdown.bundle.store import BundleWriter
from lockdown.harness.bench import summary_of
from lockdown.reports import numbers
from lockdown.reports.analysis_text import format_analysis
from lockdown.reports.bench_table import format_bench
from lockdown.reports.charts import Bar, bar_chart
from lockdown.reports.findings_text import format_findings
from lockdown.reports.flamegraph import render_flamegraph
from lockdown.reports.html_report import report_html
from lockdown.reports.run_results import load_results
from lockdown.reports.verify_text import effect_line, format_verify
from lockdown.reports.writeup import writeups

WP_RUNS = (7.4, 9.6)          # two runs: Student's t with 1 df gives a lower bound below zero


def _bench_run(rps, speed=40.0):
    return {"rps": rps, "requests": int(rps * 5), "errors": 0, "status_counts": {"200": int(rps * 5)},
            "latency_ms": {"p50": 100.0, "p90": 200.0, "p99": 1220.94, "max": 1300.0},
            "host_cpu": {"busy_pct": 90.0, "steal_pct": 1.0}, "host_speed": {"speed": speed, "cv": 0.01, "samples": 50}}


def _arm(rps):
    runs = [{"rps": x, "latency_ms": {"p50": 10.0, "p99": 20.0}} for x in rps]
    return {"runs": runs, "summary": summary_of(runs)}


def _finding(key, severity, share, remediations, evidence=()):
    return {"id": key, "key": key, "title": f"title of {key}", "severity": severity, "share_pct": share,
            "summary": f"summary of {key}", "evidence": list(evidence), "remediations": remediations,
            "urls": ["/"], "requests": ["r000001"], "details": {"function": key}}


SQL_FIX = {"kind": "sql", "content": "DELETE FROM system WHERE 1", "checked": "applied to a copy", "file": None,
           "steps": [], "description": "", "writes": None}
OTHER_FIX = {**SQL_FIX, "content": "UPDATE authors SET x = 1"}


def make_run(root: Path, *, options=("--runs", "2", "--duration", "5", "--requests", "40"),
             bench=True, verify_all=True, excimer=()) -> Path:
    """A run directory as `lockdown run wordpress --runs 2 --duration 5 --requests 40` (and
    `verify --all`) leaves it, made by hand: the files the report and the write-ups read."""
    root.mkdir(parents=True)
    w = BundleWriter(root / "bundle")
    reqs = [request("r000001", "/", wall_us=200_000), request("r000002", "/?p=2", wall_us=150_000)]
    for r in reqs:
        r.db_threads = [168]
    w.write_jsonl("requests.jsonl", reqs)
    w.write_jsonl("statements.jsonl", [statement("r000001", "SELECT 1")])
    if excimer:
        w.write_jsonl("excimer.jsonl", excimer)
    w.finish({"target": {"name": "wordpress"}, "run_dir": None, "capture": {"collect": ["queries"], "xhprof_every": 10},
              "driver": {"concurrency": 1, "requests": 2}, "requests": {"sent": 2, "logged": 2, "lost": 0,
                                                                        "instrumented": 0, "status_counts": {"200": 2}},
              "overhead": None})
    budget = {"wall_us": 175_000, "cpu_us": 100_000, "db_wait_us": 20_000, "other_wait_us": 55_000,
              "residual_us": 0, "cpu_by_subsystem_us": {"vm": 100_000}, "requests": 2}
    (root / "analysis.json").write_text(json.dumps({
        "requests": 2, "instrumented_left_out": 0, "budget_by_url": {"/": budget}, "budget_overall": budget,
        "db_round_trip": {"requests": 12, "calls": 2260, "client_us": 519387, "server_us": 230034,
                          "per_call_us": 128.03, "statements_per_request": 184.89, "us_per_request": 23671.7},
        "by_request": [{"id": r.id, "url": r.url, "status": 200, "pid": 100, "instrumented": False,
                        "statements": 1, **budget} for r in reqs],
        "subsystems": {"samples": 952, "overall": {"vm": 100.0}, "by_url": {"/": {"vm": 100.0}},
                       "samples_by_url": {"/": 952},
                       "symbols": {"samples": 1133, "leaf_unknown_before": 208, "leaf_unknown_after": 15,
                                   "frames_named": 2194, "leaf_unknown_pct": 1.32}}}))
    evidence = [{"what": "directories walked per request (median)", "value": 1613.0, "source": "xhprof"},
                {"what": "closedir calls per request", "value": 1613, "source": "xhprof"}]
    findings = [_finding("fs-scan", "high", 56.24, [SQL_FIX], evidence),
                _finding("n-plus-one", "low", 0.86, [OTHER_FIX]),
                _finding("hot-builtins", "info", None, [])]
    run_block = {"target_dir": "/x/wordpress", "php_ini": {}, "requests": 40, "xhprof_every": 10,
                 "thresholds": load_thresholds(None)}
    if options is not None:
        run_block.update(target_arg="wordpress", options=list(options))
    (root / "findings.json").write_text(json.dumps({"format": 1, "target": "wordpress", "bundle": str(root / "bundle"),
                                                    "run": run_block, "findings": findings, "dismissed": []}))
    if bench:
        runs = [_bench_run(x) for x in WP_RUNS]
        (root / "bench.json").write_text(json.dumps({
            "target": "wordpress", "canonical": False, "non_default_options": ["runs", "duration"],
            "config": {"runs": 2, "duration": 5, "warmup_duration": 5, "warmup_requests": 20, "concurrency": 4,
                       "workers": 4, "load": "wrk", "php_ini": {}, "urls": [{"path": "/", "weight": 1}],
                       "cpus": 2, "host": "vm", "versions": {"kernel": "6", "php": "PHP 8.2", "nginx": "nginx",
                                                               "mariadb": "10.11", "load": "wrk 4"}},
            "runs": runs, "summary": summary_of(runs)}))
    if verify_all:
        write_verify_all(root)
    return root


VERIFY_ALL = {
    "format": 1, "target": "wordpress",
    "finding": {"key": "all", "id": None, "subject": None, "share_pct": None, "title": "2 fixes together"},
    "findings": [{"key": "fs-scan", "id": "fs-scan", "title": "title of fs-scan", "share_pct": 56.24},
                 {"key": "n-plus-one", "id": "n-plus-one", "title": "title of n-plus-one", "share_pct": 0.86}],
    "remediations": [SQL_FIX, OTHER_FIX],
    "bench": {"design": "interleaved pairs", "runs_per_arm": 5, "duration": 3, "concurrency": 4, "workers": 4,
              "load": "wrk", "warmup_duration": 5,
              "before": _arm([11.5, 9.6, 8.5, 11.0, 9.7]), "after": _arm([173.5, 201.0, 174.7, 270.8, 276.0]),
              "change": {"runs": 10, "ratio": 22.3749, "change_pct": 2137.49, "ci95_pct": [1505.69, 3017.90],
                         "significant": True, "elasticity": 0.358, "pairs": 5, "method": "log RPS regressed"},
              "change_paired": {"pairs": 5, "ratio": 21.4542, "change_pct": 2045.42, "ci95_pct": [1498.14, 2780.11],
                                "significant": True, "method": "paired"}},
    "reprofile": {"bundle": "b", "requests": 30, "gone": False, "remaining": ["n-plus-one"],
                  "gone_by_finding": {"fs-scan": True, "n-plus-one": False}, "new": [], "findings": [],
                  "probed": False, "dismissed": []},
    "confirmed": False, "diff_svg": {}}


def write_verify_all(root: Path, data: dict = VERIFY_ALL) -> dict:
    (root / "verify" / data["finding"]["key"]).mkdir(parents=True)
    (root / "verify" / data["finding"]["key"] / "verify.json").write_text(json.dumps(data))
    return data


@pytest.fixture
def run(tmp_path):
    return make_run(tmp_path / "run dir")       # a space: every command must quote it


def text_of(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html)).replace("&amp;", "&").replace("&rarr;", "->")


# -- A1, B2: the change is named, the means are means, the paired estimate beside it ----------

def test_the_change_says_what_it_is_beside_the_means(run):
    files = writeups(load_results(run))
    summary = files["SUMMARY.md"]
    headline = summary.splitlines()[2]
    assert "**+2,137.5%** requests per second with host speed and steal taken out" in headline
    assert "means 10.1 -> 219.2 req/s" in headline
    assert "paired ratios alone: +2,045.4%, 95% CI +1,498.1% .. +2,780.1%" in headline
    # no column claims a plain after/before of the means beside it
    assert "after / before" not in summary
    row = next(line for line in summary.splitlines() if line.startswith("| 10.1 | 219.2 |"))
    assert "| 22.37x |" in row and "| +2,045.4% (+1,498.1% .. +2,780.1%) |" in row
    assert "ratio, host capacity taken out" in summary
    issue = files["fs-scan.md"]
    assert ("**+2,137.5%** requests per second with host speed and steal taken out (means 10.1 -> 219.2 req/s)"
            in issue and "paired ratios alone: +2,045.4%" in issue)
    html = text_of(report_html(run))
    assert ("+2,137.5%req/s with 2 fixes together (with host speed and steal taken out; 95% CI +1,505.7% .. "
            "+3,017.9%; paired ratios alone: +2,045.4%, 95% CI +1,498.1% .. +2,780.1%); means 10.1 -> 219.2 req/s"
            in html)
    assert "+2,137.5% with host speed and steal taken out, 95% CI +1,505.7% .. +3,017.9%" in html
    assert "This is not the ratio of the two means above" in html
    # the terminal, the same words
    line = effect_line(VERIFY_ALL)
    assert line.startswith("means 10.1 -> 219.2 req/s (5 runs each); change +2,137.5% with host speed and "
                           "steal taken out (95% CI +1,505.7% .. +3,017.9%), 5 interleaved pairs")
    assert "(paired ratios alone: +2,045.4%, 95% CI +1,498.1% .. +2,780.1%)" in format_verify(VERIFY_ALL)


def test_a_paired_only_change_is_named_as_such(tmp_path):
    """Runs without host speed: the verdict is the paired estimate, and is called that."""
    data = copy.deepcopy(VERIFY_ALL)
    data["bench"]["change"] = {**data["bench"]["change_paired"]}
    root = make_run(tmp_path / "run", verify_all=False)
    write_verify_all(root, data)
    summary = writeups(load_results(root))["SUMMARY.md"]
    assert "**+2,045.4%** requests per second from the paired ratios" in summary
    assert "| 21.45x (paired ratios: no capacity recorded) |" in summary and "paired ratios alone:" not in summary
    assert "change +2,045.4% from the paired ratios" in effect_line(data)
    assert "paired ratios alone" not in format_verify(data)


def test_verify_names_each_differential_flame_graph_in_words():
    """verify.json keys its graphs by kind and widths; the terminal says which is which."""
    data = copy.deepcopy(VERIFY_ALL)
    data["diff_svg"] = {"php": "diff-php.svg", "php_before_widths": "diff-php-before.svg",
                        "native": None, "native_before_widths": None}
    lines = format_verify(data).splitlines()
    assert "  PHP differential flame graph, widths from after: diff-php.svg" in lines
    assert "  PHP differential flame graph, widths from before (what the fix removed): diff-php-before.svg" in lines
    assert not any("native" in x or "_before_widths" in x for x in lines)


def test_report_labels_each_differential_flame_graph_beside_the_arms(run):
    """The report reads diff_svg's keys as the terminal does; a missing graph is a note, and the
    arms' figures stay (a label's variables once shadowed the before arm)."""
    data = copy.deepcopy(VERIFY_ALL)
    data["diff_svg"] = {"php": "diff-php.svg", "php_before_widths": "diff-php-before.svg"}
    (run / "verify" / "all" / "verify.json").write_text(json.dumps(data))
    text = text_of(report_html(run))
    assert "php stacks, widths from after" in text
    assert "php stacks, widths from before (what the patch removed shows, blue)" in text
    assert "mean 10.1 req/s" in text and "mean 219.2 req/s" in text


def test_new_findings_of_the_recapture_are_named_by_title(run):
    """A re-capture numbers its keys afresh: its repeated-call can be about another function
    than the run's repeated-call the fix removed; the title says which, in both outputs."""
    data = copy.deepcopy(VERIFY_ALL)
    data["reprofile"]["new"] = ["fs-scan"]
    data["reprofile"]["findings"] = [{"key": "fs-scan", "id": "fs-scan", "title": "scan of <plugins> & themes"}]
    lines = format_verify(data).splitlines()
    i = lines.index("  new in the re-capture (not in the run), by the re-capture's keys:")
    assert lines[i + 1] == "    fs-scan: scan of <plugins> & themes"
    (run / "verify" / "all" / "verify.json").write_text(json.dumps(data))
    html = report_html(run)
    assert "<code>fs-scan</code> (scan of &lt;plugins&gt; &amp; themes)" in html


# -- A2: verify is recommended only where there is something to verify ------------------------

def test_informational_findings_recommend_no_verify(run):
    files = writeups(load_results(run))
    md = files["hot-builtins.md"]
    assert "lockdown verify" not in md and "the summary says what to change" not in md
    assert "informational" in md
    html = report_html(run)
    assert "--finding hot-builtins" not in html and "the summary says what to change" not in html
    assert "Informational: this finding shows where the time goes; there is no patch to apply or verify." in html
    # a finding with a patch still gets the command, quoted
    assert f"`lockdown verify {shlex.quote(str(run))} --finding fs-scan`" in files["fs-scan.md"]
    assert "--finding hot-builtins" not in files["SUMMARY.md"]


# -- A3: the drill-down's thread ids are labelled as such -------------------------------------

def test_request_drill_down_names_thread_ids(run):
    html = report_html(run)
    assert "<th>database connection</th><td>1 (MariaDB thread id 168)</td>" in html
    assert "database connections</th><td>168" not in html


# -- A4: the commands reproduce the run, options and all --------------------------------------

def test_reproduce_commands_carry_the_run_options(run):
    files = writeups(load_results(run))
    q = shlex.quote(str(run))
    expected_run = f"lockdown run wordpress -o {q} --runs 2 --duration 5 --requests 40"
    assert shlex.split(expected_run)[4] == str(run)
    verify = f"lockdown verify {q} --all --runs 5 --duration 3 --requests 30 --no-probe"
    block = files["SUMMARY.md"].split("## Reproduce")[1]
    assert expected_run in block and verify in block and f"lockdown writeup {q} -o OUTDIR" in block
    for key in ("fs-scan", "n-plus-one", "hot-builtins"):
        assert expected_run in files[f"{key}.md"].split("## Reproduce")[1]
    assert verify in files["fs-scan.md"].split("## Reproduce")[1]
    assert f"lockdown analyze {shlex.quote(str(run / 'bundle'))}" in files["fs-scan.md"]
    # the report's methodology names the same command
    assert f"<th>command</th><td>{expected_run.replace(chr(39), '&#39;')}</td>" in report_html(run)


def test_an_older_run_is_reproduced_from_what_its_files_hold(tmp_path):
    """A findings.json without run.options: bench.json's config and the run block say it."""
    root = make_run(tmp_path / "old", options=None)
    assert "lockdown run wordpress -o " + str(root) + " --runs 2 --duration 5 --requests 40\n" in \
        writeups(load_results(root))["SUMMARY.md"]
    bare = make_run(tmp_path / "bare", options=None, bench=False, verify_all=False)
    data = json.loads((bare / "findings.json").read_text())
    data["run"]["thresholds"]["fs-scan"] = {"x": 1}
    data["run"]["php_ini"] = {"opcache.enable": "0"}
    (bare / "findings.json").write_text(json.dumps(data))
    summary = writeups(load_results(bare))["SUMMARY.md"]
    line = next(candidate for candidate in summary.splitlines() if candidate.startswith("lockdown run "))
    assert line.startswith(f"lockdown run wordpress -o {bare} --no-bench --requests 40 --php-ini opcache.enable=0"
                           "  # and --thresholds FILE")


def test_run_records_the_options_it_was_given(tmp_path):
    from lockdown.cli.run import _given_options, run_cmd
    (tmp_path / "t.toml").write_text("")
    # the group's help names: click keeps the first help option it builds on the command, and a
    # bare make_context would leave `run --help` without -h for docs/commands.md's test
    h = {"help_option_names": ["-h", "--help"]}
    ctx = run_cmd.make_context("run", ["minicms", "-o", "out", "--runs", "2", "--php-ini", "a=b c", "--no-probe",
                                       "--thresholds", str(tmp_path / "t.toml"), "--timeout", "60"], **h)
    assert _given_options(ctx) == ["--runs", "2", "--thresholds", str(tmp_path / "t.toml"), "--php-ini", "a=b c",
                                   "--no-probe"]
    assert _given_options(run_cmd.make_context("run", ["minicms", "-o", "out"], **h)) == []


# -- B1: verify refreshes the run's write-ups, and each finding names its joint measurement ---

def test_verify_refreshes_the_findings_writeups_and_the_report(tmp_path, capsys):
    from lockdown.cli.verify import publish
    from lockdown.reports.run_documents import write_finding_writeups
    root = make_run(tmp_path / "run", verify_all=False)
    write_finding_writeups(root)                     # as `lockdown run` leaves them
    assert "Not verified yet: `lockdown verify" in (root / "findings" / "fs-scan.md").read_text()
    data = write_verify_all(root)
    assert publish(root, "all", data, None) == 3
    assert "write-ups updated" in capsys.readouterr().out
    md = (root / "findings" / "fs-scan.md").read_text()
    assert "Measured together with 1 other fix(es)" in md and "this finding is gone from that re-capture" in md
    assert "Not verified alone" in md
    assert "is still reported by that re-capture" in (root / "findings" / "n-plus-one.md").read_text()
    html = (root / "report.html").read_text()
    blocks = dict(re.findall(r'<article class="finding[^"]*" id="(finding-\d)">(.*?)</article>', html, re.S))
    scan, n1, info = blocks["finding-1"], blocks["finding-2"], blocks["finding-3"]
    assert 'Measured together with 1 other fix (<a href="#verify-1">2 fixes together' in scan
    assert '<span class="yes">is gone</span> from that re-capture' in scan
    assert '<span class="nope">is still reported</span> by that re-capture' in n1
    assert "Measured together" not in info and "Not verified" not in info


# -- B7: a req/s interval below zero is shown as computed, and flagged -----------------------

def test_an_interval_below_zero_is_flagged_not_clipped(run):
    s = json.loads((run / "bench.json").read_text())["summary"]
    lo, hi = s["rps_ci95"]
    assert lo < 0 < hi
    flag = f"95% CI {lo:,.1f} .. {hi:,.1f} req/s (below zero: 2 runs are too few for a usable interval)"
    bench = json.loads((run / "bench.json").read_text())
    assert flag in format_bench(bench)
    assert flag in writeups(load_results(run))["SUMMARY.md"]
    html = report_html(run)
    assert html.count(flag) >= 2                   # the card and the methodology
    assert "drawn as an open arrow at 0" in html and "mean, 95% CI (too wide)" in html
    # the chart: no cap at an end beyond the axis, an arrow instead
    open_bar = bar_chart([Bar("m", 8.5, lo, hi)], "t")
    closed = bar_chart([Bar("m", 8.5, 2.0, hi)], "t")
    assert open_bar.count("<line x1") == closed.count("<line x1") - 1 and 'class="chart-err-open"' in open_bar
    assert "chart-err-open" not in closed


# -- B8: the unknown-leaf share and the subsystem samples say their bases ---------------------

def test_unknown_leaf_share_names_its_base(run):
    html = text_of(report_html(run))
    assert "952 perf samples inside timed requests" in html
    # the by-URL table gives each row's base: its percentages rest on that many samples
    assert re.search(r"<td class=\"name\"><code>/</code></td><td class=\"n\">952</td>", report_html(run))
    assert ("Of all 1,133 perf samples of the capture (timed or not, inside requests or not), 15 (1.3%) have a "
            "leaf frame with no function identity") in html
    a = json.loads((run / "analysis.json").read_text())
    text = format_analysis({**a, "bundle": "b", "target": "t"})
    assert "(952 perf samples inside the timed requests, xhprof-instrumented ones left out)" in text
    assert "leaf frame with no function identity: 15 of all 1133 perf samples of the capture (1.3%;" in text


# -- C1: flame graph titles name the target --------------------------------------------------

def test_flame_graph_titles_name_the_target(run, monkeypatch):
    from lockdown.bundle.store import open_bundle
    from lockdown.reports import run_documents
    titles = []
    monkeypatch.setattr(run_documents, "capture_flamegraph",
                        lambda bundle, kind, title, **kw: titles.append(title) or "<svg/>")
    run_documents.write_flamegraphs(open_bundle(run / "bundle"), run)
    assert titles == ["PHP stacks: wordpress", "PHP stacks off the CPU (us): wordpress", "Native stacks: wordpress"]


# -- C2, C6, C7: one format per kind of number; units; grammar --------------------------------

def test_each_kind_of_number_reads_the_same_everywhere(run):
    assert numbers.value(1613.0) == numbers.value(1613) == "1,613" and numbers.value(6.4412) == "6.44"
    files = writeups(load_results(run))
    html = report_html(run)
    from lockdown.reports.run_results import findings_of
    findings = findings_of(json.loads((run / "findings.json").read_text()), run)
    terminal = format_findings(findings)
    for where in (files["fs-scan.md"], html, terminal):
        assert "1613" not in where.replace(str(run), "") and where.count("1,613") >= 2
    # the rps deviation: two decimals everywhere; latency with thousands separated
    sd = json.loads((run / "bench.json").read_text())["summary"]["rps_stddev"]
    assert f"standard deviation {sd:.2f}" in files["SUMMARY.md"] and f"standard deviation {sd:.2f}" in html
    assert "| 1,220.9 |" in files["SUMMARY.md"] and ">1,220.9<" in html
    # intervals: one style, `lo .. hi`, with the unit on each end of a percentage
    assert "[+" not in html and "]%" not in html


def test_units_and_grammar(run):
    html = report_html(run)
    assert "host speed, iterations/&micro;s" in html and "per microsecond of their own CPU time" in html
    svg = render_flamegraph({"a;b": 1, "a;c": 3})
    assert "b (1 sample, 25.00%)" in svg and "c (3 samples, 75.00%)" in svg and "(1 samples" not in svg


def test_not_canonical_says_which_way_with_both_values(run):
    """A `lockdown run` benchmarks 3 runs by default, so it is not canonical though nothing was
    changed: the report, SUMMARY.md and the terminal table name each value and the canonical one."""
    assert "canonical</th><td>no: runs 2 (canonical 5), duration 5 (canonical 10)" in report_html(run)
    summary = writeups(load_results(run))["SUMMARY.md"]
    assert "(not canonical: runs 2 (canonical 5), duration 5 (canonical 10))" in summary
    bench = json.loads((run / "bench.json").read_text())
    assert "canonical no: runs 2 (canonical 5), duration 5 (canonical 10)" in format_bench(bench)
    assert "canonical yes" in format_bench({**bench, "canonical": True, "non_default_options": []})


def test_coarse_latencies_say_what_zero_means(run):
    """siege times each response to 10 ms and ab its percentiles to 1 ms: a fast page reads as
    0.0 there. The table and the report say so; wrk's microseconds need no note."""
    bench = json.loads((run / "bench.json").read_text())
    assert "latencies:" not in format_bench(bench) and "Latencies:" not in report_html(run)
    for r in bench["runs"]:
        r.update(tool="siege", latency_resolution_ms=10.0)
    (run / "bench.json").write_text(json.dumps(bench))
    note = "siege reports latency to the nearest 10 ms: 0.0 means under 5 ms"
    assert f"latencies: {note}" in format_bench(bench) and f"Latencies: {note}." in report_html(run)
    # runs from before the field was recorded say nothing rather than guess
    assert numbers.latency_resolution_note([{"tool": "siege"}]) is None
    assert numbers.latency_resolution_note([{"tool": "ab", "latency_resolution_ms": 1.0},
                                    {"tool": "wrk", "latency_resolution_ms": 0.001}]) \
        == "ab reports latency to the nearest 1 ms: 0.0 means under 0.5 ms"


def test_each_run_shows_its_host_speed_probe_by_probe(run):
    """bench.json's `host_speed.series` as a line under each run's mean speed, every run on one
    scale from 0 to the fastest probe, so a stretch at a lower speed shows where it fell; runs
    recorded before the series was kept get none."""
    bench = json.loads((run / "bench.json").read_text())
    assert "<svg class=\"chart chart-spark\"" not in report_html(run)
    first, second = bench["runs"]
    first["host_speed"]["series"] = [86.0, 85.5, 48.0, 47.5, 86.2]
    (run / "bench.json").write_text(json.dumps(bench))
    html = report_html(run)
    assert html.count('<svg class="chart chart-spark"') == 1
    line = re.search(r'<polyline class="chart-spark-line" fill="none" points="([^"]+)"', html).group(1)
    points = [tuple(map(float, p.split(","))) for p in line.split()]
    assert [x for x, _ in points] == [0, 30, 60, 90, 120]
    # SVG y grows downwards: the slow probes are lower on the line, the fastest at the top
    ys = [y for _, y in points]
    assert ys[4] == min(ys) == 1 and ys[3] == max(ys) and ys[2] > ys[1] > ys[4]
    assert "min 47.5, max 86.2 iterations/\u00b5s (axis 0 to 86.2)" in unescape(html)
    second["host_speed"]["series"] = [172.4, 172.4]        # twice as fast: the scale is shared
    (run / "bench.json").write_text(json.dumps(bench))
    html = report_html(run)
    assert html.count('<svg class="chart chart-spark"') == 2 and "(axis 0 to 172.4)" in unescape(html)
    first_line = re.findall(r'<polyline class="chart-spark-line" fill="none" points="([^"]+)"', html)[0]
    assert float(first_line.split()[4].split(",")[1]) == pytest.approx(22 - 1 - 86.2 / 172.4 * 20, abs=0.05)


def test_a_negative_elasticity_is_not_offered_as_the_host_taken_out(run):
    """A fitted elasticity at or below zero (a faster host served no more): the report says the
    host's speed explains none of the spread, not "with the capacity taken out, the CV is"."""
    bench = json.loads((run / "bench.json").read_text())
    bench["summary"].update(host_speed_cv=0.027, rps_cv_speed_adjusted=0.0518, speed_elasticity=-0.67)
    (run / "bench.json").write_text(json.dumps(bench))
    text = text_of(report_html(run))
    assert ("it explains none of the spread here (fitted elasticity -0.67: a faster host served no more "
            "requests), so the coefficient of variation stands as measured.") in text
    assert "with the capacity they left taken out" not in text
    bench["summary"]["speed_elasticity"] = 1.2
    (run / "bench.json").write_text(json.dumps(bench))
    assert "with the capacity they left taken out, the coefficient of variation is 5.18% (elasticity 1.20)" \
        in text_of(report_html(run))


def test_no_sentence_runs_into_the_next(run):
    """Sentences joined across template lines keep their space ("req/s.The host's speed" was
    printed when a block tag ended the line)."""
    text = re.sub(r"<[^>]+>", " \0 ", re.sub(r"<(style|script|svg)\b.*?</\1>", "", report_html(run), flags=re.S))
    joined = re.findall(r"\w{2}[.;:][A-Z][a-z]+", unescape(text))
    assert joined == [], joined


def test_the_budget_says_what_db_wait_leaves_out(run):
    """db wait is the server's Query_time; the statements' round trips (minicms: 185 x 128 us)
    sit in cpu and other wait, and the page says how much."""
    html = text_of(report_html(run))
    assert ("128 &micro;s per statement beyond its server time, measured on 12 xhprof-instrumented requests "
            "(2,260 client calls; instrumented, so an upper bound), so about 23.7 ms per timed request for "
            "its 184.9 statements, 13.5% of the mean wall time, counted in cpu and other wait above") in html
    text = format_analysis({**json.loads((run / "analysis.json").read_text()), "bundle": "b", "target": "t"})
    assert ("db is the server's time only; the statements' round trips add about 23.7 ms per request "
            "(184.9 statements x 128 us, xhprof), inside cpu and other") in text


# -- Excimer's base: a late sample stands for every timer period it covers -------------------
def test_php_function_shares_name_periods_and_samples(tmp_path):
    from lockdown.analyzers.analysis import analyze
    from lockdown.bundle.model import ExcimerProfile
    from lockdown.bundle.store import open_bundle
    profiles = [ExcimerProfile("r000001", 100, ["index.php;main", "index.php;main;usleep"],
                               [[1, 1, 0], [2, 3, 1]]),
                ExcimerProfile("r000002", 100, ["index.php;main"], [[1, 1, 0]])]
    run = make_run(tmp_path / "run", excimer=profiles)
    php = analyze(open_bundle(run / "bundle"))["php_functions"]
    assert (php["samples"], php["sample_count"]) == (5, 3)
    assert php["top"][0] == {"name": "usleep", "self_samples": 3, "inclusive_samples": 3}
    a = json.loads((run / "analysis.json").read_text())
    text = format_analysis({**a, "bundle": "b", "target": "t", "php_functions": php})
    assert "hot PHP functions (Excimer, 5 timer periods in 3 samples): self% incl% name" in text
    assert "   60.0  60.0  usleep" in text
    (run / "analysis.json").write_text(json.dumps({**a, "php_functions": php}))
    html = text_of(report_html(run))
    assert "Excimer's stacks of the timed requests, 5 timer periods in 3 samples;" in html
    assert numbers.excimer_weight(7, 7) == numbers.excimer_weight(7) == "7 samples"


# -- builtins PHP compiles to opcodes are calls only under tideways_xhprof ---------------------
def test_builtins_compiled_to_opcodes_are_marked(run):
    a = json.loads((run / "analysis.json").read_text())
    row = {"calls": 9, "exclusive_us": 900, "inclusive_us": 900, "allocations": None, "calls_per_request": 4.5}
    a["builtins"] = {"profiles": 2, "top": [{**row, "name": "is_array", "compiled_to_opcode": True},
                                            {**row, "name": "str_replace", "compiled_to_opcode": False,
                                             "callers": [{"name": "render<b>", "calls": 6, "inclusive_us": 600},
                                                         {"name": "main()", "calls": 3, "inclusive_us": 300}]}]}
    text = format_analysis({**a, "bundle": "b", "target": "t"})
    assert "  is_array *\n" in text and "  str_replace  <- render<b> 67%, main() 33%\n" in text
    assert "* a VM opcode, not a call, in the timed requests" in text
    (run / "analysis.json").write_text(json.dumps(a))
    html = report_html(run)
    assert "<code>is_array</code> *</td>" in html and "<code>str_replace</code></td>" in html
    assert "<td class=\"name\"><code>render&lt;b&gt;</code> 67%, <code>main()</code> 33%</td>" in html
    assert "* A VM opcode, not a call, in the timed requests" in text_of(html)
    a["builtins"]["top"] = a["builtins"]["top"][1:]          # none marked: no note
    assert "VM opcode" not in format_analysis({**a, "bundle": "b", "target": "t"})


def test_each_formatter_on_missing_odd_and_edge_values():
    assert (numbers.rps(None), numbers.rps(None, none="n/a"), numbers.rps(1220.94)) == ("-", "n/a", "1,220.9")
    for bad in ("12", True, [1]):                   # a damaged file: one TypeError, never text
        with pytest.raises(TypeError, match="where a number was expected"):
            numbers.rps(bad)
    assert (numbers.count(1613), numbers.count(1613.0), numbers.count(2.25), numbers.count(None)) == \
        ("1,613", "1,613", "2.2", "-")
    assert numbers.count(float("inf")) == "inf"
    assert (numbers.interval(None, 5), numbers.interval(1, None), numbers.interval(1, 2)) == ("-", "-", "1.0 .. 2.0")
    assert [numbers.value(v) for v in (None, True, 1613.0, 6.4, 6.444, float("inf"), [1, "é"], {"a": 1}, "x")] == \
        ["", "True", "1,613", "6.4", "6.44", "inf", '[1, "é"]', '{"a": 1}', "x"]
    too_few = "below zero: 2 runs are too few for a usable interval"
    assert numbers.rps_interval_problem(-1.0, 2) == too_few
    assert numbers.rps_interval_problem(-1.0, True) == numbers.rps_interval_problem(-1.0, None) == \
        "below zero: these runs are too few for a usable interval"
    assert [numbers.rps_interval_problem(lo, 2) for lo in (0, 0.5, float("nan"), "x", None)] == [None] * 5
    assert numbers.rps_ci_text(None, 5, 2) == numbers.rps_ci_text(1, None, 2) == "no 95% CI (one run)"
    assert numbers.rps_ci_text(10, 20, 3) == "95% CI 10.0 .. 20.0 req/s"
    assert numbers.rps_ci_text(-5, 20, 2) == f"95% CI -5.0 .. 20.0 req/s ({too_few})"
    assert numbers.change_interval({"ci95_pct": [1.5, 3.0]}) == "+1.5% .. +3.0%"
    assert [numbers.change_interval(c) for c in (None, {"ci95_pct": [1]}, {"ci95_pct": "ab"}, {})] == ["-"] * 4
    assert numbers.paired_clause(None) is None and numbers.paired_clause("x") is None
    adj = {"change_pct": 3.0, "elasticity": 1.1}

    def clause(**paired):
        return numbers.paired_clause({"change": adj, "change_paired": {"change_pct": 5.0, **paired}})
    assert clause(ci95_pct=[1.0, 9.0]) == "paired ratios alone: +5.0%, 95% CI +1.0% .. +9.0%"
    assert clause(ci95_pct=[None, None]) == clause(ci95_pct=[1.0, None]) == clause(ci95_pct=[None, 9.0]) == \
        clause() == "paired ratios alone: +5.0%"
    assert clause(ci95_pct=[1.0, 2.0, 3.0]) is None and clause(change_pct=None) is None
    assert numbers.paired_clause({"change": {"change_pct": 3.0}, "change_paired": {"change_pct": 5.0}}) is None


def test_report_budget_numbers_are_the_analysis_numbers(run):
    html = report_html(run)
    text = text_of(html)
    # the round trip: 23,671.7 us per request of the 175 ms mean wall time
    assert ("so about 23.7 ms per timed request for its 184.9 statements, 13.5% of the mean wall time"
            in text)
    # the stacked chart's segments, in ms of the URL's mean budget
    assert "/: cpu 100.0 ms /: db wait 20.0 ms /: other wait 55.0 ms 175.0 ms" in text
    assert text.count("peak memory2.0 MiB") == 2               # 2 MiB in each request's drill-down
    assert "waiting for a CPU" not in text and "Scheduler" not in text   # not recorded: not shown


def test_report_splits_other_wait_where_the_run_queue_was_recorded(run):
    """A capture with the scheduler's view: other wait's run-queue part is a column, a chart
    segment and a drill-down clause, and the note says the timings include the queueing."""
    path = run / "analysis.json"
    a = json.loads(path.read_text())
    for b in [*a["budget_by_url"].values(), a["budget_overall"], *a["by_request"]]:
        b["cpu_queue_us"] = 35_000
    a["scheduling"] = {"requests": 2, "voluntary_switches": 31.5, "involuntary_switches": 40.25,
                       "cpu_queue_us": 35_000, "cpu_queue_pct": 20.0, "run_delay_us": 39_000, "concurrency": 6,
                       "workers": 4, "cpus": 2}
    path.write_text(json.dumps(a))
    text = text_of(report_html(run))
    assert ("/: cpu 100.0 ms /: db wait 20.0 ms /: waiting for a CPU 35.0 ms /: other wait 20.0 ms 175.0 ms"
            in text)
    assert "of which waiting for a CPU ms" in text
    assert text.count("other wait 55.0 (of which waiting for a CPU 35.0)") == 2
    assert ("35.0 ms a request waiting for a CPU beyond db wait, 20.0% of the wall time (39.0 ms in the run queue "
            "in all); 31.5 voluntary context switches a "
            "request (the worker blocked) and 40.2 involuntary (preempted), captured at concurrency 6 with 4 "
            "workers on 2 CPUs. The timings include that queueing") in text
    a["scheduling"]["cpu_queue_pct"] = 2.0
    path.write_text(json.dumps(a))
    assert "The timings include that queueing" not in text_of(report_html(run))


def test_only_lockdown_flame_graphs_are_inlined_into_the_report(tmp_path):
    """verify.json names its diff graphs by path: a file there that is not one of ours is never
    put into report.html as markup."""
    from lockdown.reports.html_report import _read_svg
    (tmp_path / "diff.svg").write_text(render_flamegraph({"a;b": 1}), encoding="utf-8")
    (tmp_path / "evil.svg").write_text('<svg><script>alert(1)</script></svg>', encoding="utf-8")
    svg, where = _read_svg("elsewhere/diff.svg", tmp_path)          # found by its name in the verify dir
    assert 'class="lockdown-flamegraph' in svg and where == str(tmp_path / "diff.svg")
    assert _read_svg(str(tmp_path / "diff.svg"), tmp_path / "x")[0] is not None      # an absolute path
    svg, why = _read_svg("evil.svg", tmp_path)
    assert svg is None and why.endswith("evil.svg: not a lockdown flame graph; left out")
    assert _read_svg("gone.svg", tmp_path) == (None, "gone.svg: missing")
    assert _read_svg(None, tmp_path)[0] is None and _read_svg("", tmp_path)[0] is None


def test_remediation_steps_are_commands_or_the_operators_words(run):
    """A diff's steps are argv lists run in the app tree; an ini fix's step is a sentence for the
    operator (restart php-fpm). Each output printed the sentence's characters joined by spaces
    ("s y s t e m c t l") and called it a command for the app tree."""
    data = json.loads((run / "findings.json").read_text())
    data["findings"][1]["remediations"] = [
        {**SQL_FIX, "kind": "ini", "content": "opcache.max_accelerated_files=20000",
         "steps": ["systemctl restart php8.2-fpm"]},
        {**SQL_FIX, "kind": "diff", "content": "--- a/x\n+++ b/x\n", "file": "x",
         "steps": [["php", "maintenance/rebuild.php", "--lang=en us"]]}]
    (run / "findings.json").write_text(json.dumps(data))
    from lockdown.reports.run_results import findings_of
    terminal = format_findings(findings_of(data, run))
    issue = writeups(load_results(run))["n-plus-one.md"]
    html = unescape(text_of(report_html(run)))        # the quotes are &#39; in the page
    assert "then: systemctl restart php8.2-fpm" in terminal
    assert "then, in the app tree: php maintenance/rebuild.php '--lang=en us'" in terminal
    assert "Then: `systemctl restart php8.2-fpm`" in issue
    assert "Then run in the app tree: `php maintenance/rebuild.php '--lang=en us'`" in issue
    assert "Then: systemctl restart php8.2-fpm" in html
    assert "Then run in the application tree: php maintenance/rebuild.php '--lang=en us'" in html
    for out in (terminal, issue, html):
        assert "s y s t e m" not in out and "in the app tree: systemctl" not in out


def test_report_tail_table_is_the_analysis_tail_escaped(run):
    """analysis.json tail as a table: the long tails' ratio in bold, the parts that grew,
    what the slow requests did besides, and links to the drill-down of those on the page;
    the URL and the statement from the target are text, never markup."""
    path = run / "analysis.json"
    a = json.loads(path.read_text())
    group = {"requests": 10, "wall_us": 10_000, "parts_us": {}, "statements": 3.0, "gc_runs": 0.0,
             "compiles": None, "peak_memory": 1_000_000}
    a["tail"] = [{"url": "/<b>x</b>", "requests": 20, "p50_wall_us": 10_000, "p90_wall_us": 55_000,
                  "middle": group, "tail": {**group, "requests": 2, "wall_us": 59_500, "gc_runs": 1.0},
                  "ratio": 5.95, "excess_us": {"db wait": 39_500, "cpu": 4_000, "other wait": 20},
                  "slowest": ["r000001", "r000099"],
                  "statement": {"fingerprint": "select '<img src=x>' from t", "tail_us": 41_500, "middle_us": 2_000,
                                "tail_count": 1.0, "middle_count": 1.0}}]
    path.write_text(json.dumps(a))
    html = report_html(run)
    text = text_of(html)
    assert ("/&lt;b&gt;x&lt;/b&gt;2010.055.010.059.5 (2)5.95xdb wait +39.5, cpu +4.0cycle-collector runs per "
            "request: 1.0 against 0.0; statement time grew most in: select &#39;&lt;img src=x&gt;&#39; from t "
            "(41.5 ms in 1.0 executions against 2.0 ms in 1.0)r000001 r000099") in text
    assert "<b>5.95x</b>" in html and "<img src=x>" not in html and "<b>x</b>" not in html
    assert '<a href="#req-1">r000001</a> r000099' in html        # r000099 is not on the page


def test_report_database_server_rows_are_the_analysis_checks(run):
    path = run / "analysis.json"
    a = json.loads(path.read_text())
    a["database_status"] = {"requests": 48, "private": False, "checks": [
        {"name": "buffer pool", "value": "99.00% of 4,000 page reads a request from memory, 40.00 from disk",
         "flagged": True, "setting": "innodb_buffer_pool_size: the pages the requests use do not stay in memory"},
        {"name": "sort merge passes", "value": "0.00 a request", "flagged": False, "setting": "sort_buffer_size"}]}
    path.write_text(json.dumps(a))
    text = text_of(report_html(run))
    assert "per request (48 requests), on a shared server: other clients count too" in text
    assert ("buffer pool99.00% of 4,000 page reads a request from memory, 40.00 from disklook at "
            "innodb_buffer_pool_size: the pages the requests use do not stay in memory") in text
    assert "sort merge passes0.00 a request" in text and "sort_buffer_size" not in text


def test_report_names_the_runs_set_aside_and_numbers_runs_as_measured(run):
    path = run / "bench.json"
    b = json.loads(path.read_text())
    b["runs"][1]["run"] = 3
    b["set_aside"] = [{**b["runs"][0], "run": 2, "rps": 11.5, "set_aside": "host capacity -14.2% off the runs' median"}]
    b["summary"].update(runs_measured=3, runs_set_aside=1, rps_cv_all_runs=0.1234, host_tolerance=0.1,
                        host_unsteady=False)
    path.write_text(json.dumps(b))
    text = text_of(report_html(run))
    assert ("Runs the host disturbed were measured again (docs/bench.md, \"Runs the host disturbed\"): set aside: "
            "run 2 (11.5 req/s): host capacity -14.2% off the runs&#39; median; measured 3 runs; CV over all of them "
            "12.34% (--keep-disturbed keeps every run).") in text.replace("&#34;", '"')
    assert "run 3" in text
    # the write-up's baseline table numbers the runs as measured and says what was set aside
    summary = writeups(load_results(run))["SUMMARY.md"]
    rows = [line.split(" | ")[0] for line in summary.splitlines() if line.startswith("| ") and " req/s" not in line
            and line.split(" | ")[0][2:].isdigit()]
    assert rows == ["| 1", "| 3"], rows
    assert ("Runs are numbered as measured. Set aside: run 2 (11.5 req/s): host capacity -14.2% off the runs' "
            "median. Measured 3 runs; CV over all of them 12.34% (--keep-disturbed keeps every run).") in summary


def test_report_says_three_runs_are_too_few_to_take_the_host_out(run):
    path = run / "bench.json"
    b = json.loads(path.read_text())
    b["runs"] = [{**b["runs"][0], "rps": x, "host_speed": {"speed": sp},
                  "host_cpu": {"busy_pct": 99.0, "steal_pct": 0.0}}
                 for x, sp in ((35.5, 73.2), (37.4, 72.5), (37.2, 76.7))]
    b["summary"] = summary_of(b["runs"])
    path.write_text(json.dumps(b))
    text = text_of(report_html(run))
    assert ("The host's speed (probe threads' fixed loop, one per CPU) varied 3.0% (CV) over the runs and steal "
            "took up to 0.0% of the CPU; 3 runs are too few to take it out of the coefficient of variation "
            "(4 needed).") in text.replace("&#39;", "'")


def test_report_lists_the_hot_native_functions_escaped_with_their_shares(run):
    a = json.loads((run / "analysis.json").read_text())
    a["native_functions"] = {"samples": 200, "top": [
        {"name": "zend_hash_find", "dso": "php-fpm8.2", "subsystem": "hashtable",
         "self_samples": 41, "inclusive_samples": 48},
        {"name": "f<script>", "dso": "x&y.so", "subsystem": "other", "self_samples": 1, "inclusive_samples": 1}]}
    (run / "analysis.json").write_text(json.dumps(a))
    html = report_html(run)
    assert ('<td class="n">20.5</td><td class="n">24.0</td><td class="n">41</td><td class="n">48</td>'
            '<td>hashtable</td><td class="name"><code>zend_hash_find</code></td>') in html
    assert "<code>f&lt;script&gt;</code></td><td class=\"mono\">x&amp;y.so</td>" in html
    del a["native_functions"]
    (run / "analysis.json").write_text(json.dumps(a))
    assert "Hot native functions" not in report_html(run)


def test_remediations_are_named_by_kind_and_file_alike_from_objects_and_json():
    from lockdown.analyzers.findings import Remediation, remediation_names
    rems = [Remediation("diff", "--- a\n", file="config.php"), Remediation("sql", "UPDATE t SET x = 1")]
    assert remediation_names(rems) == "diff config.php, sql"
    assert remediation_names([{"kind": r.kind, "file": r.file} for r in rems]) == "diff config.php, sql"
    assert remediation_names([]) == ""


def test_a_planned_verification_is_reproduced_with_the_pairs_asked_for(run):
    """verify planned 9 pairs from a pilot of 5: the command to reproduce asks for the 5 (and
    the --max-runs given), and the report and write-ups say the pilot was too noisy."""
    data = copy.deepcopy(VERIFY_ALL)
    data["bench"]["runs_per_arm"] = 9
    data["bench"]["plan"] = {"pilot_runs": 5, "max_runs": 12, "runs": 9, "runs_needed": 9, "measured_runs": 9,
                             "planned_change_pct": 128.6, "named": "the predicted", "pilot_se_log": 0.3}
    (run / "verify" / "all" / "verify.json").write_text(json.dumps(data))
    files = writeups(load_results(run))
    q = shlex.quote(str(run))
    assert f"lockdown verify {q} --all --runs 5 --duration 3 --max-runs 12 --requests 30" in files["SUMMARY.md"]
    said = ("the first 5 pairs were a pilot, too noisy to resolve the predicted +128.6% with 80% power: "
            "that needed 9 pairs")
    assert said in text_of(report_html(run))
    data["bench"]["plan"]["max_runs"] = 15                 # verify's default: not repeated
    (run / "verify" / "all" / "verify.json").write_text(json.dumps(data))
    assert f"lockdown verify {q} --all --runs 5 --duration 3 --requests 30" in writeups(load_results(run))["SUMMARY.md"]
