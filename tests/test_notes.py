"""notes (the engine-level wastes of issue 35 in procedural code) and notes-clean (its control)
on the real stack.

notes is a wiki-style renderer in plain functions (fixtures/apps/notes/README.md): a placeholder
pattern holding each block's uniqid() (preg_replace_callback, a fresh pattern per block among
fixed ones), partials probed with is_file() along a skin/language path, message domains with
is_readable() along a locale chain. Every response says what it did (X-Notes-Truth).

(a) every page answers 200 and its ground truth follows the switches;
(b) `lockdown run notes`: regex-compile names restore_placeholders with the app's fresh patterns
    per URL, failed-lookups names partial_path and message_file with the app's misses;
(c) `lockdown run notes-clean`: no defect finding;
(d) `lockdown verify` of each fix (a one-line patch of config.php): the finding is gone, the
    pages are the same, and the throughput's 95% CI is above zero.
"""
import json
import re

import pytest

from conftest import REPO, lockdown_runner
from ground_truth import fetch_pages

pytestmark = pytest.mark.server

APPS = REPO / "fixtures" / "apps"
PAGES = {"home": "/?page=home", "guide": "/?page=guide", "faq": "/?page=faq&q=cache"}
SWITCHES = {"fixed_placeholder": (False, True), "partial_index": (False, True), "locale_resolved": (False, True)}
TRAILER = re.compile(r"<!-- notes-truth (.*?) -->\n\Z")
RUN_ARGS = ("--runs", "2", "--duration", "2", "--warmup-duration", "1", "--requests", "60")
# 8 pairs of 3 s: with 5 pairs of 2 s the partials fix (servers' CPU per request -28%, CI -31 .. -25%)
# gave +39.5% (CI +12.5 .. +72.9%) once and +27.8% (CI -25 .. +118%) once on the shared 2-core host
VERIFY_ARGS = ("--runs", "8", "--max-runs", "8", "--duration", "3", "--warmup-duration", "1", "--requests", "40")


def flip(switch: str) -> str:
    """A unified diff of config.php that turns `switch` on (what a fix of notes is)."""
    lines = (APPS / "notes" / "app" / "config.php").read_text().splitlines()
    i = next(n for n, line in enumerate(lines) if f"'{switch}' => false," in line)
    before, after = lines[max(0, i - 3):i], lines[i + 1:i + 4]
    start = max(0, i - 3) + 1
    body = [f" {x}" for x in before] + [f"-{lines[i]}", f"+{lines[i].replace('false', 'true')}"] + \
        [f" {x}" for x in after]
    n = len(before) + 1 + len(after)
    return f"--- a/config.php\n+++ b/config.php\n@@ -{start},{n} +{start},{n} @@\n" + "\n".join(body) + "\n"


@pytest.fixture(scope="module")
def pages(home, tmp_path_factory):
    return fetch_pages(home, tmp_path_factory.mktemp("notes-pages"), ("notes", "notes-clean"),
                       {**PAGES, "missing": "/?page=nope"}, "X-Notes-Truth")


@pytest.fixture(scope="module")
def truth(pages):
    """{target: {URL: the app's ground truth}}."""
    return {target: {PAGES[name]: json.loads(p[name]["header"]) for name in PAGES} for target, p in pages.items()}


def run_target(home, tmp_path_factory, target):
    out = tmp_path_factory.mktemp(target) / "out"
    r = lockdown_runner(home, 900)("run", target, "-o", out, *RUN_ARGS)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return out, json.loads((out / "findings.json").read_text())


@pytest.fixture(scope="module")
def notes_run(home, tmp_path_factory):
    return run_target(home, tmp_path_factory, "notes")


def by_function(data, finding_id) -> dict:
    return {f["details"]["function"]: f for f in data["findings"] if f["id"] == finding_id}


# -- the files and (a) the app -------------------------------------------------------------------


def test_clean_shares_notes_files_except_its_config():
    dirty, clean = APPS / "notes", APPS / "notes-clean"
    own = {"target.toml", "app/config.php"}
    for p in dirty.rglob("*"):
        rel = str(p.relative_to(dirty))
        if p.is_file() and rel not in own:
            assert (clean / rel).is_symlink() and (clean / rel).resolve() == p.resolve(), rel
    a = (dirty / "app" / "config.php").read_text().splitlines()
    b = (clean / "app" / "config.php").read_text().splitlines()
    assert [(x.strip(), y.strip()) for x, y in zip(a, b) if x != y] == \
        [(f"'{k}' => false,", f"'{k}' => true,") for k in SWITCHES]


