"""disk-spill on synthetic contexts: the server's own plan flags (slow log query_plan lines) of a
SELECT shape that writes its temporary table or its sort to disk on most views of a URL, with
the likely cause read from the statement's text; negative cases (in-memory temporary tables and
sorts, bundles without plan lines, a spill on a minority of views or of executions, writes,
lockdown's own statements). Every number is asserted exactly. The real stack is tested in
test_sortspill.py."""
from __future__ import annotations

from dataclasses import replace

from contexts import context, request, statement
from lockdown.analyzers.detectors import disk_spill
from lockdown.analyzers.detectors.disk_spill import check_columns, describe_causes, shape

DUPES = "SELECT body, COUNT(*) AS copies, MIN(id) AS first FROM notes GROUP BY body ORDER BY copies DESC LIMIT {}"
SORTED = "SELECT id, title, body FROM notes WHERE topic = 'topic{}' ORDER BY body"
ON_DISK = ["full_scan", "tmp_table", "tmp_table_on_disk", "filesort"]
MERGED = ["full_scan", "filesort", "merge_passes"]
IN_MEMORY = ["full_scan", "tmp_table", "filesort"]


def planned(rid, sql, plan, duration_us=20_000, rows_sent=10, rows_examined=4_510):
    return replace(statement(rid, sql, duration_us=duration_us, rows_sent=rows_sent,
                             rows_examined=rows_examined), plan=plan)


def pages(n=4, sql=DUPES, plan=ON_DISK, url="/dupes"):
    """n views of `url`, each running `sql` once with `plan`, and one view of / with an
    in-memory GROUP BY (WordPress-like: not this finding)."""
    reqs = [request(f"r{i:06d}", url) for i in range(n)] + [request("r000100", "/")]
    stmts = [planned(f"r{i:06d}", sql.format(i), plan) for i in range(n)]
    stmts.append(planned("r000100", "SELECT topic, COUNT(*) FROM notes GROUP BY topic", IN_MEMORY, duration_us=900))
    return reqs, stmts


def test_a_temporary_table_on_disk_is_found_with_its_cause():
    reqs, stmts = pages()
    [f] = disk_spill.detect(context(reqs, stmts))
    assert f.id == "disk-spill" and f.urls == ["/dupes"] and f.requests == [f"r{i:06d}" for i in range(4)]
    assert f.title == "A query writes its temporary table to disk on 1 URL(s), 20.0 ms each"
    # 4 x 20 ms of server time over 5 requests of 100 ms (no round trip measured: server only)
    assert f.share_pct == 16.0 and f.severity == "high"
    d = f.details
    assert d["fingerprint"] == ("select body, count(*) as copies, min(id) as first from notes group by body "
                                "order by copies desc limit ?")
    assert d["query_id"] == "86F274CDBD55E280751521E83195A408"
    assert d["table"] == "notes" and d["check_columns"] == ["body"]
    assert d["temporary_table_on_disk"] is True and d["sort_on_disk"] is False
    assert d["plan"] == {"full_scan": 4, "tmp_table": 4, "tmp_table_on_disk": 4, "filesort": 4}
    assert (d["executions"], d["spilled"], d["plan_known"], d["executions_per_request"]) == (4, 4, 4, 1)
    assert (d["server_us"], d["rows_examined"], d["rows_sent"]) == (20_000, 4_510, 10)
    assert d["example"] == DUPES.format(0)       # the longest spilling execution (all equal: the first)
    assert "no_patch" in d and "does not know the schema" in d["no_patch"] and f.remediations == []
    ev = {e.what: e.value for e in f.evidence}
    assert ev["executions per request (median)"] == 1
    assert ev["requests with a spilling execution"] == "4 of 4"
    assert ev["executions the server flagged as spilling to disk"] == "4 of 4"
    assert ev["the server's plan flags, % of executions"] == ("full scan 100%, tmp table 100%, tmp table on disk 100%, "
                                                              "filesort 100%")
    assert ev["server time per spilling execution (median, us)"] == 20_000
    assert ev["rows examined / returned per spilling execution (median)"] == "4510 / 10"
    assert ev["time in the spilling executions, % of timed requests' wall time (server side only: no client "
              "call of a statement in the xhprof profiles)"] == 16.0
    assert ev["columns to check for TEXT/BLOB (SHOW CREATE TABLE)"] == "body"
    assert ev["example"] == DUPES.format(0)
    assert "The internal temporary table that GROUP BY needs was written to disk" in f.summary
    assert "check with SHOW CREATE TABLE `notes` whether body is TEXT or BLOB" in f.summary
    assert "(16M each by default; 4510 rows examined per execution)" in f.summary
    # the server's own sizes, when the capture read them (manifest database.variables)
    ctx = context(reqs, stmts)
    ctx.manifest["database"] = {"variables": {"tmp_table_size": "16777216", "max_heap_table_size": "33554432",
                                              "sort_buffer_size": "2097152", "max_sort_length": "1024"}}
    [g] = disk_spill.detect(ctx)
    assert "(16.0 MB and 32.0 MB on the captured server; 4510 rows examined per execution)" in g.summary
    assert "EXPLAIN shows the plan (`Using temporary` in Extra)." in f.summary
    assert "sort_buffer_size" not in f.summary


