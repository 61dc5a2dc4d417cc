"""db-static-cache, n-plus-one and repeated-query on synthetic contexts: positive cases under
several table/column namings (mysqli-style and PDO-style statements look the same in the log),
negative cases (below thresholds, per-user keys, written tables, a batched listing), and the
boundaries between the three detectors in both directions. Every number is asserted exactly."""
from __future__ import annotations

import json

import pytest

from contexts import context, request, statement
from lockdown.analyzers.detectors import db_static_cache, n_plus_one, repeated_query
from lockdown.analyzers.sql_text import literals, normalize, point_lookup

WALL = 100_000  # every synthetic request's wall time (us), the builders' default


def run_all(ctx):
    return {m.ID: m.detect(ctx) for m in (db_static_cache, n_plus_one, repeated_query)}


def ev(finding, what_starts):
    """The value of the one evidence line whose `what` starts with `what_starts`."""
    hits = [e.value for e in finding.evidence if e.what.startswith(what_starts)]
    assert len(hits) == 1, (what_starts, [e.what for e in finding.evidence])
    return hits[0]


def examples(finding):
    return [e.value for e in finding.evidence if e.what == "example"]


def prelude(rid):
    """What a PHP app sends before its page queries: connection set-up and a page row."""
    return [statement(rid, "SET NAMES utf8mb4", rows_sent=0),
            statement(rid, "SELECT @@SESSION.sql_mode"),
            statement(rid, f"SELECT /*lockdown-capture {rid}*/ ID FROM information_schema.PROCESSLIST "
                           "WHERE ID <> CONNECTION_ID() AND DB = 'app'"),
            statement(rid, "SELECT id, title, body FROM pages WHERE id = 1")]


# ------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------

def test_normal_form_and_literals():
    a = ("SELECT /* LCStoreDB::get */ lc_value\n  FROM l10n_cache -- the cache\n"
         " WHERE lc_lang='en' AND lc_key = 'messages:it\\'s' LIMIT 1;")
    b = "SELECT lc_value FROM l10n_cache WHERE lc_lang = 'en' AND lc_key = 'messages:it\\'s' LIMIT 1"
    assert normalize(a) == normalize(b) == b
    assert literals(a) == ("en", "messages:it's", "1")
    assert normalize("SELECT 'a  -- not a comment' FROM t # comment") == "SELECT 'a  -- not a comment' FROM t"
    lk = point_lookup("SELECT config_value FROM `app`.`settings_store` s WHERE s.name = 'x' AND `locale` = \"fr\"")
    assert (lk.table, lk.columns, lk.values) == ("settings_store", ("name", "locale"), ("x", "fr"))
    assert point_lookup("SELECT v FROM translations WHERE k = 'a' LIMIT 1").columns == ("k",)
    assert point_lookup("SELECT a FROM t JOIN u ON u.id = t.u WHERE t.id = 5") is None
    assert point_lookup("SELECT a FROM t WHERE id IN (1, 2)") is None
    assert point_lookup("SELECT a FROM t WHERE id = 5 ORDER BY a") is None
    assert point_lookup("SELECT a FROM t WHERE id > 5") is None
    assert point_lookup("SELECT a FROM t WHERE a = 1 AND b = 2 AND c = 3") is None


# ------------------------------------------------------------------------------------------
# db-static-cache
# ------------------------------------------------------------------------------------------

L10N = "SELECT lc_value FROM l10n_cache WHERE lc_lang = 'en' AND lc_key = 'messages:{}' LIMIT 1"


def l10n_requests(n_requests=3, keys=25, missing=5, url="/", start=0, template=L10N, duration=200):
    reqs, stmts = [], []
    for i in range(start, start + n_requests):
        rid = f"r{i:06d}"
        reqs.append(request(rid, url))
        stmts += prelude(rid)
        for k in range(keys):
            stmts.append(statement(rid, template.format(f"key-{k}"), duration_us=duration,
                                   rows_sent=0 if k < missing else 1))
    return reqs, stmts


def test_db_static_cache_localisation_lookups():
    reqs, stmts = l10n_requests()
    found = run_all(context(reqs, stmts))
    assert found["n-plus-one"] == [] and found["repeated-query"] == []
    [f] = found["db-static-cache"]
    fp = "select lc_value from l?n_cache where lc_lang = ? and lc_key = ? limit ?"
    assert f.id == "db-static-cache" and f.details["fingerprint"] == fp
    assert f.details["table"] == "l10n_cache"
    # titles are plain text (terminal, HTML, markdown alike): no markdown code spans
    assert f.title == "Static data read from the database: 25 key lookups per request on table l10n_cache"
    assert f.details["key_columns"] == ["lc_lang", "lc_key"]
    assert f.details["varying_columns"] == ["lc_key"]
    assert f.details["constant_columns"] == {"lc_lang": "en"}
    assert f.details["queries_per_request"] == {"min": 25, "median": 25, "max": 25}
    assert f.details["distinct_keys"] == 25 and f.details["keys_on_every_request"] == 25
    assert f.details["missing_keys"] == 5
    assert f.details["keys_sample"][:3] == ["messages:key-0", "messages:key-1", "messages:key-10"]
    assert ev(f, "lookups per request") == "25/25/25"
    assert ev(f, "requests with the lookups") == "3 of 3"
    assert ev(f, "distinct keys") == 25
    assert ev(f, "keys looked up on every request") == 25
    assert ev(f, "of those, keys that returned no row") == 5
    assert ev(f, "a request's keys that no other request") == "0%"
    assert ev(f, "table") == "l10n_cache"
    # 3 requests x 25 lookups x 200 us over 3 x 100 ms of wall time
    assert f.share_pct == 5.0 and f.severity == "medium"
    assert f.urls == ["/"] and f.requests == ["r000000", "r000001", "r000002"]
    assert f.summary and "l10n_cache" in f.summary
    assert examples(f) == [L10N.format(f"key-{k}") for k in range(3)]
    assert ev(f, "time in these statements, % of timed requests' wall time (server side only") == 5.0


def instrumented_with_client_calls(rid, call, statements=10, calls=10, client_us=3000, server_us=100):
    """An instrumented request whose xhprof shows `calls` client calls taking `client_us` in all,
    as tideways 5 records a builtin: once under its caller, once more as a self-edge `f@1`."""
    stmts = [statement(rid, f"SELECT v FROM other WHERE id = {i}", duration_us=server_us)
             for i in range(statements)]
    profile = {"main()": {"ct": 1, "wt": 90_000},
               f"main()==>{call}": {"ct": calls, "wt": client_us},
               f"{call}==>{call}@1": {"ct": calls, "wt": client_us - 10},
               "main()==>mysqli_fetch_assoc": {"ct": calls, "wt": 5_000}}
    return request(rid, "/other", instrumented=True), stmts, {rid: profile}


@pytest.mark.parametrize("call", ["mysqli::query", "mysqli_query", "PDOStatement::execute", "PDO::query"])
def test_statement_shares_add_the_round_trip_measured_on_instrumented_requests(call):
    reqs, stmts = l10n_requests()
    r, extra, xhprof = instrumented_with_client_calls("r000100", call)
    ctx = context(reqs + [r], stmts + extra, xhprof=xhprof)
    # (3000 us in the client - 10 x 100 us in the server) / 10 calls; fetches are not round trips
    rt = ctx.round_trip
    assert (rt.requests, rt.calls, rt.client_us, rt.server_us, rt.per_call_us) == (1, 10, 3000, 1000, 200.0)
    [f] = db_static_cache.detect(ctx)
    # 3 requests x 25 lookups x (200 us server + 200 us round trip) over 3 x 100 ms; the
    # instrumented request is not timed, so it is in neither sum
    assert f.share_pct == 10.0 and f.severity == "high"
    assert ev(f, "time in these statements, % of timed requests' wall time (server time + one round trip") == 10.0
    assert ev(f, "time in these statements, server side only") == 5.0
    assert ev(f, "round trip per statement beyond its server time") == "200 us"
    assert "10 client calls in 1 instrumented requests" in [e.source for e in f.evidence
                                                            if e.what.startswith("round trip")][0]


