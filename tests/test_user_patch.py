"""The user's own diffs (remediation/user_patch.py): `compare --patch` measures them (on top of
verified fixes, pairs planned with --resolve), `run --patch` and `profile --patch` start from
them, `verify --patch` verifies a finding with them; the checks that refuse a diff before
anything starts; and how a starting point is worded (remediation/base.describe)."""
from __future__ import annotations

import json

import pytest

from lockdown.analyzers.findings import Finding, Remediation
from lockdown.errors import LockdownError
from lockdown.remediation.base import Base, describe, with_patches
from lockdown.remediation.recipes import unified_diff
from lockdown.remediation.user_patch import check_patches, load_patch

from conftest import SHARED_PREPARED, prepared_root, processes_mentioning

FEWER = """--- a/index.php
+++ b/index.php
@@ -4,3 +4,3 @@
 $name = isset($_GET['name']) ? $_GET['name'] : 'world';
 $items = [];
-for ($i = 0; $i < 50; $i++) {
+for ($i = 0; $i < 5; $i++) {
"""
# each applies only on top of the one before: patches go in the order given
SEVEN = FEWER.replace("-for ($i = 0; $i < 50; $i++) {\n+for ($i = 0; $i < 5; $i++) {",
                      "-for ($i = 0; $i < 5; $i++) {\n+for ($i = 0; $i < 7; $i++) {")
NINE = FEWER.replace("-for ($i = 0; $i < 50; $i++) {\n+for ($i = 0; $i < 5; $i++) {",
                     "-for ($i = 0; $i < 7; $i++) {\n+for ($i = 0; $i < 9; $i++) {")


def test_run_with_a_patch_captures_the_patched_code_and_records_it(lockdown, tmp_path):
    """hello with its 50-item loop cut to 5: the capture's call counts show 5 htmlspecialchars
    calls a request (the prepared tree still says 50), findings.json keeps the patch as the
    run's base, and the write-ups and the command to reproduce name it."""
    diff = tmp_path / "fewer.diff"
    diff.write_text(FEWER)
    out = tmp_path / "run"
    r = lockdown("run", "hello", "-o", out, "--patch", diff, "--no-bench", "--requests", "10", "--no-probe")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert f"[base] on top of the patch {diff}: diff index.php" in r.stdout
    builtins = json.loads((out / "analysis.json").read_text())["builtins"]["top"]
    assert next(b for b in builtins if b["name"] == "htmlspecialchars")["calls_per_request"] == 5
    doc = json.loads((out / "findings.json").read_text())
    base = doc["run"]["base"]
    assert base["source"] is None and base["php_ini"] == {}
    [patch] = base["remediations"]
    assert patch["content"] == FEWER and patch["description"] == f"--patch {diff}" and patch["file"] == "index.php"
    assert patch["checked"] == "applies with patch -p1 to a copy of the prepared app tree"
    assert doc["run"]["options"][-2:] == ["--patch", str(diff)]
    w = lockdown("writeup", out, "-o", tmp_path / "issues")
    assert w.returncode == 0, w.stderr
    summary = (tmp_path / "issues" / "SUMMARY.md").read_text()
    assert f"**Starting point:** the patch {diff} (diff index.php), applied to every copy" in summary
    assert f"--no-probe --patch {diff}" in summary
    # the user's own fix verified in place of the proposed change, on top of the run's patch:
    # SEVEN applies only after FEWER, so both arms have FEWER, the after arm SEVEN too
    seven = tmp_path / "seven.diff"
    seven.write_text(SEVEN)
    v = lockdown("verify", out, "--finding", "hot-builtins", "--patch", seven, "--runs", "5", "--max-runs", "5",
                 "--duration", "1", "--warmup-duration", "0", "--requests", "10", "--no-probe")
    assert v.returncode in (0, 3), v.stdout[-3000:] + v.stderr[-3000:]
    assert f"[base] both arms start from the patch {diff}" in v.stdout
    assert f"  remediation: the patch {seven} (diff index.php)" in v.stdout
    assert f"  both arms on top of the patch {diff}" in v.stdout
    result = json.loads((out / "verify" / "hot-builtins" / "verify.json").read_text())
    assert [r["description"] for r in result["remediations"]] == [f"--patch {seven}"]
    assert result["remediations"][0]["content"] == SEVEN
    first = result["responses"]["pages"][0]["first_difference"]      # 5 items before, 7 after
    assert first["before"].endswith("<li>world #4</li></ul>") and "<li>world #6</li></ul>" in first["after"]
    again = lockdown("writeup", out, "-o", tmp_path / "issues2")
    assert again.returncode == 0, again.stderr
    note = (tmp_path / "issues2" / "hot-builtins.md").read_text()
    assert f"applying the patch {seven} (diff index.php), not the proposed change" in note
    assert f"--finding hot-builtins --patch {seven} --runs 5" in (tmp_path / "issues2" / "SUMMARY.md").read_text()
    html = (out / "report.html").read_text()
    assert f"(your patch <code>{seven}</code>, not the proposed change)" in html
    assert "$i < 50;" in (prepared_root("hello") / "app" / "index.php").read_text()   # only copies patched
    assert processes_mentioning(str(out)) == []


