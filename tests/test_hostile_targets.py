"""Hostile target.toml files (issue 29, point 4 and the target parts of point 9): every path a
target names stays in the target directory or the app tree, every value that reaches a server's
configuration can add no directive, and a bad one is refused in one line naming its key, with a
non-zero exit and nothing started. And nothing lockdown starts listens beyond 127.0.0.1."""
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import HELLO, processes_mentioning
from lockdown.errors import LockdownError
from lockdown.harness.phpfpm import build_php_config, fpm_env
from lockdown.harness.render import _ENV
from lockdown.harness.toolchain import tool
from lockdown.targets.config import load_target

SHORT = ("--runs", "1", "--duration", "1", "--warmup-duration", "1", "--warmup-requests", "5")

BASE = {
    "name": '"hostile"',
    "docroot": '"."',
    "front_controller": '"index.php"',
}
APP = '[app]\nfiles = "app"\n'
URLS = '[[urls]]\npath = "/"\nweight = 1\n'
SANITY = '[sanity]\nurl = "/"\nexpect = "Hello from PHP"\n'


def toml(top=None, app=APP, urls=URLS, sanity=SANITY, extra=""):
    """A target.toml: hello's app with the top-level keys of BASE, replaced (or, with None as
    the value, left out) by `top`."""
    keys = {**BASE, **(top or {})}
    head = "".join(f"{k} = {v}\n" for k, v in keys.items() if v is not None)
    return f"{head}\n{app}\n{urls}\n{sanity}\n{extra}"


def hostile_target(root: Path, text: str, setup=None, dirname="t") -> Path:
    d = root / dirname
    shutil.copytree(HELLO, d)
    (d / "target.toml").write_text(text)
    if setup:
        setup(d)
    return d


def link(rel, to):
    def make(d):
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(to, d / rel)
    return make