def test_statements_that_name_their_sender_count_what_php_spends_under_it():
    """MediaWiki names the sending method in each statement (`/* LCStoreDB::get */`): Excimer's
    share of samples under it covers the framework's database layer too, and counts when larger."""
    template = "SELECT /* LCStoreDB::get */ lc_value FROM l10n_cache WHERE lc_lang = 'en' AND lc_key = '{}'"
    reqs, stmts = l10n_requests(template=template)
    # one more statement from the same sender in each request, of another shape: 25 of its 26
    # statements per request are the finding's
    stmts += [statement(r.id, "SELECT /* LCStoreDB::get */ lc_value FROM l10n_cache WHERE lc_lang = 'de'")
              for r in reqs]
    stacks = {"main;MessageCache::get;LCStoreDB::get;Database::selectField": 40,
              "main;Parser::parse": 50, "main;LCStoreDB::getLCStoreDBFake": 10}
    excimer = {r.id: dict(stacks) for r in reqs}
    [f] = db_static_cache.detect(context(reqs, stmts, excimer=excimer))
    sender = ev(f, "time in these statements, % of timed requests' wall time, "
                   "as PHP spends it in their sender LCStoreDB::get")
    assert sender == pytest.approx(40 * 25 / 26, abs=0.01)          # 40% of samples x 25/26
    assert f.share_pct == pytest.approx(40 * 25 / 26, abs=0.01) and f.severity == "high"
    assert "96% of the statements it sent" in [e.source for e in f.evidence if "sender" in e.what][0]
    # a sender that is no Excimer frame (or statements that name none) leaves the SQL estimate
    other = {r.id: {"main;Parser::parse": 100} for r in reqs}
    [g] = db_static_cache.detect(context(reqs, stmts, excimer=other))
    assert g.share_pct == 5.0 and not [e for e in g.evidence if "sender" in e.what]
    # and a smaller sampled share never lowers it
    few = {r.id: {"main;LCStoreDB::get": 1, "main;Parser::parse": 99} for r in reqs}
    [h] = db_static_cache.detect(context(reqs, stmts, excimer=few))
    assert h.share_pct == 5.0 and ev(h, "time in these statements, % of timed requests' wall time, as PHP") < 1


def test_a_sender_counts_when_nine_in_ten_statements_name_it():
    from lockdown.analyzers.detectors.statement_time import sender_share
    named = "SELECT /* LCStoreDB::get */ v FROM t WHERE k = 'a'"
    reqs, excimer = [request("r000001")], {"r000001": {"main;LCStoreDB::get": 40, "main;Parser::parse": 60}}
    for n_named, expected in ((9, ("LCStoreDB::get", 40.0, 1.0, 40.0)), (8, None)):
        stmts = [statement("r000001", named) for _ in range(n_named)] + \
                [statement("r000001", "SELECT v FROM t WHERE k = 'b'") for _ in range(10 - n_named)]
        got = sender_share(context(reqs, stmts, excimer=excimer), stmts)
        assert got == (pytest.approx(expected) if expected else None), n_named
    assert sender_share(context(reqs, stmts), stmts) is None          # no Excimer samples
    assert sender_share(context(reqs, stmts, excimer=excimer), []) is None


def test_round_trip_is_never_negative_and_absent_without_client_calls():
    reqs, stmts = l10n_requests()
    r, extra, xhprof = instrumented_with_client_calls("r000100", "mysqli::query", client_us=500)
    assert context(reqs + [r], stmts + extra, xhprof=xhprof).round_trip.per_call_us == 0.0
    r, extra, xhprof = instrumented_with_client_calls("r000100", "my_own_query_wrapper")
    ctx = context(reqs + [r], stmts + extra, xhprof=xhprof)
    assert ctx.round_trip is None
    [f] = db_static_cache.detect(ctx)
    assert f.share_pct == 5.0


def test_db_static_cache_other_names_one_key_column_two_urls():
    """`SELECT v FROM translations WHERE k = "..."`: two pages, 20 shared keys and 5 of their own."""
    reqs, stmts = [], []
    n = 0
    for url in ("/a", "/b"):
        for _ in range(2):
            rid = f"r{n:06d}"
            n += 1
            reqs.append(request(rid, url))
            stmts += prelude(rid)
            keys = [f"common.{k}" for k in range(20)] + [f"{url[1]}.{k}" for k in range(5)]
            for key in keys:
                stmts.append(statement(rid, f'SELECT v FROM translations WHERE k = "{key}"', duration_us=400))
    found = run_all(context(reqs, stmts))
    assert found["n-plus-one"] == [] and found["repeated-query"] == []
    [f] = found["db-static-cache"]
    assert f.details["table"] == "translations" and f.details["key_columns"] == ["k"]
    assert f.details["varying_columns"] == ["k"] and f.details["constant_columns"] == {}
    assert f.details["queries_per_request"] == {"min": 25, "median": 25, "max": 25}
    assert f.details["distinct_keys"] == 30
    assert f.details["keys_on_every_request"] == 20     # the 5 page-specific keys are on 2 of 4
    assert f.details["missing_keys"] == 0
    assert f.details["per_url"]["/a"]["with_lookups"] == 2
    assert f.urls == ["/a", "/b"] and f.requests == ["r000000", "r000001", "r000002", "r000003"]
    assert f.share_pct == 10.0 and f.severity == "high"   # 4 x 25 x 400 us / 400 ms


def test_db_static_cache_pdo_settings_store_with_noise_and_other_writes():
    """PDO-style statements (back-quotes, table alias, no LIMIT); writes to another table and
    lockdown's markers do not matter."""
    reqs, stmts = [], []
    for i in range(2):
        rid = f"r{i:06d}"
        reqs.append(request(rid, "/shop"))
        stmts += prelude(rid)
        stmts.append(statement(rid, "UPDATE sessions SET seen = NOW() WHERE id = 'abc'", rows_sent=0))
        for k in range(22):
            stmts.append(statement(rid, f"SELECT `config_value` FROM `settings_store` AS s WHERE s.`name` = "
                                        f"'opt_{k}' AND `locale` = 'fr'", duration_us=100))
    found = run_all(context(reqs, stmts))
    [f] = found["db-static-cache"]
    assert f.details["table"] == "settings_store"
    assert f.details["key_columns"] == ["name", "locale"] and f.details["varying_columns"] == ["name"]
    assert f.details["constant_columns"] == {"locale": "fr"}
    assert f.details["queries_per_request"] == {"min": 22, "median": 22, "max": 22}
    assert ev(f, "lookups per request") == "22/22/22"
    assert f.share_pct == 2.2 and f.severity == "low"
    assert found["n-plus-one"] == [] and found["repeated-query"] == []


