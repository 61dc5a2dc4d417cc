"""disk-spill on the real stack: the sortspill fixture's pages make MariaDB 10.11 write to disk on
every execution (GROUP BY a TEXT column: an on-disk Aria temporary table; ORDER BY it over
3,000 rows: a sort merged from temporary files), and its control page gets the same answers in
memory. The finding is on the two spilling URLs and not on the control, whose statements the
server ran with in-memory temporary tables and sorts only."""
import json

from lockdown.bundle.store import open_bundle

SPILL = {"tmp_table_on_disk", "filesort_on_disk", "merge_passes"}


def test_disk_spill_found_on_the_spilling_pages_and_not_on_the_control(lockdown, tmp_path):
    from conftest import processes_mentioning
    out = tmp_path / "out"
    r = lockdown("run", "sortspill", "--no-bench", "--no-probe", "--requests", "20", "-o", out, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    findings = json.loads((out / "findings.json").read_text())["findings"]
    spills = {tuple(f["urls"]): f for f in findings if f["id"] == "disk-spill"}
    assert set(spills) == {("/?p=dupes",), ("/?p=sorted",)}, [(f["id"], f["urls"]) for f in findings]
    assert not any("/?p=control" in f["urls"] for f in findings if f["severity"] != "info")

    dupes = spills[("/?p=dupes",)]["details"]
    assert dupes["temporary_table_on_disk"] and not dupes["sort_on_disk"]
    assert dupes["fingerprint"].startswith("select body, count(*) as copies, min(id) as first from notes group by body")
    assert dupes["spilled"] == dupes["plan_known"] == dupes["executions"] == dupes["plan"]["tmp_table_on_disk"] >= 5
    assert dupes["check_columns"] == ["body"] and dupes["table"] == "notes" and dupes["executions_per_request"] == 1

    ordered = spills[("/?p=sorted",)]["details"]
    assert ordered["sort_on_disk"] and not ordered["temporary_table_on_disk"]
    assert ordered["fingerprint"] == "select id, title, body from notes order by body"
    assert ordered["spilled"] == ordered["plan_known"] == ordered["plan"]["merge_passes"] >= 5
    assert ordered["check_columns"] == ["body"] and ordered["rows_sent"] == 3000
    # the server's own sizes, read by the capture (manifest database.variables), quoted
    variables = json.loads((out / "bundle" / "manifest.json").read_text())["database"]["variables"]
    assert set(variables) == {"tmp_table_size", "max_heap_table_size", "sort_buffer_size", "max_sort_length"}
    assert "on the captured server" in spills[("/?p=sorted",)]["summary"]
    # the server's own counters agree: tables on disk and merge passes, nothing else flagged
    server = json.loads((out / "analysis.json").read_text())["database_status"]
    assert {c["name"] for c in server["checks"] if c["flagged"]} == {"temporary tables", "sort merge passes"}
    assert server["per_request"]["Created_tmp_disk_tables"] > 0 and server["per_request"]["Sort_merge_passes"] > 0
    for f in spills.values():
        assert f["remediations"] == [] and "does not know the schema" in f["details"]["no_patch"]
        assert f["severity"] in ("medium", "high") and f["share_pct"] > 3

    # the control did the same kinds of work, in memory: a temporary table and sorts, none on disk
    bundle = open_bundle(out / "bundle")
    url_of = {q.id: q.url or q.uri for q in bundle.requests()}
    control = [s for s in bundle.statements() if url_of.get(s.request) == "/?p=control"]
    flags = [set(s.plan) for s in control if s.plan is not None]
    assert len(flags) == len(control) >= 15 and not any(f & SPILL for f in flags)
    assert sum("tmp_table" in f for f in flags) * 3 == len(flags)
    assert sum("filesort" in f for f in flags) * 3 == 2 * len(flags)
    assert processes_mentioning(str(out)) == []