def test_pages_and_ground_truth(pages, truth):
    for target in ("notes", "notes-clean"):
        dirty = target == "notes"
        for name, page in pages[target].items():
            header = json.loads(page["header"])
            m = TRAILER.search(page["body"])
            assert m and json.loads(m[1]) == header, name
            assert header["config"] == {"lang": "de_AT", "skin": "paper",
                                        **{k: v[0 if dirty else 1] for k, v in SWITCHES.items()}}
            assert page["status"] == (404 if name == "missing" else 200), name
    for url, t in truth["notes"].items():
        blocks = t["partials"]["lookups"] - 4
        assert t["regex"]["fresh"] == blocks and t["regex"]["distinct"] == blocks + (3 if "q=" in url else 2)
        assert t["partials"]["misses"] == 15 * (t["partials"]["lookups"] - 1) + 3, url
        assert t["strings"] == {"domains": 20, "probes": 80, "misses": 60, "found": 20, "resolved": 0}
    assert {u: t["regex"]["fresh"] for u, t in truth["notes"].items()} == \
        {"/?page=home": 40, "/?page=guide": 48, "/?page=faq&q=cache": 32}
    for url, t in truth["notes-clean"].items():
        assert t["regex"]["fresh"] == 0 and t["partials"]["probes"] == t["strings"]["probes"] == 0
        assert t["regex"]["calls"] == truth["notes"][url]["regex"]["calls"]
    for name in PAGES:
        a, b = (TRAILER.sub("", pages[t][name]["body"]) for t in ("notes", "notes-clean"))
        assert a == b, name


# -- (b) the findings, with the app's counts -------------------------------------------------------


def test_fresh_placeholder_patterns_are_found_in_their_function(notes_run, truth):
    _, data = notes_run
    found = by_function(data, "regex-compile")
    assert list(found) == ["restore_placeholders"], [f["title"] for f in data["findings"]]
    d = found["restore_placeholders"]["details"]
    assert sorted(found["restore_placeholders"]["urls"]) == sorted(PAGES.values())
    for url, t in truth["notes"].items():
        assert d["compiled_per_request"][url]["median"] == t["regex"]["fresh"], url
        assert d["preg_calls_per_request"][url] == t["regex"]["calls"], url
        # the fixed patterns' callers are named, but not as the one compiling
        assert {"restore_placeholders", "protect_code"} <= set(d["callers"][url])
    assert found["restore_placeholders"]["severity"] != "info"


def test_failed_lookups_are_found_per_function_with_the_apps_misses(notes_run, truth):
    _, data = notes_run
    found = by_function(data, "failed-lookups")
    assert set(found) == {"partial_path", "message_file"}, [f["title"] for f in data["findings"]]
    partials, messages = found["partial_path"]["details"], found["message_file"]["details"]
    assert partials["builtins"] == ["is_file"] and messages["builtins"] == ["is_readable"]
    assert partials["credited_per_request"] == {u: t["partials"]["misses"] for u, t in truth["notes"].items()}
    assert messages["credited_per_request"] == {u: t["strings"]["misses"] for u, t in truth["notes"].items()}
    assert not partials["estimated"] and not messages["estimated"]
    for url, t in truth["notes"].items():
        assert partials["failed_per_request"][url]["median"] == t["partials"]["misses"] + t["strings"]["misses"]


# -- (c) the control ----------------------------------------------------------------------------


def test_notes_clean_has_no_defect(home, tmp_path_factory):
    _, data = run_target(home, tmp_path_factory, "notes-clean")
    assert [f["id"] for f in data["findings"]] == ["hot-builtins"], [f["title"] for f in data["findings"]]


# -- (d) the fixes, verified ----------------------------------------------------------------------


@pytest.mark.parametrize("finding,function,switch", [("regex-compile", "restore_placeholders", "fixed_placeholder"),
                                                     ("failed-lookups", "partial_path", "partial_index")])
def test_fix_is_verified(home, notes_run, tmp_path, finding, function, switch):
    out, data = notes_run
    key = by_function(data, finding)[function]["key"]
    patch = tmp_path / f"{switch}.diff"
    patch.write_text(flip(switch))
    r = lockdown_runner(home, 900)("verify", out, "--finding", key, "--patch", patch, *VERIFY_ARGS)
    # the gain is a measurement (docs/measurements/), not asserted: 3 is measured and not confirmed
    assert r.returncode in (0, 3), r.stdout[-3000:] + r.stderr[-3000:]
    v = json.loads((out / "verify" / key / "verify.json").read_text())
    assert v["reprofile"]["gone"]
    assert v["responses"]["same"] == v["responses"]["urls"] == len(PAGES)
