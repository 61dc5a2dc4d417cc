"""minicms (every pathology on) and minicms-clean (its control) on the real stack.

Each target is profiled once; a hook fetches each page between warmup and capture to read the
app's own count of what it did (the X-Minicms-Truth header). The tests check that the
pathologies happen in minicms and not in minicms-clean, by that ground truth and by the bundle
(statements and PHP stacks), and that the two agree.
"""
import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter, defaultdict

import pytest

from conftest import REPO, SHARED_PREPARED, lockdown_argv
from lockdown.analyzers.engine_state import summarize
from lockdown.bundle.store import open_bundle
from lockdown.harness.prepare import cache_key
from lockdown.targets.config import load_target

APPS = REPO / "fixtures" / "apps"
PAGES = {"home": "/", "list": "/?p=list", "page": "/?p=page&id=3"}
SWITCHES = {"l10n_store": ("'db'", "'php'"), "view_counter": ("true", "false"),
            "listing_batch": ("false", "true"), "query_memo": ("false", "true"),
            "theme_memo": ("false", "true"), "filter_cache": ("false", "true")}

# The statements of each pathology, as minicms sends them.
L10N = re.compile(r"^SELECT lc_value FROM l10n_cache WHERE lc_lang = 'en' AND lc_key = '([^']+)' LIMIT 1$")
VIEWS = re.compile(r"^UPDATE pages SET views = views \+ 1 WHERE id = \d+$")
AUTHOR = re.compile(r"^SELECT id, name, bio FROM authors WHERE id = (\d+)$")
MODULE_LOOKUP = re.compile(r"^SELECT filename FROM modules WHERE name = '(\w+)' AND type = 'module'$")
SITE_NAME = "SELECT value FROM settings WHERE name = 'site_name'"

FETCH = """\
import json, os, sys, urllib.request
pages = json.loads(sys.argv[2])
truth = {}
for name, path in pages.items():
    with urllib.request.urlopen(os.environ["LOCKDOWN_BASE_URL"] + path) as r:
        body = r.read().decode()
        truth[name] = json.loads(r.headers["X-Minicms-Truth"])
        truth[name]["_body_ok"] = "minicms ok" in body
open(sys.argv[1], "w").write(json.dumps(truth))
"""


def capture(target, tmp_path_factory, home):
    """Profile `target` (20 requests, Excimer and statements); return (truth by page, bundle)."""
    tmp = tmp_path_factory.mktemp(target)
    (tmp / "fetch.py").write_text(FETCH)
    truth_file = tmp / "truth.json"
    hook = f"{sys.executable} {tmp / 'fetch.py'} {truth_file} '{json.dumps(PAGES)}'"
    env = {**os.environ, "LOCKDOWN_HOME": str(home), "LOCKDOWN_PREPARED_DIR": str(SHARED_PREPARED)}
    env.pop("LOCKDOWN_PHP_EXTENSION_DIR", None)
    r = subprocess.run(lockdown_argv("profile", target, "--requests", "20", "--collect", "excimer,queries",
                                     "--no-overhead-check", "-o", tmp / "b", "--exec-after-warmup", hook),
                       capture_output=True, text=True, timeout=300, env=env, cwd=REPO)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return json.loads(truth_file.read_text()), open_bundle(tmp / "b")


@pytest.fixture(scope="module")
def dirty(tmp_path_factory, home):
    return capture("minicms", tmp_path_factory, home)


@pytest.fixture(scope="module")
def clean(tmp_path_factory, home):
    return capture("minicms-clean", tmp_path_factory, home)


def statements_by_url(bundle):
    """{url: [list of SQL texts of one request, ...]} for the captured requests."""
    requests = {q.id: q for q in bundle.requests()}
    assert requests and all(q.status == 200 for q in requests.values())
    sql = defaultdict(list)
    for s in bundle.statements():
        assert s.request in requests, s          # one client at a time: every statement is named
        sql[s.request].append(s.sql)
    out = defaultdict(list)
    for rid, q in requests.items():
        out[q.url].append(sql[rid])
    return out


def stacks(bundle) -> str:
    return "\n".join(st for p in bundle.excimer() for st in p.stacks)


@pytest.mark.parametrize("variant", ["minicms-clean", "minicms-queries", "minicms-files"])
def test_variant_shares_minicms_files_except_its_config(variant):
    """minicms-clean and minicms-queries are minicms's files through symlinks, plus their own
    target.toml and config.php."""
    dirty_dir, clean_dir = APPS / "minicms", APPS / variant
    own = {"target.toml", "seed.sql", "app/config.php"}
    shared = sorted(str(p.relative_to(dirty_dir)) for p in dirty_dir.rglob("*") if p.is_file())
    for rel in shared:
        if rel in own:
            continue
        link = clean_dir / rel
        assert link.is_symlink() and link.resolve() == (dirty_dir / rel).resolve(), rel
    clean_files = {str(p.relative_to(clean_dir)) for p in clean_dir.rglob("*") if p.is_file()}
    assert clean_files == (set(shared) - {"seed.sql"})
    assert not (clean_dir / "app" / "config.php").is_symlink()


def test_clean_is_prepared_again_when_a_shared_file_changes(tmp_path):
    """The symlinks are what make minicms-clean's cache key cover minicms's files."""
    for name in ("minicms", "minicms-clean"):
        shutil.copytree(APPS / name, tmp_path / name, symlinks=True)
    before = cache_key(load_target(tmp_path / "minicms-clean"))
    index = tmp_path / "minicms" / "app" / "index.php"
    index.write_text(index.read_text() + "// edited\n")
    assert cache_key(load_target(tmp_path / "minicms-clean")) != before


