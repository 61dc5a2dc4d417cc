"""`lockdown init`'s parts without a server: framework detection on small directory layouts,
access-log counting and weights, the generated configure step run by PHP on sample files."""
from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from lockdown.errors import LockdownError
from lockdown.intake import access_log, configure, detect
from lockdown.intake.init import links, same_site, sanity_string, target_name
from lockdown.targets.config import MAX_TOTAL_WEIGHT, MAX_WEIGHT


def tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


LAYOUTS = {
    "wordpress": ({"index.php": "", "wp-config.php": "<?php", "wp-settings.php": ""}, ".", "wp-config.php"),
    "drupal7": ({"index.php": "", "includes/bootstrap.inc": "", "sites/default/settings.php": "<?php",
                 "sites/all/modules/x.module": ""}, ".", "sites/default/settings.php"),
    "drupal10": ({"composer.json": "{}", "web/index.php": "", "web/core/lib/Drupal.php": "",
                  "web/sites/default/settings.php": "<?php", ".env": "X=1"}, "web", "web/sites/default/settings.php"),
    "mediawiki": ({"index.php": "", "LocalSettings.php": "<?php", "includes/Setup.php": ""}, ".", "LocalSettings.php"),
    "laravel": ({"artisan": "", ".env": "DB_HOST=x", "public/index.php": "", "bin/console": ""}, "public", ".env"),
    "symfony": ({"bin/console": "", ".env": "DATABASE_URL=x", "public/index.php": ""}, "public", ".env.local"),
    "generic": ({"web/index.php": "", "lib/app.php": ""}, "web", None),
}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_framework_and_docroot_detected_from_the_files(tmp_path, layout):
    files, docroot, config = LAYOUTS[layout]
    found = detect.detect(tree(tmp_path, files))
    assert found.framework == layout.rstrip("0123456789")
    assert (found.docroot, found.config) == (docroot, config)


def test_generic_docroot_order_and_a_tree_without_php(tmp_path):
    tree(tmp_path, {"public/index.php": "", "index.php": ""})
    assert detect.detect(tmp_path).docroot == "."
    with pytest.raises(LockdownError, match="no index.php in"):
        detect.detect(tree(tmp_path / "empty", {"README": ""}))


def test_a_framework_named_is_checked(tmp_path):
    tree(tmp_path, {"index.php": ""})
    with pytest.raises(LockdownError, match="--framework wordpress: .* does not look like one"):
        detect.detect(tmp_path, "wordpress")
    assert detect.detect(tmp_path, "generic").framework == "generic"


LOG = [
    '10.0.0.1 - - [27/Nov/2026:03:00:00 +0000] "GET / HTTP/1.1" 200 5120 "-" "wrk"',
    '10.0.0.1 - - [27/Nov/2026:03:00:00 +0000] "GET /?p=42 HTTP/1.1" 200 5120 "http://x/" "Mozilla/5.0 (X11)"',
    '10.0.0.1 - - [27/Nov/2026:03:00:00 +0000] "GET /wp-content/themes/t/style.css?ver=6.1 HTTP/1.1" 200 10 "-" "-"',
    '10.0.0.1 - - [27/Nov/2026:03:00:00 +0000] "GET /logo HTTP/1.1" 200 10 "-" "-"',
    '10.0.0.1 - - [27/Nov/2026:03:00:00 +0000] "POST /wp-comments-post.php HTTP/1.1" 302 0 "-" "-"',
    '10.0.0.1 - - [27/Nov/2026:03:00:00 +0000] "GET /gone HTTP/1.1" 404 0 "-" "-"',
    '10.0.0.1 - - [27/Nov/2026:03:00:00 +0000] "GET /old HTTP/1.1" 301 0 "-" "-"',
    'garbage line',
    '::1 - alice [27/Nov/2026:03:00:00 +0000] "GET /?s=a+b HTTP/2.0" 206 5120 "-" "curl"',
]