def test_a_sort_merged_from_temporary_files_is_found():
    """Merge_passes (MariaDB logs Filesort_on_disk: No beside it) and Filesort_on_disk count the
    same; the cause names the sort columns and, without a LIMIT, suggests one."""
    reqs, stmts = pages(n=3, sql=SORTED, plan=MERGED, url="/sorted")
    stmts[2] = replace(stmts[2], plan=["filesort", "filesort_on_disk"], duration_us=26_000)
    [f] = disk_spill.detect(context(reqs, stmts))
    assert f.title == "A query sorts through temporary files on disk on 1 URL(s), 20.0 ms each"
    assert f.share_pct == 16.5          # (20 + 20 + 26 ms) / 4 x 100 ms
    assert f.details["plan"] == {"full_scan": 2, "filesort": 3, "filesort_on_disk": 1, "merge_passes": 2}
    assert f.details["temporary_table_on_disk"] is False and f.details["sort_on_disk"] is True
    assert f.details["check_columns"] == ["body"] and f.details["example"] == SORTED.format(2)
    ev = {e.what: e.value for e in f.evidence}
    assert ev["the server's plan flags, % of executions"] == \
        "full scan 67%, filesort 100%, filesort on disk 33%, sort merged from temporary files 67%"
    assert "The sort (by body) did not fit sort_buffer_size (2M by default)" in f.summary
    assert "add a LIMIT" in f.summary and "(6000" not in f.summary and "(4510 examined per execution)" in f.summary
    assert "EXPLAIN shows the plan (`Using filesort` in Extra)." in f.summary


def test_in_memory_plans_missing_plans_and_occasional_spills_are_not_flagged():
    reqs, stmts = pages(plan=IN_MEMORY)                      # WordPress's every page: in memory
    assert disk_spill.detect(context(reqs, stmts)) == []
    reqs, stmts = pages(plan=None)                           # no query_plan lines in the bundle
    assert disk_spill.detect(context(reqs, stmts)) == []
    reqs, stmts = pages(sql="INSERT INTO digest SELECT body, COUNT(*) FROM notes GROUP BY body /* {} */")
    assert disk_spill.detect(context(reqs, stmts)) == []
    reqs, stmts = pages(sql="SELECT /*lockdown-capture r{}*/ body FROM t GROUP BY body")
    assert disk_spill.detect(context(reqs, stmts)) == []
    # one URL, spilling on 1 of its 3 views: under min_request_share
    reqs, stmts = pages(n=3)
    stmts[1] = replace(stmts[1], plan=IN_MEMORY)
    stmts[2] = replace(stmts[2], plan=IN_MEMORY)
    assert disk_spill.detect(context(reqs, stmts)) == []
    # on 2 of 3 it is flagged, and the threshold is a threshold
    stmts[1] = replace(stmts[1], plan=ON_DISK)
    [f] = disk_spill.detect(context(reqs, stmts))
    assert f.details["spilled"] == 2 and f.details["plan_known"] == 3 and f.requests == ["r000000", "r000001"]
    assert disk_spill.detect(context(reqs, stmts, thresholds={"disk-spill": {"min_request_share": 0.9}})) == []


def test_a_shape_that_spills_on_a_minority_of_its_executions_is_not_flagged():
    """Every view spills once, but the page runs the shape four times and the other three stay
    in memory (a rare large argument, not the shape): 4 of 16 executions, under min_execution_share."""
    reqs = [request(f"r{i:06d}", "/tag") for i in range(4)]
    stmts = [planned(r.id, DUPES.format(k), ON_DISK if k == 0 else IN_MEMORY) for r in reqs for k in range(4)]
    assert disk_spill.detect(context(reqs, stmts)) == []
    [f] = disk_spill.detect(context(reqs, stmts, thresholds={"disk-spill": {"min_execution_share": 0.25}}))
    assert (f.details["spilled"], f.details["plan_known"], f.details["executions_per_request"]) == (4, 16, 4)
    assert f.share_pct == 20.0          # the 4 spilling executions only: 4 x 20 ms / 4 x 100 ms


def causes(sql: str, table_spill: bool, sort_spill: bool, rows_examined: float):
    """(the describer's sentences, the columns to check) for a statement's text."""
    sh = shape(sql)
    return describe_causes(sh, table_spill, sort_spill, rows_examined), check_columns(sh, table_spill, sort_spill)


def test_the_cause_read_from_the_text():
    assert shape("/* app */ SELECT DISTINCT p.*, u.name AS author FROM `blog`.`posts` p "
                 "JOIN users u ON u.id = p.author WHERE p.status = 'x, y' ORDER BY p.created_at DESC, author") == {
        "table": "posts", "distinct": True, "union": False, "limit": False, "star": True, "selected": ["name"],
        "grouped": [], "group_by": False, "ordered": ["created_at"], "order_by": True}
    assert shape("SELECT MD5(body) AS h, COUNT(*) AS n FROM notes GROUP BY h ORDER BY n DESC LIMIT 10") == {
        "table": "notes", "distinct": False, "union": False, "limit": True, "star": False, "selected": [],
        "grouped": [], "group_by": True, "ordered": [], "order_by": True}
    why, check = causes("SELECT DISTINCT p.*, u.name FROM posts p JOIN users u ON u.id = p.author", True, False, 1200)
    assert check == ["name"]
    assert why[0].startswith("The internal temporary table that DISTINCT needs was written to disk")
    assert "whether any column (it selects `*`, and name) is TEXT or BLOB" in why[0]
    why, check = causes("SELECT a, b FROM t GROUP BY a, b ORDER BY c LIMIT 5", True, True, 50_000)
    assert check == ["a", "b", "c"] and len(why) == 3
    assert "whether any of a, b is TEXT or BLOB" in why[0] and "add a LIMIT" not in why[1]
    assert why[2] == "EXPLAIN shows the plan (`Using temporary` and `Using filesort` in Extra)."
