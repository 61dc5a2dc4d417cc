"""The time accounting on real captures (issue 35): explained + unexplained = 100% of the sampled
request time within rounding, overall and per URL, with the hotspot findings among the findings
and owning none of it. catalog (a capture, then the detect step with the hotspot step, as
`lockdown analyze` reckons it) and minicms (a whole `lockdown run`, its accounting.json, after
the argument probe and the run's hotspot step). The fixture ledger's run is test_ledger.py's."""
import json
import math

from lockdown.analyzers import accounting as A
from lockdown.analyzers.detectors import build_context, detect, load_thresholds
from lockdown.analyzers.findings import Finding
from lockdown.bundle.store import open_bundle


def tiles(part: dict) -> None:
    assert part["total_us"] > 0
    assert abs(part["explained_us"] + part["unexplained_us"] - part["total_us"]) <= 0.2    # rounded to 0.1 us
    assert abs(part["explained_pct"] + part["unexplained_pct"] - 100.0) <= 0.02


def test_catalog_capture_is_tiled_and_hotspots_own_nothing(lockdown, tmp_path):
    out = tmp_path / "b"
    r = lockdown("profile", "catalog", "--requests", "40", "-o", out, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    ctx = build_context(open_bundle(out), load_thresholds())
    found = detect(ctx)
    acc = A.of_context(ctx, found)
    j = acc.to_json()
    tiles(j)
    for u in j["urls"]:
        tiles(u)
    assert math.isclose(sum(u["total_us"] for u in j["urls"]), j["total_us"], abs_tol=1.0)
    assert j["explained_pct"] > 0 and len(j["urls"]) == 5
    # a hotspot finding for every unexplained function, made up here, explains nothing more
    made = [Finding(id="hotspot", title="t", severity="high", share_pct=h.share_pct, summary="", urls=h.urls,
                      details={"function": h.name}, key=f"hotspot-x{i}")
            for i, h in enumerate(acc.hotspots["inclusive"])]
    assert made
    more = A.of_context(ctx, found + made)
    assert more.overall.explained_us == acc.overall.explained_us
    assert {f.key for f in more.findings} == {f.key for f in acc.findings}
    assert {f.key for f in made} <= set(more.informational)


def test_minicms_runs_accounting_is_tiled(minicms_run):
    r, out = minicms_run
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    acc = json.loads((out / "accounting.json").read_text())
    tiles(acc)
    for u in acc["urls"]:
        if u["total_us"]:
            tiles(u)
    findings = json.loads((out / "findings.json").read_text())["findings"]
    for f in findings:
        if f["id"] == "hotspot":
            assert f["key"] in acc["informational"] and f["key"] not in acc["by_finding_pct"]
