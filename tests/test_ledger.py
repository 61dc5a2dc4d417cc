"""ledger (both planted problems on) and ledger-clean (its control) on the real stack (issue 35).

ledger (fixtures/apps/ledger) is written in idioms unlike catalog's and minicms's: PEAR-style
class names found along a 10-directory include path by a procedural autoloader, procedural
helpers, no database. Its money formatter parses its currency table on each of its 40 calls a
page with 32 distinct argument pairs: under repeated-call's call count (50) and under the
argument probe's repeats (25%), so no known detector reports it, yet it is most of the request.

(a) every page answers 200 and its ground truth (X-Ledger-Truth) follows the switches;
(b) one `lockdown run ledger` with per-call-setup's loop floor just above the formatter's loop
    (UNDER): a hotspot finding reports the formatter, with the app's own counts, the probe's
    verdict, and no share of it counted as explained; the time accounting tiles the sampled time;
(c) one `lockdown run ledger-clean`: no defect finding;
(d) one `lockdown run ledger` with the default thresholds: a per-call-setup finding on the
    formatter with the app's counts (setups, rows parsed), and its fix verified.
"""
import json
import tomllib

import pytest

from conftest import REPO, lockdown_runner
from ground_truth import fetch_pages, truths

APPS = REPO / "fixtures" / "apps"
PAGES = {"home": "/", "invoice7": "/invoice?id=7", "invoice12": "/invoice?id=12", "report": "/report"}
# 2.5 ms pages sampled at Excimer's shortest period (2 ms): about one sample a page; 200 pages
# keep the hotspot's share and per-call time off its thresholds under CI's load (60 did not)
RUN_ARGS = ("--no-bench", "--requests", "200")
THRESHOLDS = tomllib.loads((REPO / "lockdown" / "analyzers" / "detectors" / "thresholds.toml").read_text())


@pytest.fixture(scope="module")
def pages(home, tmp_path_factory):
    """{target: {page: {status, header, body}}}, each page fetched once after a short warmup."""
    return fetch_pages(home, tmp_path_factory.mktemp("ledger-pages"), ("ledger", "ledger-clean"), PAGES,
                       "X-Ledger-Truth")


@pytest.fixture(scope="module")
def truth(pages):
    return truths(pages, PAGES)


# per-call-setup's loop floor one above the formatter's loop (the table's 24 rows and its header:
# 25 str_getcsv calls a call): the pattern just under a known detector's threshold
UNDER = "[per-call-setup]\nmin_loop_calls = 26\n"


def run_target(home, tmp_path_factory, target, *extra):
    out = tmp_path_factory.mktemp(target) / "out"
    r = lockdown_runner(home, 900)("run", target, "-o", out, *RUN_ARGS, *extra)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r, out, json.loads((out / "findings.json").read_text())


@pytest.fixture(scope="module")
def ledger_run(home, tmp_path_factory):
    under = tmp_path_factory.mktemp("ledger-under") / "thresholds.toml"
    under.write_text(UNDER)
    return run_target(home, tmp_path_factory, "ledger", "--thresholds", under)


@pytest.fixture(scope="module")
def setup_run(home, tmp_path_factory):
    return run_target(home, tmp_path_factory, "ledger")


@pytest.fixture(scope="module")
def clean_run(home, tmp_path_factory):
    return run_target(home, tmp_path_factory, "ledger-clean")


def test_clean_shares_ledgers_files_but_its_config():
    clean = APPS / "ledger-clean"
    for link in ("install.php", "README.md", "app/index.php", "app/include/functions.php"):
        assert (clean / link).is_symlink() and (clean / link).resolve() == (APPS / "ledger" / link).resolve(), link
    assert not (clean / "app" / "config.php").is_symlink()


