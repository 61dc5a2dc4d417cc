"""The next round of a lockdown (`lockdown run --on-top-of VERIFIED`, remediation/base.py): a
run served with fixes already verified, whose patches are made against the patched files and
whose verifications apply the base to both arms."""
from __future__ import annotations

import json

from conftest import VERIFY_ARGS, prepared_root, tree_digest
from lockdown.remediation.base import base_refused, load_base, patched_tree


def test_a_second_round_starts_from_the_verified_fix(lockdown, minicms_verified, tmp_path):
    """On top of minicms's verified db-static-cache fix (a diff of config.php): the l10n
    lookups are gone from the second round, the other findings remain, and their config.php
    diffs apply on top of that fix; verifying one applies both, and measures it against the
    site with the first fix in."""
    v, first, digest = minicms_verified
    assert v.returncode in (0, 3), v.stderr[-3000:]
    # the shared verification runs 1 s pairs, and on a noisy host it may not reach significance
    # (exit 3); a base must be confirmed, so its verify.json is taken as confirmed here: what is
    # tested is the round's mechanics, and the refusal of an unconfirmed base is tested below
    base_dir = tmp_path / "base"
    base_dir.mkdir()
    data = json.loads((first / "verify" / "db-static-cache" / "verify.json").read_text())
    assert data["reprofile"]["gone"]
    (base_dir / "verify.json").write_text(json.dumps({**data, "confirmed": True}))
    out = tmp_path / "round2"
    r = lockdown("run", "minicms", "-o", out, "--on-top-of", base_dir, "--runs", "1", "--duration", "3",
                 "--warmup-duration", "0", "--requests", "30", "--no-probe")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert f"[base] on top of the 1 fix(es) verified in {base_dir}: diff config.php" in r.stdout
    doc = json.loads((out / "findings.json").read_text())
    keys = {f["key"] for f in doc["findings"]}
    assert "db-static-cache" not in keys and {"fs-scan", "repeated-call"} <= keys, keys
    base = doc["run"]["base"]
    assert base["source"] == str(base_dir) and [x["file"] for x in base["remediations"]] == ["config.php"]
    assert "--on-top-of" in doc["run"]["options"]
    bench = json.loads((out / "bench.json").read_text())
    assert not bench["canonical"] and "on_top_of" in bench["non_default_options"]
    memo = next(f for f in doc["findings"] if f["key"] == "repeated-call")["remediations"][0]
    assert memo["file"] == "config.php" and "with the base's diffs applied" in memo["checked"]
    # the second fix, verified: both arms get the first, the after arm both diffs to config.php
    vr = lockdown("verify", out, "--finding", "repeated-call", *VERIFY_ARGS, "--no-probe")
    assert vr.returncode in (0, 3), vr.stdout[-3000:] + vr.stderr[-3000:]
    assert f"[base] both arms start from the 1 fix(es) verified in {base_dir}" in vr.stdout
    before = vr.stdout.split("[start] before", 1)[1].split("[start] after", 1)[0]
    assert "[remedy] patch -p1 config.php" in before
    result = json.loads((out / "verify" / "repeated-call" / "verify.json").read_text())
    assert result["base_source"] == str(base_dir) and len(result["base_remediations"]) == 1
    assert result["reprofile"]["gone"] and result["responses"]["same"], result["responses"]
    assert f"both arms on top of the 1 fix(es) verified in {base_dir}" in vr.stdout
    summary = lockdown("writeup", out, "-o", tmp_path / "issues")
    assert summary.returncode == 0
    assert "**Starting point:** the 1 fix(es) verified in" in (tmp_path / "issues" / "SUMMARY.md").read_text()
    # a third round starts from both (confirmed or not, as above, on 1 s pairs): the base it
    # loads holds the first fix, then the second, and both diffs apply to the prepared tree in
    # that order (what `run --on-top-of` serves; the run itself is tested above)
    base3 = tmp_path / "base3"
    base3.mkdir()
    (base3 / "verify.json").write_text(json.dumps({**result, "confirmed": True}))
    third = load_base(base3, "minicms")
    assert third.describe() == f"the 2 fix(es) verified in {base3}"
    assert [r.content for r in third.remediations] == [data["remediations"][0]["content"],
                                                       result["remediations"][0]["content"]]
    app = prepared_root("minicms") / "app"
    patched = patched_tree(app, third.remediations, tmp_path / "round3-app", base_refused)
    assert (patched / "config.php").read_text() != (app / "config.php").read_text()
    assert tree_digest(app) == digest      # nothing reached the prepared tree


def test_only_a_confirmed_verification_of_the_same_target_is_a_base(lockdown, minicms_verified, tmp_path):
    _, first, _ = minicms_verified
    for where, says in ((tmp_path, "no verify.json there or in its verify/all"),
                        (first / "verify" / "db-static-cache", "verified on 'minicms', not 'hello'")):
        r = lockdown("run", "hello", "-o", tmp_path / "out", "--on-top-of", where, "--no-bench")
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and says in r.stderr, r.stderr
        assert not (tmp_path / "out").exists()
    unconfirmed = tmp_path / "v"
    unconfirmed.mkdir()
    data = json.loads((first / "verify" / "db-static-cache" / "verify.json").read_text())
    (unconfirmed / "verify.json").write_text(json.dumps({**data, "confirmed": False}))
    r = lockdown("run", "minicms", "-o", tmp_path / "out", "--on-top-of", unconfirmed, "--no-bench")
    assert r.returncode == 2 and "did not confirm its fixes" in r.stderr and not (tmp_path / "out").exists()
    (unconfirmed / "verify.json").write_text("{")
    r = lockdown("run", "minicms", "-o", tmp_path / "out", "--on-top-of", unconfirmed, "--no-bench")
    assert r.returncode == 2 and "is damaged" in r.stderr and r.stderr.count("\n") == 1
