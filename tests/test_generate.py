"""Generated remediations (remediation/sender.py, generate.py, php/memoize.php's object and
persistent scopes, php/defer.php): the sender of a statement found in code written in several
idioms, and each generated change run by real PHP, returning what the original did while doing
less work."""
import json
import subprocess

from lockdown.analyzers.findings import Finding
from lockdown.harness.toolchain import tool
from lockdown.remediation import generate, memoize, sender

# Three database layers in three idioms: a PDO repository class, procedural mysqli with an
# interpolated table prefix and printf placeholders, and a heredoc query in a static method.
APP = {
    "src/Repo/Settings.php": r"""<?php
namespace Acme\Repo;

final class Settings
{
    public function __construct(private \PDO $db) {}

    public function value(string $name): ?string
    {
        $st = $this->db->prepare('SELECT value FROM settings WHERE name = :name');
        $st->execute(['name' => $name]);
        return $st->fetchColumn() ?: null;
    }

    public function all(): array
    {
        $f = function () { return 'SELECT value FROM settings WHERE name = :name'; };
        return [$f];
    }
}
""",
    "lib/options.php": r"""<?php
function get_option_value($name)
{
    global $db, $prefix;
    $sql = sprintf("SELECT option_value FROM {$prefix}options WHERE option_name = '%s' LIMIT 1",
                   mysqli_real_escape_string($db, $name));
    return mysqli_query($db, $sql)->fetch_row()[0] ?? null;
}
""",
    "lib/Views.php": r"""<?php
class Views
{
    public static function bump(int $id): void
    {
        $sql = <<<SQL
            UPDATE page_views SET n = n + 1 WHERE page_id = ?
            SQL;
        Db::run($sql, [$id]);
    }
}
""",
    "lib/unrelated.php": "<?php\nfunction nothing() { return 'SELECT 1'; }\n",
}


def make_app(root):
    for rel, text in APP.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_sender_is_found_by_the_statements_shape_in_each_idiom(tmp_path):
    app = make_app(tmp_path / "app")
    got, why = sender.locate("select value from settings where name = ?", app)
    assert why == "" and (got.function, got.file, got.line, got.method, got.static) == \
        ("Acme\\Repo\\Settings::value", "src/Repo/Settings.php", 8, True, False)
    # the same text inside a closure is not a function to patch: only `value` holds it
    got, _ = sender.locate("select option_value from wp_options where option_name = ? limit ?", app)
    assert (got.function, got.file) == ("get_option_value", "lib/options.php")
    got, _ = sender.locate("update page_views set n = n ? ? where page_id = ?", app)
    assert (got.function, got.static) == ("Views::bump", True)
    none, why = sender.locate("select a from elsewhere where b = ?", app)
    assert none is None and "no PHP function of the app tree holds" in why


def test_the_call_graph_picks_among_several_senders(tmp_path):
    app = make_app(tmp_path / "app")
    (app / "lib/copy.php").write_text("<?php\nfunction other_value($n) {\n"
                                      "  return q('SELECT value FROM settings WHERE name = ?', $n);\n}\n")
    fp = "select value from settings where name = ?"
    none, why = sender.locate(fp, app)
    assert none is None and why.startswith("several functions hold its text")
    got, _ = sender.locate(fp, app, called={"other_value": 31.0})
    assert got.function == "other_value" and "called 31 times per request" in got.how


def php(where, code: str) -> dict:
    (where / "run.php").write_text(code)
    r = subprocess.run([tool("php"), "-n", str(where / "run.php")], capture_output=True, text=True, cwd=where)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


LIB = r"""<?php
class Catalogue
{
    public static $runs = 0;
    public function __construct(private string $locale, private $db = null) {}

    public function lookup(string $id): ?string
    {
        self::$runs++;
        return $id === 'none' ? null : "{$this->locale}:{$id}";
    }
}
"""


