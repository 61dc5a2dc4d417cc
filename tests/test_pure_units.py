"""Unit tests of pure modules' own functions, on small synthetic inputs with exact expected
values: lockdown/options.py, analyzers/sql_caller.py, analyzers/sql_text.py,
analyzers/round_trip.py, remediation/propose.py and reports/reproduce.py. No server starts."""
from __future__ import annotations

from lockdown import options
from lockdown.harness import ab_bench, bench, steady_runs


# ------------------------------------------------------------------------------ options.py

def test_options_defaults_are_the_harness_own():
    """The defaults moved below harness and reports are the ones the harness measures with."""
    assert steady_runs.TOLERANCE is options.HOST_TOLERANCE       # one value, defined once
    assert options.BenchOptions().host_tolerance == 100 * steady_runs.TOLERANCE == 5.0
    assert bench.BenchOptions is options.BenchOptions
    assert ((ab_bench.DEFAULT_RUNS, ab_bench.DEFAULT_MAX_RUNS) == (options.DEFAULT_RUNS, options.DEFAULT_MAX_RUNS)
            == (5, 15))
    assert ab_bench.PairPlan(None).max_runs == 15
    assert options.VERIFY_DEFAULTS == {"runs": 5, "duration": 10, "load": "wrk", "warmup_duration": 5}
    assert options.RUN_DEFAULTS == {"runs": 3, "duration": 10, "warmup_duration": 5, "requests": 120,
                                    "xhprof_every": 10}


def test_bench_options_non_default_and_tolerance():
    o = options.BenchOptions()
    assert o.non_default() == [] and o.tolerance() == 0.05
    o = options.BenchOptions(runs=3, php_ini={"opcache.enable": "0"}, port=8080, hooks={"after-warmup": "true"},
                             rerun_disturbed=False)
    # the port and the hooks do not make a benchmark non-canonical
    assert o.non_default() == ["runs", "php_ini", "rerun_disturbed"] and o.tolerance() is None
    assert options.BenchOptions(host_tolerance=10).tolerance() == 0.1


# ------------------------------------------------------------------------- analyzers/sql_caller.py

def test_caller_is_the_name_in_the_comment_right_after_the_verb():
    from lockdown.analyzers.sql_caller import caller_of
    assert caller_of("SELECT /* LCStoreDB::get */ lc_value FROM l10n_cache WHERE lc_lang = 'en'") == "LCStoreDB::get"
    assert caller_of("  update /*WikiPage::updateRevisionOn*/ page SET page_latest = 3") == "WikiPage::updateRevisionOn"
    assert caller_of("SELECT /* wfGetDB 127.0.0.1 */ 1") == "wfGetDB"
    # a namespaced name keeps its namespace, not the leading backslash; a call's () ends it
    assert caller_of("SELECT /* \\Shop\\Cart::total */ 1") == "Shop\\Cart::total"
    assert caller_of("DELETE /* Store::purge() */ FROM t") == "Store::purge"
    assert caller_of("SELECT /* Store:: */ 1") == "Store"


def test_a_comment_elsewhere_names_no_caller():
    from lockdown.analyzers.sql_caller import caller_of
    for sql in ("SELECT 1 /* LCStoreDB::get */", "/* LCStoreDB::get */ SELECT 1", "SELECT /* 42 */ 1",
                "SELECT * FROM t", "SELECT -- Foo::bar\n 1", ""):
        assert caller_of(sql) is None, sql


# --------------------------------------------------------------------------- analyzers/sql_text.py

def test_markers_selects_and_strings():
    from lockdown.analyzers import sql_text as t
    marker = "SHOW /*lockdown-capture r000001*/ PROCESSLIST"
    old_marker = "SELECT /*lockdown-capture r000001*/ ID FROM information_schema.PROCESSLIST WHERE 0"
    assert t.is_marker(marker) and t.is_marker(old_marker) and not t.is_marker("SELECT 1")
    assert t.is_select("  /* x */ (SELECT a FROM t)") and t.is_select("select 1")
    assert not t.is_select(old_marker) and not t.is_select("UPDATE t SET a = 1")
    assert not t.is_select("WITH x AS (SELECT 1) SELECT * FROM x")
    assert t.without_strings("SELECT 'a FROM b', \"c\\\"d\" FROM t WHERE e = 'it\\'s'") == \
        "SELECT '', '' FROM t WHERE e = ''"
    assert t.one_line("SELECT a\n\t FROM  t\n") == "SELECT a FROM t"


