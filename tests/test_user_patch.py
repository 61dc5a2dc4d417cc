"""The user's own diffs (remediation/user_patch.py): `lockdown run --patch` serves every copy
with them and records them as the run's starting point; the checks that refuse a diff before
anything starts; and how a starting point is worded (remediation/base.describe)."""
from __future__ import annotations

import json

import pytest

from lockdown.analyzers.findings import Finding, Remediation
from lockdown.errors import LockdownError
from lockdown.remediation.base import Base, describe, with_patches
from lockdown.remediation.recipes import unified_diff
from lockdown.remediation.user_patch import check_patches, load_patch

from conftest import prepared_root, processes_mentioning
from test_compare import FEWER, SEVEN


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
                        (("--finding", "hot-builtins", "--remediation", "1"), "not with --all, --each or --remediation"),
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
    assert checked.checked == "applies with patch -p1 to a copy of the prepared app tree with the verified fixes applied"
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


def test_compare_a_patch_on_top_of_verified_fixes(lockdown, tmp_path):
    """`compare --on-top-of VERIFIED --patch FILE`: both arms start from the verified fix (hello's
    loop cut to 5), the second also gets the patch made against it (5 -> 7), so the change
    measured is the patch's alone."""
    base_dir = tmp_path / "verified"
    base_dir.mkdir()
    fix = {"kind": "diff", "file": "index.php", "content": FEWER, "steps": [], "description": "recipe"}
    (base_dir / "verify.json").write_text(json.dumps({
        "target": "hello", "confirmed": True, "remediations": [fix], "base_remediations": [],
        "php_ini": {"before": {}, "after": {"memory_limit": "160M"}}}))
    (tmp_path / "seven.diff").write_text(SEVEN)
    run_dir = tmp_path / "cmp"
    r = lockdown("compare", "hello", "--on-top-of", base_dir, "--patch", tmp_path / "seven.diff", "--runs", "5",
                 "--duration", "1", "--warmup-duration", "0", "--run-dir", run_dir)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "[patch] 1 diff(s) apply to a copy of the prepared app tree with the verified fixes applied" in r.stdout
    assert f"  both on top of the 1 fix(es) verified in {base_dir}" in r.stdout
    result = json.loads((run_dir / "compare.json").read_text())
    assert result["php_ini"]["both"] == {"memory_limit": "160M"}        # the verified after arm's
    assert result["base"]["source"] == str(base_dir) and result["base"]["remediations"][0]["content"] == FEWER
    first = result["responses"]["pages"][0]["first_difference"]
    assert first["before"].endswith("<li>world #4</li></ul>") and "<li>world #6</li></ul>" in first["after"]
    # a base of another target is refused before anything starts
    (base_dir / "verify.json").write_text(json.dumps({
        "target": "minicms", "confirmed": True, "remediations": [fix], "php_ini": {"after": {}}}))
    r = lockdown("compare", "hello", "--on-top-of", base_dir, "--with", "opcache.enable=0", "--run-dir", tmp_path / "c2")
    assert r.returncode == 2 and "verified on 'minicms', not 'hello'" in r.stderr and r.stderr.count("\n") == 1
    assert not (tmp_path / "c2").exists()
