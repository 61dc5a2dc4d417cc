"""glossary (per-call setup on) and glossary-clean (its control) on the real stack (issue 35).

glossary (fixtures/apps/glossary) is modern PHP (strict types, namespaces, static classes, no
database): its slug maker builds a 30-row transliteration table on each of its calls, 30 a list
page and 12 a term page, every argument distinct; beside it a row renderer does ordinary
per-row work (three htmlspecialchars a call).

(a) every page answers 200 and its ground truth (X-Glossary-Truth) follows the switch;
(b) one `lockdown run glossary`: a per-call-setup finding on the slug maker with the app's own
    counts, none on the row renderer;
(c) one `lockdown run glossary-clean`: no defect finding;
(d) the fix (the switch, as `verify --patch`) verified with a CI above zero.
"""
import json

import pytest

from conftest import REPO, lockdown_runner
from ground_truth import fetch_pages, truths

APPS = REPO / "fixtures" / "apps"
PAGES = {"list": "/", "term7": "/term?id=7", "term20": "/term?id=20"}
RUN_ARGS = ("--no-bench", "--requests", "200")
VERIFY_ARGS = ("--runs", "8", "--max-runs", "8", "--duration", "3", "--warmup-duration", "1", "--requests", "100")
SLUG = "Glossary\\Slug::make"


@pytest.fixture(scope="module")
def pages(home, tmp_path_factory):
    return fetch_pages(home, tmp_path_factory.mktemp("glossary-pages"), ("glossary", "glossary-clean"), PAGES,
                       "X-Glossary-Truth")


@pytest.fixture(scope="module")
def truth(pages):
    return truths(pages, PAGES)


def run_target(home, tmp_path_factory, target):
    out = tmp_path_factory.mktemp(target) / "out"
    r = lockdown_runner(home, 900)("run", target, "-o", out, *RUN_ARGS)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r, out, json.loads((out / "findings.json").read_text())


@pytest.fixture(scope="module")
def glossary_run(home, tmp_path_factory):
    return run_target(home, tmp_path_factory, "glossary")


@pytest.fixture(scope="module")
def clean_run(home, tmp_path_factory):
    return run_target(home, tmp_path_factory, "glossary-clean")


def test_clean_shares_glossarys_files_but_its_config():
    clean, dirty = APPS / "glossary-clean", APPS / "glossary"
    for rel in ("app/index.php", "app/src/Slug.php", "app/src/Terms.php", "app/src/Truth.php", "README.md"):
        link = clean / rel
        assert link.is_symlink() and link.resolve() == (dirty / rel).resolve(), rel
    assert not (clean / "app" / "config.php").is_symlink()


def test_pages_answer_and_report_what_they_did(pages, truth):
    for target in ("glossary", "glossary-clean"):
        for name in PAGES:
            assert pages[target][name]["status"] == 200 and "glossary ok" in pages[target][name]["body"]
    for name, n in (("list", 30), ("term7", 12), ("term20", 12)):
        on, off = truth["glossary"][name], truth["glossary-clean"][name]
        assert on["config"] == {"slug_table_static": False} and off["config"] == {"slug_table_static": True}
        assert on["slug"] == {"calls": n, "setups": n, "rows_parsed": 30 * n}
        assert off["slug"] == {"calls": n, "setups": 1, "rows_parsed": 30}
        assert on["rows"]["calls"] == off["rows"]["calls"] == n

    def strip(body: str) -> str:
        return body.rsplit("<!-- glossary-truth", 1)[0]

    assert all(strip(pages["glossary"][n]["body"]) == strip(pages["glossary-clean"][n]["body"]) for n in PAGES)


def test_per_call_setup_with_the_apps_counts(glossary_run, truth):
    _, out, data = glossary_run
    slug = [t["slug"] for t in truth["glossary"].values()]
    assert all(s["setups"] == s["calls"] for s in slug)                  # a setup on every call
    (rows,) = {s["rows_parsed"] // s["setups"] for s in slug}
    found = [f for f in data["findings"] if f["id"] == "per-call-setup"]
    assert [f["details"]["function"] for f in found] == [SLUG], [(f["id"], f["details"].get("function"))
                                                                 for f in data["findings"]]
    d = found[0]["details"]
    assert d["calls_seen"] == sorted({s["calls"] for s in slug})         # 12 and 30: the same loop on both
    loops = {x["builtin"]: x["per_call"] for x in d["loops"]}
    # the text's split and one explode per row; trim and mb_strtolower per row and the term's own
    assert loops == {"explode": rows + 1, "trim": rows + 1, "mb_strtolower": rows + 1}
    assert set(found[0]["urls"]) == set(PAGES.values())
    # the row renderer, called once per row too, is ordinary per-row work
    assert not any(f["details"].get("function") == "Glossary\\Terms::row" for f in data["findings"])
    acc = json.loads((out / "accounting.json").read_text())
    # a sub-millisecond page sampled every 2 ms: a handful of the 180 timed requests get an
    # Excimer sample (4 to 11 seen); the finding's share is then xhprof's, and the accounting,
    # made of samples, places it only where a sample landed on it
    if d["basis"] == "excimer":
        assert acc["by_finding_pct"][found[0]["key"]] > 0
    else:
        assert d["basis"] == "xhprof" and acc["sampled_requests"] < 50
    assert abs(acc["explained_pct"] + acc["unexplained_pct"] - 100.0) <= 0.02


def test_clean_control_has_no_defect(clean_run):
    _, _, data = clean_run
    assert [f["key"] for f in data["findings"] if f["severity"] != "info"] == []


def flip() -> str:
    """A unified diff of config.php that turns the table static (glossary-clean's setting)."""
    lines = (APPS / "glossary" / "app" / "config.php").read_text().splitlines()
    i = next(n for n, line in enumerate(lines) if "'slug_table_static' => false," in line)
    before, after = lines[max(0, i - 3):i], lines[i + 1:i + 4]
    start = max(0, i - 3) + 1
    body = ([f" {x}" for x in before] + [f"-{lines[i]}", f"+{lines[i].replace('=> false', '=> true ')}"]
            + [f" {x}" for x in after])
    n = len(before) + 1 + len(after)
    return f"--- a/config.php\n+++ b/config.php\n@@ -{start},{n} +{start},{n} @@\n" + "\n".join(body) + "\n"


@pytest.mark.parametrize("own", [True, False])
def test_fix_is_verified(home, glossary_run, tmp_path, own):
    """The app's own fix (glossary-clean's switch) as `verify --patch`, and the finding's generated
    remediation (the table built on the first call of a request only)."""
    _, out, data = glossary_run
    found = next(f for f in data["findings"] if f["id"] == "per-call-setup")
    key = found["key"]
    [gen] = found["remediations"]
    assert (gen["origin"], gen["file"]) == ("generated", "src/Slug.php") and "its results ($map)" in gen["description"]
    patch = tmp_path / "static.diff"
    patch.write_text(flip())
    r = lockdown_runner(home, 900)("verify", out, "--finding", key, *(("--patch", patch) if own else ()),
                                   *VERIFY_ARGS)
    # the gain is a measurement (docs/measurements/), not asserted: 3 is measured and not confirmed
    assert r.returncode in (0, 3), r.stdout[-3000:] + r.stderr[-3000:]
    v = json.loads((out / "verify" / key / "verify.json").read_text())
    assert v["reprofile"]["gone"] and v["responses"]["same"] == v["responses"]["urls"] == len(PAGES)
