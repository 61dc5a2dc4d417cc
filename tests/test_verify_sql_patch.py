"""`lockdown verify --patch FILE.sql`: the user's SQL for the target's database, checked on a
copy of the prepared database before anything starts, applied to the after arm's database copy
only (remediation/user_patch.py, remediation/apply.py). The pure parts: how a file is read as
a diff, as SQL, or refused. The real ones: minicms-scan's registry repair written by hand
verifies as the proposed fix does, alone and beside a diff; SQL that fails, an empty file and
a file that is neither are refused in one line, with nothing written."""
from __future__ import annotations

import json

import pytest

from lockdown.errors import LockdownError
from lockdown.remediation.recipes import unified_diff
from lockdown.remediation.user_patch import is_sql, load_patch

from conftest import VERIFY_ARGS, lockdown_runner, passable, prepared_root, processes_mentioning, tree_digest

REGISTRY_REPAIR = ("-- the two zombie rows of minicms's seed.sql, written by hand\n"
                   "DELETE FROM modules WHERE type = 'module' AND name IN ('devel_generate', 'devel_node_access');\n")


# --- pure parts -------------------------------------------------------------------------------

def test_sql_is_told_by_its_first_statement_after_the_comments():
    assert is_sql("DELETE FROM x WHERE a = 1;")
    assert is_sql("-- why\n# more\n/* and\n more */\n  update cache set data = NULL;")
    assert is_sql("TRUNCATE cache_bootstrap")
    for text in ("--- a/config.php\n+++ b/config.php\n", "just words\n", "-- only a comment\n", "SELECTION;",
                 "--x\nDELETE FROM t"):       # `--x` is no comment to MariaDB's client
        assert not is_sql(text), text


def test_verify_reads_sql_and_diffs_and_refuses_the_rest(tmp_path):
    sql = tmp_path / "fix.sql"
    sql.write_text(REGISTRY_REPAIR)
    r = load_patch(sql, sql=True)
    assert (r.kind, r.content, r.description, r.file) == ("sql", REGISTRY_REPAIR, f"--patch {sql}", None)
    diff = tmp_path / "fix.diff"
    diff.write_text(unified_diff("config.php", "a\n", "b\n"))
    assert load_patch(diff, sql=True).kind == "diff"
    # run, compare and profile take diffs only: SQL there is "not a unified diff"
    with pytest.raises(LockdownError, match=r"is not a unified diff \(no ---/\+\+\+ file lines\): make it"):
        load_patch(sql)
    empty = tmp_path / "empty.sql"
    empty.write_text("\n  \n")
    with pytest.raises(LockdownError, match=r"is empty: give a unified diff of the app's files or SQL"):
        load_patch(empty, sql=True)
    words = tmp_path / "notes.txt"
    words.write_text("-- delete the zombie rows\nremember to clear the cache\n")
    with pytest.raises(LockdownError,
                       match=r"is not a unified diff .* nor SQL \(no statement verb after the comments\)"):
        load_patch(words, sql=True)


# --- real runs --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def scan_run(home, tmp_path_factory):
    out = passable(tmp_path_factory.mktemp("sqlpatch")) / "run"
    r = lockdown_runner(home, 900)("run", "minicms-scan", "-o", out, "--no-bench", "--requests", "30")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return out


def test_a_users_sql_verifies_the_fs_scan_fix(scan_run, lockdown, tmp_path):
    """minicms-scan's registry repair as a .sql file of the user's: the A/B gains, the
    re-capture no longer shows the scan, every page is the same, the prepared database is
    untouched, and verify.json names the file."""
    fix = tmp_path / "registry.sql"
    fix.write_text(REGISTRY_REPAIR)
    prepared = prepared_root("minicms-scan")
    digest = tree_digest(prepared)
    v = lockdown("verify", scan_run, "--finding", "fs-scan", "--patch", fix, *VERIFY_ARGS)
    assert v.returncode == 0, v.stdout[-3000:] + v.stderr[-3000:]
    assert "[patch] running 1 SQL patch(es) on a copy of minicms-scan's database" in v.stdout
    result = json.loads((scan_run / "verify" / "fs-scan" / "verify.json").read_text())
    assert result["confirmed"] and result["reprofile"]["gone"]
    change = result["bench"]["change"]
    assert change["significant"] and change["ci95_pct"][0] > 0
    assert result["responses"]["urls"] == result["responses"]["same"] == 5
    [mine] = result["remediations"]
    assert (mine["kind"], mine["content"], mine["description"]) == ("sql", REGISTRY_REPAIR, f"--patch {fix}")
    assert f"remediation: the patch {fix} (sql)" in v.stdout
    assert tree_digest(prepared) == digest                     # only the arm's copy got the DELETE
    assert processes_mentioning(str(scan_run)) == []


def test_a_diff_and_sql_together_are_two_patches_applied_in_order(scan_run, lockdown, tmp_path):
    """A diff of config.php (a comment) and the SQL, as two --patch options: both are checked,
    both applied to the after arm, both recorded."""
    conf = (prepared_root("minicms-scan") / "app" / "config.php").read_text()
    diff = tmp_path / "comment.diff"
    diff.write_text(unified_diff("config.php", conf, conf.replace("<?php\n", "<?php\n// zombie rows removed\n", 1)))
    fix = tmp_path / "registry.sql"
    fix.write_text(REGISTRY_REPAIR)
    v = lockdown("verify", scan_run, "--finding", "fs-scan", "--patch", diff, "--patch", fix, *VERIFY_ARGS)
    assert v.returncode == 0, v.stdout[-3000:] + v.stderr[-3000:]
    result = json.loads((scan_run / "verify" / "fs-scan" / "verify.json").read_text())
    assert [(r["kind"], r["description"]) for r in result["remediations"]] == [
        ("diff", f"--patch {diff}"), ("sql", f"--patch {fix}")]
    assert result["confirmed"] and result["reprofile"]["gone"]


def test_sql_that_cannot_be_used_is_refused_in_one_line(scan_run, lockdown, tmp_path):
    """SQL that fails on the copy (MariaDB's own error), an empty file and one that is neither
    diff nor SQL: exit 2, one line on stderr, and the run's verify/ untouched."""
    before = sorted(p.name for p in (scan_run / "verify").iterdir()) if (scan_run / "verify").exists() else []
    broken = tmp_path / "broken.sql"
    broken.write_text("DELETE FROM modules WHERE name = 'devel_generate';\nDELETE FROM no_such_table;\n")
    empty = tmp_path / "empty.sql"
    empty.write_text("")
    notes = tmp_path / "notes.txt"
    notes.write_text("clear the cache too\n")
    for path, words in ((broken, f"--patch {broken} fails on a copy of minicms-scan's database (ERROR 1146 "
                                 f"(42S02) at line 2: Table 'minicms.no_such_table' doesn't exist)"),
                        (empty, f"--patch {empty} is empty"),
                        (notes, f"--patch {notes} is not a unified diff (no ---/+++ file lines) nor SQL")):
        r = lockdown("verify", scan_run, "--finding", "fs-scan", "--patch", path, *VERIFY_ARGS)
        assert r.returncode == 2 and words in r.stderr and r.stderr.count("\n") == 1, r.stderr
    after = sorted(p.name for p in (scan_run / "verify").iterdir()) if (scan_run / "verify").exists() else []
    assert after == before
    # the check's copy is gone, and its server with it
    assert not list(prepared_root("minicms-scan").parent.glob(".minicms-scan-sql-check-*"))
    assert processes_mentioning("-sql-check-") == []