def test_db_static_cache_below_threshold_is_nothing():
    reqs, stmts = l10n_requests(keys=19)
    assert run_all(context(reqs, stmts)) == {"db-static-cache": [], "n-plus-one": [], "repeated-query": []}
    # ... and found once the threshold is lowered
    [f] = db_static_cache.detect(context(reqs, stmts, thresholds={"db-static-cache": {"min_queries_per_request": 19}}))
    assert f.details["queries_per_request"]["median"] == 19


def test_db_static_cache_needs_most_requests_of_the_url():
    reqs, stmts = l10n_requests(n_requests=2)
    for i in range(2, 5):                           # three more views of "/" without the lookups
        reqs.append(request(f"r{i:06d}", "/"))
        stmts += prelude(f"r{i:06d}")
    assert db_static_cache.detect(context(reqs, stmts)) == []   # 2 of 5 < 0.8


def test_static_data_allows_up_to_30_percent_of_a_requests_keys_its_own():
    from lockdown.analyzers.detectors.db_static_cache import static_fingerprints

    def shares(own):                  # two views of /, 20 keys each, `own` of them asked by one view only
        reqs, stmts = [], []
        for i in range(2):
            rid = f"r{i:06d}"
            reqs.append(request(rid, "/"))
            keys = [f"k{j}" for j in range(20 - own)] + [f"own{i}-{j}" for j in range(own)]
            stmts += [statement(rid, f"SELECT v FROM translations WHERE k = '{k}'") for k in keys]
        return {fp: v["unique_share"] for fp, v in static_fingerprints(context(reqs, stmts)).items()}
    fp = "select v from translations where k = ?"
    assert shares(5) == {fp: 0.25} and shares(6) == {fp: pytest.approx(0.3)} and shares(7) == {}


def test_the_parent_query_is_looked_for_among_the_five_data_statements_before_the_loop():
    from lockdown.analyzers.detectors.query_loops import find_parent
    parent = statement("r1", "SELECT id, author_id FROM posts LIMIT 30", rows_sent=30)
    loop = statement("r1", "SELECT name FROM authors WHERE id = 5")
    data = [statement("r1", f"SELECT v FROM opts WHERE k = 'o{k}'") for k in range(5)]
    skipped = [statement("r1", "SET NAMES utf8mb4", rows_sent=0), prelude("r1")[2],      # noise, the marker
               statement("r1", "SELECT name FROM authors WHERE id = 4")]                 # the loop's own shape

    def found(before, counts=frozenset({30})):
        return find_parent(before + [loop], len(before), set(counts), 5)
    assert found([parent] + data[:4]) is parent and found([parent] + data) is None
    assert found([parent] + data[:4] + skipped) is parent
    wrapped = statement("r1", "((SELECT id FROM posts LIMIT 30))", rows_sent=30)
    assert found([wrapped]) is wrapped
    assert found([statement("r1", "SELECT id FROM posts", rows_sent=29)]) is None
    two = statement("r1", "SELECT id FROM posts", rows_sent=2)
    assert found([two], {2}) is two and found([statement("r1", "SELECT id FROM posts", rows_sent=1)], {1}) is None


def test_per_user_keys_are_not_static_data():
    """Keys that change on every request (per-user data) are not db-static-cache; a loop of
    them is an N+1 by the shared rule."""
    reqs, stmts = [], []
    for i in range(3):
        rid = f"r{i:06d}"
        reqs.append(request(rid, "/account"))
        stmts += prelude(rid)
        for k in range(25):
            stmts.append(statement(rid, f"SELECT pref_value FROM user_prefs WHERE user_id = {100 + i} "
                                        f"AND pref_key = 'u{i}-pref-{k}'"))
    found = run_all(context(reqs, stmts))
    assert found["db-static-cache"] == [] and found["repeated-query"] == []
    [f] = found["n-plus-one"]
    assert f.details["executions_per_request"] == {"min": 25, "median": 25, "max": 25}
    assert f.details["parent"] is None


def test_written_table_is_not_static_data():
    reqs, stmts = l10n_requests(template="SELECT v FROM translations WHERE k = '{}'")
    reqs.append(request("r000009", "/admin", method="POST"))
    stmts.append(statement("r000009", "UPDATE translations SET v = 'Hi' WHERE k = 'key-1'", rows_sent=0))
    found = run_all(context(reqs, stmts))
    assert found["db-static-cache"] == []
    [f] = found["n-plus-one"]                       # keys repeat, but the table is written
    assert f.urls == ["/"]


def test_one_key_asked_many_times_is_repeated_query_not_static_data():
    """One key 25 times a request: a missing memo (repeated-query), not a static table."""
    reqs, stmts = [], []
    for i in range(2):
        rid = f"r{i:06d}"
        reqs.append(request(rid, "/"))
        stmts += prelude(rid)
        stmts += [statement(rid, "SELECT value FROM settings WHERE name = 'site_name'") for _ in range(25)]
    found = run_all(context(reqs, stmts))
    assert found["db-static-cache"] == [] and found["n-plus-one"] == []
    [f] = found["repeated-query"]
    assert f.details["executions_per_request"] == {"min": 25, "median": 25, "max": 25}


# ------------------------------------------------------------------------------------------
# n-plus-one
# ------------------------------------------------------------------------------------------

def listing(n_requests=3, rows=30, url="/list", author_of=lambda p: 17 + p, batched=False,
            duration=150, loops_in=None):
    """A listing page: the latest posts, then (unless batched) one authors lookup per post."""
    reqs, stmts = [], []
    for i in range(n_requests):
        rid = f"r{i:06d}"
        reqs.append(request(rid, url))
        stmts += prelude(rid)
        stmts.append(statement(rid, "SELECT id, author_id, title FROM posts ORDER BY created DESC LIMIT 30",
                               rows_sent=rows))
        if batched:
            ids = ", ".join(str(author_of(p)) for p in range(rows))
            stmts.append(statement(rid, f"SELECT id, name, bio FROM authors WHERE id IN ({ids})", rows_sent=rows))
        elif loops_in is None or i in loops_in:
            for p in range(rows):
                stmts.append(statement(rid, f"SELECT id, name, bio FROM authors WHERE id = {author_of(p)}",
                                       duration_us=duration))
        stmts.append(statement(rid, "SELECT COUNT(*) FROM comments WHERE approved = 1"))
    return reqs, stmts


def test_n_plus_one_listing_with_parent_query_is_not_static_data():
    """The same author ids on every view of a read-only table: the parent query makes it N+1."""
    reqs, stmts = listing()
    found = run_all(context(reqs, stmts))
    assert found["db-static-cache"] == [] and found["repeated-query"] == []
    [f] = found["n-plus-one"]
    assert f.details["fingerprint"] == "select id, name, bio from authors where id = ?"
    assert f.details["table"] == "authors" and f.details["varying_columns"] == ["id"]
    assert f.title == "N+1 queries: 30 lookups per request on table authors"
    assert f.details["executions_per_request"] == {"min": 30, "median": 30, "max": 30}
    assert f.details["distinct_per_request"] == {"min": 30, "median": 30, "max": 30}
    assert f.details["values_sample"][:3] == ["17", "18", "19"]
    parent = f.details["parent"]
    assert parent["fingerprint"] == "select id, author_id, title from posts order by created desc limit ?"
    assert parent["rows_sent"] == {"min": 30, "median": 30, "max": 30} and parent["requests"] == 3
    ids = ", ".join(str(17 + p) for p in range(30))
    assert f.details["batched_example"] == f"SELECT id, name, bio FROM authors WHERE id IN ({ids})"
    assert ev(f, "executions per request") == "30/30/30"
    assert ev(f, "different literal values per request") == "30/30/30"
    assert ev(f, "requests with the loop") == "3 of 3"
    assert ev(f, "parent query").startswith("select id, author_id, title from posts")
    assert examples(f) == [f"SELECT id, name, bio FROM authors WHERE id = {k}" for k in (17, 18, 19)]
    assert f.share_pct == 4.5 and f.severity == "medium"    # 3 x 30 x 150 us / 300 ms
    assert f.urls == ["/list"] and f.requests == ["r000000", "r000001", "r000002"]
    assert "IN (" in f.summary