def test_object_scope_memo_keeps_one_memo_per_object(tmp_path):
    src = tmp_path / "lib.php"
    src.write_text(LIB)
    text, why = memoize.memoized(src, "Catalogue::lookup", 7, scope="object")
    assert why == "", why
    src.write_text(text)
    out = php(tmp_path, "<?php require 'lib.php';\n$de = new Catalogue('de'); $fr = new Catalogue('fr');\n"
                        "$o = [];\nforeach (['a', 'a', 'b', 'none', 'none'] as $k) "
                        "{ $o[] = $de->lookup($k); $o[] = $fr->lookup($k); }\n"
                        "echo json_encode(['out' => $o, 'runs' => Catalogue::$runs]), \"\\n\";")
    assert out["out"] == ["de:a", "fr:a", "de:a", "fr:a", "de:b", "fr:b", None, None, None, None]
    assert out["runs"] == 6           # a, b, none on each of two objects


def test_persistent_memo_serves_later_processes_and_rebuilds_on_a_new_version(tmp_path):
    src = tmp_path / "lib.php"
    src.write_text(LIB)
    version = "@file_get_contents( __DIR__ . '/version.txt' )"
    text, why = memoize.memoized(src, "Catalogue::lookup", 7, scope="persistent",
                                 cache={"name": "t-lookup", "ttl": 3600, "version": version})
    assert why == "", why
    src.write_text(text)
    (tmp_path / "version.txt").write_text("1")
    run = ("<?php require 'lib.php';\n$o = [];\nforeach (['de', 'fr'] as $l) { $c = new Catalogue($l);\n"
           "  foreach (['a', 'b', 'a', 'none'] as $k) { $o[] = $c->lookup($k); } }\n"
           "echo json_encode(['out' => $o, 'runs' => Catalogue::$runs]), \"\\n\";")
    first = php(tmp_path, run)
    assert first["out"] == ["de:a", "de:b", "de:a", None, "fr:a", "fr:b", "fr:a", None]
    assert first["runs"] == 6         # the object's locale is in the key: de and fr apart
    cache = tmp_path / ".lockdown-cache" / "t-lookup.php"
    assert cache.is_file()
    second = php(tmp_path, run)       # a new process: everything from the array file
    assert second == {**first, "runs": 0}
    (tmp_path / "version.txt").write_text("2")
    assert php(tmp_path, run)["runs"] == 6


def test_persistent_memo_keeps_what_other_workers_wrote_meanwhile(tmp_path):
    """A worker writes the array file at the end of its request from the view it loaded at the
    start (through OPcache, which may serve a stale copy): without a merge, a key another worker
    wrote meanwhile was lost, and on catalog the workers kept rewriting each other's keys (CI: 22
    translation lookups a page still sent in the re-capture of `verify --all`). The file is now
    read again under a lock, past OPcache, and merged."""
    src = tmp_path / "lib.php"
    src.write_text(LIB)
    text, why = memoize.memoized(src, "Catalogue::lookup", 7, scope="persistent",
                                 cache={"name": "t-merge", "ttl": 3600})
    assert why == "", why
    src.write_text(text)
    (tmp_path / "other.php").write_text("<?php require 'lib.php';\n(new Catalogue('de'))->lookup('b');\n")
    # this request loads the (absent) file, misses 'a'; meanwhile another worker stores 'b'
    php(tmp_path, "<?php require 'lib.php';\n(new Catalogue('de'))->lookup('a');\n"
                  "shell_exec(escapeshellarg(PHP_BINARY) . ' -n other.php');\necho json_encode([]), \"\\n\";")
    later = php(tmp_path, "<?php require 'lib.php';\n$c = new Catalogue('de');\n"
                          "$o = [$c->lookup('a'), $c->lookup('b')];\n"
                          "echo json_encode(['out' => $o, 'runs' => Catalogue::$runs]), \"\\n\";")
    assert later == {"out": ["de:a", "de:b"], "runs": 0}


def test_deferred_write_runs_after_the_rest_of_the_request(tmp_path):
    src = tmp_path / "lib.php"
    src.write_text(APP["lib/Views.php"].replace("Db::run($sql, [$id]);", "$GLOBALS['log'][] = \"bump $id\";"))
    text, why = memoize.memoized(src, "Views::bump", 4, script=generate.DEFER)
    assert why == "", why
    src.write_text(text)
    out = php(tmp_path, "<?php require 'lib.php';\n$GLOBALS['log'] = [];\nViews::bump(7); Views::bump(8);\n"
                        "$GLOBALS['log'][] = 'page';\nregister_shutdown_function(function () {\n"
                        "  echo json_encode(['log' => $GLOBALS['log']]), \"\\n\"; });")
    assert out["log"] == ["page", "bump 7", "bump 8"]
    # a function whose callers may use its result is refused
    refused = memoize.memoized(tmp_path / "lib.php", "Views::bump", 4, script=generate.DEFER)
    assert refused[0] is not None     # already deferred: still a void function, accepted
    (tmp_path / "r.php").write_text("<?php\nfunction hit($id) { return q('UPDATE t SET n = n + 1'); }\n")
    assert memoize.memoized(tmp_path / "r.php", "hit", 2, script=generate.DEFER)[1].startswith("it returns a value")