def test_tokens_know_quotes_comments_and_numbers():
    from lockdown.analyzers.sql_text import identifiers, normalize, tokens
    assert tokens("SELECT `a``b`, 'it''s', 0x1F, 1.5e3, 3abc -- c\n FROM t # x") == (
        ("ident", "SELECT"), ("ident", "`a``b`"), ("punct", ","), ("str", "'it''s'"), ("punct", ","),
        ("num", "0x1F"), ("punct", ","), ("num", "1.5e3"), ("punct", ","), ("ident", "3abc"),
        ("ident", "FROM"), ("ident", "t"))
    # `--` starts a comment only before white space or the end (MariaDB's rule)
    assert tokens("SELECT a--b") == (("ident", "SELECT"), ("ident", "a"), ("punct", "-"), ("punct", "-"),
                                     ("ident", "b"))
    assert tokens("SELECT a-- b") == tokens("SELECT a--") == (("ident", "SELECT"), ("ident", "a"))
    assert normalize("SELECT /* c */ a . b , c FROM db . t WHERE ( x = 1 ) ; ") == \
        "SELECT a.b, c FROM db.t WHERE (x = 1)"
    assert identifiers("SELECT `Name`, x.Y FROM T WHERE z = 'W'") == \
        {"select", "name", "x", "y", "from", "t", "where", "z"}


def test_unquote_and_ident():
    from lockdown.analyzers.sql_text import ident, literals, unquote
    assert unquote("'it''s'") == "it's" and unquote("'a\\'b'") == "a'b" and unquote("'a\\\\b'") == "a\\b"
    assert unquote('"unterminated') == "unterminated" and unquote("42") == "42"
    assert ident("`a``b`") == "a`b" and ident("plain") == "plain"
    assert literals("SELECT * FROM t WHERE a = 'x''y' AND b IN (1, -2.5)") == ("x'y", "1", "2.5")


def test_noise_and_table_selects():
    from lockdown.analyzers.sql_text import is_noise, is_table_select, is_write, write_verb
    for sql in ("SET NAMES utf8mb4", "/* c */ start  transaction", "SHOW TABLES", "DO 1",
                "RELEASE SAVEPOINT a", "unlock tables", "COMMIT"):
        assert is_noise(sql), sql
    for sql in ("SELECT * FROM settings", "settle", "UPDATE t SET a = 1", "INSERT INTO sets VALUES (1)"):
        assert not is_noise(sql), sql
    assert is_table_select("select x from t") and is_table_select("((SELECT a FROM t))")
    for sql in ("SELECT @@sql_mode", "SELECT 1", "SELECT FOUND_ROWS()", "SELECT 'FROM'",
                "UPDATE t SET a = (SELECT 1 FROM u)", ""):
        assert not is_table_select(sql), sql
    assert write_verb("/* c */ load  data infile 'x' into table t") == "LOAD DATA"
    assert write_verb("(INSERT INTO t VALUES (1))") == "INSERT" and is_write("-- c\nDROP TABLE t")
    assert write_verb("SELECT * FROM inserts") is None and not is_write("SELECT 'DELETE'")


# ------------------------------------------------------------------------- analyzers/round_trip.py

PROFILE = {
    "main()": {"ct": 1, "wt": 5000},
    "main()==>mysqli_query": {"ct": 3, "wt": 600},
    "mysqli_query==>mysqli_query@1": {"ct": 3, "wt": 590},    # tideways' doubled internal call
    "main()==>f": {"ct": 1, "wt": 400},
    "f==>PDOStatement::execute": {"ct": 2, "wt": 300},
    "main()==>PDO::prepare": {"ct": 2, "wt": 50},               # a trip of those statements: time, not calls
    "main()==>mysqli_fetch_assoc": {"ct": 9, "wt": 20},         # reads a buffered result
}