def test_n_plus_one_pdo_quoted_ids_per_product_pages():
    """Other names, quoted ids (PDO), a parent with a WHERE, a different id set per page and
    the key column not selected (the batched query adds it)."""
    reqs, stmts = [], []
    for i, (url, base) in enumerate([("/shop/1", 100), ("/shop/2", 200), ("/shop/2", 200)]):
        rid = f"r{i:06d}"
        reqs.append(request(rid, url))
        stmts += prelude(rid)
        stmts.append(statement(rid, f"SELECT id FROM products WHERE category_id = '{base}'", rows_sent=12))
        for p in range(12):
            stmts.append(statement(rid, "SELECT `path`, `alt` FROM `product_images` "
                                        f"WHERE `product_id` = '{base + p}' LIMIT 1",
                                   duration_us=500))
    found = run_all(context(reqs, stmts))
    assert found["db-static-cache"] == [] and found["repeated-query"] == []
    [f] = found["n-plus-one"]
    assert f.details["table"] == "product_images"
    assert f.details["executions_per_request"] == {"min": 12, "median": 12, "max": 12}
    assert f.details["parent"]["fingerprint"] == "select id from products where category_id = ?"
    assert f.details["parent"]["requests"] == 3
    ids = ", ".join(f"'{100 + p}'" for p in range(12))
    assert f.details["batched_example"] == ("SELECT `product_id`, `path`, `alt` FROM `product_images` "
                                            f"WHERE `product_id` IN ({ids})")
    assert f.urls == ["/shop/1", "/shop/2"]
    assert f.share_pct == 6.0   # 3 x 12 x 500 us / 300 ms


def test_n_plus_one_join_per_row_without_parent():
    """Not a single-table lookup and no parent found: still N+1 (different literals every time)."""
    reqs, stmts = [], []
    for i in range(2):
        rid = f"r{i:06d}"
        reqs.append(request(rid, f"/feed?page={i}"))
        stmts += prelude(rid)
        for p in range(15):
            stmts.append(statement(rid, "SELECT m.meta_value FROM postmeta m JOIN posts p ON p.id = m.post_id "
                                        f"WHERE p.id = {1000 * i + p} AND m.meta_key = 'thumb'"))
    [f] = n_plus_one.detect(context(reqs, stmts))
    assert f.details["table"] is None and f.details["batched_example"] is None
    assert f.title == f"N+1 queries: 15 lookups per request on {f.details['fingerprint']}"
    assert f.details["parent"] is None
    assert f.details["executions_per_request"] == {"min": 15, "median": 15, "max": 15}
    assert f.urls == ["/feed?page=0", "/feed?page=1"]
    assert db_static_cache.detect(context(reqs, stmts)) == []


def test_n_plus_one_with_two_varying_columns_proposes_no_in_list():
    """`IN (...)` over one column cannot stand for a loop whose lookups vary in two."""
    reqs, stmts = [], []
    for i in range(2):
        rid = f"r{i:06d}"
        reqs.append(request(rid, "/grid"))
        stmts += prelude(rid)
        stmts += [statement(rid, f"SELECT v FROM cells WHERE x = {100 * i + k} AND y = {k % 4}") for k in range(12)]
    [f] = n_plus_one.detect(context(reqs, stmts))
    assert f.details["table"] == "cells" and f.details["varying_columns"] == ["x", "y"]
    assert f.details["batched_example"] is None and "For example" not in f.summary
    assert f.details["values_sample"][:3] == ["0 | 0", "1 | 1", "2 | 2"] and len(f.details["values_sample"]) == 12
    # one varying column beside a constant one: the IN list is over it alone
    stmts = [s for s in stmts if "cells" not in s.sql]
    for i in range(2):
        stmts += [statement(f"r{i:06d}", f"SELECT v FROM cells WHERE x = {100 * i + k} AND y = 3") for k in range(12)]
    [f] = n_plus_one.detect(context(reqs, stmts))
    assert f.details["varying_columns"] == ["x"] and f.details["values_sample"][:2] == ["0", "1"]
    in_list = ", ".join(map(str, range(12)))
    assert f.details["batched_example"] == f"SELECT x, v FROM cells WHERE x IN ({in_list}) AND y = 3"


def test_n_plus_one_below_threshold_is_nothing():
    reqs, stmts = listing(rows=9)
    assert run_all(context(reqs, stmts)) == {"db-static-cache": [], "n-plus-one": [], "repeated-query": []}
    reqs, stmts = listing(rows=10)                          # min_executions is a floor: 10 is enough
    assert [ev(f, "executions per request") for f in n_plus_one.detect(context(reqs, stmts))] == ["10/10/10"]


def test_batched_listing_is_clean():
    """The control: the same page with one `IN (...)` query."""
    reqs, stmts = listing(batched=True)
    assert run_all(context(reqs, stmts)) == {"db-static-cache": [], "n-plus-one": [], "repeated-query": []}


def test_n_plus_one_needs_half_the_views_of_the_url():
    reqs, stmts = listing(n_requests=3, loops_in={0})
    assert n_plus_one.detect(context(reqs, stmts)) == []
    reqs, stmts = listing(n_requests=3, loops_in={0, 1})
    [f] = n_plus_one.detect(context(reqs, stmts))
    assert f.requests == ["r000000", "r000001"] and ev(f, "requests with the loop") == "2 of 3"
    reqs, stmts = listing(n_requests=4, loops_in={0, 1})    # exactly half is enough
    [f] = n_plus_one.detect(context(reqs, stmts))
    assert ev(f, "requests with the loop") == "2 of 4"


def test_localisation_lookups_are_not_n_plus_one():
    reqs, stmts = l10n_requests(keys=40)
    found = run_all(context(reqs, stmts))
    assert found["n-plus-one"] == [] and len(found["db-static-cache"]) == 1
    # Below db-static-cache's count they are still static data: nothing at all.
    found = run_all(context(reqs, stmts, thresholds={"db-static-cache": {"min_queries_per_request": 50}}))
    assert found == {"db-static-cache": [], "n-plus-one": [], "repeated-query": []}


def test_few_authors_with_parent_is_n_plus_one_and_not_repeated_query():
    """30 posts by 10 authors: each author id 3 times; the loop (and its repeats) is N+1's."""
    reqs, stmts = listing(author_of=lambda p: 1 + p % 10)
    found = run_all(context(reqs, stmts))
    assert found["repeated-query"] == [] and found["db-static-cache"] == []
    [f] = found["n-plus-one"]
    assert f.details["executions_per_request"]["median"] == 30
    assert f.details["distinct_per_request"] == {"min": 10, "median": 10, "max": 10}
    assert f.details["batched_example"] == ("SELECT id, name, bio FROM authors WHERE id IN ("
                                            + ", ".join(str(1 + p) for p in range(10)) + ")")


