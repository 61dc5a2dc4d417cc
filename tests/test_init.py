"""`lockdown init` on the real stack, from an "existing site" each test builds outside lockdown:
an app directory and a MariaDB server of its own (started by the test, with the user's account
and database), as a user would have them. `lockdown init` then `lockdown run` must give the
findings the corresponding built-in target gives, and leave the user's files and database as
they were (checksums, row counts). The site's files and rows are a built-in target's prepared
install, copied out: the same app and data, so the findings can be compared."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.parse
from collections import Counter
from pathlib import Path

import pytest

from conftest import SHARED_PREPARED, lockdown_runner, prepared_root, tree_digest
from lockdown.harness.mariadb import DatabaseServer, PrivateMariaDB
from lockdown.harness.prepare import cache_key, prepared_stem
from lockdown.harness.processes import ProcessGroup
from lockdown.targets.config import MAX_TOTAL_WEIGHT, MAX_WEIGHT, load_target

pytestmark = pytest.mark.server

PASSWORD = "Site-0wner#pw'x"
RUN_ARGS = ("--runs", "2", "--duration", "2", "--warmup-duration", "1", "--requests", "60")
DOCROOTS = {"laravel": "public"}        # the docroot init finds, where it is not the app directory
LINE = re.compile(r'^\S+ \S+ \S+ \[[^\]]*\] "(\S+) (\S+) [^"]*" (\d{3}) ')


class Site:
    """The user's site: `app` (its files) and `db` (its database on its own server)."""

    def __init__(self, app: Path, admin: DatabaseServer, port: int, name: str):
        self.app, self.admin, self.port, self.name = app, admin, port, name

    @property
    def dsn(self) -> str:
        return f"mysql://owner:{urllib.parse.quote(PASSWORD, safe='')}@127.0.0.1:{self.port}/{self.name}"

    def state(self) -> dict:
        """What must not change: every file's digest, each table's rows and checksum."""
        tables = self.admin.sql("SHOW TABLES;", self.name).split()
        rows = {t: self.admin.sql(f"SELECT COUNT(*) FROM `{t}`;", self.name).strip() for t in tables}
        sums = self.admin.sql("CHECKSUM TABLE " + ", ".join(f"`{t}`" for t in tables) + ";", self.name)
        return {"files": tree_digest(self.app), "rows": rows, "checksums": sums}


def _site(tmp_path: Path, procs: ProcessGroup, builtin: str, config_rewrite) -> Site:
    """The built-in target's prepared app and database, copied out as a user's site."""
    root = prepared_root(builtin)
    app = tmp_path / "site" / "www"
    shutil.copytree(root / "app", app, symlinks=True)
    mysql = PrivateMariaDB(procs, tmp_path / "site" / "mysql", tmp_path / "site" / "data")
    PrivateMariaDB.initialize(procs, tmp_path / "site" / "data")
    admin = mysql.start()
    quoted = PASSWORD.replace("\\", "\\\\").replace("'", "\\'")
    admin.sql(f"CREATE USER 'owner'@'127.0.0.1' IDENTIFIED BY '{quoted}'; CREATE DATABASE shop;"
              "GRANT ALL ON shop.* TO 'owner'@'127.0.0.1';")
    admin.load_file(root / "dump.sql", "shop")
    config_rewrite(app, mysql.port)
    return Site(app, admin, mysql.port, "shop")


def _catalog_config(app: Path, port: int) -> None:
    (app / "dbconf.php").unlink()
    (app / "dbconf.php").write_text(f"<?php\nreturn ['host' => '127.0.0.1', 'port' => {port}, 'socket' => '', "
                                    f"'name' => 'shop', 'user' => 'owner', 'password' => {PASSWORD!r}];\n")


def _wordpress_config(app: Path, port: int) -> None:
    """The user's wp-config.php: their database, their URL, their own absolute paths."""
    text = re.sub(r"(define\( '(?:ABSPATH|WP_CONTENT_DIR)', ')[^']*/app(/[^']*)?'",
                  lambda m: f"{m[1]}{app}{m[2] or ''}'", (app / "wp-config.php").read_text())
    for key, value in (("DB_NAME", "shop"), ("DB_USER", "owner"), ("DB_PASSWORD", PASSWORD),
                       ("DB_HOST", f"127.0.0.1:{port}"), ("WP_HOME", "https://blog.example.org"),
                       ("WP_SITEURL", "https://blog.example.org")):
        text = re.sub(rf"define\( '{key}', '(?:[^'\\]|\\.)*' \);", lambda m: f"define( '{key}', {value!r} );", text)
    (app / "wp-config.php").unlink()
    (app / "wp-config.php").write_text(text)