def test_client_calls_are_the_builtins_that_send_a_statement():
    from lockdown.analyzers.round_trip import client_calls, is_client_call
    assert is_client_call("MYSQLI::QUERY") and is_client_call("PDO::exec") and is_client_call("mysqli_stmt_execute")
    assert not is_client_call("PDO::prepare") and not is_client_call("mysqli_fetch_assoc")
    assert client_calls(PROFILE) == (5, 950)
    assert client_calls({"main()": {"ct": 1, "wt": 10}}) == (0, 0)


def test_round_trip_measured_on_the_instrumented_requests():
    from contexts import statement
    from lockdown.analyzers.round_trip import RoundTrip, app_statements, measure
    mine = [statement("r1", "SELECT 1", duration_us=100) for _ in range(3)] + \
        [statement("r1", "SELECT 2", duration_us=50) for _ in range(2)]
    marker = statement("r1", "SHOW /*lockdown-capture r1*/ PROCESSLIST", duration_us=900)
    assert app_statements(mine + [marker]) == mine
    # r2 sent nothing through a client call: not counted, whatever its statements
    got = measure({"r1": PROFILE, "r2": {"main()": {"ct": 1, "wt": 9}}},
                  {"r1": mine + [marker], "r2": [statement("r2", "SELECT 3", duration_us=7000)]})
    assert got == RoundTrip(requests=1, calls=5, client_us=950, server_us=400, per_call_us=110.0, prepares=2,
                            prepare_us=50)
    slow_server = [statement("r1", "SELECT 1", duration_us=1000)]
    assert measure({"r1": PROFILE}, {"r1": slow_server}).per_call_us == 0.0       # never below 0
    assert measure({"r1": {"main()": {"ct": 1, "wt": 9}}}, {"r1": mine}) is None
    assert measure({}, {}) is None


def test_round_trip_applied_bounded_by_each_request():
    from contexts import request, statement
    from lockdown.analyzers.round_trip import Applied, RoundTrip, applied
    rt = RoundTrip(requests=1, calls=5, client_us=900, server_us=400, per_call_us=100.0)
    reqs = [request("r1", wall_us=10_000), request("r2", wall_us=900), request("r3", wall_us=500),
            request("r4", wall_us=500), request("r5", wall_us=1000)]
    statements_of = {
        "r1": [statement("r1", "SELECT 1", duration_us=1000) for _ in range(4)],   # bound 1500: 100
        "r2": [statement("r2", "SELECT 1", duration_us=400) for _ in range(2)],    # bound 50: capped
        "r4": [statement("r4", "SHOW /*lockdown-capture r4*/ PROCESSLIST")],       # its marker only
        "r5": [statement("r5", "SELECT 1", duration_us=400) for _ in range(2)],    # bound 100: not capped
    }
    got = applied(rt, reqs, statements_of)
    assert got == Applied(per_call_us={"r1": 100.0, "r2": 50.0, "r5": 100.0}, requests=3, capped=1,
                          statements=8, us=700.0)
    assert got.mean_us == 700.0 / 8
    assert applied(rt, [reqs[2]], statements_of).mean_us == 0.0


# -------------------------------------------------------------------------- remediation/propose.py

def _finding(id_, severity="high", **details):
    from lockdown.analyzers.findings import Finding
    return Finding(id_, f"{id_} title", severity, 10.0, "summary", details=details)


def _recipe(finding, match, replace, source, **when):
    from lockdown.remediation.recipes import Recipe
    return Recipe(finding=finding, file="conf.php", match=match, replace=replace, source=source, when=when)


CONF = "<?php\n$cache = false;\n$debug = true;\n"


def _app(tmp_path):
    app = tmp_path / "app"
    app.mkdir()
    (app / "conf.php").write_text(CONF)
    (app / "other.php").write_text("<?php\n$cache = false;\n")
    return app