def test_mostly_same_literal_without_parent_is_repeated_query():
    """12 executions, 2 values, no parent: not a per-row loop; two repeated statements."""
    reqs, stmts = [], []
    for i in range(2):
        rid = f"r{i:06d}"
        reqs.append(request(rid, "/"))
        stmts += prelude(rid)
        for k in range(12):
            stmts.append(statement(rid, f"SELECT name FROM users WHERE id = {1 + k % 2}"))
    found = run_all(context(reqs, stmts))
    assert found["n-plus-one"] == [] and found["db-static-cache"] == []
    texts = [f.details["statement"] for f in found["repeated-query"]]
    assert texts == ["SELECT name FROM users WHERE id = 1", "SELECT name FROM users WHERE id = 2"]
    assert all(f.details["executions_per_request"] == {"min": 6, "median": 6, "max": 6}
               for f in found["repeated-query"])


def test_write_loops_are_not_n_plus_one():
    reqs, stmts = [request("r000000", "/import", method="POST")], []
    stmts += [statement("r000000", f"INSERT INTO log (msg) VALUES ('line {k}')", rows_sent=0) for k in range(20)]
    stmts += [statement("r000000", f"SELECT GET_LOCK('job-{k}', 0)") for k in range(20)]
    assert run_all(context(reqs, stmts)) == {"db-static-cache": [], "n-plus-one": [], "repeated-query": []}


# ------------------------------------------------------------------------------------------
# repeated-query
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("sql,tables", [
    ("SELECT a FROM wp.t1 AS x, `t2` y JOIN t3 ON x.a = y.b WHERE 1", {"t1", "t2", "t3"}),
    ("SELECT * FROM t1 AS a, db.t2 AS b, t3", {"t1", "t2", "t3"}),
    ("SELECT * FROM t1 x, t2", {"t1", "t2"}),
    ("SELECT * FROM t1 LEFT JOIN db.t2 USING (id)", {"t1", "t2"}),
    ("SELECT * FROM t1 WHERE x IN (SELECT y FROM t2)", {"t1", "t2"}),
    ("SELECT * FROM t1 WHERE a = 1 ORDER BY b", {"t1"}),
    ("SELECT * FROM db.", {"db"}),
    ("SELECT 1", set()),
])
def test_tables_a_repeated_query_reads(sql, tables):
    """What a write must touch to end a run of repeats: schemas, aliases and FROM lists."""
    assert repeated_query.tables_read(sql) == tables


def test_repeated_query_ignores_comments_and_whitespace():
    variants = ["SELECT value FROM settings WHERE name = 'site_name'",
                "SELECT /* setting() */ value FROM settings WHERE name = 'site_name'",
                "SELECT value\n\tFROM settings -- site name\n WHERE name='site_name'",
                "select value FROM settings WHERE name = 'site_name'",   # another text: case kept
                "SELECT value FROM settings WHERE name = 'site_name';",
                "SELECT value FROM settings WHERE name = 'site_name' # end"]
    reqs, stmts = [], []
    for i in range(2):
        rid = f"r{i:06d}"
        reqs.append(request(rid, "/"))
        stmts += prelude(rid)
        stmts += [statement(rid, v, duration_us=300) for v in variants]
    found = run_all(context(reqs, stmts))
    assert found["db-static-cache"] == [] and found["n-plus-one"] == []
    [f] = found["repeated-query"]
    assert f.details["statement"] == "SELECT value FROM settings WHERE name = 'site_name'"
    assert f.details["fingerprint"] == "select value from settings where name = ?"
    assert f.details["tables"] == ["settings"]
    assert f.details["executions_per_request"] == {"min": 5, "median": 5, "max": 5}
    assert f.details["saved_per_request"] == {"min": 4, "median": 4, "max": 4}
    assert ev(f, "executions per request") == "5/5/5"
    assert ev(f, "executions a per-request memo saves") == "4/4/4"
    assert ev(f, "requests with the repeats") == "2 of 2"
    assert f.share_pct == 1.2 and f.severity == "low"   # 2 requests x 4 saved x 300 us / 200 ms
    assert ev(f, "time in all its executions") == 1.5
    # the label says what the number covers: no xhprof here, so no round trip in it
    assert "time in all its executions on these URLs, % of timed requests' wall time (server side only)" in {
        e.what for e in f.evidence}
    assert f.urls == ["/"] and f.requests == ["r000000", "r000001"] and f.summary


def test_repeated_query_pdo_users_at_threshold():
    reqs, stmts = [], []
    for i, url in enumerate(["/profile", "/profile", "/settings"]):
        rid = f"r{i:06d}"
        reqs.append(request(rid, url))
        stmts += prelude(rid)
        stmts += [statement(rid, "SELECT `id`, `email` FROM `app`.`users` u WHERE u.`id` = '42' LIMIT 1")
                  for _ in range(3)]
    [f] = repeated_query.detect(context(reqs, stmts))
    assert f.details["executions_per_request"] == {"min": 3, "median": 3, "max": 3}
    assert f.details["tables"] == ["users"]
    assert f.urls == ["/profile", "/settings"] and f.requests == ["r000000", "r000001", "r000002"]
    # twice is below the threshold
    reqs2 = reqs[:1]
    stmts2 = [s for s in stmts if s.request == "r000000"][:-1]
    assert repeated_query.detect(context(reqs2, stmts2)) == []


def test_repeated_query_title_names_the_url_that_repeats_it_most():
    """minicms's site_name: 24 times on / (under half of the requests), 3 on the other pages;
    a title with the median over all requests (3) hid the page that repeats it most."""
    reqs, stmts = [], []
    for i, (url, n) in enumerate([("/", 24), ("/a", 3), ("/a", 3), ("/b", 3), ("/b", 4)]):
        rid = f"r{i:06d}"
        reqs.append(request(rid, url))
        stmts += prelude(rid)
        stmts += [statement(rid, "SELECT value FROM settings WHERE name = 'site_name'") for _ in range(n)]
    [f] = repeated_query.detect(context(reqs, stmts))
    assert f.details["executions_per_request"]["median"] == 3
    assert f.title == ("Same query 24 times per request on / (3-3.5 on the 2 other URLs): "
                       "SELECT value FROM settings WHERE name = 'site_name'")
    assert "ran 24 times per request on / (3-3.5 on the 2 other URLs), a median of 3 over its 5 requests" in f.summary
    # one URL, or the same count everywhere: the plain count
    same = repeated_query.detect(context(reqs[1:3], [s for s in stmts if s.request in ("r000001", "r000002")]))
    assert same[0].title.startswith("Same query 3 times per request: SELECT")


def test_different_literals_are_not_repeated_query():
    reqs = [request("r000000", "/")]
    stmts = [statement("r000000", f"SELECT name FROM users WHERE id = {k}") for k in range(5)]
    assert repeated_query.detect(context(reqs, stmts)) == []


def test_repeated_query_ignores_noise():
    noise = ["BEGIN", "START TRANSACTION", "COMMIT", "ROLLBACK", "SET NAMES utf8mb4", "SET autocommit = 1",
             "SHOW TABLES LIKE 'wp_options'", "SELECT @@SESSION.sql_mode", "SELECT 1", "SELECT FOUND_ROWS()",
             "SELECT LAST_INSERT_ID()", "SELECT GET_LOCK('cron', 0)",
             "SELECT /*lockdown-capture r000000*/ ID FROM information_schema.PROCESSLIST WHERE DB = 'app'",
             "SELECT id FROM jobs WHERE run_at < NOW()", "SELECT id FROM jobs WHERE id = 3 FOR UPDATE",
             "SELECT id FROM jobs WHERE id = 3 LOCK IN SHARE MODE", "UPDATE counters SET n = n + 1 WHERE id = 1"]
    reqs = [request("r000000", "/")]
    stmts = [statement("r000000", q) for q in noise for _ in range(5)]
    assert run_all(context(reqs, stmts)) == {"db-static-cache": [], "n-plus-one": [], "repeated-query": []}