# (id, target.toml, setup of the target directory, what the one line must name)
CASES = [
    ("docroot-dotdot", toml({"docroot": '"../../etc"'}), None, "docroot '../../etc' leads out of the app tree"),
    ("docroot-absolute", toml({"docroot": '"/etc"'}), None, "docroot '/etc' leads out of the app tree"),
    ("docroot-symlink", toml({"docroot": '"www"'}), link("app/www", "/etc"),
     "docroot 'www' leads out of the app tree (through a symlink, to /etc)"),
    ("docroot-directives", toml({"docroot": '". ; listen 0.0.0.0:8080; autoindex on;"'}), None,
     "docroot '. ; listen 0.0.0.0:8080; autoindex on;' holds"),
    ("docroot-newline", toml({"docroot": '".\\nautoindex on"'}), None, "docroot '.\\nautoindex on' holds"),
    ("docroot-dollar", toml({"docroot": '"$document_root"'}), None, "docroot '$document_root' holds '$'"),
    ("docroot-empty", toml({"docroot": '""'}), None, "docroot is empty"),
    ("front-semicolon", toml({"front_controller": '"index.php; autoindex on"'}), None,
     "front_controller 'index.php; autoindex on' holds"),
    ("front-newline", toml({"front_controller": '"index.php\\nautoindex on;"'}), None,
     "front_controller 'index.php\\nautoindex on;' holds"),
    ("front-brace", toml({"front_controller": '"index.php; } server { listen 0.0.0.0:80; location / {"'}),
     None, "front_controller 'index.php; } server {"),
    ("front-braces", toml({"front_controller": '"{index}.php"'}), None, "front_controller '{index}.php' holds '{' '}'"),
    ("front-quote", toml({"front_controller": '"i\\"x.php"'}), None, "front_controller 'i\"x.php' holds '\"'"),
    ("front-dotdot", toml({"front_controller": '"../../etc/passwd"'}), None,
     "front_controller '../../etc/passwd' leads out of the docroot"),
    ("front-absolute", toml({"front_controller": '"/etc/passwd"'}), None,
     "front_controller '/etc/passwd' leads out of the docroot"),
    ("front-symlink", toml({"front_controller": '"evil.php"'}), link("app/evil.php", "/etc/passwd"),
     "front_controller 'evil.php' leads out of the docroot (through a symlink"),
    ("files-dotdot", toml(app='[app]\nfiles = "../../etc"\n'), None,
     "[app] files '../../etc' leads out of the target directory"),
    ("files-absolute", toml(app='[app]\nfiles = "/etc"\n'), None,
     "[app] files '/etc' leads out of the target directory"),
    ("files-symlink", toml(app='[app]\nfiles = "lnk"\n'), link("lnk", "/etc"),
     "[app] files 'lnk' leads out of the target directory (through a symlink, to /etc)"),
    ("source-missing", toml(app='[app]\nsource = "/nonexistent/app"\n'), None,
     "[app] source '/nonexistent/app' is not an existing directory"),
    ("source-root", toml(app='[app]\nsource = "/"\n'), None, "[app] source is the root directory"),
    ("exclude-int", toml(app=f'[app]\nsource = "{HELLO / "app"}"\nexclude = [1]\n'), None,
     "[app] exclude[0] must be a string"),
    ("exclude-dotdot", toml(app=f'[app]\nsource = "{HELLO / "app"}"\nexclude = ["../x"]\n'), None,
     "[app] exclude[0] '../x' is not the name of a top-level entry"),
    ("schema-dotdot", toml(extra='[database]\nname = "h"\nschema = "../../etc/passwd"\n'), None,
     "[database] schema '../../etc/passwd' leads out of the target directory"),
    ("schema-absolute", toml(extra='[database]\nname = "h"\nschema = "/etc/passwd"\n'), None,
     "[database] schema '/etc/passwd' leads out of the target directory"),
    ("schema-symlink", toml(extra='[database]\nname = "h"\nschema = "s.sql"\n'), link("s.sql", "/etc/passwd"),
     "[database] schema 's.sql' leads out of the target directory (through a symlink, to /etc/passwd)"),
    ("seed-dotdot", toml(extra='[database]\nname = "h"\nseed = "../seed.sql"\n'), None,
     "[database] seed '../seed.sql' leads out of the target directory"),
    ("dbname-injection", toml(extra='[database]\nname = "x`; DROP DATABASE mysql; --"\n'), None,
     "[database] name 'x`; DROP DATABASE mysql; --' may only hold"),
    ("install-script-dotdot", toml(extra='[install]\ncommand = ["sh", "../../tmp/evil.sh"]\n'), None,
     "[install] command's script '../../tmp/evil.sh' leads out of the target directory"),
    ("configure-script-dotdot", toml(extra='[configure]\ncommand = ["../evil"]\n'), None,
     "[configure] command's script '../evil' leads out of the target directory"),
    ("patchable-dotdot", toml({"patchable": '["../../etc/passwd"]'}), None,
     "patchable[0] '../../etc/passwd' leads out of the app tree"),
    ("patchable-int", toml({"patchable": '[3]'}), None, "patchable[0] must be a string"),
    ("writable-dotdot", toml({"writable": '["../../etc"]'}), None, "writable[0] '../../etc' leads out of the app tree"),
    ("writable-tree", toml({"writable": '["./"]'}), None, "writable[0] './' is the app tree itself"),
    ("writable-int", toml({"writable": '[3]'}), None, "writable[0] must be a string"),
    ("php-ini-newline", toml({"php_ini": '{ error_log = "x\\nauto_prepend_file = /etc/passwd" }'}), None,
     "php_ini.error_log 'x\\nauto_prepend_file = /etc/passwd' holds a control character ('\\n')"),
    ("php-ini-key-newline", toml({"php_ini": '{ "a\\nauto_prepend_file" = "1" }'}), None,
     "php_ini key 'a\\nauto_prepend_file' is not a php.ini setting name"),
    ("php-ini-key-bracket", toml({"php_ini": '{ "x] = 1\\n[y" = "1" }'}), None, "php_ini key 'x] = 1\\n[y'"),
    ("php-ini-nan", toml({"php_ini": '{ memory_limit = nan }'}), None, "php_ini.memory_limit must be a finite number"),
    ("weight-huge", toml(urls='[[urls]]\npath = "/"\nweight = 100000000\n'), None,
     "urls[0].weight must be at most 1000"),
    ("weight-float-huge", toml(urls='[[urls]]\npath = "/"\nweight = 1e8\n'), None,
     "urls[0].weight must be a positive integer, got 100000000.0"),
    ("weight-nan", toml(urls='[[urls]]\npath = "/"\nweight = nan\n'), None,
     "urls[0].weight must be a positive integer, got nan"),
    ("weight-inf", toml(urls='[[urls]]\npath = "/"\nweight = inf\n'), None,
     "urls[0].weight must be a positive integer, got inf"),
    ("weight-bool", toml(urls='[[urls]]\npath = "/"\nweight = true\n'), None,
     "urls[0].weight must be a positive integer, got True"),
    ("weights-sum", toml(urls="".join(f'[[urls]]\npath = "/{i}"\nweight = 1000\n' for i in range(11))), None,
     "urls' weights add up to 11000; at most 10000"),
    ("url-newline", toml(urls='[[urls]]\npath = "/a\\r\\nX-Evil: 1"\n'), None,
     "urls[0].path '/a\\r\\nX-Evil: 1' holds a control character ('\\r')"),
    ("sanity-url-newline", toml(sanity='[sanity]\nurl = "/\\nHost: evil"\nexpect = "Hello"\n'), None,
     "[sanity] url '/\\nHost: evil' holds a control character ('\\n')"),
    ("url-fragment", toml(urls='[[urls]]\npath = "/a#b"\n'), None, "urls[0].path '/a#b' holds '#'"),
    ("name-empty", toml({"name": '""'}), None, "name is empty"),
    ("name-dotdot", toml({"name": '"../x"'}), None, "name '../x' is not a safe name"),
    ("name-dots", toml({"name": '".."'}), None, "name '..' is not a safe name"),
    ("name-slash", toml({"name": '"a/b"'}), None, "name 'a/b' is not a safe name"),
    ("name-space", toml({"name": '"a b"'}), None, "name 'a b' is not a safe name"),
    ("name-quote", toml({"name": '"x`y"'}), None, "name 'x`y' is not a safe name"),
    ("name-int", toml({"name": '3'}), None, "`name` must be a string, not an integer"),
    ("timeout-negative", toml(extra='[install]\ncommand = ["true"]\ntimeout = -1\n'), None,
     "[install] timeout must be a positive number of seconds, at most 86400, got -1"),
    ("timeout-zero", toml(extra='[install]\ncommand = ["true"]\ntimeout = 0\n'), None,
     "[install] timeout must be a positive"),
    ("timeout-nan", toml(extra='[install]\ncommand = ["true"]\ntimeout = nan\n'), None,
     "[install] timeout must be a positive number of seconds, at most 86400, got nan"),
    ("timeout-inf", toml(extra='[install]\ncommand = ["true"]\ntimeout = inf\n'), None,
     "[install] timeout must be a positive"),
    ("timeout-bool", toml(extra='[install]\ncommand = ["true"]\ntimeout = true\n'), None,
     "[install] timeout must be a number, not a boolean"),
    ("timeout-string", toml(extra='[install]\ncommand = ["true"]\ntimeout = "600"\n'), None,
     "[install] timeout must be a number, not a string"),
]