def test_verify_refuses_a_patch_it_cannot_use_in_one_line(lockdown, tmp_path):
    finding = Finding("hot-builtins", "t", "info", None, "s", key="hot-builtins")
    (tmp_path / "findings.json").write_text(json.dumps({"format": 1, "target": "hello",
                                                        "findings": [finding.to_json()]}))
    (tmp_path / "seven.diff").write_text(SEVEN)
    for args, words in ((("--all",), "--patch is the fix of the findings given with --finding"),
                        (("--finding", "hot-builtins", "--remediation", "1"),
                         "not with --all, --each or --remediation"),
                        (("--finding", "hot-builtins"), "does not apply to hello's app tree (Hunk #1 FAILED")):
        r = lockdown("verify", tmp_path, *args, "--patch", tmp_path / "seven.diff")
        assert r.returncode == 2 and words in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert not (tmp_path / "verify").exists()


def test_run_refuses_a_patch_that_does_not_apply_before_making_its_directory(lockdown, tmp_path):
    (tmp_path / "seven.diff").write_text(SEVEN)
    r = lockdown("run", "hello", "-o", tmp_path / "run", "--patch", tmp_path / "seven.diff", "--no-bench")
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert f"--patch {tmp_path / 'seven.diff'} does not apply to hello's app tree (Hunk #1 FAILED" in r.stderr
    assert not (tmp_path / "run").exists()


def test_patches_are_checked_after_the_fixes_they_go_on_top_of(tmp_path):
    prepared = tmp_path / "prepared" / "t-0" / "app"
    prepared.mkdir(parents=True)
    (prepared / "a.php").write_text("one\n")
    fix = Remediation("diff", unified_diff("a.php", "one\n", "two\n"), file="a.php", description="recipe")
    (tmp_path / "p.diff").write_text(unified_diff("a.php", "two\n", "three\n"))
    mine = load_patch(tmp_path / "p.diff")
    # alone it does not apply: it was made against the fixed file
    with pytest.raises(LockdownError, match=r"does not apply to t's app tree \(Hunk #1 FAILED"):
        check_patches(prepared, [mine], "t")
    [checked] = check_patches(prepared, [mine], "t", before=[fix])
    assert checked.checked == ("applies with patch -p1 to a copy of the prepared app tree "
                               "with the verified fixes applied")
    assert (prepared / "a.php").read_text() == "one\n"                        # checked on a copy
    assert [p.name for p in (tmp_path / "prepared").iterdir()] == ["t-0"]      # which is gone
    # a base fix that no longer applies is the base's problem, in the base's words
    stale = Remediation("diff", unified_diff("a.php", "zero\n", "two\n"), file="a.php", description="recipe")
    with pytest.raises(LockdownError, match="--on-top-of: the base's diff against a.php does not apply"):
        check_patches(prepared, [mine], "t", before=[stale])