def test_pages_answer_and_report_what_they_did(pages, truth):
    for target in ("ledger", "ledger-clean"):
        for name in PAGES:
            assert pages[target][name]["status"] == 200
            assert "ledger ok" in pages[target][name]["body"]
    for name in PAGES:
        on, off = truth["ledger"][name], truth["ledger-clean"][name]
        assert on["config"] == {"money_table_static": False, "class_map": False}
        assert off["config"] == {"money_table_static": True, "class_map": True}
        assert on["money"]["calls"] == off["money"]["calls"] == 40
        assert on["money"]["distinct"] == off["money"]["distinct"] == 32
        assert on["money"]["setups"] == 40 and off["money"]["setups"] == 1
        assert on["autoload"]["loaded"] == off["autoload"]["loaded"] == 65
        assert on["autoload"]["calls"] == off["autoload"]["calls"] == 69      # 4 optional classes absent
        assert on["autoload"]["include_path_dirs"] == 10
        assert on["autoload"]["misses"] == on["autoload"]["probes"] - on["autoload"]["loaded"] > 500
        assert off["autoload"]["probes"] == 0 and off["autoload"]["map_reads"] == 1

    # the pages are the same with the switches off, but for the ground-truth trailer
    def strip(body: str) -> str:
        return body.rsplit("<!-- ledger-truth", 1)[0]

    assert all(strip(pages["ledger"][n]["body"]) == strip(pages["ledger-clean"][n]["body"]) for n in PAGES)


def found_ids(data, id) -> list:
    return [f["key"] for f in data["findings"] if f["id"] == id]


def by_id(data) -> dict:
    out: dict = {}
    for f in data["findings"]:
        out.setdefault(f["id"], []).append(f)
    return out


