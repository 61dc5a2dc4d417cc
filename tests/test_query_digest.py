"""Query classes: fingerprints as pt-query-digest makes them, and exact per-class numbers."""
from __future__ import annotations

import math

import pytest

from lockdown.analyzers.query_digest import (QueryClass, by_request, digest, fingerprint, pct95,
                                             query_id)
from lockdown.bundle.model import RequestRecord, Statement

# Cases from percona-toolkit's own tests of QueryRewriter::fingerprint (t/lib/QueryRewriter.t).
PT_CASES = [
    (r"""UPDATE groups_search SET  charter = '   -------3\'\' XXXXXXXXX.\n    \n    """
     r"""-----------------------------------------------------', show_in_list = 'Y' """
     r"""WHERE group_id='aaaaaaaa'""",
     "update groups_search set charter = ?, show_in_list = ? where group_id=?"),
    ("SELECT /*!40001 SQL_NO_CACHE */ * FROM `film`", "mysqldump"),
    ("CALL foo(1, 2, 3)", "call foo"),
    ("administrator command: Init DB", "administrator command: Init DB"),
    ("REPLACE /*foo.bar:3/3*/ INTO checksum.checksum (db, tbl, chunk, boundaries, this_cnt, "
     "this_crc) SELECT 'foo', 'bar', 2 AS chunk_num, '`id` >= 2166633', COUNT(*) AS cnt "
     "FROM `foo`.`bar` USE INDEX (`PRIMARY`) WHERE (`id` >= 2166633); ", "percona-toolkit"),
    ("use `foo`", "use ?"),
    ("select \n--bar\n foo", "select foo"),
    ("select foo--bar\nfoo", "select foo foo"),
    ("select foo -- bar\n", "select foo "),
    ("select null, 5.001, 5001. from foo", "select ?, ?, ? from foo"),
    ("select 'hello', '\nhello\n', \"hello\", '\\'' from foo", "select ?, ?, ?, ? from foo"),
    ("select 'hello'\n", "select ?"),
    ("select   foo", "select foo"),
    ("SELECT * from foo where a = 5", "select * from foo where a = ?"),
    ("select 0e0, +6e-30, -6.00 from foo where a = 5.5 or b=0.5 or c=.5",
     "select ?, ?, ? from foo where a = ? or b=? or c=?"),
    ("select 0x0, x'123', 0b1010, b'10101' from foo", "select ?, ?, ?, ? from foo"),
    (" select  * from\nfoo where a = 5", "select * from foo where a = ?"),
    ("select * from foo where a in (5) and b in (5, 8,9 ,9 , 10)",
     "select * from foo where a in(?+) and b in(?+)"),
    ("select foo_1 from foo_2_3", "select foo_? from foo_?_?"),
    ("select 123foo from 123foo", "select ?oo from ?oo"),
    ("select 123_foo from 123_foo", "select ?_foo from ?_foo"),
    ("insert into abtemp.coxed select foo.bar from foo",
     "insert into abtemp.coxed select foo.bar from foo"),
    ("insert into foo(a, b, c) values(2, 4, 5)", "insert into foo(a, b, c) values(?+)"),
    ("insert into foo(a, b, c) values(2, 4, 5) , (2,4,5)", "insert into foo(a, b, c) values(?+)"),
    ("insert into foo(a, b, c) value(2, 4, 5)", "insert into foo(a, b, c) value(?+)"),
    ("select * from foo limit 5", "select * from foo limit ?"),
    ("select * from foo limit 5, 10", "select * from foo limit ?"),
    ("select * from foo limit 5 offset 10", "select * from foo limit ?"),
    ("select 1 union select 2 union select 4", "select ? /*repeat union*/"),
    ("select 1 union all select 2 union all select 4", "select ? /*repeat union all*/"),
    ("select * from (select 1 union all select 2 union all select 4) as x "
     "join (select 2 union select 2 union select 3) as y",
     "select * from (select ? /*repeat union all*/) as x join (select ? /*repeat union*/) as y"),
    ("REPLACE INTO `film_actor` VALUES (1,1,'2006-02-15 04:46:27'),(1,23,'2006-02-15 04:46:27')",
     "replace into `film_actor` values(?+)"),
    ("INSERT IGNORE INTO `film_actor` VALUES (1,1,'2006-02-15'),(1,23,'2006-02-15')",
     "insert ignore into `film_actor` values(?+)"),
    ("INSERT INTO foo (a,b,c,d,e,f,g,h) VALUES (1,2,3,4,5,6,7,8),(1,2,3,4,5,6,7,8)",
     "insert into foo (a,b,c,d,e,f,g,h) values(?+)"),
    # several rows: cut after the first, ON DUPLICATE KEY UPDATE and all (the last s///)
    ("INSERT INTO t (a) VALUES (1),(2) ON DUPLICATE KEY UPDATE a=VALUES(a)", "insert into t (a) values(?+)"),
    ("select c from t where i=1 order by c asc", "select c from t where i=? order by c"),
    ("select * from t where i=1 order by a, b ASC, d DESC, e asc",
     "select * from t where i=? order by a, b, d desc, e"),
    ("select * from t where i=1      order            by \n      a,  b          ASC, d    DESC,"
     "    \n                             \n                             e asc",
     "select * from t where i=? order by a, b, d desc, e"),
    ("LOAD DATA INFILE '/tmp/foo.txt' INTO db.tbl", "load data infile ? into db.tbl"),
    ("/* -- S++ SU ABORTABLE -- spd_user: rspadim */SELECT SQL_SMALL_RESULT SQL_CACHE DISTINCT "
     "centro_atividade FROM est_dia WHERE unidade_id=1001 AND item_id=67 AND item_id_red=573",
     "select sql_small_result sql_cache distinct centro_atividade from est_dia "
     "where unidade_id=? and item_id=? and item_id_red=?"),
    ("SELECT * FROM tbl WHERE id=1 AND flag=true AND trueflag=FALSE",
     "select * from tbl where id=? and flag=? and trueflag=?"),
    # pt-fingerprint's documented example.
    ("SELECT name, password FROM user WHERE id='12823'",
     "select name, password from user where id=?"),
    ("select name,   password from user\n   where id=5", "select name, password from user where id=?"),
]