def _finding(kind, fp, **details):
    return Finding(kind, "t", "medium", 5.0, "s", details={"fingerprint": fp, **details})


def test_generated_remediations_are_checked_diffs_that_say_they_were_generated(tmp_path):
    app = make_app(tmp_path / "app")
    f = _finding("repeated-query", "select value from settings where name = ?")
    (r,) = generate.propose(f, ["src/*.php"], app)
    assert (r.kind, r.file, r.origin) == ("diff", "src/Repo/Settings.php", "generated")
    assert "applies cleanly" in r.checked and "passes php -l" in r.checked
    assert r.description.startswith("A per-request memo of Acme") and "one memo per object" in r.description
    assert f.details["sender"] == "Acme\\Repo\\Settings::value"
    g = _finding("db-static-cache", "select option_value from wp_options where option_name = ? limit ?",
                 table="wp_options")
    (r,) = generate.propose(g, ["*.php"], app)
    assert r.file == "lib/options.php" and "every 60 s" in r.description and ".lockdown-cache" in r.content
    w = _finding("write-on-read", "update page_views set n = n ? ? where page_id = ?")
    (r,) = generate.propose(w, ["lib/*.php"], app)
    assert "fastcgi_finish_request" in r.content and "cannot show its result" in r.description
    # not patchable: no diff, and why
    h = _finding("repeated-query", "select value from settings where name = ?")
    assert generate.propose(h, ["config.php"], app) == []
    assert h.details["no_patch"].startswith("src/Repo/Settings.php is not one of the target's patchable files")
    # n-plus-one: no diff; where the per-row query is sent
    n = _finding("n-plus-one", "select value from settings where name = ?")
    assert generate.propose(n, ["*.php"], app) == []
    assert "sent by Acme\\Repo\\Settings::value (src/Repo/Settings.php:8)" in n.details["no_patch"]
    assert sorted(p.relative_to(app).as_posix() for p in app.rglob("*.php")) == sorted(APP)   # nothing applied


def test_writes_after_the_app_released_its_response_are_not_write_on_read():
    """A view counter deferred past fastcgi_finish_request: the capture counts one statement
    after the release; write-on-read leaves it out, and keeps one sent on the response path."""
    from contexts import context, request, statement
    from lockdown.analyzers.detectors import write_on_read

    reqs, stmts = [], []
    for i in range(1, 9):
        rid = f"r{i}"
        r = request(rid, "/item?id=3" if i % 2 else "/item?id=4")
        stmts.append(statement(rid, f"SELECT title FROM items WHERE id = {3 + i % 2}", thread_id=10 + i))
        if i <= 4:                     # the first four defer the write, the others send it inline
            r.released_early, r.after_release_statements = True, 1
            # the next request's first statement, credited here too: another connection
            stmts.append(statement(rid, "UPDATE views SET n = n + 1 WHERE item = 3", thread_id=10 + i))
            stmts.append(statement(rid, "SELECT 1 FROM items", thread_id=99))
        else:
            stmts.append(statement(rid, "UPDATE views SET n = n + 1 WHERE item = 3", thread_id=10 + i))
            stmts.append(statement(rid, "SELECT 2 FROM items", thread_id=10 + i))
        reqs.append(r)
    ctx = context(reqs, stmts)
    assert len(ctx.after_release) == 4
    # on-path writes in half the GET requests of each URL (the threshold): reported, without the
    # deferred ones
    [c] = write_on_read.decide(ctx)
    assert c.executions == 4 and set(c.requests) == {"r5", "r6", "r7", "r8"}
    for r in reqs[4:]:
        r.released_early, r.after_release_statements = True, 2     # now every write is after release
    ctx = context(reqs, stmts)
    assert write_on_read.decide(ctx) == []