def test_propose_picks_each_finding_its_generators(tmp_path, monkeypatch):
    """Recipes for every defect; fs-scan's SQL from the registry probe first; the memo for a
    repeated call only when no recipe fits; nothing for an informational finding."""
    from lockdown.analyzers.findings import Remediation
    from lockdown.remediation import propose, recipes
    from lockdown.targets.config import Target
    app = _app(tmp_path)
    catalogue = [_recipe("db-static-cache", "$cache = false;", "$cache = true;", "cache doc", table="t"),
                 _recipe("opcache", "$debug = true;", "$debug = false;", "opcache doc"),
                 _recipe("repeated-call", "$debug = true;", "$debug = 0;", "memo doc", function="g")]
    monkeypatch.setattr(recipes, "load_recipes", lambda: catalogue)
    calls = []

    def probe(f, statements, target, out, say):
        calls.append(("probe", f.id, statements, out))
        return [Remediation("sql", "UPDATE registry SET v = 1")]

    def memo(f, patchable, app_dir, tree):
        calls.append(("memo", f.details["function"], patchable, tree))
        return [Remediation("diff", "memo diff")]
    monkeypatch.setattr(propose.registry_probe, "propose", probe)
    monkeypatch.setattr(propose.memoize, "propose", memo)
    target = Target(name="t", directory=tmp_path, patchable=("conf.php",))
    found = [_finding("db-static-cache", table="t"), _finding("db-static-cache", table="u"),
             _finding("opcache", severity="info"), _finding("repeated-call", function="f"),
             _finding("repeated-call", function="g"), _finding("fs-scan", walker="w")]
    out = propose._propose(found, ["stmt"], target, tmp_path / "run", app, "TREE", print)
    assert out is found
    cache, other_table, info, memo_only, recipe_call, scan = found
    (r,) = cache.remediations
    assert (r.kind, r.file, r.description) == ("diff", "conf.php", "cache doc")
    assert r.checked == "applies cleanly with patch -p1 to a copy of conf.php from TREE"
    assert "\n-$cache = false;\n+$cache = true;\n" in r.content and r.content.startswith("--- a/conf.php\n")
    assert other_table.remediations == [] and info.remediations == []
    assert [x.content for x in memo_only.remediations] == ["memo diff"]
    assert [x.description for x in recipe_call.remediations] == ["memo doc"]
    assert [x.content for x in scan.remediations] == ["UPDATE registry SET v = 1"]
    assert calls == [("memo", "f", ["conf.php"], "TREE"),
                     ("probe", "fs-scan", ["stmt"], tmp_path / "run" / "probe")]
    assert (app / "conf.php").read_text() == CONF            # proposed, never applied


def test_propose_all_checks_against_the_base_fixes(tmp_path, monkeypatch):
    """With a base (run --on-top-of) the recipes read the files as its diffs leave them, in a
    copy that is removed afterwards; without, the prepared tree itself."""
    from types import SimpleNamespace

    from lockdown.analyzers.findings import Remediation
    from lockdown.remediation import propose, recipes
    from lockdown.remediation.base import Base
    from lockdown.targets.config import Target
    app = _app(tmp_path)
    monkeypatch.setattr(propose, "prepare", lambda target, say: SimpleNamespace(app=app))
    monkeypatch.setattr(recipes, "load_recipes", lambda: [
        _recipe("opcache", "$debug = true;", "$debug = false;", "debug off")])
    target = Target(name="t", directory=tmp_path, patchable=("conf.php",))
    run_dir = tmp_path / "run"
    (f,) = propose.propose_all([_finding("opcache")], [], target, run_dir, say=print)
    assert f.remediations[0].checked.endswith("conf.php from the prepared app tree")
    cache_on = recipes.unified_diff("conf.php", CONF, CONF.replace("$cache = false;", "$cache = true;"))
    base = Base(None, [Remediation("diff", cache_on, file="conf.php")], {})
    (g,) = propose.propose_all([_finding("opcache")], [], target, run_dir, say=print, base=base)
    (r,) = g.remediations
    assert r.checked.endswith("conf.php from the prepared app tree with the base's diffs applied")
    # the diff is of the file as the base leaves it: its context holds the base's line
    assert " $cache = true;\n-$debug = true;\n+$debug = false;\n" in r.content
    assert not (run_dir / "base-app").exists() and (app / "conf.php").read_text() == CONF
    # a base that already made the change leaves the recipe nothing to do
    debug_off = recipes.unified_diff("conf.php", CONF, CONF.replace("$debug = true;", "$debug = false;"))
    (h,) = propose.propose_all([_finding("opcache")], [], target, run_dir, say=print,
                               base=Base(None, [Remediation("diff", debug_off, file="conf.php")], {}))
    assert h.remediations == []


# --------------------------------------------------------------------------- reports/reproduce.py

