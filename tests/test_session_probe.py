"""session-probe on synthetic contexts: which statements are probes, the repeat and share rules,
the sender from a comment or from the xhprof call graph, and the Excimer share under it. The
real capture (fixtures/apps/bulletin) is tested in test_bulletin.py."""
import pytest

from contexts import context, request, statement
from lockdown.analyzers.detectors import repeated_query, session_probe
from lockdown.analyzers.detectors.call_sender import sender_of
from lockdown.analyzers.sql_text import normalize

PHP = {"ini": {}, "extensions": {}, "zend_extensions": ["Zend OPcache"],
       "internal_functions": ["mysqli_query", "mysqli_fetch_row"], "internal_classes": ["mysqli", "pdo",
                                                                                       "pdostatement"]}


def ev(f, what):
    return next(e.value for e in f.evidence if e.what.startswith(what))


@pytest.mark.parametrize("sql", ["SELECT @@GLOBAL.read_only", "select @@session.sql_mode", "SELECT 1",
                                 "SELECT VERSION()", "SELECT /* Db::ping */ 1", "SHOW VARIABLES LIKE 'sql_mode'",
                                 "SHOW GLOBAL STATUS LIKE 'Threads_running'", "SELECT @@tx_isolation, @@autocommit"])
def test_probes(sql):
    assert session_probe.is_probe(sql)


@pytest.mark.parametrize("sql", ["SELECT FOUND_ROWS()", "SELECT LAST_INSERT_ID()", "SELECT GET_LOCK('x', 1)",
                                 "SELECT NOW()", "SELECT RAND()", "SELECT v FROM settings WHERE k = 'a'",
                                 "SHOW TABLES", "SHOW WARNINGS", "SET NAMES utf8mb4",
                                 "SHOW /*lockdown-capture r000001*/ PROCESSLIST", "UPDATE t SET a = @@sql_mode"])
def test_not_probes(sql):
    assert not session_probe.is_probe(sql)


def test_system_variables_keep_their_name_in_the_normal_form():
    assert normalize("SELECT  @@GLOBAL.read_only") == "SELECT @@GLOBAL.read_only"
    assert normalize("select @@session . sql_mode,@x") == "select @@session.sql_mode, @x"


def probing(n_probe=(7, 5), per_url=4, probe="SELECT @@GLOBAL.read_only", duration_us=500, wall_us=100_000):
    """Two URLs, `per_url` timed requests each; each sends `n` probes, each before one query."""
    reqs, stmts = [], []
    for u, (url, n) in enumerate(zip(("/", "/archive"), n_probe)):
        for i in range(per_url):
            rid = f"r{u * per_url + i:06d}"
            reqs.append(request(rid, url, wall_us=wall_us))
            for k in range(n):
                stmts.append(statement(rid, probe, duration_us=duration_us))
                stmts.append(statement(rid, f"SELECT title FROM posts WHERE nid = {k}", duration_us=100))
    return reqs, stmts


def test_a_probe_repeated_in_every_request_is_a_finding_with_its_counts():
    reqs, stmts = probing()
    [f] = session_probe.detect(context(reqs, stmts, php=PHP))
    d = f.details
    assert d["statement"] == "SELECT @@GLOBAL.read_only" and d["fingerprint"] == "select @@global.read_only"
    assert d["executions_per_request"] == {"min": 5, "median": 6, "max": 7}
    assert d["saved_per_request"] == {"min": 4, "median": 5, "max": 6}
    assert d["per_url"]["/"]["executions_per_request"]["median"] == 7
    # saved: 4 x 6 + 4 x 4 = 40 executions of 500 us, over 8 x 100 ms (server side; no round trip measured)
    assert f.share_pct == 2.5 and f.severity == "low"
    assert d["sender"] is None and "sent by" not in f.summary
    assert f.title.startswith("Session probe 7 times per request on / (5 on the other URL)")
    # repeated-query still leaves it out (one finding per cause)
    assert not repeated_query.detect(context(reqs, stmts, php=PHP))