def test_a_write_to_a_cache_table_is_a_cache_refill_not_a_write_to_defer(tmp_path):
    """MediaWiki without a local cache refills `objectcache` on views: the finding says so and the
    advice is an in-memory cache; no write is deferred. Other cache tables in other idioms too."""
    from contexts import context, request, statement
    from lockdown.analyzers.detectors import write_on_read

    for sql, table in (("REPLACE INTO `objectcache` (keyname,value,exptime) VALUES ('k','v','2038')", "objectcache"),
                       ("INSERT INTO cache_page (cid, data) VALUES ('x', 'y') ON DUPLICATE KEY UPDATE data = 'y'",
                        "cache_page"),
                       ("UPDATE app.Widget_Cache SET body = 'b' WHERE id = 3", "widget_cache")):
        reqs = [request(f"r{i}", "/wiki/Page") for i in range(1, 5)]
        stmts = [statement(r.id, sql) for r in reqs]
        [f] = write_on_read.detect(context(reqs, stmts))
        assert f.details["refills"] == table and f.details["cause"] == {"kind": "cache refill", "table": table}
        assert "not removing the write" in f.summary and "disable it" not in f.summary
        assert generate.propose(f, ["*.php"], make_app(tmp_path / table)) == []
        assert f.details["no_patch"].startswith(f"the write refills a cache kept in the database table `{table}`")
    reqs = [request(f"r{i}", "/item") for i in range(1, 5)]
    [f] = write_on_read.detect(context(reqs, [statement(r.id, "UPDATE items SET views = views + 1 WHERE id = 1")
                                              for r in reqs]))
    assert f.details["refills"] is None and "disable it, batch it" in f.summary


# An N+1 in another idiom than catalog's: a mysqli-flavoured gateway with fetchRow/fetchAll,
# rows as objects, the loop over `$orders as $order` asking `->byId($order->customer_id)`.
SHOP = {
    "lib/Db.php": r"""<?php
class Db
{
    public $queries = [];
    private $rows;
    public function __construct() { $this->rows = [3 => 'ann', 5 => 'bob', 8 => 'cy']; }
    private function select($sql, $params)
    {
        $this->queries[] = $sql;
        preg_match('/IN \(|= \?/', $sql, $m);
        $ids = $m[0] === '= ?' ? [$params[0]] : $params;
        $out = [];
        foreach ($ids as $id) {
            if (isset($this->rows[$id])) { $out[] = (object) ['id' => $id, 'name' => $this->rows[$id]]; }
        }
        return $out;
    }
    public function fetchRow($sql, array $params) { return $this->select($sql, $params)[0] ?? false; }
    public function fetchAll($sql, array $params) { return $this->select($sql, $params); }
}
""",
    "lib/Customers.php": r"""<?php
class Customers
{
    private $db;
    public function __construct(Db $db) { $this->db = $db; }
    public function byId($id)
    {
        return $this->db->fetchRow("SELECT id, name FROM customers WHERE id = ?", array($id));
    }
}
""",
    "lib/Report.php": r"""<?php
class Report
{
    private $customers;
    public function __construct(Customers $c) { $this->customers = $c; }
    public function lines(array $orders)
    {
        $out = [];
        foreach ($orders as $order) {
            $c = $this->customers->byId($order->customer_id);
            $out[] = $order->id . ':' . ($c ? $c->name : '?');
        }
        return $out;
    }
}
""",
}

SHOP_RUN = r"""<?php
foreach (['Db', 'Customers', 'Report'] as $c) { require __DIR__ . "/lib/$c.php"; }
$db = new Db();
$orders = [];
foreach ([3, 5, 3, 8, 9, 5] as $i => $cid) { $orders[] = (object) ['id' => $i, 'customer_id' => $cid]; }
$lines = (new Report(new Customers($db)))->lines($orders);
echo json_encode(['lines' => $lines, 'queries' => $db->queries]), "\n";
"""