def _mediawiki_config(app: Path, port: int) -> None:
    text = (app / "LocalSettings.php").read_text()
    for key, value in (("wgDBserver", f"127.0.0.1:{port}"), ("wgDBname", "shop"), ("wgDBuser", "owner"),
                       ("wgDBpassword", PASSWORD), ("wgServer", "https://wiki.example.org")):
        text = re.sub(rf'^\${key} = "(?:[^"\\]|\\.)*";', lambda m: f'${key} = "{value}";', text, flags=re.M)
    (app / "LocalSettings.php").unlink()
    (app / "LocalSettings.php").write_text(text)


def _drupal_config(app: Path, port: int) -> None:
    """minicms (Drupal 7's mechanisms) laid out as a Drupal 7 site: its database settings in
    sites/default/settings.php's $databases, which its dbconf.php now reads, and Drupal 7's
    includes/bootstrap.inc beside its own code (a marker: minicms never loads it)."""
    settings = app / "sites" / "default" / "settings.php"
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text("<?php\n$databases['default']['default'] = array(\n  'driver' => 'mysql', 'database' => 'shop',"
                        f" 'username' => 'owner', 'password' => {PASSWORD!r}, 'host' => '127.0.0.1',"
                        f" 'port' => '{port}', 'prefix' => '',\n);\n$drupal_hash_salt = 'x';\n")
    (app / "includes" / "bootstrap.inc").write_text("<?php\n// Drupal 7's bootstrap (a marker here)\n")
    (app / "dbconf.php").unlink()
    (app / "dbconf.php").write_text(
        "<?php\nrequire __DIR__ . '/sites/default/settings.php';\n$d = $databases['default']['default'];\n"
        "return ['host' => $d['host'], 'port' => (int) $d['port'], 'socket' => '', 'name' => $d['database'],"
        " 'user' => $d['username'], 'password' => $d['password']];\n")


def _laravel_config(app: Path, port: int) -> None:
    """The user's .env: their database over TCP, also as a connection URL (which Laravel's
    config/database.php prefers to the DB_* keys), their URL, a password that needs quoting."""
    url = f"mysql://owner:{urllib.parse.quote(PASSWORD, safe='')}@127.0.0.1:{port}/shop"
    values = {"APP_URL": "https://journal.example.org", "DB_HOST": "127.0.0.1", "DB_PORT": str(port),
              "DB_DATABASE": "shop", "DB_USERNAME": "owner", "DB_PASSWORD": '"' + PASSWORD + '"', "DATABASE_URL": url}
    lines = [line for line in (app / ".env").read_text().splitlines()
             if line.split("=", 1)[0] not in {*values, "DB_SOCKET"}]
    (app / ".env").unlink()
    (app / ".env").write_text("\n".join(lines + [f"{k}={v}" for k, v in values.items()]) + "\n")


def _defects(findings_dir: Path) -> dict:
    """The kinds of defect finding, each with its highest severity; `hotspot` left out: it is
    the unexplained time above a share, the remainder of the others, and its count moves with
    sampling noise between two runs of the same target (MediaWiki: 4 in one run, 5 in the
    next). Kinds, not counts: a second finding of one kind near its threshold comes and goes
    between two runs too (WordPress's second repeated-call, 2.8% of the page, in one CI run of
    two)."""
    data = json.loads((findings_dir / "findings.json").read_text())
    rank = {"low": 0, "medium": 1, "high": 2}
    out: dict = {}
    for f in data["findings"]:
        if f.get("severity") in rank and f["id"] != "hotspot":
            out[f["id"]] = max(out.get(f["id"], "low"), f["severity"], key=rank.get)
    return out


def _same_defects(mine: dict, builtin: dict) -> None:
    """Every kind either run finds at medium or high severity, the other finds too. A low
    finding sits near its threshold and may be missing from the other run: WordPress's
    WP_Theme_JSON::sanitize is a per-call-setup of 1.6 to 1.8% against a 2.0% floor (setup
    fraction 0.45 against 0.5) here, and crossed both in one CI run of two under load."""
    assert mine and builtin, (mine, builtin)
    strong = {k for d in (mine, builtin) for k, sev in d.items() if sev != "low"}
    assert strong <= set(mine) & set(builtin), (mine, builtin)