def test_run_command_with_the_options_given():
    from lockdown.reports.reproduce import run_command
    block = {"options": ["--runs", "5", "--php-ini", "a=b c"], "target_arg": "fixtures/apps/minicms"}
    assert run_command("/r/d", "minicms", block, None) == \
        "lockdown run fixtures/apps/minicms -o /r/d --runs 5 --php-ini 'a=b c'"
    assert run_command("/r/d", "minicms", {"options": [], "target_arg": 7}, None) == "lockdown run minicms -o /r/d"


def test_run_command_read_back_from_an_older_run():
    from lockdown.analyzers.detectors import load_thresholds
    from lockdown.reports.reproduce import run_command
    block = {"requests": 60, "xhprof_every": 10, "php_ini": {"opcache.enable": "0"},
             "thresholds": load_thresholds(None)}
    bench = {"config": {"runs": 2, "duration": 10, "warmup_duration": 1.5}}
    assert run_command("/d", "minicms", block, bench) == \
        "lockdown run minicms -o /d --runs 2 --warmup-duration 1.5 --requests 60 --php-ini opcache.enable=0"
    # no bench.json: --no-bench; thresholds of its own, which it did not name: said in a comment
    got = run_command("/d", "hello", {"requests": 120, "thresholds": {"n-plus-one": {}}}, None)
    assert got == ("lockdown run hello -o /d --no-bench  # and --thresholds FILE holding findings.json's "
                   "run.thresholds (this run did not record the file's name)")
    assert run_command("/d", "hello", None, {"config": {"php_ini": {"x": "1"}}}) == \
        "lockdown run hello -o /d --php-ini x=1"


def test_verify_command_of_one_finding_with_its_second_remediation():
    from lockdown.analyzers.findings import Remediation
    from lockdown.reports.reproduce import verify_command
    f = _finding("n-plus-one")
    f.remediations = [Remediation("diff", "A"), Remediation("diff", "B")]
    v = {"finding": {"key": "n-plus-one"}, "findings": [{"key": "n-plus-one"}],
         "remediations": [{"kind": "diff", "content": "B"}],
         "bench": {"plan": {"pilot_runs": 5, "max_runs": 20}, "runs_per_arm": 9, "duration": 4,
                   "concurrency": 8, "workers": 4, "load": "siege", "warmup_duration": 5},
         "reprofile": {"requests": 60, "probed": False}}
    got = verify_command("/d", v, {"n-plus-one": f}, {"requests": 120}, {"config": {"concurrency": 4, "workers": 4}})
    assert got == ("lockdown verify /d --finding n-plus-one --remediation 2 --runs 5 --duration 4 "
                   "--max-runs 20 --concurrency 8 --load siege --requests 60 --no-probe")
    # the first remediation is the default, and one the finding does not have is not named
    v["remediations"] = [{"kind": "diff", "content": "A"}, {"kind": "sql", "content": "X"}]
    v["bench"] = {"runs_per_arm": 5, "duration": 10, "plan": {"max_runs": 15}}
    v["reprofile"] = {"requests": 120, "probed": True}
    assert verify_command("/d", v, {"n-plus-one": f}, {"requests": 120}, None) == \
        "lockdown verify /d --finding n-plus-one --runs 5 --duration 10"


def test_verify_command_of_several_findings_and_of_all():
    from lockdown.reports.reproduce import suggest_verify, verify_command
    v = {"finding": {"key": "a+b"}, "findings": [{"key": "a"}, {"key": "b"}],
         "remediations": [{"kind": "diff", "content": "x", "description": "--patch /tmp/my fix.diff"}],
         "each": True, "bench": {"runs_per_arm": 6, "duration": 10.0}}
    assert verify_command("/d", v, {}, None, None) == \
        "lockdown verify /d --finding a --finding b --patch '/tmp/my fix.diff' --each --runs 6 --duration 10"
    v = {"finding": {"key": "all"}, "bench": {}, "reprofile": {"requests": 90}}
    assert verify_command("/d", v, {}, {"requests": 120}, None) == \
        "lockdown verify /d --all --runs 5 --duration 10 --requests 90"
    assert suggest_verify("/r d", "n-plus-one") == "lockdown verify '/r d' --finding n-plus-one"