def test_n_plus_one_prefetch_batches_the_loop_and_answers_the_same(tmp_path):
    app = tmp_path / "shop"
    for rel, text in SHOP.items():
        (app / rel).parent.mkdir(parents=True, exist_ok=True)
        (app / rel).write_text(text)
    (app / "run.php").write_text(SHOP_RUN)
    before = php(app, SHOP_RUN)
    f = _finding("n-plus-one", "select id, name from customers where id = ?", key_columns=["id"])
    called = {"Customers::byId": 6.0, "Report::lines==>Customers::byId": 6.0, "Report::lines": 1.0}
    (r,) = generate.propose(f, ["lib/*.php"], app, called)
    assert (r.kind, r.file, r.origin) == ("diff", "lib/Customers.php", "generated")
    assert "lib/Customers.php and lib/Report.php" in r.description and r.checked.count("applies cleanly") == 2
    patched = tmp_path / "patched"
    subprocess.run(["cp", "-r", str(app), str(patched)], check=True)
    subprocess.run(["patch", "-p1", "-s"], input=r.content, text=True, cwd=patched, check=True)
    after = php(patched, SHOP_RUN)
    assert after["lines"] == before["lines"] == ["0:ann", "1:bob", "2:ann", "3:cy", "4:?", "5:bob"]
    assert len(before["queries"]) == 6
    # one IN (...) for the 4 distinct keys, the run-time check of the first key, and the one key
    # the batch did not return (9: no such customer), asked as before
    assert len(after["queries"]) == 3 and "IN (?, ?, ?, ?)" in after["queries"][0]
    # a loop the writer does not recognise: no diff, and where the query is sent
    g = _finding("n-plus-one", "select id, name from customers where id = ?", key_columns=["id"])
    assert generate.propose(g, ["lib/*.php"], app, {"Customers::byId": 6.0}) == []
    assert g.details["no_patch"].startswith("the per-row query is sent by Customers::byId (lib/Customers.php:6)")


# An autoloader in another idiom than ledger's: a static method registered with an array
# callable, namespaced classes found along a search path with is_file, one class overridden.
LOADER_APP = {
    "boot.php": r"""<?php
final class Loader
{
    public static $tests = 0;
    public static function load($class)
    {
        foreach (['site', 'ext', 'core'] as $dir) {
            self::$tests++;
            $file = __DIR__ . "/$dir/" . str_replace('\\', '/', $class) . '.php';
            if (is_file($file)) { require $file; return; }
        }
    }
}
spl_autoload_register(array('Loader', 'load'));
""",
    "core/App/Money.php": "<?php\nnamespace App;\n"
                          "class Money { public static function of() { return 'core money'; } }\n",
    "core/App/Tax.php": "<?php\nnamespace App;\ninterface Tax {}\n",
    "site/App/Money.php": "<?php\nnamespace App;\n"
                          "class Money { public static function of() { return 'site money'; } }\n",
    "ext/App/Rate.php": "<?php\nnamespace App;\n"
                        "final class Rate implements Tax { public function v() { return 7; } }\n",
    "run.php": r"""<?php
require __DIR__ . '/boot.php';
$out = [\App\Money::of(), (new \App\Rate())->v(), class_exists('App\Missing')];
echo json_encode(['out' => $out, 'tests' => Loader::$tests]), "\n";
""",
}


def test_autoload_gets_a_class_map_in_front_of_the_apps_loader(tmp_path):
    app = tmp_path / "app"
    for rel, text in LOADER_APP.items():
        (app / rel).parent.mkdir(parents=True, exist_ok=True)
        (app / rel).write_text(text)
    before = php(app, LOADER_APP["run.php"])
    f = Finding("autoload", "t", "high", 20.0, "s", details={"function": "Loader::load", "no_patch": "later"})
    (r,) = generate.propose(f, ["*.php"], app)
    assert (r.file, r.origin) == ("boot.php", "generated") and "no_patch" not in f.details
    assert "App\\\\Money" not in r.content and "'app\\\\rate' => '/ext/App/Rate.php'" in r.content
    subprocess.run(["patch", "-p1", "-s"], input=r.content, text=True, cwd=app, check=True)
    after = php(app, LOADER_APP["run.php"])
    # the same classes from the same files (Money is declared twice: left to the app's loader,
    # which finds site's first); Rate and Tax from the map; Missing still walks the whole path
    assert after["out"] == before["out"] == ["site money", 7, False]
    assert (before["tests"], after["tests"]) == (1 + 2 + 3 + 3, 1 + 3)


