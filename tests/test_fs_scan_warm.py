"""fs-scan's fix on a site whose caches are warm (issue 30): minicms-scan-warm reads its module
list from a cache_bootstrap entry first, as Drupal 7's system_list() does, and its install
warms that entry while the two zombie rows are still in the registry. Repairing the registry
alone then leaves the scan running (the cached list still names the modules); the proposed SQL
also removes the cache entries that name them, found by searching every text and blob column
of a copy of the database (remediation/registry_probe.py), and verify confirms it there.

The pure parts: which names of a missing item are searched for, and what each statement says."""
from __future__ import annotations

import json
import re

import pytest

from lockdown.bundle.store import open_bundle
from lockdown.remediation.registry_probe import Mention, Probe, item_names, name_pattern, statements

from conftest import VERIFY_ARGS, lockdown_runner, passable

REGISTRY_ONLY = "DELETE FROM modules WHERE type = 'module' AND name IN ('devel_generate', 'devel_node_access');\n"
ZOMBIES = ("devel_generate", "devel_node_access")
CACHE_GET = "SELECT data FROM cache_bootstrap WHERE cid = 'system_list'"


# --- pure parts -------------------------------------------------------------------------------

def _probe(name: str, path: str) -> Probe:
    sql = f"SELECT filename FROM modules WHERE name = '{name}' AND type = 'module'"
    return Probe(sql, "modules", f"name = '{name}' AND type = 'module'", [path], [path])


def test_an_item_is_searched_by_its_path_and_the_key_that_is_its_name():
    z = _probe("devel_generate", "sites/all/modules/devel/devel_generate/devel_generate.module")
    # 'module' (the lookup's type) names every module: it is not searched for
    assert item_names(z) == ["devel_generate", "sites/all/modules/devel/devel_generate/devel_generate.module"]
    plugin = Probe("SELECT file FROM wp_plugins WHERE slug = 'seo' AND active = 1", "wp_plugins",
                   "slug = 'seo' AND active = 1", ["seo/seo.php"], ["seo/seo.php"])
    assert item_names(plugin) == ["seo", "seo/seo.php"]
    # a key that is neither the file's stem nor its directory is not the item's name
    other = Probe("SELECT f FROM reg WHERE owner = 'alice'", "reg", "owner = 'alice'", ["x/y.php"], ["x/y.php"])
    assert item_names(other) == ["x/y.php"]


def test_the_pattern_matches_a_name_standing_alone():
    pattern = name_pattern(["devel_generate", "sites/all/x.module"])
    assert pattern == ("(^|[^[:alnum:]_])(devel_generate|sites[/]all[/]x[.]module)([^[:alnum:]_]|$)")
    # the same pattern in Python's dialect, to check what it matches
    py = re.compile(pattern.replace("[:alnum:]", "0-9A-Za-z"))
    assert py.search('a:1:{s:14:"devel_generate";}') and py.search("sites/all/x.module")
    assert not py.search("devel_generate_extra") and not py.search("mydevel_generate")
    assert not py.search("sites/all/xamodule")          # the dot is a dot


def test_each_statement_says_what_it_does_and_only_caches_are_cleared():
    z = _probe("devel_generate", "sites/all/modules/devel/devel_generate/devel_generate.module")
    cache = Mention("cache_bootstrap", ["data"], 1, ["devel_generate"], ["system_list"], cache=True)
    log = Mention("watchdog", ["message"], 3, ["devel_generate"], ["1", "2", "3"], cache=False)
    steps = statements([z], [cache, log])
    assert [sql for sql, _ in steps] == [
        "DELETE FROM modules WHERE name = 'devel_generate' AND type = 'module';",
        "DELETE FROM `cache_bootstrap` WHERE `data` REGEXP '(^|[^[:alnum:]_])(devel_generate)([^[:alnum:]_]|$)';"]
    assert "removes the registry row the lookup" in steps[0][1] and "missing from the app tree" in steps[0][1]
    assert steps[1][1].startswith("removes the 1 entry of cache table cache_bootstrap (system_list) that still "
                                  "names devel_generate")
    # a table that is not a cache (a log, settings) is never written
    assert not any("watchdog" in sql for sql, _ in steps)


# --- real runs --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def warm_run(home, tmp_path_factory):
    """`lockdown run minicms-scan-warm`: the prepared database's cache names the zombies."""
    out = passable(tmp_path_factory.mktemp("warm")) / "run"
    r = lockdown_runner(home, 900)("run", "minicms-scan-warm", "-o", out, "--no-bench", "--requests", "30")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return out