def test_log_counts_get_2xx_pages_and_leaves_out_static_files_and_the_rest():
    counts = access_log.count(LOG, frozenset({"logo"}))
    assert counts.pages == Counter({"/": 1, "/?p=42": 1, "/?s=a+b": 1})
    assert (counts.static, counts.other, counts.unreadable, counts.lines) == (2, 3, 1, 9)


def test_weights_are_the_counts_when_they_fit():
    pages = Counter({"/": 400, "/?p=1": 300, "/?p=2": 200, "/?p=3": 80, "/rare": 20})
    assert access_log.weighted(pages) == [("/", 400, 400), ("/?p=1", 300, 300), ("/?p=2", 200, 200),
                                          ("/?p=3", 80, 80)]                        # 980 of 1000 covered: 98% >= 95%
    assert [p for p, _, _ in access_log.weighted(pages, cover=1.0)][-1] == "/rare"


def test_weights_scaled_by_one_factor_within_the_bounds():
    assert access_log.weighted(Counter({"/": 5000, "/a": 100, "/b": 12}), cover=1.0) == \
        [("/", MAX_WEIGHT, 5000), ("/a", 20, 100), ("/b", 2, 12)]             # one weight at most 1000
    pages = Counter({f"/p{i}": 5000 - i * 90 for i in range(50)})
    got = access_log.weighted(pages, cover=1.0)
    scale = (MAX_TOTAL_WEIGHT - 50) / sum(pages.values())                      # their sum at most 10000
    assert len(got) == 50 and sum(w for _, w, _ in got) <= MAX_TOTAL_WEIGHT
    for _, w, n in got:
        assert abs(w - n * scale) <= 0.5                                       # proportional, to the rounding


def test_sanity_text_is_raw_text_of_the_title_and_links_are_same_site_pages():
    body = ('<html><head><title>My Blog &#8211; Just another site</title></head><body>'
            '<a href="/?p=2">a</a> <a href="http://127.0.0.1:8080/about/#x">b</a> <a href="https://other.org/">c</a>'
            '<a href="/style.css">d</a> <a href="/?p=2">again</a> <a href="?cat=1&amp;paged=2">e</a></body></html>')
    assert sanity_string(body) == "Just another site"
    assert links(body, "http://127.0.0.1:8080") == ["/?p=2", "/about/", "/?cat=1&paged=2"]
    with pytest.raises(LockdownError, match="no title or heading"):
        sanity_string("<p>x</p>")
    assert target_name(Path("/x/My Site!")) == "My-Site"
    assert same_site("http://127.0.0.1:8080/index.php/Main_Page", "http://127.0.0.1:8080") == "/index.php/Main_Page"
    assert same_site("/index.php?title=A&amp;b=1", "http://127.0.0.1:8080") == "/index.php?title=A&b=1"
    assert same_site("https://wiki.example.org/", "http://127.0.0.1:8080") is None


ENV = {"LOCKDOWN_DB_HOST": "127.0.0.1", "LOCKDOWN_DB_PORT": "3399", "LOCKDOWN_DB_SOCKET": "",
       "LOCKDOWN_DB_NAME": "shop", "LOCKDOWN_DB_USER": "lockdown", "LOCKDOWN_DB_PASSWORD": "s3cr'et",
       "LOCKDOWN_BASE_URL": "http://127.0.0.1:8123"}


def _configure(tmp_path: Path, spec: dict | None, files: dict[str, str],
               linked: dict[str, Path] | None = None) -> tuple[subprocess.CompletedProcess, Path]:
    """Run the generated configure.php on an app copy holding `files` (and `linked`: hard links
    to files elsewhere, as a run's app tree holds the prepared one's)."""
    app = tree(tmp_path / "app", files)
    app.mkdir(parents=True, exist_ok=True)
    for rel, src in (linked or {}).items():
        os.link(src, app / rel)
    script = tmp_path / "configure.php"
    script.write_text(configure.configure_script(spec))
    env = {**os.environ, **ENV, "LOCKDOWN_APP_DIR": str(app)}
    return subprocess.run(["php", str(script)], env=env, capture_output=True, text=True, timeout=60), app