def test_session_probe_gets_a_memo_of_the_function_asking_the_server(tmp_path):
    """`SELECT @@GLOBAL.read_only` names no table: its sender is found by the variable's name."""
    app = tmp_path / "app"
    (app / "inc").mkdir(parents=True)
    (app / "inc" / "db.php").write_text("<?php\nfunction server_is_read_only(): bool\n{\n"
                                        "    $GLOBALS['asked'] = ($GLOBALS['asked'] ?? 0) + 1;\n"
                                        "    return (bool) query_one('SELECT @@GLOBAL.read_only');\n}\n")
    f = Finding("session-probe", "t", "medium", 8.0, "s",
                details={"statement": "SELECT @@GLOBAL.read_only", "fingerprint": "select @@global.read_only",
                         "sender": None})
    (r,) = generate.propose(f, ["inc/*.php"], app)
    assert (r.file, r.origin) == ("inc/db.php", "generated") and "asked once per request" in r.description
    subprocess.run(["patch", "-p1", "-s"], input=r.content, text=True, cwd=app, check=True)
    out = php(app, "<?php\nfunction query_one($sql) { return 0; }\nrequire 'inc/db.php';\n"
                   "$a = [server_is_read_only(), server_is_read_only(), server_is_read_only()];\n"
                   "echo json_encode(['out' => $a, 'asked' => $GLOBALS['asked']]), \"\\n\";")
    assert out == {"out": [False, False, False], "asked": 1}


def test_findings_with_no_safe_rewrite_say_where_to_change(tmp_path):
    """disk-spill, regex-compile and per-call-setup get no diff (the change is a judgment on the
    app's query, pattern or setup), but their `no_patch` names the place: the statement's sender
    found by its text, or the named function's definition. The detector's reason stays first."""
    app = make_app(tmp_path / "app")
    spill = Finding("disk-spill", "t", "medium", 8.0, "s",
                    details={"fingerprint": "select value from settings where name = ?",
                             "no_patch": "the capture does not know the schema"})
    setup = Finding("per-call-setup", "t", "medium", 8.0, "s",
                    details={"function": "Views::bump", "no_patch": "keep the setup in a static."})
    unknown = Finding("regex-compile", "t", "medium", 8.0, "s",
                      details={"function": "(unknown)", "no_patch": "keep the pattern fixed"})
    for f in (spill, setup, unknown):
        assert generate.propose(f, ["*.php"], app) == []
    assert spill.details["located"] == "src/Repo/Settings.php:8"
    assert spill.details["no_patch"].startswith("the capture does not know the schema. Where: the statement is "
                                                "sent by")
    assert "Acme\\Repo\\Settings::value" in spill.details["no_patch"]
    assert setup.details["located"] == "lib/Views.php:4"
    assert setup.details["no_patch"].startswith("keep the setup in a static. Where: Views::bump is defined at "
                                                "lib/Views.php:4")
    assert unknown.details == {"function": "(unknown)", "no_patch": "keep the pattern fixed"}


def test_an_autoloaders_failed_lookups_share_the_class_map():
    """ledger: failed-lookups names ledger_autoload, which returns nothing (no cache of what it
    resolved can be generated); the autoload finding's class map removes its lookups, so both
    findings carry that one remediation. A lookup function that is no loader keeps its own."""
    from lockdown.analyzers.findings import Remediation
    from lockdown.remediation.propose import share_loader_fix
    cmap = Remediation(kind="diff", content="--- a/x\n+++ b/x\n", file="x.php", origin="generated")
    auto = Finding("autoload", "t", "high", 40.0, "s", details={"function": "ledger_autoload"},
                   remediations=[cmap], key="autoload")
    same = Finding("failed-lookups", "t", "medium", 9.0, "s.",
                   details={"function": "ledger_autoload", "no_patch": "none generated"})
    other = Finding("failed-lookups", "t", "medium", 9.0, "s.",
                    details={"function": "partial_path", "no_patch": "none generated"})
    share_loader_fix([auto, same, other])
    assert same.remediations == [cmap] and same.remediations[0] is cmap
    assert same.details == {"function": "ledger_autoload", "same_fix_as": "autoload"}
    assert "class map proposed for the autoload finding (autoload)" in same.summary
    assert other.remediations == [] and other.details["no_patch"] == "none generated"