def _lookups(bundle) -> dict[str, list[int]]:
    """Per zombie, the rows its lookup by name returned in each statement of the capture."""
    out: dict[str, list[int]] = {}
    for s in bundle.statements():
        m = re.search(r"FROM modules WHERE name = '(devel_\w+)'", s.sql)
        if m:
            out.setdefault(m.group(1), []).append(s.rows_sent)
    return out


def test_the_proposed_sql_also_clears_the_warm_cache_entry(warm_run):
    doc = json.loads((warm_run / "findings.json").read_text())
    fs = next(f for f in doc["findings"] if f["id"] == "fs-scan")
    [sql] = [r for r in fs["remediations"] if r["kind"] == "sql"]
    statements_ = [line for line in sql["content"].splitlines() if line and not line.startswith("--")]
    assert [s.split(" WHERE")[0] for s in statements_] == (["DELETE FROM modules"] * 2
                                                           + ["DELETE FROM `cache_bootstrap`"])
    assert all(f"name = '{z}'" in sql["content"] for z in ZOMBIES)
    # each statement is preceded by what it does; the description says it too
    assert sql["content"].count("\n-- ") + sql["content"].startswith("-- ") == 3
    assert "(3) removes the 1 entry of cache table cache_bootstrap (system_list) that still names " \
           "devel_generate, devel_node_access" in sql["description"]
    assert "1 cache table(s) name them (cache_bootstrap)" in sql["checked"]
    # the capture ran on warm caches: every request read the module list from the cache entry,
    # none from the registry, and none refilled it
    bundle = open_bundle(warm_run / "bundle")
    sent = [" ".join(s.sql.split()) for s in bundle.statements()]
    requests = {s.request for s in bundle.statements() if s.request}
    assert sum(CACHE_GET in s for s in sent) >= len(requests) > 0
    assert not any("FROM modules WHERE type = 'module' AND status = 1" in s for s in sent)
    assert not any(s.startswith("REPLACE INTO cache_bootstrap") for s in sent)
    assert set(_lookups(bundle)) == set(ZOMBIES)


def test_warm_caches_need_the_cache_entries_cleared_too(warm_run, lockdown, tmp_path):
    """On copies warmed before the fix: the registry repair alone (as the user's --patch SQL)
    leaves the scan running and is not confirmed; the proposed SQL is."""
    only = tmp_path / "registry-only.sql"
    only.write_text(REGISTRY_ONLY)
    v = lockdown("verify", warm_run, "--finding", "fs-scan", "--patch", only, *VERIFY_ARGS)
    assert v.returncode == 3, v.stdout[-3000:] + v.stderr[-3000:]
    result = json.loads((warm_run / "verify" / "fs-scan" / "verify.json").read_text())
    assert not result["confirmed"] and not result["reprofile"]["gone"]
    assert result["reprofile"]["remaining"] == ["fs-scan"]
    assert "finding fs-scan: still reported by the re-capture" in v.stdout
    # why: the repaired registry no longer answers the lookups, but the cached list still
    # names the modules, so they are looked up, miss, and the tree is scanned
    after = open_bundle(warm_run / "verify" / "fs-scan" / "bundle")
    lookups = _lookups(after)
    assert set(lookups) == set(ZOMBIES) and all(set(rows) == {0} for rows in lookups.values())
    assert any(CACHE_GET in s.sql for s in after.statements())

    v = lockdown("verify", warm_run, "--finding", "fs-scan", *VERIFY_ARGS)
    assert v.returncode == 0, v.stdout[-3000:] + v.stderr[-3000:]
    result = json.loads((warm_run / "verify" / "fs-scan" / "verify.json").read_text())
    assert result["confirmed"] and result["reprofile"]["gone"] and result["reprofile"]["remaining"] == []
    change = result["bench"]["change"]
    assert change["significant"] and change["ci95_pct"][0] > 0
    assert result["responses"]["urls"] == result["responses"]["same"] == 5
    [applied] = result["remediations"]
    assert "DELETE FROM `cache_bootstrap`" in applied["content"]
    # the cache entry was refilled from the repaired registry: nothing looks the zombies up
    after = open_bundle(warm_run / "verify" / "fs-scan" / "bundle")
    assert _lookups(after) == {}