def test_write_between_repeats_restarts_the_count():
    reqs = [request("r000000", "/page")]
    read = "SELECT views FROM pages WHERE id = 1"
    stmts = []
    for _ in range(3):
        stmts.append(statement("r000000", read))
        stmts.append(statement("r000000", "UPDATE pages SET views = views + 1 WHERE id = 1", rows_sent=0))
    assert repeated_query.detect(context(reqs, stmts)) == []
    # A write to another table does not change what the SELECT reads.
    stmts = []
    for _ in range(3):
        stmts.append(statement("r000000", read))
        stmts.append(statement("r000000", "INSERT INTO access_log (page) VALUES (1)", rows_sent=0))
    [f] = repeated_query.detect(context(reqs, stmts))
    assert f.details["longest_run_per_request"]["max"] == 3


def test_repeated_query_needs_half_the_views_of_the_url():
    reqs = [request(f"r{i:06d}", "/") for i in range(3)]
    stmts = [statement("r000000", "SELECT value FROM settings WHERE name = 'x'") for _ in range(4)]
    stmts += [statement(r.id, "SELECT value FROM settings WHERE name = 'x'") for r in reqs[1:]]
    assert repeated_query.detect(context(reqs, stmts)) == []


# ------------------------------------------------------------------------------------------
# all three together
# ------------------------------------------------------------------------------------------

def test_minicms_like_page_one_finding_each_and_deterministic():
    """Localisation lookups, an N+1 listing and a repeated setting on the same page: one
    finding per detector, in the same order every time, JSON-serialisable."""
    reqs, stmts = [], []
    for i in range(4):
        rid = f"r{i:06d}"
        reqs.append(request(rid, "/list", instrumented=(i == 3)))
        stmts += prelude(rid)
        stmts += [statement(rid, L10N.format(f"m{k}")) for k in range(30)]
        stmts.append(statement(rid, "SELECT id, author_id, title FROM posts ORDER BY created DESC LIMIT 30",
                               rows_sent=30))
        for p in range(30):
            stmts.append(statement(rid, f"SELECT id, name, bio FROM authors WHERE id = {p + 1}"))
            stmts.append(statement(rid, "SELECT value FROM settings WHERE name = 'date_format'"))
    ctx = context(reqs, stmts)
    first = {k: [f.to_json() for f in v] for k, v in run_all(ctx).items()}
    again = {k: [f.to_json() for f in v] for k, v in run_all(context(reqs, stmts)).items()}
    assert first == again
    json.dumps(first)
    assert [len(v) for v in first.values()] == [1, 1, 1]
    assert first["db-static-cache"][0]["details"]["queries_per_request"]["median"] == 30
    assert first["n-plus-one"][0]["details"]["executions_per_request"]["median"] == 30
    assert first["repeated-query"][0]["details"]["executions_per_request"]["median"] == 30
    # timed requests only: 3 x 30 x 200 us over 3 x 100 ms (the instrumented one is left out)
    assert first["db-static-cache"][0]["share_pct"] == 6.0
    assert first["repeated-query"][0]["share_pct"] == pytest.approx(100 * 3 * 29 * 200 / 300_000, abs=0.01)


def test_repeated_calls_reached_through_a_query_sender_point_at_the_query_finding():
    """MediaWiki with its l10n cache in the database: LoadBalancer::getConnectionInternal runs
    once per LCStoreDB::get. The repeated-call finding is kept and names the query finding."""
    from lockdown.analyzers.detectors.related import link_consequences
    from lockdown.analyzers.findings import Finding
    reqs, stmts = l10n_requests(template="SELECT /* Store::get */ v FROM kv WHERE k = '{}'")
    profile = {"main()": {"ct": 1, "wt": 90_000},
               "main()==>Msg::get": {"ct": 25, "wt": 30_000},
               "Msg::get==>Store::get": {"ct": 25, "wt": 20_000},
               "Store::get==>Pool::connection": {"ct": 25, "wt": 5_000},
               "main()==>Pool::connection": {"ct": 1, "wt": 100},
               "main()==>Title::text": {"ct": 40, "wt": 8_000}}
    inst = [request(f"r{100 + i:06d}", "/profiled", instrumented=True) for i in range(3)]
    excimer = {r.id: {"main;Msg::get;Store::get": 30, "main;Parser::parse": 70} for r in reqs}
    ctx = context(reqs + inst, stmts, xhprof={r.id: profile for r in inst}, excimer=excimer)
    [query] = db_static_cache.detect(ctx)
    assert query.details["sender"] == "Store::get"
    pool = Finding(id="repeated-call", title="Pool::connection", severity="medium", share_pct=5.0,
                   summary="s.", details={"function": "Pool::connection"})
    title = Finding(id="repeated-call", title="Title::text", severity="medium", share_pct=8.0,
                    summary="t.", details={"function": "Title::text"})
    link_consequences(ctx, [query, pool, title])
    assert pool.details["follows"] == {"id": "db-static-cache", "subject": query.subject, "sender": "Store::get"}
    assert ev(pool, "reached through Store::get, the sender of the db-static-cache statements") == "3 of 3 profiles"
    assert "verify that fix first" in pool.summary
    assert "follows" not in title.details and title.summary == "t."


BLOG_PHP = {"ini": {}, "extensions": {}, "zend_extensions": ["Zend OPcache"],
            "internal_functions": ["is_int"], "internal_classes": ["mysqli", "mysqli_result"]}
BLOG_PAGES = {"/": (30, 10), "/post": (20, 0)}   # URL: messages (one lookup each), date_format reads


def blog(q_callers=(("t", 2), ("setting", 1), ("find_plugin_file", 1)), q_sends=False):
    """An audit app (a small blog): t($key) sends one translations lookup per message,
    setting($name) the settings query (date_format again and again, site_name 3 times),
    find_plugin_file() one plugins lookup each (4 per page, not flagged); each through
    db_one() -> db_all() -> mysqli::query. The quoting helper q() is called by `q_callers`
    (caller, calls of q per call of it); with `q_sends`, q($sql) sends the statement itself
    (t, setting and find_plugin_file call it once each). Four timed requests and one
    xhprof-instrumented one per URL."""
    reqs, stmts, xhprof, excimer = [], [], {}, {}
    for u, (url, (messages, dates)) in enumerate(BLOG_PAGES.items()):
        for i in range(5):
            rid = f"r{5 * u + i:06d}"
            reqs.append(request(rid, url, instrumented=i == 4))
            names = ["date_format"] * dates + ["site_name"] * 3
            stmts += prelude(rid)
            stmts += [statement(rid, f"SELECT txt FROM translations WHERE lang = 'en' AND msg_key = 'm{k}' LIMIT 1")
                      for k in range(messages)]
            stmts += [statement(rid, f"SELECT value FROM settings WHERE name = '{n}'") for n in names]
            stmts += [statement(rid, f"SELECT path FROM plugins WHERE name = 'p{k}' AND enabled = 1")
                      for k in range(4)]
            calls = {"t": messages, "setting": len(names), "find_plugin_file": 4, "render": 1}
            if i == 4:
                xhprof[rid] = blog_profile(calls, q_callers, q_sends)
            else:
                excimer[rid] = {"main;render;t;q": 3, "main;render;setting;q": 1,
                                "main;render;t;db_one;db_all": 40, "main;render": 56}
    return context(reqs, stmts, xhprof=xhprof, excimer=excimer, php=BLOG_PHP)