def test_cheap_rare_or_single_probes_are_not_findings():
    reqs, stmts = probing(duration_us=50)            # 40 x 50 us / 800 ms = 0.25% < 1%
    assert not session_probe.detect(context(reqs, stmts, php=PHP))
    reqs, stmts = probing(n_probe=(2, 2), duration_us=5000)   # below min_executions
    assert not session_probe.detect(context(reqs, stmts, php=PHP))
    reqs, stmts = probing()
    few = [s for s in stmts if s.request in ("r000000", "r000004") or "@@" not in s.sql]
    assert not session_probe.detect(context(reqs, few, php=PHP))   # on 1 of 4 requests per URL


@pytest.mark.parametrize("probe", ["SELECT 1", "SHOW SESSION VARIABLES LIKE 'sql_mode'", "select @@sql_mode"])
def test_other_probes_are_found_the_same_way(probe):
    reqs, stmts = probing(probe=probe)
    [f] = session_probe.detect(context(reqs, stmts, php=PHP))
    assert f.details["statement"] == normalize(probe) and f.share_pct == 2.5


def test_a_probe_that_names_its_sender_counts_the_samples_under_it():
    probe = "SELECT /* Wikimedia\\Rdbms\\DatabaseMysqlBase::serverIsReadOnly */ @@GLOBAL.read_only AS v"
    reqs, stmts = probing(probe=probe)
    stacks = {"main;Wiki::run;Wikimedia\\Rdbms\\DatabaseMysqlBase::serverIsReadOnly;Database::query": 26,
              "main;Wiki::run;Parser::parse": 74}
    [f] = session_probe.detect(context(reqs, stmts, php=PHP, excimer={r.id: dict(stacks) for r in reqs}))
    assert f.details["sender"] == "Wikimedia\\Rdbms\\DatabaseMysqlBase::serverIsReadOnly"
    assert f.details["sender_source"] == "comment"
    # 26% of the samples, times the saved part (40 of 48 executions)
    assert f.share_pct == pytest.approx(26 * 40 / 48, abs=0.01) and f.severity == "high"


def profile(n_probe, n_query, probe_us, query_us, client="mysqli_query"):
    """db_query() sends each query after db_server_read_only() sent the probe; page() calls
    db_query n_query times: both senders are called as often, only the probe's has its time."""
    return {"main()": {"ct": 1, "wt": 90_000},
            "main()==>page": {"ct": 1, "wt": 80_000},
            "page==>db_query": {"ct": n_query, "wt": n_probe * probe_us + n_query * query_us + 100},
            "db_query==>db_server_read_only": {"ct": n_probe, "wt": n_probe * probe_us},
            f"db_server_read_only==>{client}": {"ct": n_probe, "wt": n_probe * probe_us - 50},
            "db_server_read_only==>mysqli_fetch_row": {"ct": n_probe, "wt": 20},
            f"db_query==>{client}": {"ct": n_query, "wt": n_query * query_us}}


@pytest.mark.parametrize("client", ["mysqli_query", "mysqli::query", "PDO::query"])
def test_the_sender_is_found_in_the_call_graph_and_its_samples_count(client):
    reqs, stmts = probing(duration_us=200)
    inst = []
    for u, (url, n) in enumerate((("/", 7), ("/archive", 5))):
        rid = f"r00010{u}"
        inst.append(request(rid, url, instrumented=True))
        for k in range(n):
            stmts += [statement(rid, "SELECT @@GLOBAL.read_only", duration_us=200),
                      statement(rid, f"SELECT title FROM posts WHERE nid = {k}", duration_us=900)]
    xhprof = {"r000100": profile(7, 7, 300, 1000, client), "r000101": profile(5, 5, 300, 1000, client)}
    stacks = {"main;page;db_query;db_server_read_only": 30, "main;page;db_query": 50, "main;page": 20}
    ctx = context(reqs + inst, stmts, xhprof=xhprof, excimer={r.id: dict(stacks) for r in reqs}, php=PHP)
    assert sender_of(ctx, "r000100", 7, 7 * 300) == "db_server_read_only"
    # db_query calls db_server_read_only: the callee, however close the caller is in time
    assert sender_of(ctx, "r000100", 7, 7 * 1300) == "db_server_read_only"
    assert sender_of(ctx, "r000100", 3, 0) is None and sender_of(ctx, "r000100", 1, 0) is None
    [f] = session_probe.detect(ctx)
    assert (f.details["sender"], f.details["sender_source"]) == ("db_server_read_only", "xhprof")
    assert "sent by `db_server_read_only`" in f.summary
    # 30% of the timed samples, times the saved part of its calls (40 of 48)
    assert ev(f, "time in the saved executions, % of timed requests' wall time, as PHP spends it in their "
                 "sender db_server_read_only (preferred") == 25.0
    assert ev(f, "time in the saved executions, % of timed requests' wall time (server time") < 25.0
    assert f.share_pct == 25.0