def _log_counts(log: Path) -> Counter:
    """The log's GET requests answered 2xx, by request target (the test's own reading)."""
    out = Counter()
    for line in log.read_text().splitlines():
        m = LINE.match(line)
        if m and m[1] == "GET" and m[3].startswith("2"):
            out[m[2]] += 1
    return out


def _run_builtin(home, tmp_path, builtin) -> Path:
    out = tmp_path / f"{builtin}-run"
    r = lockdown_runner(home, 1200)("run", builtin, "-o", out, *RUN_ARGS)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return out


@pytest.mark.parametrize("builtin, framework, rewrite", [("catalog", "generic", _catalog_config),
                                                         ("wordpress", "wordpress", _wordpress_config),
                                                         ("mediawiki", "mediawiki", _mediawiki_config),
                                                         ("minicms", "drupal", _drupal_config),
                                                         ("laravel", "laravel", _laravel_config)])
def test_init_then_run_finds_what_the_builtin_target_finds(home, tmp_path, builtin, framework, rewrite):
    run = lockdown_runner(home, 1200)
    builtin_run = _run_builtin(home, tmp_path, builtin)            # also prepares what the site is copied from
    bench_dir = tmp_path / "bench"
    b = run("bench", builtin, "--runs", "1", "--duration", "2", "--warmup-duration", "1", "--run-dir", bench_dir)
    assert b.returncode == 0, b.stderr[-3000:]
    log = bench_dir / "logs" / "nginx-access.log"                   # written by nginx under wrk's load
    with ProcessGroup(tmp_path / "site-procs") as procs:
        site = _site(tmp_path, procs, builtin, rewrite)
        before = site.state()
        target = tmp_path / f"my-{builtin}"
        i = run("init", "-o", target, "--app", site.app, "--db", site.dsn, "--access-log", log)
        assert i.returncode == 0, i.stdout[-3000:] + i.stderr[-3000:]
        assert f"({framework}, docroot {DOCROOTS.get(framework, '.')})" in i.stdout
        assert PASSWORD not in i.stdout + i.stderr
        assert i.stdout.count(f"[prepare] my-{builtin}: first use") == 1        # prepared once, ...
        assert not any(PASSWORD.encode() in p.read_bytes() for p in target.rglob("*") if p.is_file())

        # the URL list: the log's page views, by count
        counts = _log_counts(log)
        urls = __import__("tomllib").loads((target / "target.toml").read_text())["urls"]
        kept = {u["path"] for u in urls}
        left = [n for path, n in counts.items() if path not in kept]
        assert kept <= set(counts) and sum(counts[p] for p in kept) >= 0.95 * sum(counts.values())
        assert max(left, default=0) <= min(counts[p] for p in kept)           # the most requested kept
        top = max(counts.values())
        scale = min(1.0, MAX_WEIGHT / top, (MAX_TOTAL_WEIGHT - len(urls)) / sum(counts.values()))
        for u in urls:
            assert abs(u["weight"] - counts[u["path"]] * scale) <= (0.5 if scale < 1 else 0), (u, counts)

        # from here on, nothing may reach the user's server: lockdown's copy has its own database
        site.admin.sql("ALTER USER 'owner'@'127.0.0.1' ACCOUNT LOCK;")
        r = run("run", target, "-o", tmp_path / "mine", *RUN_ARGS)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        assert "[prepare]" not in r.stdout                  # ... for the target.toml init wrote last
        _same_defects(_defects(tmp_path / "mine"), _defects(builtin_run))
        assert site.state() == before
        assert PASSWORD not in r.stdout + r.stderr
        mysql_dump = subprocess.run(["grep", "-rl", PASSWORD, str(home)], capture_output=True, text=True)
        assert mysql_dump.stdout == ""                              # nothing lockdown keeps holds it


def test_init_without_a_log_takes_the_home_page_and_its_links(home, tmp_path):
    """No access log: the home page and the same-site pages it links to that answer 200."""
    run = lockdown_runner(home, 1200)
    _run_builtin(home, tmp_path, "catalog") if not list(prepared_glob("catalog")) else None
    with ProcessGroup(tmp_path / "site-procs") as procs:
        site = _site(tmp_path, procs, "catalog", _catalog_config)
        before = site.state()
        target = tmp_path / "shop"
        i = run("init", "-o", target, "--app", site.app, "--db", site.dsn)
        assert i.returncode == 0, i.stdout[-3000:] + i.stderr[-3000:]
        doc = __import__("tomllib").loads((target / "target.toml").read_text())
        paths = [u["path"] for u in doc["urls"]]
        assert paths[0] == "/" and doc["urls"][0]["weight"] == 3 and len(paths) > 1
        assert all(u["weight"] == 1 for u in doc["urls"][1:])
        assert "/products" in paths                          # the home page's own navigation
        assert doc["sanity"] == {"url": "/", "expect": doc["sanity"]["expect"]} and doc["sanity"]["expect"]
        assert i.stdout.count("[prepare] shop: first use") == 1
        final = SHARED_PREPARED / f"{prepared_stem(load_target(target))}-{cache_key(load_target(target))}"
        assert (final / "prepared.json").is_file()           # what init prepared is the final file's
        assert site.state() == before