def blog_profile(calls, q_callers, q_sends):
    senders = ("t", "setting", "find_plugin_file")
    p = {"main()": {"ct": 1, "wt": 100_000}, "main()==>render": {"ct": 1, "wt": 90_000},
         "main()==>db_one": {"ct": 1, "wt": 300}}                 # the page row
    q_calls = sum(calls[caller] * per for caller, per in q_callers)
    queries = sum(calls[f] for f in senders) + 1
    for f in senders:
        p[f"render==>{f}"] = {"ct": calls[f], "wt": calls[f] * 400}
        if not q_sends:
            p[f"{f}==>db_one"] = {"ct": calls[f], "wt": calls[f] * 300}
    for caller, per in q_callers:
        p[f"{caller}==>q"] = {"ct": calls[caller] * per, "wt": calls[caller] * per * 30}
    p["q==>is_int"] = {"ct": q_calls, "wt": q_calls * 2}
    p["q==>mysqli::real_escape_string"] = {"ct": q_calls, "wt": q_calls * 5}
    if q_sends:
        p["q==>mysqli::query"] = {"ct": q_calls, "wt": q_calls * 200}
        queries = 1
    p.update({"db_one==>db_all": {"ct": queries, "wt": queries * 280},
              "db_all==>mysqli::query": {"ct": queries, "wt": queries * 250},
              "db_all==>mysqli_result::fetch_all": {"ct": queries, "wt": queries * 10}})
    return p


def test_a_repeated_call_made_for_flagged_statements_points_at_their_findings():
    """The audit's quoting helper: q() runs 77 times on /, twice per translated message (t:
    db-static-cache), once per setting() (repeated-query) and once per plugin lookup (not
    flagged). Fixing the query findings removes most of its calls: the repeated-call finding
    is kept and says so, naming them, with the part of its calls each accounts for."""
    from lockdown.analyzers import detectors
    from lockdown.analyzers.detectors.related import statement_senders
    ctx = blog()
    assert statement_senders(ctx) == {
        "t": ("shape", "select txt from translations where lang = ? and msg_key = ? limit ?"),
        "setting": ("shape", "select value from settings where name = ?"),
        "find_plugin_file": ("shape", "select path from plugins where name = ? and enabled = ?")}
    found = detectors.detect(ctx)
    by_subject = {f.subject: f for f in found}
    [q] = [f for f in found if f.id == "repeated-call"]
    assert q.details["function"] == "q" and q.details["rows"][0]["calls"] == 77
    static = by_subject["db-static-cache:select txt from translations where lang = ? and msg_key = ? limit ?"]
    dates = by_subject["repeated-query:SELECT value FROM settings WHERE name = 'date_format'"]
    names = by_subject["repeated-query:SELECT value FROM settings WHERE name = 'site_name'"]
    # of 77 calls: 60 under t (every lookup goes), 13 under setting, 9 + 2 of whose 13
    # statements a memo saves (the first date_format and site_name stay), 4 under plugin lookups
    link = q.details["for_statements"]
    assert link["pct"] == round(100 * 71 / 77, 1) == 92.2
    assert link["findings"] == [{"id": "db-static-cache", "subject": static.subject, "pct": round(100 * 60 / 77, 1)},
                                {"id": "repeated-query", "subject": dates.subject, "pct": round(100 * 9 / 77, 1)},
                                {"id": "repeated-query", "subject": names.subject, "pct": round(100 * 2 / 77, 1)}]
    assert link["senders"] == {
        "t": {"statements": static.details["fingerprint"], "named": False, "pct": 77.9},
        "setting": {"statements": "select value from settings where name = ?", "named": False, "pct": 14.3}}
    assert ev(q, "calls made for the statements of query findings, flagged too") == "92%"
    assert (f' 92% of its calls are made inside calls of t and setting, for the statements that query findings '
            f'report: 78% for db-static-cache ("{static.title}"); 12% for repeated-query ("{dates.title}"); '
            f'3% for repeated-query ("{names.title}"). Fixing them removes these calls too, so the shares '
            f'overlap; verify those fixes first.') in q.summary
    assert "for_statements" not in static.details and "follows" not in q.details


def test_a_repeated_call_made_for_other_statements_is_not_linked():
    """The same app and query findings, but q() escapes HTML in render (60 calls) and quotes
    the plugin lookups (16), which no query finding reports: no link, whatever else sends SQL."""
    from lockdown.analyzers import detectors
    found = detectors.detect(blog(q_callers=(("render", 60), ("find_plugin_file", 4))))
    assert {"db-static-cache", "repeated-query"} <= {f.id for f in found}
    [q] = [f for f in found if f.id == "repeated-call"]
    assert q.details["rows"][0]["calls"] == 76
    assert "for_statements" not in q.details and "query findings" not in q.summary
    assert not any("query findings" in e.what for e in q.evidence)


def test_a_helper_that_sends_the_flagged_statements_is_linked_through_its_callers():
    """q($sql) sends each statement itself (mysqli::query): t, setting and find_plugin_file
    each send one statement per call through it, and their counts say which."""
    from lockdown.analyzers.detectors import repeated_query
    from lockdown.analyzers.detectors.related import link_consequences
    from lockdown.analyzers.findings import Finding
    ctx = blog(q_callers=(("t", 1), ("setting", 1), ("find_plugin_file", 1)), q_sends=True)
    queries = db_static_cache.detect(ctx) + repeated_query.detect(ctx)
    q = Finding(id="repeated-call", title="q", severity="low", share_pct=2.0, summary="s.",
                details={"function": "q"})
    link_consequences(ctx, [*queries, q])
    # no rows: both instrumented requests. 47 calls on /: 30 lookups (all go), 13 settings
    # (9 + 2 go), 4 plugin lookups (stay); 27 on /post: 20 lookups, 3 settings (2 go), 4
    assert q.details["for_statements"]["pct"] == round(100 * (41 + 22) / (47 + 27), 1)
    assert [x["pct"] for x in q.details["for_statements"]["findings"]] == [
        round(100 * 50 / 74, 1), round(100 * 9 / 74, 1), round(100 * 4 / 74, 1)]


def test_a_sender_is_known_by_its_counts_only_when_one_shape_matches():
    """One instrumented request where two shapes are sent as often as t is called: no sender;
    a second request with other counts singles one out. page(), two statements per call, is
    no sender of one shape, though its 3 calls match the 3 statements of `pages`."""
    from lockdown.analyzers.detectors.related import statement_senders

    def profile(n):      # page(): 3 calls, 6 statements, 3 of them its own shape's
        return {"main()": {"ct": 1, "wt": 1000}, "main()==>t": {"ct": n, "wt": 500},
                "t==>mysqli_query": {"ct": n, "wt": 400}, "main()==>page": {"ct": 3, "wt": 300},
                "page==>mysqli_query": {"ct": 6, "wt": 200}}

    def shapes(rid, n, m):
        return ([statement(rid, f"SELECT v FROM kv WHERE k = 'k{i}'") for i in range(n)]
                + [statement(rid, f"SELECT name FROM users WHERE id = {i}") for i in range(m)]
                + [statement(rid, f"SELECT id FROM pages WHERE id = {i}") for i in range(3)]
                + [statement(rid, "SELECT 1 FROM a"), statement(rid, "SELECT 1 FROM a"),
                   statement(rid, "SELECT 2 FROM b")])

    php = {"internal_functions": ["mysqli_query"]}
    one = [request("r000000", "/", instrumented=True)]
    ctx = context(one, shapes("r000000", 5, 5), xhprof={"r000000": profile(5)}, php=php)
    assert statement_senders(ctx) == {}
    two = one + [request("r000001", "/a", instrumented=True)]
    ctx = context(two, shapes("r000000", 5, 5) + shapes("r000001", 7, 5),
                  xhprof={"r000000": profile(5), "r000001": profile(7)}, php=php)
    assert statement_senders(ctx) == {"t": ("shape", "select v from kv where k = ?")}