def _php_eval(code: str) -> dict:
    r = subprocess.run(["php", "-r", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


WP_CONFIG = """<?php
define( 'DB_NAME', 'live_wp' );
define( 'DB_USER', "live_user" );
define( 'DB_PASSWORD', 'live-secret' );
define( 'DB_HOST', 'db.internal' );
$table_prefix = 'wp_';
"""


def test_wordpress_configure_rewrites_the_copy_and_leaves_the_original_file(tmp_path):
    spec = configure.spec_for("wordpress", tmp_path / "www", "wp-config.php")
    original = tmp_path / "orig-wp-config.php"
    original.write_text(WP_CONFIG + f"define( 'WP_CONTENT_DIR', '{tmp_path}/www/wp-content' );\n")
    before = original.read_text()
    r, app = _configure(tmp_path, spec, {}, {"wp-config.php": original})
    assert r.returncode == 0, r.stderr
    assert "s3cr" not in r.stdout + r.stderr
    assert original.read_text() == before                              # written by rename, not through the link
    got = _php_eval(f"define('ABSPATH', '/'); include '{app}/wp-config.php'; echo json_encode(["
                    "DB_NAME, DB_USER, DB_PASSWORD, DB_HOST, WP_HOME, WP_SITEURL, DISABLE_WP_CRON, $table_prefix,"
                    "WP_CONTENT_DIR]);")
    assert got == ["shop", "lockdown", "s3cr'et", "127.0.0.1:3399", "http://127.0.0.1:8123", "http://127.0.0.1:8123",
                   True, "wp_", f"{app}/wp-content"]                   # the user's own path: the copy's
    # a run's copy, hard links to that (prepared) one: configured again, for its own paths
    run = tmp_path / "run"
    subprocess.run(["cp", "-al", str(app), str(run)], check=True)
    prepared_text = (app / "wp-config.php").read_text()
    r = subprocess.run(["php", str(tmp_path / "configure.php")], capture_output=True, text=True, timeout=60,
                       env={**os.environ, **ENV, "LOCKDOWN_APP_DIR": str(run), "LOCKDOWN_DB_PORT": "4400"})
    assert r.returncode == 0, r.stderr
    assert (app / "wp-config.php").read_text() == prepared_text
    got = _php_eval(f"define('ABSPATH', '/'); include '{run}/wp-config.php'; "
                    "echo json_encode([DB_HOST, WP_CONTENT_DIR]);")
    assert got == ["127.0.0.1:4400", f"{run}/wp-content"]


def test_mediawiki_drupal_laravel_symfony_configure_in_their_own_formats(tmp_path):
    cases = {
        "mediawiki": ("LocalSettings.php", '<?php\n$wgDBserver = "localhost";\n$wgDBname = "wiki";\n$wgDBuser = "u";\n'
                                           '$wgDBpassword = "p";\n$wgServer = "https://wiki.example";\n',
                      "echo json_encode([$wgDBserver, $wgDBname, $wgDBuser, $wgDBpassword, $wgServer]);",
                      ["127.0.0.1:3399", "shop", "lockdown", "s3cr'et", "http://127.0.0.1:8123"]),
        "drupal": ("sites/default/settings.php",
                   "<?php\n$databases['default']['default'] = ['database' => 'd7', 'username' => 'u',"
                   " 'password' => 'p', 'host' => 'localhost', 'driver' => 'mysql', 'prefix' => 'x_'];\n",
                   "echo json_encode($databases['default']['default']);",
                   {"database": "shop", "username": "lockdown", "password": "s3cr'et", "host": "127.0.0.1",
                    "port": "3399", "driver": "mysql", "prefix": "x_"}),
    }
    for framework, (rel, text, show, expected) in cases.items():
        r, app = _configure(tmp_path / framework, configure.spec_for(framework, tmp_path, rel), {rel: text})
        assert r.returncode == 0, r.stderr
        assert _php_eval(f"include '{app / rel}'; {show}") == expected
    # a Laravel connection URL wins over the DB_* keys: set where the file has one, not added
    env_cases = {"laravel": (".env", "APP_URL=https://shop.example\nDB_HOST=db\nDB_DATABASE=live\nDB_USERNAME=u\n"
                                     "DB_PASSWORD=p\n# DB_PORT=3306\nDATABASE_URL=mysql://u:p@db:3306/live\n",
                             {"APP_URL": "http://127.0.0.1:8123", "DB_HOST": "127.0.0.1", "DB_DATABASE": "shop",
                              "DB_USERNAME": "lockdown", "DB_PASSWORD": "\"s3cr'et\"", "DB_PORT": "3399",
                              "DATABASE_URL": "mysql://lockdown:s3cr%27et@127.0.0.1:3399/shop"}),
                 "symfony": (".env.local", None,
                             {"DATABASE_URL": "mysql://lockdown:s3cr%27et@127.0.0.1:3399/shop"})}
    for framework, (rel, text, expected) in env_cases.items():
        r, app = _configure(tmp_path / framework, configure.spec_for(framework, tmp_path, rel),
                            {rel: text} if text else {})
        assert r.returncode == 0, r.stderr
        lines = dict(line.split("=", 1) for line in (app / rel).read_text().splitlines()
                     if "=" in line and not line.startswith("#"))
        assert {k: lines[k] for k in expected} == expected
        assert "DB_URL" not in lines


def test_generic_configuration_found_by_its_keys(tmp_path):
    app = tree(tmp_path / "site", {"index.php": "", "config.php": "<?php // nothing here\n",
                                   "dbconf.php": "<?php\nreturn ['host' => 'db', 'port' => 3306, 'socket' => '',"
                                                 " 'name' => 'live', 'user' => 'u', 'password' => 'p'];\n"})
    spec = configure.generic_spec(app, None)
    assert spec == {"format": "php-array", "file": "dbconf.php",
                    "keys": {"host": "host", "port": "port", "socket": "socket", "name": "name", "user": "user",
                             "password": "password"}}
    r, copy = _configure(tmp_path, spec, {"dbconf.php": (app / "dbconf.php").read_text()})
    assert r.returncode == 0, r.stderr
    assert _php_eval(f"echo json_encode(include '{copy}/dbconf.php');") == {
        "host": "127.0.0.1", "port": "3399", "socket": "", "name": "shop", "user": "lockdown", "password": "s3cr'et"}
    assert configure.generic_spec(tree(tmp_path / "bare", {"index.php": ""}), None) is None
    r, _ = _configure(tmp_path / "none", None, {})
    assert r.returncode == 1 and "fill in this script" in r.stderr


def test_a_dump_file_is_copied_as_it_is_and_one_that_selects_its_database_refused(tmp_path):
    from lockdown.intake import dump
    good = tmp_path / "good.sql"
    good.write_bytes(b"-- MariaDB dump\nCREATE TABLE t (id INT);\nINSERT INTO t VALUES (1),(2);\n\xff raw bytes\n")
    dump.copy_dump(good, tmp_path / "seed.sql")
    assert (tmp_path / "seed.sql").read_bytes() == good.read_bytes()
    for text, words in ((b"CREATE DATABASE live;\nUSE `live`;\n", "selects its database"),
                        (b"\x1f\x8b\x08\x00", "compressed")):
        bad = tmp_path / "bad.sql"
        bad.write_bytes(text)
        with pytest.raises(LockdownError, match=words):
            dump.copy_dump(bad, tmp_path / "other.sql")
    with pytest.raises(LockdownError, match="names no database") as e:
        dump.dsn_database("mysql://reader:secret@127.0.0.1:3306/")
    assert "secret" not in str(e.value)
    assert dump.dsn_database("mysql://reader@db:3307/my%2Dshop?socket=/run/x.sock") == "my-shop"