@pytest.fixture
def private_home(tmp_path):
    """A LOCKDOWN_HOME and prepared directory of the test's own: whatever a refused command made
    would show there."""
    home, prepared = tmp_path / "home", tmp_path / "prepared"
    return home, {"LOCKDOWN_HOME": str(home), "LOCKDOWN_PREPARED_DIR": str(prepared)}


def assert_refused(r, target: Path, problem: str, home: Path):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert r.stdout == ""
    assert "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("lockdown: error: "), r.stderr
    assert f"bad target file {target / 'target.toml'}: " in r.stderr
    assert problem in r.stderr, r.stderr
    # nothing made and nothing started: no run directory, no preparation, no server
    assert not (home / "runs").exists() and not (home.parent / "prepared").exists()
    assert processes_mentioning(str(target)) == []
    assert processes_mentioning(str(home)) == []


@pytest.mark.parametrize("text, setup, problem", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hostile_target_is_refused_in_one_line(lockdown, tmp_path, private_home, text, setup, problem):
    home, env = private_home
    d = hostile_target(tmp_path, text, setup)
    r = lockdown("bench", d, *SHORT, extra_env=env)
    assert_refused(r, d, problem, home)


@pytest.mark.parametrize("command", [
    ("profile", "{d}", "--requests", "5", "-o", "{tmp}/bundle"),
    ("run", "{d}", "-o", "{tmp}/out"),
    ("compare", "{d}", "--with", "opcache.enable=0"),
])
def test_every_command_refuses_the_nginx_injection(lockdown, tmp_path, private_home, command):
    """The issue's case: a docroot that made nginx serve /etc with autoindex on 0.0.0.0."""
    home, env = private_home
    d = hostile_target(tmp_path, toml({"docroot": '"/etc; listen 0.0.0.0:8080; autoindex on"'}))
    r = lockdown(*[c.format(d=d, tmp=tmp_path) for c in command], extra_env=env)
    assert_refused(r, d, "docroot '/etc; listen 0.0.0.0:8080; autoindex on' holds", home)
    assert not (tmp_path / "bundle").exists() and not (tmp_path / "out").exists()


def test_a_directory_name_unsafe_as_a_name_needs_a_name(lockdown, tmp_path, private_home):
    """The name defaults to the directory's: one that cannot name a directory or a database is
    refused with what to do, and the same directory loads with a `name` of its own."""
    home, env = private_home
    d = hostile_target(tmp_path, toml({"name": None}), dirname="my target")
    r = lockdown("bench", d, *SHORT, extra_env=env)
    assert_refused(r, d, "name 'my target' is not a safe name (it defaults to the directory's name)", home)
    (d / "target.toml").write_text(toml())
    assert load_target(d).name == "hostile"


def test_sibling_symlinks_and_safe_spellings_load(tmp_path):
    """What stays allowed: a target's files may be symlinks into a sibling target directory (how
    minicms-clean shares minicms's files), `./` and `a/..` spellings that stay inside are
    normalized, and a URL's space and non-ASCII characters are percent-encoded, once."""
    base = hostile_target(tmp_path, toml(), dirname="base")
    (base / "schema.sql").write_text("CREATE TABLE t (id INT);\n")
    variant = hostile_target(tmp_path, toml(
        {"name": '"variant"', "docroot": '"./sub/.."', "front_controller": '"./index.php"'},
        urls='[[urls]]\npath = "/a b/é?q=ü ö&r=%C3%A9&pct=100%"\nweight = 1000\n',
        extra='[database]\nname = "v"\nschema = "schema.sql"\n[install]\ncommand = ["php", "install.php"]\n'),
        link("schema.sql", "../base/schema.sql"), dirname="variant")
    os.symlink("../base/app", variant / "install.php")    # resolves into the sibling target
    t = load_target(variant)
    assert t.docroot == "." and t.front_controller == "index.php"
    assert t.schema == variant / "schema.sql"
    assert t.urls[0].path == "/a%20b/%C3%A9?q=%C3%BC%20%C3%B6&r=%C3%A9&pct=100%25"
    assert t.weighted_paths() == [t.urls[0].path] * 1000
    # a symlink into a directory that is no target is not a sibling target
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "schema.sql").write_text("")
    (variant / "schema.sql").unlink()
    os.symlink("../other/schema.sql", variant / "schema.sql")
    with pytest.raises(LockdownError, match=r"\[database\] schema 'schema.sql' leads out of the target directory"):
        load_target(variant)