# -- round trips of native prepared statements (round_trip.py) ----------------------------------

def prepared_profile(prepare, execute, n=10, prepare_us=1500, execute_us=2000):
    """n statements, each prepared then executed on the server (native prepares), as tideways
    records the builtins: under their caller, and again as a self-edge."""
    return {"main()": {"ct": 1, "wt": 90_000},
            f"main()==>{prepare}": {"ct": n, "wt": prepare_us},
            f"{prepare}==>{prepare}@1": {"ct": n, "wt": prepare_us - 10},
            f"main()==>{execute}": {"ct": n, "wt": execute_us},
            f"{execute}==>{execute}@1": {"ct": n, "wt": execute_us - 10},
            "main()==>PDOStatement::closeCursor": {"ct": n, "wt": 30}}


@pytest.mark.parametrize("prepare,execute", [("PDO::prepare", "PDOStatement::execute"),
                                             ("mysqli::prepare", "mysqli_stmt::execute"),
                                             ("mysqli_prepare", "mysqli_stmt_execute")])
def test_a_native_prepare_counts_as_a_round_trip_of_its_statement(prepare, execute):
    from lockdown.analyzers.round_trip import measure
    stmts = {"r1": [statement("r1", f"SELECT v FROM t WHERE id = {i}", duration_us=50) for i in range(10)]}
    rt = measure({"r1": prepared_profile(prepare, execute)}, stmts)
    # (2000 us executing + 1500 us preparing - 10 x 50 us in the server) / 10 statements
    assert (rt.calls, rt.prepares, rt.prepare_us, rt.client_us, rt.server_us) == (10, 10, 1500, 3500, 500)
    assert rt.per_call_us == 300.0 and rt.trips_per_statement == 2.0
    # without the prepares (emulated prepares, or plain queries): one trip each
    only = {k: v for k, v in prepared_profile(prepare, execute).items() if prepare not in k}
    rt = measure({"r1": only}, stmts)
    assert (rt.prepares, rt.per_call_us, rt.trips_per_statement) == (0, 150.0, 1.0)


def test_statement_shares_count_the_prepares():
    reqs, stmts = probing(n_probe=(0, 0))
    for r in reqs:
        stmts += [statement(r.id, "SELECT value FROM settings WHERE name = 'currency'", duration_us=100)
                  for _ in range(10)]
    inst = request("r000100", "/", instrumented=True)
    stmts += [statement(inst.id, f"SELECT v FROM t WHERE id = {i}", duration_us=50) for i in range(10)]
    xhprof = {inst.id: prepared_profile("PDO::prepare", "PDOStatement::execute")}
    [f] = repeated_query.detect(context(reqs + [inst], stmts, xhprof=xhprof, php=PHP))
    # 8 requests x 9 saved x (100 us + 300 us: execute and prepare) over 8 x 100 ms
    assert f.share_pct == 3.6
    assert ev(f, "round trip per statement beyond its server time") == "300 us"


def test_of_two_sibling_senders_the_one_closer_in_time_is_taken():
    reqs = [request("r000100", "/", instrumented=True)]
    stmts = [statement("r000100", f"SELECT {k}") for k in range(4)]
    profile = {"main()": {"ct": 1, "wt": 9_000},
               "main()==>a": {"ct": 4, "wt": 400}, "a==>mysqli_query": {"ct": 4, "wt": 380},
               "main()==>b": {"ct": 4, "wt": 4_000}, "b==>mysqli_query": {"ct": 4, "wt": 3_900}}
    ctx = context(reqs, stmts, xhprof={"r000100": profile}, php=PHP)
    assert sender_of(ctx, "r000100", 4, 500) == "a" and sender_of(ctx, "r000100", 4, 3_500) == "b"
