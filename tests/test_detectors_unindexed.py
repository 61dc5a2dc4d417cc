"""unindexed-query on synthetic contexts: the slow log's Rows_examined against Rows_sent, with
the index hint taken from the statement; negative cases (small tables, a full read asked for,
writes, a scan on a minority of a URL's views). Every number is asserted exactly."""
from __future__ import annotations

from contexts import context, request, statement
from lockdown.analyzers.detectors import unindexed_query
from lockdown.analyzers.detectors.unindexed_query import index_hint, is_filtered_select

SCAN = "SELECT id, author_name, body FROM comments WHERE post_id = {} ORDER BY created_at DESC LIMIT 20"


def post_requests(n=4, examined=40_000, sql=SCAN, duration_us=9_000):
    reqs = [request(f"r{i:06d}", f"/post/{i}") for i in range(n)] + [request("r000100", "/")]
    stmts = [statement(r.id, "SELECT id, title FROM posts WHERE id = 1") for r in reqs]
    stmts += [statement(f"r{i:06d}", sql.format(i), duration_us=duration_us, rows_sent=20,
                        rows_examined=examined) for i in range(n)]
    return reqs, stmts


def test_a_lookup_that_reads_the_whole_table_is_found_with_its_index_hint():
    reqs, stmts = post_requests()
    [f] = unindexed_query.detect(context(reqs, stmts))
    assert f.urls == [f"/post/{i}" for i in range(4)]
    assert f.details["rows_examined"] == 40_000 and f.details["rows_sent"] == 20
    assert f.details["table"] == "comments" and f.details["columns"] == ["post_id", "created_at"]
    # 4 x 9 ms of server time over 5 requests of 100 ms (no round trip measured: server only)
    assert f.share_pct == 7.2
    assert "an index on `comments` (post_id, created_at)" in f.summary


def test_the_servers_own_plan_flags_are_evidence():
    """With the slow log's query_plan lines, the finding says how many executions the server
    itself ran as a full scan (and what else it did); without them it says nothing of it."""
    from dataclasses import replace
    reqs, stmts = post_requests()
    scans = [s for s in stmts if s.rows_examined == 40_000]
    flags = [["full_scan", "filesort"], ["full_scan", "filesort"], ["full_scan", "filesort"], ["filesort"]]
    planned = [s for s in stmts if s not in scans] + [replace(s, plan=f) for s, f in zip(scans, flags)]
    [f] = unindexed_query.detect(context(reqs, planned))
    row = next(e for e in f.evidence if e.what == "executions the server ran as a full table scan")
    assert row.value == "3 of 4; also filesort 100%"
    assert f.details["plan"] == {"full_scan": 3, "filesort": 4} and f.details["plan_known"] == 4
    [f] = unindexed_query.detect(context(reqs, stmts))
    assert not any(e.what.startswith("executions the server ran") for e in f.evidence)


def test_small_tables_full_reads_writes_and_occasional_scans_are_not_flagged():
    reqs, stmts = post_requests(examined=900)              # under min_rows_examined
    assert unindexed_query.detect(context(reqs, stmts)) == []
    reqs, stmts = post_requests(sql="SELECT COUNT(*) FROM comments /* {} */")   # no WHERE
    assert unindexed_query.detect(context(reqs, stmts)) == []
    reqs, stmts = post_requests(sql="UPDATE comments SET flag = 1 WHERE post_id = {}")
    assert unindexed_query.detect(context(reqs, stmts)) == []
    # one URL, scanned on 1 of its 3 views: under min_request_share
    reqs = [request(f"r{i:06d}", "/post/1") for i in range(3)]
    stmts = [statement("r000000", SCAN.format(1), rows_sent=20, rows_examined=40_000)]
    stmts += [statement(r, SCAN.format(1), rows_sent=20, rows_examined=21) for r in ("r000001", "r000002")]
    assert unindexed_query.detect(context(reqs, stmts)) == []
    # the same scan on 2 of 3 views is flagged, and the threshold is a threshold
    stmts[1] = statement("r000001", SCAN.format(1), rows_sent=20, rows_examined=40_000)
    assert len(unindexed_query.detect(context(reqs, stmts))) == 1
    strict = {"unindexed-query": {"min_request_share": 0.9}}
    assert unindexed_query.detect(context(reqs, stmts, thresholds=strict)) == []


def test_statement_text_helpers():
    assert is_filtered_select("/* app */ SELECT a FROM t WHERE b = 1")
    assert not is_filtered_select("SELECT a FROM t WHERE_x")
    assert not is_filtered_select("SELECT 'WHERE' FROM t")                 # a literal, not a clause
    assert not is_filtered_select("SELECT /*lockdown-capture r1*/ ID FROM information_schema.PROCESSLIST WHERE ID <> 1")
    hint = index_hint("SELECT o.id FROM `shop`.`orders` o WHERE o.customer_id IN (1, 2) AND o.status = 'x' "
                      "ORDER BY o.created_at DESC, o.id LIMIT 5")
    assert hint == ("orders", ["customer_id", "status", "created_at", "id"])
    assert index_hint("SELECT a FROM t WHERE name LIKE 'x%'") == ("t", ["name"])