# WordPress-like statements and the real tool's quirks (each checked against the Perl rules).
WP_CASES = [
    ("SELECT option_value FROM wp_options WHERE option_name = 'WPLANG' LIMIT 1",
     "select option_value from wp_options where option_name = ? limit ?"),
    ("SELECT post_id, meta_key, meta_value FROM wp_postmeta WHERE post_id IN (12,34,56) "
     "ORDER BY meta_id ASC",
     "select post_id, meta_key, meta_value from wp_postmeta where post_id in(?+) order by meta_id"),
    ("SELECT SQL_CALC_FOUND_ROWS  wp_posts.ID FROM wp_posts  WHERE 1=1  AND "
     "((wp_posts.post_type = 'post' AND (wp_posts.post_status = 'publish')))  "
     "ORDER BY wp_posts.post_date DESC LIMIT 0, 10",
     "select sql_calc_found_rows wp_posts.id from wp_posts where ?=? and "
     "((wp_posts.post_type = ? and (wp_posts.post_status = ?))) "
     "order by wp_posts.post_date desc limit ?"),
    ("SET NAMES 'utf8mb4' COLLATE 'utf8mb4_unicode_520_ci'", "set names ? collate ?"),
    ("SET NAMES utf8mb4", "set names utf?m?"),  # digits in words go, then the `b?` leftover
    ("SELECT * FROM wp_2_options WHERE autoload = 'yes'",
     "select * from wp_?_options where autoload = ?"),
    ("UPDATE wp_options SET option_value = option_value + 1 WHERE option_name = 'hits'",
     "update wp_options set option_value = option_value ? ? where option_name = ?"),
    ("SELECT a-b FROM t", "select a? from t"),
    ("INSERT INTO `wp_options` (`option_name`, `option_value`, `autoload`) VALUES "
     "('_transient_doing_cron', '1700000000.1234', 'yes') ON DUPLICATE KEY UPDATE "
     "`option_name` = VALUES(`option_name`), `autoload` = VALUES(`autoload`)",
     "insert into `wp_options` (`option_name`, `option_value`, `autoload`) values(?+) "
     "on duplicate key update `option_name` = values(`option_name`), "
     "`autoload` = values(`autoload`)"),
    ("SELECT * FROM wp_posts WHERE post_parent IS NULL", "select * from wp_posts where post_parent is ?"),
    ("SELECT /* WP_Query */ ID FROM wp_posts # trailing", "select id from wp_posts "),
    ("SELECT /*!40001 SQL_NO_CACHE */ id FROM t", "select /*!? sql_no_cache */ id from t"),
    ("CALL `wp`.`Recount` (42, 'x')", "call `wp`.`recount` (?, ?)"),
    ("  CALL Wp.Recount(42, 'x')", "call wp.recount"),
    ("USE wordpress", "use ?"),
    ("SELECT 0xFF, 0x1f", "select ?ff, ?"),  # number rule runs before lower-casing
    ("SELECT * FROM t WHERE a IN ('x', NULL, 3)", "select * from t where a in(?+)"),
    ("SELECT * FROM t WHERE id IN (SELECT id FROM u WHERE x = 1)",
     "select * from t where id in (select id from u where x = ?)"),
    ("(SELECT a FROM t LIMIT 1, 2) UNION (SELECT b FROM u LIMIT 3, 4)",
     "(select a from t limit ?) union (select b from u limit ?, ?)"),
    ("SELECT * FROM t WHERE a = -1 AND b = \"x\"", "select * from t where a = ? and b = ?"),
    ("SELECT * FROM t ORDER BY ascii_name", "select * from t order by ascii_name"),
    ("SELECT * FROM t ORDER BY a, b asc_name", "select * from t order by a, b_name"),
]


