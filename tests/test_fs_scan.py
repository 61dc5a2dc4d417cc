"""fs-scan: each directory counted once however it is walked, and which walk was observed (a
lookup that misses and falls back to a scan, or a discovery walk on every request), on
synthetic xhprof arrays in idioms the fixtures do not use (scandir recursion, opendir plus
scandir, FilesystemIterator and DirectoryIterator per directory, dir(), class-based lookups over
PDO and mysqli), and on the recorded minicms captures (Drupal's walk, the app's own counts)."""
from collections import Counter

from contexts import context, request, statement

from lockdown.analyzers.detectors import fs_scan, load_thresholds
from lockdown.analyzers.detectors.context import build_context
from lockdown.bundle.store import open_bundle
from conftest import REPO

PHP = {"ini": {}, "extensions": {}, "zend_extensions": ["Zend OPcache"],
       "internal_functions": ["opendir", "readdir", "closedir", "is_dir", "scandir", "glob", "dir",
                              "file_get_contents", "json_decode", "array_merge", "in_array", "mysqli_query",
                              "mysqli_fetch_assoc", "str_ends_with", "array_diff"],
       "internal_classes": ["RecursiveDirectoryIterator", "RecursiveIteratorIterator", "FilesystemIterator",
                            "DirectoryIterator", "Directory", "PDO", "PDOStatement", "SplFileInfo"]}
INTERNAL = {f.lower() for f in PHP["internal_functions"]} | {c.lower() for c in PHP["internal_classes"]}


def profile(*edges) -> dict:
    """An xhprof array from (caller, callee, calls) edges, as tideways 5 records it: each
    internal call also as its own self-edge `f==>f@1`, recursion as `f==>f@1`."""
    p = {"main()": {"ct": 1, "wt": 90_000}}
    for caller, callee, ct in edges:
        if caller == callee:
            p[f"{caller}==>{callee}@1"] = {"ct": ct, "wt": 40 * ct}
            continue
        p[f"{caller}==>{callee}"] = {"ct": ct, "wt": 50 * ct}
        if callee.partition("::")[0].lower() in INTERNAL:
            p[f"{callee}==>{callee}@1"] = {"ct": ct, "wt": 45 * ct}
    return p


def ctx_of(edges, statements_per_request=(), requests=3, url="/"):
    reqs = [request(f"r{i:06d}", url, instrumented=True) for i in range(requests)]
    stmts = [statement(r.id, sql, rows_sent=rows) for r in reqs for sql, rows in statements_per_request]
    return context(reqs, stmts, xhprof={r.id: profile(*edges) for r in reqs}, php=PHP)


# -- each directory counted once -----------------------------------------------------------------

def scandir_tree(dirs=90, files=4):
    """A recursive scandir() walker: one scandir and one is_dir per entry, per directory."""
    return [("main()", "App\\Assets::collect", 1), ("App\\Assets::collect", "App\\Assets::scanTree", 1),
            ("App\\Assets::scanTree", "App\\Assets::scanTree", dirs - 1),
            ("App\\Assets::scanTree", "scandir", dirs),
            ("App\\Assets::scanTree", "is_dir", dirs * (files + 1)),
            ("App\\Assets::scanTree", "str_ends_with", dirs * files)]


def test_scandir_recursion_counts_each_directory_once():
    [f] = fs_scan.detect(ctx_of(scandir_tree(dirs=90)))
    assert f.details["directories"] == [90] * 3
    assert f.details["directories_by_mechanism"] == {"scandir": [90] * 3}
    assert f.details["walker"] == "App\\Assets::scanTree" and f.details["lookup"] == "App\\Assets::collect"
    ev = {e.what: e for e in f.evidence}["directories walked per request (median)"]
    assert ev.value == 90 and "(scandir 90), not their sum" in ev.source