def test_php_ini_values_are_quoted_in_php_ini(tmp_path):
    """A value with quotes, a backslash, `$` and `;` reaches PHP as written and adds no setting;
    a newline is refused whoever gives it (the target, --php-ini)."""
    value = 'a"b\\c ${HOME} $x; auto_prepend_file = /etc/passwd'
    php = build_php_config(tmp_path / "php", {"user_agent": value, "highlight.html": 'x"'})
    out = subprocess.run([tool("php"), "-c", str(php.ini_file), "-r",
                          'echo json_encode([ini_get("user_agent"), ini_get("auto_prepend_file"), '
                          'ini_get("highlight.html")]);'],
                         capture_output=True, text=True, env=fpm_env(php), timeout=60)
    assert json.loads(out.stdout[out.stdout.find("["):]) == [value, "", 'x"'], out.stderr
    with pytest.raises(LockdownError, match="holds a control character"):
        build_php_config(tmp_path / "php2", {"user_agent": "x\nauto_prepend_file=/etc/passwd"})


def test_php_fpm_pool_values_are_quoted(tmp_path):
    """The pool's env[] and php_admin_value[] lines quote their values: php-fpm reads back the
    value as given, and no other setting."""
    value = 'v"q\\ ${HOME} $y; php_admin_value[open_basedir] = /'
    conf = tmp_path / "fpm.conf"
    conf.write_text(_ENV.get_template("php-fpm.conf.j2").render(
        run_dir=tmp_path, pid_file=tmp_path / "fpm.pid", error_log=tmp_path / "fpm.log",
        pools=[{"name": "t", "socket": tmp_path / "fpm.sock", "workers": 1}],
        pool_env={"LOCKDOWN_X": value}, pool_ini={"user_agent": value}, account=None, as_root=False))
    r = subprocess.run([tool("php-fpm"), "-n", "-tt", "-y", str(conf), "--allow-to-run-as-root"],
                       capture_output=True, text=True, timeout=60)
    dump = r.stdout + r.stderr
    assert "test is successful" in dump, dump
    assert f"\tenv[LOCKDOWN_X] = {value}\n" in dump
    assert f"\tphp_admin_value[user_agent] = {value}\n" in dump
    assert "open_basedir" not in dump.replace(value, "")