@pytest.mark.parametrize("sql,expected", PT_CASES + WP_CASES)
def test_fingerprint(sql, expected):
    assert fingerprint(sql) == expected


def test_fingerprint_known_deficiency_escaped_backslash():
    # pt's regexes drop `\'` before matching strings, so a string ending in `\\` stays open.
    assert fingerprint("select '\\\\' from foo") == "select '\\ from foo"


@pytest.mark.parametrize("sql,expected,opts", [
    ("SELECT * FROM db.fbc5e685a5d3d45aa1d0347fdb7c4d35_temp where id=1",
     "select * from db.?_temp where id=?", {"match_md5_checksums": True}),
    ("SELECT * FROM db.fbc5e685a5d3d45aa1d0347fdb7c4d35_temp where id=1",    # without the option,
     "select * from db.fbc?_temp where id=?", {}),                              # a number from its first digit
    ("SELECT * FROM db.temp_fbc5e685a5d3d45aa1d0347fdb7c4d35 where id=1",
     "select * from db.temp_? where id=?", {"match_md5_checksums": True}),
    ("SELECT * FROM db.fbc5e685a5d3d45aa1d0347fdb7c4d35_temp where id=1",
     "select * from db.?_temp where id=?",
     {"match_md5_checksums": True, "match_embedded_numbers": True}),
    ("SELECT * FROM prices.rt_5min where id=1", "select * from prices.rt_5min where id=?",
     {"match_embedded_numbers": True}),
    ("SELECT * FROM wp_2_options WHERE autoload = 'yes'",
     "select * from wp_2_options where autoload = ?", {"match_embedded_numbers": True}),
])
def test_fingerprint_pt_fingerprint_options(sql, expected, opts):
    assert fingerprint(sql, **opts) == expected


def test_query_id():
    # Both pairs seen in pt-query-digest 3.x output: a report's "ID 0x..." and a review table row.
    assert query_id("select * from `tests` where name = ?") == "E059E46446FBFF3138ADF5F0076612E7"
    assert query_id("select col from foo_tbl") == "538CA093E701E0CBA20C29AF174CE545"
    assert query_id("select col from foo_tbl", legacy=True) == "A20C29AF174CE545"


def test_pct95_follows_pt_cutoff():
    assert pct95([7]) == 7
    assert pct95(list(range(1, 10))) == 9        # under 10 values: the maximum
    assert pct95(list(range(1, 11))) == 9        # floor(9.5) = 9th value
    assert pct95(list(range(1, 21))) == 19
    assert pct95(list(range(1, 101))) == 95


def _req(rid: str, url: str | None) -> RequestRecord:
    return RequestRecord(id=rid, pid=1, method="GET", uri=url or "/", status=200, start_ns=0,
                         end_ns=1, start_unix=0.0, wall_us=1, cpu_us=1, peak_memory=0,
                         instrumented=False, url=url)


def _st(seq, request, sql, dur, lock=0, sent=0, examined=0, affected=0) -> Statement:
    return Statement(seq=seq, request=request, attribution="order" if request else "none",
                     thread_id=1, schema="wp", sql=sql, duration_us=dur, lock_us=lock,
                     rows_sent=sent, rows_examined=examined, rows_affected=affected,
                     timestamp=None)


REQUESTS = [_req("r1", "/"), _req("r2", "/"), _req("r3", "/?p=1"), _req("r4", "/?p=2")]
STATEMENTS = [  # given out of log order on purpose
    _st(6, "r4", "UPDATE wp_options SET option_value = 'y' WHERE option_name = 'b'", 200,
        lock=30, examined=1, affected=None),
    _st(0, "r1", "SELECT * FROM wp_posts WHERE ID = 1", 100, lock=10, sent=1, examined=1),
    _st(1, "r1", "SELECT * FROM wp_posts WHERE ID = 2", 300, lock=20, sent=1, examined=1),
    _st(2, "r1", "SELECT * FROM wp_posts WHERE ID = 3", 200, sent=1, examined=1),
    _st(3, "r2", "SELECT * FROM  wp_posts WHERE ID = 9", 400, examined=1),
    _st(4, "r3", "UPDATE wp_options SET option_value = 'x' WHERE option_name = 'a'", 1000,
        lock=50, examined=1, affected=1),
    _st(5, None, "SELECT * FROM wp_posts WHERE ID = 5", 300, sent=1, examined=1),
]