def prepared_glob(name: str):
    return (p for p in SHARED_PREPARED.glob(f"{name}-*") if (p / "prepared.json").is_file())


FLAT_PAGE = r"""<?php
// A flat-file wiki: pages and their metadata under data/, which the web server's account owns;
// the metadata file is rewritten in place on every view, as DokuWiki's is.
$page = preg_replace('/[^a-z]/', '', $_GET['id'] ?? 'start') ?: 'start';
$text = @file_get_contents(__DIR__ . "/data/pages/$page.txt");
if ($text === false) { http_response_code(404); exit("no such page\n"); }
$meta = __DIR__ . "/data/meta/$page.meta";
$h = @fopen($meta, 'r+');
$saved = $h !== false && fwrite($h, (string) time()) !== false;
if ($h) { fclose($h); }
echo "<html><head><title>Flat Wiki - $page</title></head><body><h1>$page</h1><p>", htmlspecialchars($text), "</p>",
     $saved ? "<p>meta saved</p>" : "<p>META NOT SAVED</p>",
     '<a href="/?id=about">about</a> <a href="/?id=help">help</a></body></html>', "\n";
"""


def test_init_of_an_app_without_a_database_keeps_what_it_writes_writable(home, tmp_path, monkeypatch):
    """--no-db: no [database], no configure step; the site's data directory, owned by the web
    server's account, becomes `writable`, so lockdown's copy saves what the site saves."""
    import pwd
    site = tmp_path / "site"
    for d in ("data/pages", "data/meta", "conf"):
        (site / d).mkdir(parents=True)
    (site / "index.php").write_text(FLAT_PAGE)
    (site / "conf" / "local.php").write_text("<?php $conf['title'] = 'Flat Wiki';\n")
    for page in ("start", "about", "help"):
        (site / "data" / "pages" / f"{page}.txt").write_text(f"the {page} page\n")
        (site / "data" / "meta" / f"{page}.meta").write_text("0")
    www = pwd.getpwnam("www-data")
    for root, dirs, files in __import__("os").walk(site / "data"):
        for name in [root, *(str(Path(root, f)) for f in dirs + files)]:
            __import__("os").chown(name, www.pw_uid, www.pw_gid)
    before = tree_digest(site)
    run = lockdown_runner(home, 1200)
    r = run("init", "-o", tmp_path / "t1", "--app", site)
    assert r.returncode == 2 and "--no-db" in r.stderr and r.stderr.count("\n") == 1
    i = run("init", "-o", tmp_path / "flat", "--app", site, "--no-db")
    assert i.returncode == 0, i.stdout[-3000:] + i.stderr[-3000:]
    doc = __import__("tomllib").loads((tmp_path / "flat" / "target.toml").read_text())
    assert "database" not in doc and "configure" not in doc and doc["writable"] == ["data"]
    assert not (tmp_path / "flat" / "configure.php").exists()
    assert doc["sanity"] == {"url": "/", "expect": "Flat Wiki - start"}
    assert {u["path"] for u in doc["urls"]} == {"/", "/?id=about", "/?id=help"}
    r = run("run", tmp_path / "flat", "-o", tmp_path / "flat-run", "--no-bench", "--requests", "30")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    # what lockdown's copy serves: the metadata saved on every view, as on the site
    from lockdown.harness.bench import fetch
    from lockdown.harness.stack import Stack, StackOptions
    from lockdown.targets.config import load_target
    monkeypatch.setenv("LOCKDOWN_PREPARED_DIR", str(tmp_path / "prepared"))
    with Stack(load_target(tmp_path / "flat"), tmp_path / "flat-serve", StackOptions(workers=1),
               say=lambda m: None) as stack:
        pages = [fetch(stack.base_url + "/?id=about")[1].decode() for _ in range(2)]
    assert all("meta saved" in p for p in pages), pages
    assert tree_digest(site) == before