def test_a_pattern_under_known_thresholds_is_a_hotspot_finding(ledger_run, truth):
    _, out, data = ledger_run
    calls = {t["money"]["calls"] for t in truth["ledger"].values()}
    distinct = {t["money"]["distinct"] for t in truth["ledger"].values()}
    assert calls == {40} and distinct == {32}
    # under the known detectors' thresholds: fewer calls than repeated-call wants, fewer repeats,
    # its loop (the table's rows and its header a call) under per-call-setup's floor for this run
    assert 40 < THRESHOLDS["repeated-call"]["min_calls_per_request"]
    rows = {t["money"]["rows_parsed"] // t["money"]["setups"] for t in truth["ledger"].values()}
    assert all(n + 1 < tomllib.loads(UNDER)["per-call-setup"]["min_loop_calls"] for n in rows)
    assert not found_ids(data, "per-call-setup")
    assert 100.0 * (40 - 32) / 40 < THRESHOLDS["repeated-call"]["min_repeat_pct"]
    found = by_id(data)
    assert not any(f["details"].get("function") == "ledger_money" for f in found.get("repeated-call", []))
    # repeated-call may take it as a candidate (40 calls >= min_calls_when_costly, when xhprof's
    # saving reaches costly_share_pct) that the probe dismisses; else the hotspot step probes it
    assert [d["function"] for d in data["dismissed"] if d["id"] == "repeated-call"] in ([], ["ledger_money"])
    assert (out / "hotspot-probe-run").exists() == (data["dismissed"] == [])

    hot = [f for f in found.get("hotspot", []) if f["details"]["function"] == "ledger_money"]
    assert len(hot) == 1, [(f["key"], f["details"].get("function")) for f in data["findings"]]
    f = hot[0]
    d = f["details"]
    assert f["severity"] in ("high", "medium", "low") and f["share_pct"] >= THRESHOLDS["hotspot"]["min_share_pct"]
    # the app's own counts: calls per request (xhprof), repeats and distinct pairs (argument probe)
    assert d["calls_per_request"] == 40
    probe = d["probe"]
    assert probe["function"] == "ledger_money" and probe["calls"] == 40 * probe["requests"]
    assert probe["repeats"] == (40 - 32) * probe["requests"] and probe["repeat_pct"] == 20.0
    assert all(row["distinct"] == 32 for row in probe["rows"])
    # where it goes and who calls it
    assert d["path"][-2:] == ["Ledger_View::invoice", "ledger_money"] and d["callers"] == ["Ledger_View::invoice"]
    assert d["uniform_callees"] and "str_getcsv" in d["callees"]
    # the URLs whose sampled requests show it (a page sampled little may miss it): pages of ledger
    assert f["urls"] and set(f["urls"]) <= set(PAGES.values())
    assert "once per request" in d["look_at"] and "20% repeats" in d["look_at"]
    assert f["remediations"] == [] and d["no_patch"]


def test_the_accounting_tiles_the_time_and_the_hotspot_explains_none_of_it(ledger_run):
    _, out, data = ledger_run
    acc = json.loads((out / "accounting.json").read_text())
    for part in [acc, *acc["urls"]]:
        assert part["total_us"] > 0
        assert abs(part["explained_us"] + part["unexplained_us"] - part["total_us"]) <= 0.2
        assert abs(part["explained_pct"] + part["unexplained_pct"] - 100.0) <= 0.02
    hot = [f for f in data["findings"] if f["id"] == "hotspot"]
    assert hot
    for f in hot:
        assert f["key"] in acc["informational"]
        assert f["key"] not in acc["by_finding_pct"]
        assert f["key"] not in {t["key"] for t in acc["findings"]}
        assert f["share_pct"] <= acc["unexplained_pct"] + 0.01
    # the hotspot is the accounting's top unexplained app function by self time, and the
    # accounting's row of it names the finding
    # (lockdown's own work at the end of the request, `[end of request]`, is no app function)
    assert [h["name"] for h in acc["hotspots"]["self"] if not h["name"].startswith("[")][0] == "ledger_money"
    row = next(h for h in acc["hotspots"]["inclusive"] if h["name"] == "ledger_money")
    assert [k for k in row["noted_by"] if k.startswith("hotspot")] == [hot[0]["key"]]


def test_per_call_setup_with_the_apps_counts(setup_run, truth):
    """Default thresholds: the formatter's setup is per-call-setup's, with the app's counts."""
    _, out, data = setup_run
    money = [t["money"] for t in truth["ledger"].values()]
    assert {m["setups"] for m in money} == {m["calls"] for m in money} == {40}     # a setup on every call
    rows = {m["rows_parsed"] // m["setups"] for m in money}
    assert len(rows) == 1 and all(m["rows_parsed"] % m["setups"] == 0 for m in money)
    (n,) = rows                                                                      # the table's rows
    found = [f for f in data["findings"] if f["id"] == "per-call-setup"]
    assert [f["details"]["function"] for f in found] == ["ledger_money"], by_id(data).keys()
    d = found[0]["details"]
    assert d["calls_per_request"] == 40 and d["calls_seen"] == [40]
    loops = {x["builtin"]: x["per_call"] for x in d["loops"]}
    assert loops == {"str_getcsv": n + 1, "array_combine": n}                       # header + rows; rows
    assert found[0]["share_pct"] >= THRESHOLDS["per-call-setup"]["min_share_pct"]
    assert set(found[0]["urls"]) == set(PAGES.values())
    # generated: the statement that parses the table run on the first call only, the table kept
    [r] = found[0]["remediations"]
    assert (r["origin"], r["file"], r["kind"]) == ("generated", "include/functions.php", "diff")
    assert "its results ($table)" in r["description"] and "no_patch" not in d
    assert "+    static $lockdown_setup = null;" in r["content"]
    # its time is explained: no hotspot on it, and the accounting counts it
    assert not any(f["details"].get("function") == "ledger_money" for f in by_id(data).get("hotspot", []))
    acc = json.loads((out / "accounting.json").read_text())
    assert acc["by_finding_pct"][found[0]["key"]] > 0
    assert abs(acc["explained_pct"] + acc["unexplained_pct"] - 100.0) <= 0.02


def test_clean_control_has_no_defect(clean_run):
    _, out, data = clean_run
    assert [f["key"] for f in data["findings"] if f["severity"] != "info"] == []
    assert data["dismissed"] == []


def test_the_include_path_walk_is_an_autoload_finding_with_the_apps_counts(ledger_run, truth):
    _, out, data = ledger_run
    found = by_id(data).get("autoload", [])
    assert [f["details"]["function"] for f in found] == ["ledger_autoload"]
    f = found[0]
    d = f["details"]
    auto = {json.dumps(t["autoload"], sort_keys=True) for t in truth["ledger"].values()}
    assert len(auto) == 1                     # every page asks for the same classes
    t = truth["ledger"]["home"]["autoload"]
    assert d["calls_per_request"] == t["calls"] == 69
    assert d["tests_per_request"] == {"file_exists": t["probes"]}
    assert d["tests_per_class"] == round(t["probes"] / t["calls"], 2)
    assert d["include_path_reads"] == t["calls"]          # the loader reads the include path on each call
    assert all(x.startswith("lib/") for x in d["found_in"])
    assert set(f["urls"]) == set(PAGES.values())
    assert f["share_pct"] >= THRESHOLDS["autoload"]["min_share_pct"]
    assert "composer dump-autoload -o" in f["summary"]
    [r] = f["remediations"]         # generated: a class map in the loader's place, where it is registered
    assert (r["origin"], r["file"], r["kind"]) == ("generated", "index.php", "diff") and "no_patch" not in d
    assert "'ledger_model_invoice' => '/lib/core/Ledger/Model/Invoice.php'" in r["content"]
    # every class ledger's tree declares is declared once (install.php): all of them in the map
    assert d["class_map"] == {"mapped": 67, "declared_in_several_files": []}


# -- the fixes, verified --------------------------------------------------------------------------

VERIFY_ARGS = ("--runs", "8", "--max-runs", "8", "--duration", "3", "--warmup-duration", "1", "--requests", "40")


def flip(switch: str) -> str:
    """A unified diff of config.php that turns `switch` on (a fix of ledger, as ledger-clean has it)."""
    lines = (APPS / "ledger" / "app" / "config.php").read_text().splitlines()
    i = next(n for n, line in enumerate(lines) if f"'{switch}' => false," in line)
    before, after = lines[max(0, i - 3):i], lines[i + 1:i + 4]
    start = max(0, i - 3) + 1
    body = [f" {x}" for x in before] + [f"-{lines[i]}", f"+{lines[i].replace('=> false', '=> true')}"] + \
        [f" {x}" for x in after]
    n = len(before) + 1 + len(after)
    return f"--- a/config.php\n+++ b/config.php\n@@ -{start},{n} +{start},{n} @@\n" + "\n".join(body) + "\n"


@pytest.mark.parametrize("finding,switch", [("hotspot", "money_table_static"), ("autoload", "class_map"),
                                            ("autoload", None)])
def test_fix_is_verified(home, ledger_run, tmp_path, finding, switch):
    """The app's own fixes (its switches, as ledger-clean has them), and the generated class map
    (switch None: the finding's own remediation)."""
    _, out, data = ledger_run
    key = next(f["key"] for f in data["findings"] if f["id"] == finding
               and f["details"]["function"] in ("ledger_money", "ledger_autoload"))
    patch = tmp_path / f"{switch}.diff"
    patch.write_text(flip(switch) if switch else "")
    r = lockdown_runner(home, 900)("verify", out, "--finding", key, *(("--patch", patch) if switch else ()),
                                   *VERIFY_ARGS)
    # the gain is a measurement (docs/measurements/), not asserted: 3 is measured and not confirmed
    assert r.returncode in (0, 3), r.stdout[-3000:] + r.stderr[-3000:]
    v = json.loads((out / "verify" / key / "verify.json").read_text())
    # the generated map (switch None) maps the 65 classes, and learns from ledger_autoload, once,
    # that the 4 optional classes have no file: the re-capture asks the loader for nothing
    assert v["reprofile"]["gone"]
    assert v["responses"]["same"] == v["responses"]["urls"] == len(PAGES)


@pytest.mark.parametrize("switch", ["money_table_static", None])
def test_per_call_setups_fix_is_verified(home, setup_run, tmp_path, switch):
    """The one-line switch (money_table_static: the table kept in a static) as `verify --patch`,
    and (switch None) the finding's generated remediation: the setup statement run once per request."""
    _, out, data = setup_run
    key = next(f["key"] for f in data["findings"] if f["id"] == "per-call-setup")
    patch = tmp_path / "static.diff"
    patch.write_text(flip(switch) if switch else "")
    r = lockdown_runner(home, 900)("verify", out, "--finding", key, *(("--patch", patch) if switch else ()),
                                   *VERIFY_ARGS)
    # the gain is a measurement (docs/measurements/), not asserted: 3 is measured and not confirmed
    assert r.returncode in (0, 3), r.stdout[-3000:] + r.stderr[-3000:]
    v = json.loads((out / "verify" / key / "verify.json").read_text())
    assert v["reprofile"]["gone"] and v["responses"]["same"] == v["responses"]["urls"] == len(PAGES)