def test_digest_exact_numbers():
    sel, upd = digest(STATEMENTS, REQUESTS)
    assert sel == QueryClass(
        id=query_id("select * from wp_posts where id = ?"),
        fingerprint="select * from wp_posts where id = ?", count=5, count_per_request=1.25,
        max_per_request=3, time_total=1300, time_min=100, time_max=400, time_avg=260.0,
        time_p95=400, time_median=300, time_stddev=pytest.approx(math.sqrt(10400)),
        lock_total=30, rows_sent_total=4, rows_sent_avg=0.8, rows_examined_total=5,
        rows_examined_avg=1.0, rows_affected_total=0, requests=2, urls=1,
        example="SELECT * FROM  wp_posts WHERE ID = 9")
    assert upd.fingerprint == "update wp_options set option_value = ? where option_name = ?"
    assert (upd.count, upd.count_per_request, upd.max_per_request) == (2, 0.5, 1)
    assert (upd.time_total, upd.time_min, upd.time_max, upd.time_avg) == (1200, 200, 1000, 600.0)
    assert (upd.time_p95, upd.time_median, upd.time_stddev) == (1000, 600, 400.0)
    assert (upd.lock_total, upd.rows_affected_total, upd.requests, upd.urls) == (80, 1, 2, 2)
    assert upd.example.endswith("'a'")


def test_digest_example_is_latest_of_slowest_and_no_requests():
    ss = [_st(0, "r1", "SELECT 1", 50), _st(1, "r1", "SELECT 2", 50), _st(2, "r1", "SELECT 3", 10)]
    (c,) = digest(ss, [])
    assert c.example == "SELECT 2"
    assert c.count_per_request is None and c.urls == 0 and c.max_per_request == 3
    assert digest([], REQUESTS) == []
    (alone,) = digest([_st(0, None, "SELECT 1", 5)], REQUESTS)          # in no request
    assert (alone.requests, alone.max_per_request, alone.count_per_request) == (0, 0, 0.25)


def test_digest_counts_the_servers_plan_flags():
    """pt-query-digest's "Full scan" / "Tmp table" percentages, from the plan flags each
    statement carries; executions logged without plan lines are not counted either way."""
    from dataclasses import replace
    from lockdown.analyzers.query_digest import plan_text
    ss = [replace(_st(i, "r1", f"SELECT * FROM t WHERE a = {i}", 10), plan=plan) for i, plan in
          enumerate([["full_scan", "filesort"], ["full_scan"], [], None])]
    (c,) = digest(ss, REQUESTS)
    assert c.plan == {"full_scan": 2, "filesort": 1} and c.plan_known == 3
    assert plan_text(c.plan, c.plan_known) == "full scan 67%, filesort 33%"
    assert plan_text({}, 3) == "" and plan_text({}, 0) == "-"
    assert plan_text({"filesort": 2, "merge_passes": 1}, 2) == "filesort 100%, sort merged from temporary files 50%"


def test_by_request_log_order():
    groups = by_request(STATEMENTS)
    assert list(groups) == ["r1", "r2", "r3", "r4"]
    assert [s.seq for s in groups["r1"]] == [0, 1, 2]
    assert sum(len(v) for v in groups.values()) == 6   # the unattributed one is left out


def test_digest_real_bundle_invariants(wordpress_bundle):
    """The digest of a real WordPress capture (the session's shared 50-request bundle) keeps
    every statement and every microsecond, once."""
    from lockdown.bundle.store import open_bundle
    r, path = wordpress_bundle
    assert r.returncode == 0, r.stderr
    b = open_bundle(path)
    statements, requests = b.statements(), b.requests()
    classes = digest(statements, requests)
    assert sum(c.count for c in classes) == len(statements)
    assert sum(c.time_total for c in classes) == sum(s.duration_us for s in statements)
    assert len({c.id for c in classes}) == len(classes)
    totals = [c.time_total for c in classes]
    assert totals == sorted(totals, reverse=True)
    for c in classes:
        assert c.time_min <= c.time_median <= c.time_max
        assert c.time_min <= c.time_p95 <= c.time_max
        assert 1 <= c.max_per_request <= c.count
        assert c.requests <= len(requests) and c.urls <= c.requests
        assert fingerprint(c.example) == c.fingerprint
    assert sum(len(v) for v in by_request(statements).values()) == sum(
        1 for s in statements if s.request is not None)