def test_two_mechanisms_on_the_same_directories_count_once():
    """scandir() to list a directory, then opendir()/readdir() to read it again; a
    FilesystemIterator per directory plus a glob() of its manifests; a DirectoryIterator and
    dir() per directory: the largest count of one mechanism, not the sum."""
    walker = "Lib\\Tree::visit"
    head = [("main()", walker, 1), (walker, walker, 69)]
    cases = {
        "scandir+opendir": [(walker, "scandir", 70), (walker, "opendir", 70), (walker, "readdir", 70 * 7),
                            (walker, "closedir", 70)],
        "FilesystemIterator+glob": [(walker, "FilesystemIterator::__construct", 70),
                                    (walker, "FilesystemIterator::valid", 70 * 6), (walker, "glob", 70)],
        "DirectoryIterator+dir": [(walker, "DirectoryIterator::__construct", 70),
                                  (walker, "DirectoryIterator::next", 70 * 5), (walker, "dir", 70),
                                  ("Lib\\Tree::visit", "Directory::read", 70 * 5)],
    }
    expected = {"scandir+opendir": {"opendir": [70] * 3, "scandir": [70] * 3},
                "FilesystemIterator+glob": {"FilesystemIterator": [70] * 3, "glob": [70] * 3},
                "DirectoryIterator+dir": {"DirectoryIterator": [70] * 3, "dir": [70] * 3}}
    for name, edges in cases.items():
        [f] = fs_scan.detect(ctx_of(head + edges))
        assert f.details["directories"] == [70] * 3, name
        assert f.details["directories_by_mechanism"] == expected[name], name


def test_recursive_directory_iterator_children_are_the_constructs():
    """RecursiveDirectoryIterator: getChildren constructs each child, and xhprof counts that
    __construct too (getChildren + 1 == __construct), with tideways' doubled internal calls;
    with a glob() per directory beside it, still one count per directory. A profile where
    the children's constructs are not seen counts getChildren + 1."""
    w = "Mods\\Scanner::all"
    it = [("main()", "Mods\\Boot::run", 1), ("Mods\\Boot::run", w, 1),
          (w, "RecursiveDirectoryIterator::__construct", 1),
          (w, "RecursiveIteratorIterator::__construct", 1),
          (w, "RecursiveDirectoryIterator::hasChildren", 260),
          (w, "RecursiveDirectoryIterator::getChildren", 119),
          ("RecursiveDirectoryIterator::getChildren", "RecursiveDirectoryIterator::__construct", 119),
          (w, "Mods\\Scanner::inDir", 120), ("Mods\\Scanner::inDir", "glob", 120)]
    [f] = fs_scan.detect(ctx_of(it))
    assert f.details["calls_per_request"]["RecursiveDirectoryIterator::__construct"] == [120] * 3
    assert f.details["directories_by_mechanism"] == {"RecursiveDirectoryIterator": [120] * 3, "glob": [120] * 3}
    assert f.details["directories"] == [120] * 3                    # not 120 + 119 + 120
    unseen = [e for e in it if e[0] != "RecursiveDirectoryIterator::getChildren" and e[1] != "glob"]
    [g] = fs_scan.detect(ctx_of(unseen + [(w, "is_dir", 200)]))
    assert g.details["directories_by_mechanism"] == {"RecursiveDirectoryIterator": [120] * 3}


def test_count_rule_boundaries():
    """What the rule gives when one mechanism does not see every directory: a walk split
    between two mechanisms counts its larger part; two glob patterns per directory count
    each directory twice (documented in the module)."""
    by = fs_scan.directories_by_mechanism
    split = Counter({"opendir": 30, "closedir": 30, "scandir": 50, "readdir": 200})
    assert by(split) == {"opendir": 30, "scandir": 50} and fs_scan.directories_visited(split) == 50
    assert fs_scan.directories_visited(Counter({"glob": 2 * 40, "is_dir": 40})) == 80
    assert fs_scan.directories_visited(Counter({"readdir": 500, "is_dir": 90})) == 0
    assert by(Counter({"RecursiveDirectoryIterator::getChildren": 9})) == {"RecursiveDirectoryIterator": 10}
    assert by(Counter({"recursivedirectoryiterator::__construct": 4})) == {"RecursiveDirectoryIterator": 4}


# -- which walk was observed ---------------------------------------------------------------------

def pdo_lookup_miss(lookups=40, walked=1, dirs=150):
    """A class-based registry over PDO: Extensions::pathOf($name) answers from a row, and for a
    name whose row points at nothing walks the extension tree with opendir/readdir."""
    look, walk = "Ext\\Extensions::pathOf", "Ext\\Extensions::searchTree"
    return [("main()", "Ext\\App::boot", 1), ("Ext\\App::boot", look, lookups),
            (look, "Ext\\Registry::row", lookups), ("Ext\\Registry::row", "PDO::prepare", lookups),
            ("Ext\\Registry::row", "PDOStatement::execute", lookups),
            (look, "is_file", lookups), (look, "Ext\\Extensions::fallback", walked),
            ("Ext\\Extensions::fallback", walk, walked), (walk, walk, dirs - walked),
            (walk, "opendir", dirs), (walk, "readdir", dirs * 8), (walk, "closedir", dirs),
            (walk, "is_dir", dirs * 7)]