def listeners(run_dir: Path) -> list[tuple[str, str]]:
    """(process, local address) of every listening TCP socket and bound UDP socket the hook saw
    that belongs to a process of this run: one whose command line names the run directory, or
    a descendant of one (the workers' titles do not name it)."""
    ps = {}
    for line in (run_dir / "ps.txt").read_text().splitlines():
        pid, ppid, args = (line.split(None, 2) + [""])[:3]
        ps[int(pid)] = (int(ppid), args)
    ours = {pid for pid, (_, args) in ps.items() if str(run_dir) in args}
    grew = True
    while grew:
        more = {pid for pid, (ppid, _) in ps.items() if ppid in ours} - ours
        ours |= more
        grew = bool(more)
    found = []
    for line in (run_dir / "ss.txt").read_text().splitlines():
        pids = {int(p) for p in re.findall(r"pid=(\d+)", line)}
        if pids & ours:
            fields = line.split()
            name = re.search(r'\(\("([^"]+)"', line).group(1)
            found.append((name, fields[4]))
    return found


HOOK = 'ss -H -ltunp > "$LOCKDOWN_RUN_DIR/ss.txt"; ps -ww -eo pid=,ppid=,args= > "$LOCKDOWN_RUN_DIR/ps.txt"'


@pytest.mark.parametrize("target, servers", [("hello", {"nginx"}), ("sqltag", {"nginx", "mariadbd"})])
def test_servers_listen_on_loopback_only(lockdown, tmp_path, target, servers):
    """`ss` during a run: every socket a server of the run listens on is on 127.0.0.1 (php-fpm
    listens on unix sockets only)."""
    out = tmp_path / "out.json"
    r = lockdown("bench", target, *SHORT, "--exec-after-warmup", HOOK, "--json", out)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    run_dir = Path(json.loads(out.read_text())["run_dir"])
    found = listeners(run_dir)
    assert {name for name, _ in found} == servers, found
    assert all(re.fullmatch(r"127\.0\.0\.1:\d+", addr) for _, addr in found), found


def test_url_with_space_and_non_ascii_is_benched(lockdown, tmp_path):
    """A URL with a space and non-ASCII characters (and a sanity URL like it) is percent-encoded
    and served: no traceback, every response a 200 from the front controller."""
    d = hostile_target(tmp_path, toml(urls='[[urls]]\npath = "/a b/é?name=ü ö"\nweight = 2\n'
                                           '[[urls]]\npath = "/"\n',
                                      sanity='[sanity]\nurl = "/?name=lock down é"\nexpect = "lock down é"\n'))
    out = tmp_path / "out.json"
    r = lockdown("bench", d, *SHORT, "--json", out)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "Traceback" not in r.stdout + r.stderr
    data = json.loads(out.read_text())
    assert [u["path"] for u in data["config"]["urls"]] == ["/a%20b/%C3%A9?name=%C3%BC%20%C3%B6", "/"]
    assert data["sanity"]["url"] == "/?name=lock%20down%20%C3%A9"
    for run in data["runs"]:
        assert set(run["status_counts"]) == {"200"} and run["requests"] > 0