def test_a_starting_point_is_worded_by_what_it_holds():
    fix = Remediation("sql", "UPDATE x", description="recipe")
    mine = Remediation("diff", "", file="a.php", description="--patch /p/memo.diff")
    other = Remediation("diff", "", file="b.php", description="--patch /p/two.diff")
    assert Base("/r/verify/all", [fix], {}).describe() == "the 1 fix(es) verified in /r/verify/all"
    assert Base(None, [mine, other], {}).describe() == "the patches /p/memo.diff, /p/two.diff"
    both = with_patches(Base("/r/verify/all", [fix], {"x": "1"}), [mine])
    assert both.describe() == "the 1 fix(es) verified in /r/verify/all and the patch /p/memo.diff"
    assert both.php_ini == {"x": "1"} and both.remediations == [fix, mine]
    assert with_patches(None, []) is None and with_patches(None, [mine]).source is None
    # from JSON (findings.json run.base, verify.json base_remediations) alike
    assert describe(None, [{"description": "--patch /p/memo.diff"}]) == "the patch /p/memo.diff"
    assert Base.from_json(Base(None, [mine], {}).to_json()).describe() == "the patch /p/memo.diff"


def test_profile_with_a_patch_says_so_in_its_manifest(lockdown, tmp_path):
    diff = tmp_path / "fewer.diff"
    diff.write_text(FEWER)
    bundle = tmp_path / "bundle"
    r = lockdown("profile", "hello", "-o", bundle, "--patch", diff, "--requests", "10", "--collect", "xhprof",
                 "--no-overhead-check", "--run-dir", tmp_path / "run")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["target"]["applied"] == [{"kind": "diff", "file": "index.php", "description": f"--patch {diff}"}]
    assert f"  served patched: diff index.php (--patch {diff})" in r.stdout
    a = lockdown("analyze", bundle, "--json")
    calls = next(b for b in json.loads(a.stdout)["builtins"]["top"] if b["name"] == "htmlspecialchars")
    assert calls["calls_per_request"] == 5                     # the loop the patch cut from 50 to 5
    # nothing is started for a diff that does not fit, and no bundle is written
    (tmp_path / "seven.diff").write_text(SEVEN)
    r = lockdown("profile", "hello", "-o", tmp_path / "b2", "--patch", tmp_path / "seven.diff")
    assert r.returncode == 2 and "does not apply to hello's app tree" in r.stderr and r.stderr.count("\n") == 1
    assert not (tmp_path / "b2").exists()


def test_compare_patches_on_top_of_verified_fixes_with_planned_pairs(lockdown, tmp_path):
    """One real comparison with every option of a code change: both arms start from a verified
    fix (hello's loop cut to 50 -> 5) and its php.ini; the second arm also gets two patches of
    the user's, in order, each made against the one before (5 -> 7 -> 9); so the change
    measured is the patches' alone. --resolve 1: a +1% change is beyond 5 pairs of 1 s, so the
    plan goes on to --max-runs 7, in the same flipped order, and says so. Only copies are
    patched (each arm's copy is removed when it stops); compare.json keeps the diffs."""
    base_dir = tmp_path / "verified"
    base_dir.mkdir()
    fix = {"kind": "diff", "file": "index.php", "content": FEWER, "steps": [], "description": "recipe"}
    (base_dir / "verify.json").write_text(json.dumps({
        "target": "hello", "confirmed": True, "remediations": [fix], "base_remediations": [],
        "php_ini": {"before": {}, "after": {"memory_limit": "160M"}}}))
    seven, nine = tmp_path / "seven.diff", tmp_path / "nine.diff"
    seven.write_text(SEVEN)
    nine.write_text(NINE)
    run_dir = tmp_path / "cmp"
    r = lockdown("compare", "hello", "--on-top-of", base_dir, "--patch", seven, "--patch", nine,
                 "--runs", "5", "--duration", "1", "--warmup-duration", "0", "--resolve", "1", "--max-runs", "7",
                 "--run-dir", run_dir)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = r.stdout
    assert "[patch] 2 diff(s) apply to a copy of the prepared app tree with the verified fixes applied" in out
    assert f"against with patch {seven} (index.php); patch {nine} (index.php)" in out
    assert f"  both on top of the 1 fix(es) verified in {base_dir}" in out
    result = json.loads((run_dir / "compare.json").read_text())
    assert result["php_ini"] == {"both": {"memory_limit": "160M"}, "with": {}}      # the verified after arm's
    assert result["base"]["source"] == str(base_dir) and result["base"]["remediations"][0]["content"] == FEWER
    assert [(p["path"], p["files"], p["content"]) for p in result["patches"]] == [
        (str(seven), ["index.php"], SEVEN), (str(nine), ["index.php"], NINE)]
    assert result["patches"][1]["checked"].endswith("with the verified fixes applied (patch 2 of 2, after the "
                                                    "ones before it)")
    # 5 items before (#0-#4); after, more than 8 (SEVEN alone would stop at #6): both patches
    first = result["responses"]["pages"][0]["first_difference"]
    assert first["before"].endswith("<li>world #4</li></ul>") and "<li>world #7</li><li>world " in first["after"]
    assert "$i < 50;" in (prepared_root("hello") / "app" / "index.php").read_text()
    # the pairs, planned for +1%
    ab = result["bench"]
    plan = ab["plan"]
    assert plan["pilot_runs"] == 5 and plan["runs"] == plan["measured_runs"] == 7 and plan["max_runs"] == 7
    assert plan["planned_change_pct"] == 1.0 and plan["named"] == "a change of"
    assert plan["runs_needed"] is None or plan["runs_needed"] > 7
    assert len(ab["before"]["runs"]) == len(ab["after"]["runs"]) == ab["runs_per_arm"] == 7
    assert ab["order"][10:] == ["after", "before", "before", "after"]
    assert ab["change"]["pairs"] == 7 and ab["change"]["resolvable_pct"] > 1.0
    assert 0 < ab["change"]["power"] < 0.8
    assert ab["design"].startswith("7 interleaved pairs of 1 s runs (the first 5 a pilot")
    assert "[plan] the first 5 pairs are too noisy to resolve a change of +1.0%: it needs " in out
    assert "[measure] 14/14 after" in out and "[measure] 15/" not in out
    assert "resolution: the first 5 pairs were a pilot, too noisy to resolve a change of +1.0%" in out
    assert processes_mentioning(str(run_dir)) == []