REGISTRY_ROW = ("SELECT path FROM extensions WHERE name = 'legacy_export' LIMIT 1", 1)


def test_a_lookup_that_misses_and_falls_back_is_told_with_its_registry_read():
    ctx = ctx_of(pdo_lookup_miss(), [REGISTRY_ROW] + [("SELECT value FROM options WHERE k = 'x'", 1)] * 3)
    [f] = fs_scan.detect(ctx)
    d = f.details
    assert d["walk"] == "miss-fallback" and d["walker"] == "Ext\\Extensions::searchTree"
    assert d["walk_evidence"] == {
        "entries": 1, "missed_lookup": "Ext\\Extensions::pathOf", "lookup_calls": 40, "lookup_walks": 1,
        "registry_read": "PDOStatement::execute",
        # no shape sent 40 times: the ones sent closest to it, closest first
        "registry_statements": ["select value from options where k = ?",
                                "select path from extensions where name = ? limit ?"],
        "file_reads": {}}
    assert d["directories"] == [150] * 3
    assert f.title == "Every request walks 150 directories after a lookup misses (Ext\\Extensions::searchTree)"
    assert ("Ext\\Extensions::pathOf was called 40 times per request and walked on 1 of them, after reading "
            "the database (PDOStatement::execute)") in f.summary
    assert "repair the registry row" in f.summary and "cache the miss" in f.summary
    values = {e.what: e.value for e in f.evidence}
    assert values["lookup calls per request, of which walked"] == "40, 1"
    assert values["registry read before the walk"] == "PDOStatement::execute"


def test_the_registry_statements_are_those_sent_as_often_as_the_lookup_read():
    """40 reads of the registry, 40 single-row lookups of one shape: that shape alone."""
    rows = [(f"SELECT path FROM extensions WHERE name = 'e{i}' LIMIT 1", 1) for i in range(40)]
    [f] = fs_scan.detect(ctx_of(pdo_lookup_miss(), rows + [("SELECT value FROM options WHERE k = 'x'", 1)]))
    assert f.details["walk_evidence"]["registry_statements"] == ["select path from extensions where name = ? limit ?"]
    # without statements (a capture without the queries collector): told from xhprof alone
    [g] = fs_scan.detect(ctx_of(pdo_lookup_miss()))
    assert g.details["walk"] == "miss-fallback" and g.details["walk_evidence"]["registry_statements"] == []


def test_a_procedural_mysqli_registry_miss():
    """Procedural code: a registry read three calls down (module_path -> registry_get ->
    db_fetch -> mysqli_query), a dir() walker."""
    edges = [("main()", "load_modules", 1), ("load_modules", "module_path", 25),
             ("module_path", "registry_get", 25), ("registry_get", "db_fetch", 25),
             ("db_fetch", "mysqli_query", 25), ("db_fetch", "mysqli_fetch_assoc", 25),
             ("module_path", "find_module_dir", 2), ("find_module_dir", "find_module_dir", 118),
             ("find_module_dir", "dir", 120), ("find_module_dir", "Directory::read", 900),
             ("find_module_dir", "is_dir", 780)]
    [f] = fs_scan.detect(ctx_of(edges, [("SELECT file FROM registry WHERE name = 'gone'", 1)]))
    w = f.details["walk_evidence"]
    assert f.details["walk"] == "miss-fallback" and f.details["directories"] == [120] * 3
    assert (w["missed_lookup"], w["lookup_calls"], w["lookup_walks"], w["registry_read"], w["entries"]) == \
        ("module_path", 25, 2, "mysqli_query", 2)


def discovery_scandir(theme_files=12):
    """A discovery walk: Themes::all() once per request, scandir recursion, each theme.json it
    finds read and decoded."""
    return [("main()", "App\\Kernel::handle", 1), ("App\\Kernel::handle", "App\\Themes::all", 1),
            ("App\\Themes::all", "App\\Themes::walk", 1), ("App\\Themes::walk", "App\\Themes::walk", 119),
            ("App\\Themes::walk", "scandir", 120), ("App\\Themes::walk", "is_dir", 720),
            ("App\\Themes::walk", "App\\Themes::read", theme_files),
            ("App\\Themes::read", "file_get_contents", theme_files), ("App\\Themes::read", "json_decode", theme_files)]


