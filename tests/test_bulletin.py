"""bulletin (its planted problems on) and bulletin-clean (its control) on the real stack.

bulletin is a procedural PHP app (mysqli functions, an include library, no classes; see
fixtures/apps/bulletin/README.md). Every response says what the request did
(X-Bulletin-Truth, and the same JSON in a trailing HTML comment).

(a) every page answers 200 and its ground truth follows the switches;
(b) one `lockdown run bulletin`: the session probe before every query, with the app's counts and
    its sender; the missing module's warning with the registry entry that names it, and the log
    row written for it, which write-on-read names as a log write;
(c) one `lockdown run bulletin-clean`: no defect finding.
"""
import json
import re
from collections import defaultdict

import pytest

from conftest import REPO, lockdown_runner
from ground_truth import fetch_pages, truths
from lockdown.bundle.store import open_bundle

APPS = REPO / "fixtures" / "apps"
PAGES = {"front": "/", "post3": "/?q=post/3", "post11": "/?q=post/11", "archive": "/?q=archive"}
SWITCHES = {"readonly_check": (True, False), "check_module_files": (False, True)}
TRAILER = re.compile(r"<!-- bulletin-truth (.*?) -->\n\Z")
RUN_ARGS = ("--runs", "1", "--duration", "2", "--warmup-duration", "1", "--requests", "60")
PROBE = "SELECT @@GLOBAL.read_only"


@pytest.fixture(scope="module")
def pages(home, tmp_path_factory):
    """{target: {page: {status, header, body}}}, each page fetched once after a short warmup."""
    return fetch_pages(home, tmp_path_factory.mktemp("bulletin-pages"), ("bulletin", "bulletin-clean"), PAGES,
                       "X-Bulletin-Truth")


@pytest.fixture(scope="module")
def truth(pages):
    return truths(pages, PAGES)


def run_target(home, tmp_path_factory, target):
    out = tmp_path_factory.mktemp(target) / "out"
    r = lockdown_runner(home, 900)("run", target, "-o", out, *RUN_ARGS)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return out, json.loads((out / "findings.json").read_text())


@pytest.fixture(scope="module")
def bulletin_run(home, tmp_path_factory):
    return run_target(home, tmp_path_factory, "bulletin")


@pytest.fixture(scope="module")
def clean_run(home, tmp_path_factory):
    return run_target(home, tmp_path_factory, "bulletin-clean")


def by_id(data) -> dict:
    out = defaultdict(list)
    for f in data["findings"]:
        out[f["id"]].append(f)
    return out


def test_clean_shares_bulletins_files_except_its_settings():
    dirty, clean = APPS / "bulletin", APPS / "bulletin-clean"
    own = {"target.toml", "app/settings.php"}
    shared = sorted(str(p.relative_to(dirty)) for p in dirty.rglob("*") if p.is_file())
    for rel in shared:
        if rel not in own:
            link = clean / rel
            assert link.is_symlink() and link.resolve() == (dirty / rel).resolve(), rel
    assert {str(p.relative_to(clean)) for p in clean.rglob("*") if p.is_file()} == set(shared)
    a = (dirty / "app" / "settings.php").read_text().splitlines()
    b = (clean / "app" / "settings.php").read_text().splitlines()
    php = {True: "true", False: "false"}
    assert [(x.strip(), y.strip()) for x, y in zip(a, b) if x != y] == \
        [(f"'{k}' => {php[d]},", f"'{k}' => {php[c]},") for k, (d, c) in SWITCHES.items()]


# -- (a) the app and its ground truth ------------------------------------------------------------


def test_pages_answer_and_report_what_they_did(pages, truth):
    for target, dirty in (("bulletin", True), ("bulletin-clean", False)):
        for name, page in pages[target].items():
            t = truth[target][name]
            assert page["status"] == 200 and "bulletin ok" in page["body"], (target, name)
            assert json.loads(TRAILER.search(page["body"])[1]) == t
            assert t["config"] == {k: v[0 if dirty else 1] for k, v in SWITCHES.items()}
            q = t["queries"]
            assert q["total"] == sum(q["by_kind"].values())
            assert t["motd"] is False      # its read failed, silenced with @: no warning logged
            if dirty:   # one probe before each query, the log row for the missing module included
                assert t["probes"] == q["total"] and q["by_kind"]["log"] == t["log_writes"] == 1
                assert t["modules"] == {"loaded": ["news", "polls"], "missing": ["legacy_poll"], "skipped": []}
                assert t["failed_includes"] == 1
            else:
                assert t["probes"] == t["log_writes"] == t["failed_includes"] == 0 and "log" not in q["by_kind"]
                assert t["modules"] == {"loaded": ["news", "polls"], "missing": [], "skipped": ["legacy_poll"]}
    assert {n: t["probes"] for n, t in truth["bulletin"].items()} == \
        {"front": 7, "post3": 7, "post11": 7, "archive": 5}