def test_each_switch_is_one_config_line():
    """config.php of the two targets differs in exactly the switch lines."""
    a = (APPS / "minicms" / "app" / "config.php").read_text().splitlines()
    b = (APPS / "minicms-clean" / "app" / "config.php").read_text().splitlines()
    assert len(a) == len(b)
    changed = [(x, y) for x, y in zip(a, b) if x != y]
    assert len(changed) == len(SWITCHES)
    for (x, y), (key, (bad, good)) in zip(changed, SWITCHES.items()):
        assert x.strip() == f"'{key}' => {bad}," and y.strip() == f"'{key}' => {good},"


def test_minicms_ground_truth(dirty):
    truth, _ = dirty
    assert all(t["_body_ok"] for t in truth.values())
    for name, t in truth.items():
        # the module scan: both zombie rows missed, looked up by name twice each, one scan
        assert t["modules"]["missing"] == ["devel_generate", "devel_node_access"]
        assert t["queries"]["by_kind"]["module_lookup"] == 4
        fs = t["fs"]
        assert fs["scans"] == 1 and fs["dirs"] >= 500, (name, fs)
        assert fs["opendir"] == fs["closedir"] == fs["dirs"]
        assert fs["readdir"] > 3 * fs["dirs"] and fs["is_dir"] > 2 * fs["dirs"]
        # a write on every view
        assert t["queries"]["by_kind"]["page_views"] == 1 == t["queries"]["writes"]
        # every message is a query
        assert t["l10n"]["queries"] == t["queries"]["by_kind"]["l10n"] == t["l10n"]["lookups"] + 2
        # the theme merge redone on every call
        assert t["theme"]["computed"] == t["theme"]["calls"] >= 20
    home, listing = truth["home"], truth["list"]
    assert home["l10n"]["queries"] >= 150
    assert 50 <= home["theme"]["calls"] <= 80
    assert home["queries"]["max_identical"] >= 20                 # site_name, again and again
    assert home["queries"]["by_kind"]["setting"] == home["settings"]["calls"]
    assert listing["queries"]["by_kind"]["listing_author"] == listing["listing"]["rows"] == 30


def test_minicms_bundle_shows_every_pathology(dirty):
    truth, bundle = dirty
    by_url = statements_by_url(bundle)
    for name, path in PAGES.items():
        assert by_url[path], path
        for sqls in by_url[path]:
            # the bundle holds exactly what the app says it sent
            assert len(sqls) == truth[name]["queries"]["total"], path
            keys = [m[1] for s in sqls if (m := L10N.match(s))]
            assert len(keys) == truth[name]["l10n"]["queries"] and len(set(keys)) == len(keys)
            assert sum(bool(VIEWS.match(s)) for s in sqls) == 1
            lookups = Counter(m[1] for s in sqls if (m := MODULE_LOOKUP.match(s)))
            assert lookups == {"devel_generate": 2, "devel_node_access": 2}
    for sqls in by_url["/"]:
        assert len([s for s in sqls if L10N.match(s)]) >= 150
        assert Counter(sqls)[SITE_NAME] >= 20
    for sqls in by_url["/?p=list"]:
        authors = [m[1] for s in sqls if (m := AUTHOR.match(s))]
        assert len(authors) == len(set(authors)) == 30            # N+1: one per row
    text = stacks(bundle)
    for fn in ("file_scan_directory", "LCStoreDB::get", "theme_settings"):
        assert fn in text, fn


def test_minicms_clean_ground_truth(clean):
    truth, _ = clean
    assert all(t["_body_ok"] for t in truth.values())
    for name, t in truth.items():
        assert t["modules"]["missing"] == [] and t["modules"]["loaded"] == t["modules"]["enabled"] > 50
        assert t["fs"]["scans"] == t["fs"]["dirs"] == t["fs"]["opendir"] == 0
        assert t["l10n"]["queries"] == 0 and t["l10n"]["lookups"] > 100
        assert t["queries"]["writes"] == 0 and "page_views" not in t["queries"]["by_kind"]
        assert t["queries"]["max_identical"] == 1
        assert t["theme"]["computed"] == 1 and t["theme"]["calls"] >= 20
        assert "module_lookup" not in t["queries"]["by_kind"]
    listing = truth["list"]["queries"]["by_kind"]
    assert listing["listing_join"] == 1 and "listing_author" not in listing
    assert truth["home"]["theme"]["calls"] >= 50 and truth["home"]["settings"]["calls"] >= 20


def test_minicms_clean_bundle_shows_none(clean):
    truth, bundle = clean
    by_url = statements_by_url(bundle)
    for name, path in PAGES.items():
        assert by_url[path], path
        for sqls in by_url[path]:
            assert len(sqls) == truth[name]["queries"]["total"] <= 6, (path, sqls)
            assert len(set(sqls)) == len(sqls)                     # nothing repeated
            assert not any("l10n_cache" in s or s.startswith("UPDATE") or MODULE_LOOKUP.match(s)
                           for s in sqls), sqls
    for sqls in by_url["/?p=list"]:
        assert len([s for s in sqls if "authors" in s]) == 1      # the one join
    text = stacks(bundle)
    assert "file_scan_directory" not in text and "LCStoreDB" not in text
    # the messages file the first request builds (cache/l10n_en.php) is cached before the
    # capture: OPcache leaves a file younger than file_update_protection (2 s) uncached, and
    # the whole capture of this fast app fits in that window (2 scripts compiled per request)
    state = summarize(bundle.requests(), bundle.manifest["php"]["ini"])
    assert state.opcache.requests > 10 and state.opcache.requests_with_misses == 0, state.opcache