def test_a_discovery_walk_is_told_as_such_with_the_files_it_read():
    [f] = fs_scan.detect(ctx_of(discovery_scandir(), [("SELECT value FROM options WHERE k = 'theme'", 1)]))
    d = f.details
    assert d["walk"] == "discovery" and d["walker"] == "App\\Themes::walk" and d["directories"] == [120] * 3
    assert d["walk_evidence"] == {"entries": 1, "missed_lookup": None, "lookup_calls": 0, "lookup_walks": 0,
                                  "registry_read": None, "registry_statements": [],
                                  "file_reads": {"file_get_contents": 12}}
    assert f.title == "Every request walks 120 directories to discover what they hold (App\\Themes::walk)"
    assert "registry" not in f.summary.lower() and "falls back" not in f.summary
    assert "App\\Themes::walk was entered 1 time(s) per request" in f.summary
    assert "read 12 file(s) it found" in f.summary
    assert "cache the walk's result" in f.summary and "rebuilt when a directory of the tree changes" in f.summary
    assert {e.what: e.value for e in f.evidence}["files read under the walker per request"] == 12


def test_what_is_not_a_miss_fallback():
    """A memoized getter asked for many names that walks on its first call, without reading a
    registry; a loader that reads the database but walks on every call it gets; a closure
    (tideways names every closure of a scope alike) with many calls and a query: discovery."""
    memo = [("main()", "App\\Plugins::get", 30), ("App\\Plugins::get", "App\\Plugins::scan", 1),
            ("App\\Plugins::scan", "App\\Plugins::scan", 79), ("App\\Plugins::scan", "glob", 80),
            ("App\\Plugins::scan", "is_dir", 400)]
    loader = [("main()", "App\\Loader::load", 1), ("App\\Loader::load", "PDOStatement::execute", 3),
              ("App\\Loader::load", "App\\Loader::scan", 1), ("App\\Loader::scan", "App\\Loader::scan", 79),
              ("App\\Loader::scan", "opendir", 80), ("App\\Loader::scan", "readdir", 400)]
    closure = "App\\Kernel::App\\{closure}"
    shared = [("main()", closure, 12), (closure, "PDOStatement::execute", 11), (closure, "App\\Page::render", 1),
              ("App\\Page::render", "App\\Page::scan", 1), ("App\\Page::scan", "App\\Page::scan", 79),
              ("App\\Page::scan", "scandir", 80), ("App\\Page::scan", "is_dir", 400)]
    for name, edges in (("memo", memo), ("loader", loader), ("closure", shared)):
        [f] = fs_scan.detect(ctx_of(edges, [REGISTRY_ROW]))
        assert f.details["walk"] == "discovery", name
        assert f.details["walk_evidence"]["missed_lookup"] is None, name
    # the memoized getter with a registry read first is a lookup's fallback
    read = memo + [("App\\Plugins::get", "App\\Db::one", 30), ("App\\Db::one", "PDOStatement::execute", 30)]
    [g] = fs_scan.detect(ctx_of(read, [REGISTRY_ROW]))
    assert g.details["walk"] == "miss-fallback" and g.details["walk_evidence"]["lookup_calls"] == 30


# -- the recorded Drupal walk ---------------------------------------------------------------------

def test_recorded_minicms_walk_counts_each_directory_once_and_is_a_miss_fallback():
    """minicms's Drupal walk (fixtures/golden): one opendir per directory, which the app's own
    ground truth equals (tests/test_minicms.py: opendir == closedir == dirs), so the count is
    opendir's, 1613; drupal_get_filename, called for each module, walked on one call after its
    registry read. Without the queries collector the same kind, from xhprof alone."""
    for case, statements in (("minicms", ["select filename from modules where name = ? and type = ?"]),
                             ("minicms-engine-off", [])):
        ctx = build_context(open_bundle(REPO / "fixtures" / "golden" / case / "bundle"), load_thresholds())
        [f] = fs_scan.detect(ctx)
        d = f.details
        assert d["directories"] == d["calls_per_request"]["opendir"] == d["calls_per_request"]["closedir"], case
        assert set(d["directories"]) == {1613} and d["directories_by_mechanism"] == {"opendir": [1613] * 5}
        assert d["walk"] == "miss-fallback", case
        assert d["walk_evidence"] == {"entries": 2, "missed_lookup": "drupal_get_filename", "lookup_calls": 118,
                                      "lookup_walks": 1, "registry_read": "mysqli::query",
                                      "registry_statements": statements, "file_reads": {}}, case