def test_compare_refuses_what_it_cannot_apply_in_one_line_and_starts_nothing(lockdown, home, tmp_path):
    runs, prepared = home / "runs", SHARED_PREPARED
    before = set(runs.iterdir()) if runs.is_dir() else set()
    (tmp_path / "seven.diff").write_text(SEVEN)
    (tmp_path / "prose.diff").write_text("just some words\n")
    (tmp_path / "escape.diff").write_text(FEWER.replace("a/index.php", "a/../../etc/passwd")
                                          .replace("b/index.php", "b/../../etc/passwd"))
    for args, words in (((tmp_path / "seven.diff",), "--patch {d}/seven.diff does not apply to hello's app tree "
                                                    "(Hunk #1 FAILED at 4.; 1 out of 1 hunk FAILED); make the "
                                                    "diff against the files in "),
                        ((tmp_path / "prose.diff",), "--patch {d}/prose.diff is not a unified diff"),
                        ((tmp_path / "escape.diff",), "changes '../../etc/passwd', outside the app tree"),
                        ((tmp_path / "missing.diff",), "cannot read --patch {d}/missing.diff: No such file")):
        r = lockdown("compare", "hello", *[x for a in args for x in ("--patch", a)])
        assert r.returncode == 2 and words.format(d=tmp_path) in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert (set(runs.iterdir()) if runs.is_dir() else set()) == before
    assert not [p for p in prepared.iterdir() if "patch-check" in p.name]
    assert "$i < 50;" in (prepared_root("hello") / "app" / "index.php").read_text()
    assert not (prepared_root("hello") / "app" / "index.php.rej").exists()
    # a starting point of another target is refused before anything starts
    base_dir = tmp_path / "verified"
    base_dir.mkdir()
    (base_dir / "verify.json").write_text(json.dumps({
        "target": "minicms", "confirmed": True, "remediations": [], "php_ini": {"after": {}}}))
    r = lockdown("compare", "hello", "--on-top-of", base_dir, "--with", "opcache.enable=0",
                 "--run-dir", tmp_path / "c2")
    assert r.returncode == 2 and "verified on 'minicms', not 'hello'" in r.stderr and r.stderr.count("\n") == 1
    assert not (tmp_path / "c2").exists()