def test_the_busiest_url_is_named_when_urls_differ():
    """db-static-cache's summary and repeated-query's title name the URL that sends most
    (minicms: 167 message lookups on /, 125-126 elsewhere; a median of 126 over all)."""
    from lockdown.analyzers.detectors.figures import busiest, others_text
    per_url = {u: {"queries_per_request": {"median": m}} for u, m in (("/", 167), ("/a", 125), ("/b", 126))}
    assert busiest(per_url, "queries_per_request") == ("/", 167, 125, 126, 2)
    assert others_text(125, 126, 2) == "125-126 on the 2 other URLs" and others_text(3, 3, 1) == "3 on the other URL"
    assert busiest({"/": {"queries_per_request": {"median": 5}}, "/a": {"queries_per_request": {"median": 5}}},
                   "queries_per_request") is None


# ------------------------------------------------------------------------------------------
# write-on-read
# ------------------------------------------------------------------------------------------

def test_write_on_read_counts_the_get_views_of_a_url_that_write():
    from lockdown.analyzers.detectors import write_on_read
    from lockdown.analyzers.query_digest import fingerprint
    reqs, stmts = [], []
    for i in range(4):                                   # /article: 3 of 4 views bump a counter
        rid = f"r{i:06d}"
        reqs.append(request(rid, "/article"))
        stmts += prelude(rid)
        if i < 3:
            stmts.append(statement(rid, f"UPDATE page SET counter = counter + 1 WHERE id = {i + 7}", rows_sent=0))
    reqs.append(request("r000004", "/article", method="POST"))     # a POST may write; not a view
    stmts.append(statement("r000004", "UPDATE page SET counter = counter + 1 WHERE id = 9", rows_sent=0))
    for i in range(5, 9):                                # /other: 1 of 4 views logs (below half)
        rid = f"r{i:06d}"
        reqs.append(request(rid, "/other", method="head" if i == 5 else "GET"))
        stmts += prelude(rid)
        if i == 5:
            stmts.append(statement(rid, "/* audit */ INSERT INTO log (msg) VALUES ('x')", rows_sent=0))
    reqs.append(request("r000009", "/save", method="POST"))
    stmts.append(statement("r000009", "DELETE FROM drafts WHERE id = 3", rows_sent=0))
    (f,) = write_on_read.detect(context(reqs, stmts))
    fp = fingerprint("UPDATE page SET counter = counter + 1 WHERE id = 7")
    assert (f.title, f.urls, f.requests) == ("Every page view writes: UPDATE on 1 read-only URL(s)", ["/article"],
                                             ["r000000", "r000001", "r000002"])
    assert f.summary.startswith(f"3 of 4 GET requests to /article ran `{fp}`.")
    assert ev(f, "GET requests that sent it") == "3 of 4" and ev(f, "executions") == 3
    assert f.details["fingerprint"] == fp and f.details["verb"] == "UPDATE"
    # the half of the views is the threshold: 2 of 4 is enough, and a comment before the verb is skipped
    stmts.append(statement("r000006", "/* audit */ INSERT INTO log (msg) VALUES ('y')", rows_sent=0))
    found = write_on_read.detect(context(reqs, stmts))
    assert [(g.details["verb"], g.urls, ev(g, "GET requests that sent it")) for g in found] == \
        [("INSERT", ["/other"], "2 of 4"), ("UPDATE", ["/article"], "3 of 4")]
    assert not write_on_read.is_write("SELECT 1") and not write_on_read.is_write("UPDATEd_at()")


def test_one_write_rule_for_every_query_detector():
    """sql_text.is_write is the one rule (write-on-read's own regular expression skipped only
    /* */ comments before the verb and knew only the four row writes). Comments of every kind
    are skipped; write-on-read keeps the row writes (sql_text.ROW_WRITES): a TRUNCATE, ALTER or
    CREATE TEMPORARY TABLE on a GET is a write to the table, not a view counter."""
    from lockdown.analyzers.detectors import write_on_read
    from lockdown.analyzers.sql_text import is_write, write_verb
    for sql, verb in (("UPDATE t SET n = n + 1", "UPDATE"), ("/* a */ insert into log values (1)", "INSERT"),
                      ("-- audit\nREPLACE INTO t VALUES (1)", "REPLACE"), ("# x\nDELETE FROM t", "DELETE"),
                      ("TRUNCATE cache", "TRUNCATE"), ("LOAD  DATA INFILE 'f' INTO TABLE t", "LOAD DATA"),
                      ("CREATE TEMPORARY TABLE tmp (id INT)", "CREATE"), ("SELECT 1", None),
                      ("UPDATEd_at()", None), ("SELECT updated FROM t", None)):
        assert write_verb(sql) == verb and is_write(sql) == (verb is not None), sql
        assert write_on_read.is_write(sql) == (verb in ("UPDATE", "INSERT", "REPLACE", "DELETE")), sql
    reqs, stmts = [], []
    for i in range(4):
        rid = f"r{i:06d}"
        reqs.append(request(rid, "/article"))
        stmts += prelude(rid)
        stmts.append(statement(rid, f"-- counter\nUPDATE page SET counter = counter + 1 WHERE id = {i}", rows_sent=0))
        stmts.append(statement(rid, "CREATE TEMPORARY TABLE tmp (id INT)", rows_sent=0))
    [f] = write_on_read.detect(context(reqs, stmts))
    assert f.details["verb"] == "UPDATE" and ev(f, "GET requests that sent it") == "4 of 4"


def test_statements_per_call_do_not_depend_on_which_function_is_asked_first():
    """sent_per_call kept one memo for every question: a function first reached inside an
    ancestor's walk got the rate that walk saw, where a call back into a function on the walk's
    path counted 0, and kept it (Laravel: Settings::get's statements run through the container
    and closures its middleware pipeline is made of). Each function's rate is now its own
    walk's, whichever is asked first."""
    from lockdown.analyzers.detectors.related import sent_per_call
    edges = {("main()", "kernel"): {"ct": 1}, ("kernel", "call"): {"ct": 1}, ("call", "view"): {"ct": 1},
             ("view", "get"): {"ct": 30}, ("get", "call"): {"ct": 30},       # through the container again
             ("call", "PDOStatement::execute"): {"ct": 30}}
    calls = {"main()": {"calls": 1}, "kernel": {"calls": 1}, "view": {"calls": 1}, "call": {"calls": 31},
             "get": {"calls": 30}, "PDOStatement::execute": {"calls": 30}}
    fresh = sent_per_call(edges, calls)("get")
    rate = sent_per_call(edges, calls)
    rate("main()")                                            # the ancestor asked first
    assert rate("get") == fresh > 0.9