def test_switches_change_no_page(pages):
    for name in PAGES:
        a, b = (TRAILER.sub("", pages[t][name]["body"]) for t in ("bulletin", "bulletin-clean"))
        assert a == b, name


# -- (b) what `lockdown run bulletin` finds ---------------------------------------------------------


def test_the_read_only_probe_is_found_with_the_apps_counts_and_its_sender(bulletin_run, truth):
    _, data = bulletin_run
    [f] = by_id(data)["session-probe"]
    d = f["details"]
    assert d["statement"] == PROBE and d["fingerprint"] == "select @@global.read_only"
    assert d["sender"] == "db_server_read_only" and d["sender_source"] == "xhprof"
    t = {url: truth["bulletin"][name] for name, url in PAGES.items()}
    assert sorted(d["per_url"]) == sorted(PAGES.values()) == sorted(f["urls"])
    for url, row in d["per_url"].items():
        n = t[url]["probes"]
        assert row["executions_per_request"] == {"min": n, "median": n, "max": n}, url
        assert row["with_probes"] == row["requests"]
    assert d["saved_per_request"]["max"] == max(x["probes"] for x in t.values()) - 1
    assert f["severity"] != "info" and f["share_pct"] >= 1.0
    # the probe is no repeated-query (one finding per cause)
    assert not [g for g in by_id(data)["repeated-query"] if "@@" in g["details"]["statement"]]


def test_the_missing_modules_warning_is_found_with_the_registry_and_its_log_write(bulletin_run, truth):
    out, data = bulletin_run
    t = truth["bulletin"]
    [f] = by_id(data)["php-warning"]
    d = f["details"]
    missing = {m for x in t.values() for m in x["modules"]["missing"]}
    assert missing == {"legacy_poll"}
    assert d["missing"] == {"file": "modules/legacy_poll/legacy_poll.module.php", "module": "legacy_poll"}
    assert d["file"] == "includes/module.inc.php" and d["function"] == "module_load_all"
    # PHP raises two warnings per failed include: "Failed to open stream", then "Failed opening"
    per = {2 * x["failed_includes"] for x in t.values()}
    assert per == {2} and d["per_request"] == {"min": 2, "median": 2, "max": 2}
    assert len(d["messages"]) == 2 and sorted(f["urls"]) == sorted(PAGES.values())
    assert d["registry"]["table"] == "modules" and d["registry"]["column"] == "filename"
    assert d["registry"]["repair"] == ("DELETE FROM modules "
                                       "WHERE filename = 'modules/legacy_poll/legacy_poll.module.php'")
    # the repair, proposed as SQL and checked on a copy of the database
    [rem] = f["remediations"]
    assert (rem["kind"], rem["origin"]) == ("sql", "generated") and d["registry"]["repair"] in rem["content"]
    assert rem["checked"].startswith("runs without error on a copy of the prepared database")
    # its cost is the log row written for it, which write-on-read names as a log write
    [w] = by_id(data)["write-on-read"]
    assert {x["log_writes"] for x in t.values()} == {1}
    assert w["details"]["cause"] == {"kind": "log write", "function": "bb_log"}
    assert w["details"]["fingerprint"].startswith("insert into event_log ")
    sent = next(e["value"] for e in w["evidence"] if e["what"] == "GET requests that sent it")
    assert sent.split(" of ")[0] == sent.split(" of ")[1]
    assert d["log_write"] == {"fingerprint": w["details"]["fingerprint"], "sender": "bb_log"}
    assert f["share_pct"] == w["share_pct"] > 0
    # the capture holds what the app did: each request's warnings, counted by the handler (the
    # motd read that fails on every request is silenced with @, and not counted)
    bundle = open_bundle(out / "bundle")
    for r in bundle.requests():
        assert r.status == 200
        assert sum(e["count"] for e in r.php_errors or []) == 2, r.id


# -- (c) the control ----------------------------------------------------------------------------


def test_bulletin_clean_reports_no_defect(clean_run):
    out, data = clean_run
    assert [f["id"] for f in data["findings"] if f["severity"] != "info"] == []
    assert all(r.php_errors is None for r in open_bundle(out / "bundle").requests())
