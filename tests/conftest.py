"""Shared test helpers: run the real `lockdown` CLI in a private LOCKDOWN_HOME and find the
processes a run left behind (by its run directory in their command lines)."""
from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lockdown.paths import default_home

REPO = Path(__file__).resolve().parent.parent
HELLO = REPO / "fixtures" / "apps" / "hello"
SHARED_PREPARED = default_home() / "prepared"


def passable(path: Path) -> Path:
    """`path` and the test directories above it opened to every account for passing through
    (o+x, not for listing): as root, lockdown's servers run as an unprivileged account that
    must reach a run's directory, and pytest makes its temporary directories 0700. Only
    directories owned by the tests' user are changed, from /tmp down."""
    for d in [path, *path.parents]:
        try:
            st = d.stat()
        except OSError:
            break
        if st.st_uid != os.geteuid() or d == Path("/") or str(d) in ("/tmp", "/var/tmp"):
            break
        if not st.st_mode & 0o001:
            d.chmod((st.st_mode & 0o7777) | 0o001)
    return path


TEST_ROOT = Path("/var/tmp") / f"lockdown-tests-{os.geteuid()}"


def pytest_configure(config):
    """Each test session's temporary directories under /var/tmp/lockdown-tests-UID/pytest-PID
    rather than pytest's /tmp/pytest-of-USER, which every new pytest session on the machine
    resets to 0700: the servers' account of a session still running then lost its way to the
    pages it served (nginx answered 404). xdist's workers get their directory from the
    controller (basetemp/popen-gwN); sessions whose process is gone are removed."""
    if config.option.basetemp or hasattr(config, "workerinput"):
        return
    TEST_ROOT.mkdir(mode=0o711, exist_ok=True)
    TEST_ROOT.chmod(0o711)
    for old in [*TEST_ROOT.glob("pytest-*"), *TEST_ROOT.glob("servers-*")]:
        pid = old.name.split("-", 1)[1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(old, ignore_errors=True)
    config.option.basetemp = str(TEST_ROOT / f"pytest-{os.getpid()}")
    # records of users' servers (paths.servers_dir): one place per session, shared by its homes
    # (the workers inherit it), so another session's commands never restore this one's
    os.environ["LOCKDOWN_SERVERS_DIR"] = str(TEST_ROOT / f"servers-{os.getpid()}")


class PassableFactory:
    """pytest's tmp_path_factory, whose directories the servers' account can pass through."""

    def __init__(self, factory):
        self._factory = factory

    def mktemp(self, *args, **kwargs) -> Path:
        return passable(self._factory.mktemp(*args, **kwargs))

    def getbasetemp(self) -> Path:
        return passable(self._factory.getbasetemp())

    def __getattr__(self, name):
        return getattr(self._factory, name)


@pytest.fixture(scope="session")
def tmp_path_factory(tmp_path_factory):
    return PassableFactory(tmp_path_factory)


@pytest.fixture
def tmp_path(tmp_path):
    return passable(tmp_path)


@pytest.fixture(scope="session")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("lockdown-home")


def _env(home: Path) -> dict:
    e = dict(os.environ)
    e["LOCKDOWN_HOME"] = str(home)
    # records of users' servers (paths.servers_dir) beside the home, so that a command of
    # another test never restores a capture this test killed on purpose; a test of two homes
    # sharing them sets one directory for both
    e["LOCKDOWN_SERVERS_DIR"] = str(home.parent / f"{home.name}.servers")
    # Prepared targets (installed WordPress/MediaWiki) are reused across test sessions.
    e["LOCKDOWN_PREPARED_DIR"] = str(SHARED_PREPARED)
    e.pop("LOCKDOWN_PHP_EXTENSION_DIR", None)
    return e


@pytest.fixture
def env(home) -> dict:
    return _env(home)


def lockdown_argv(*args) -> list[str]:
    return [sys.executable, "-m", "lockdown", *map(str, args)]


def lockdown_runner(home: Path, timeout: float = 600):
    """`run(*args)`: `lockdown ARGS...` with `home` as LOCKDOWN_HOME, the CompletedProcess
    (text). For fixtures wider than one test, which cannot use the `lockdown` fixture."""
    env = _env(home)

    def run(*args, timeout=timeout, extra_env=None):
        return subprocess.run(lockdown_argv(*args), capture_output=True, text=True, timeout=timeout,
                              env={**env, **(extra_env or {})}, cwd=REPO)
    return run


@pytest.fixture
def lockdown(home):
    """Run `lockdown ARGS...`; returns the CompletedProcess (text)."""
    return lockdown_runner(home)


SETTINGS_SQL = ("SHOW GLOBAL VARIABLES WHERE Variable_name IN "
                "('slow_query_log','long_query_time','log_output','general_log','slow_query_log_file')")


def settings_hook(name: str) -> str:
    """A hook that saves the private server's log settings into the run directory."""
    return (f'mariadb --defaults-file="$LOCKDOWN_RUN_DIR/mysql/client-root.cnf" --batch '
            f'-e "{SETTINGS_SQL}" > "$LOCKDOWN_RUN_DIR/{name}.tsv"')


@pytest.fixture(scope="session")
def wordpress_bundle(home, tmp_path_factory):
    """One 50-request WordPress capture (all collectors, settings dumped around the capture),
    shared by the tests that read a real bundle: (the profile's CompletedProcess, bundle path)."""
    b1 = tmp_path_factory.mktemp("wordpress") / "b1"
    r = lockdown_runner(home, 900)("profile", "wordpress", "--requests", "50", "-o", b1,
                                   "--exec-after-warmup", settings_hook("settings-before"),
                                   "--exec-after-capture", settings_hook("settings-after"))
    return r, b1


@pytest.fixture(scope="session")
def minicms_run(home, tmp_path_factory):
    """One `lockdown run minicms` (every pathology on), shared by the tests that read a run
    directory (findings, verify, report, write-ups): (CompletedProcess, run directory)."""
    out = tmp_path_factory.mktemp("minicms-run") / "out"
    r = lockdown_runner(home, 900)("run", "minicms", "-o", out, "--runs", "2", "--duration", "2",
                                   "--warmup-duration", "1", "--requests", "60")
    return r, out


SHARED_FIXTURES = ("wordpress_bundle", "minicms_run")   # session-wide, each a minute or more


@pytest.hookimpl(tryfirst=True)   # before xdist's own hook reads the marks
def pytest_collection_modifyitems(config, items):
    """Group tests for `pytest -n N --dist loadgroup` (make test): the tests that use one of
    the expensive session fixtures run on one worker, so no worker builds it a second time;
    every other test runs with the rest of its file, so a module fixture is built once."""
    for item in items:
        group = next((name for name in SHARED_FIXTURES if name in item.fixturenames), item.path.name)
        item.add_marker(pytest.mark.xdist_group(group))


def tree_digest(root: Path) -> str:
    """Names and contents of every file under `root`: any write shows."""
    h = hashlib.sha256()
    for p in sorted(x for x in root.rglob("*") if x.is_file() and not x.is_symlink()):
        h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def prepared_root(name: str) -> Path:
    roots = [p for p in SHARED_PREPARED.glob(f"{name}-*") if (p / "prepared.json").is_file()
             and re.fullmatch(re.escape(name) + r"-[0-9a-f]{16}", p.name)]
    assert len(roots) == 1, roots
    return roots[0]


# --max-runs 5: no plan beyond the pilot. A 1 s pilot on a busy CI host is noisy enough to
# plan more pairs even for a 2x fix, and every pair is test time (make test under 10 minutes);
# the tests that use these check mechanics, not verdicts. The plan is tested in test_pair_plan.py.
VERIFY_ARGS = ("--runs", "5", "--max-runs", "5", "--duration", "1", "--warmup-duration", "1", "--requests", "30")


@pytest.fixture(scope="session")
def minicms_verified(home, minicms_run):
    """`lockdown verify --finding db-static-cache --json` (a diff remediation) on the shared
    minicms run: (verify's CompletedProcess, run directory, digest of the prepared app tree
    before). Its stdout is the verification document alone."""
    r, out = minicms_run
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    digest = tree_digest(prepared_root("minicms") / "app")
    v = lockdown_runner(home, 900)("verify", out, "--finding", "db-static-cache", *VERIFY_ARGS, "--json")
    return v, out, digest


def processes_mentioning(fragment: str) -> list[str]:
    """Command lines of live (non-zombie) processes that contain `fragment`."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmd = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if fragment in cmd and state != "Z":
            found.append(f"{entry.name}: {cmd}")
    return found


def run_dir_of(output: str) -> str:
    for line in output.splitlines():
        if line.startswith("[start] run directory "):
            return line.split("[start] run directory ", 1)[1].strip()
    raise AssertionError(f"no run directory in output:\n{output}")


def wait_for_line(proc, marker, timeout=120) -> str:
    """Read a running lockdown's stdout until a line contains `marker`; return what was read."""
    lines = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if marker in line:
            return "".join(lines)
    raise AssertionError(f"{marker!r} never printed:\n{''.join(lines)}")


# `lockdown bench wordpress --runs 5 --duration 10` on this VM (2026-11-22): the probe's speed
# held still while the hypervisor stole 6% to 17% of the CPU, and RPS followed 1 - steal.
STOLEN = [(15.257, 33.765, 6.5), (14.767, 34.111, 6.3), (14.495, 34.654, 10.0),
          (13.036, 33.513, 17.0), (13.756, 33.689, 14.5)]


def stolen_runs():
    return [{"rps": rps, "host_speed": {"speed": speed}, "host_cpu": {"busy_pct": 100 - steal, "steal_pct": steal}}
            for rps, speed, steal in STOLEN]


def one_page_target(root: Path, name: str, description: str, page: str, expect: str,
                    php_ini: dict | None = None) -> Path:
    """ROOT/NAME: a target of one PHP page served at / (`app/index.php`, whose output must
    contain `expect`), with `php_ini` overrides: for tests that need an app of their own on
    the real stack. Returns the target directory; the page's directory is `app/`. The page is
    dated an hour back, as a deployed app's files are: one written just before the run is
    younger than opcache.file_update_protection, which the warmup then waits out and names."""
    target = root / name
    (target / "app").mkdir(parents=True)
    ini = ("php_ini = { " + ", ".join(f'"{k}" = "{v}"' for k, v in php_ini.items()) + " }\n") if php_ini else ""
    (target / "target.toml").write_text(
        f'name = "{name}"\ndescription = "{description}"\ndocroot = "."\nfront_controller = "index.php"\n{ini}'
        f'\n[app]\nfiles = "app"\n\n[[urls]]\npath = "/"\nweight = 1\n\n[sanity]\nurl = "/"\nexpect = "{expect}"\n')
    (target / "app" / "index.php").write_text(page)
    hour_ago = time.time() - 3600
    os.utime(target / "app" / "index.php", (hour_ago, hour_ago))
    return target


# -- The fast tier: `make unit` runs `pytest -m "not server"` ---------------------------------
# A test is `server` when it uses a fixture that runs lockdown commands (marked here), or
# carries the mark itself (`@pytest.mark.server`, or `pytestmark` for a module) because it
# starts a server directly. A test without the mark that starts one fails (`server_program`
# below), in `make unit` and `make test` alike, so the fast tier stays free of servers.

# (`server`: a MariaDB of the test's own, in test_users_server.py and test_slowlog_forging.py)
SERVER_FIXTURES = ("lockdown", "env", "home", "minicms_run", "wordpress_bundle", "minicms_verified",
                   "server")

# Programs that are servers, or load generators and browsers that need one
SERVERS = re.compile(r"mariadbd|mysqld|mariadbd-safe|mysqld_safe|mariadb-install-db|mysql_install_db"
                     r"|php-fpm[0-9.]*|nginx|redis-server|wrk|siege|ab|chromedriver|chromium|chrome|google-chrome")
# ... unless asked a question they answer and exit: a version, a config test, their modules
QUESTIONS = {"-v", "-V", "--version", "-h", "--help", "-i", "-t", "-tt", "-T", "-m"}


def server_program(args) -> str | None:
    """What a child started with `args` (Popen's) runs that only `server` tests may start: a
    server, a load generator or a browser, a lockdown command (beyond --help and --version), a
    bench/ script (they run lockdown); None for anything else. (A command line given as one
    string is split as the shell would; what a shell script or a child starts in turn is not seen.)"""
    if isinstance(args, (bytes, os.PathLike)):
        args = [args]
    elif isinstance(args, str):
        try:
            args = shlex.split(args)
        except ValueError:
            args = [args]
    argv = [os.fsdecode(a) if isinstance(a, (bytes, os.PathLike)) else str(a) for a in args]
    if not argv:
        return None
    name = os.path.basename(argv[0])
    if re.fullmatch(r"python[0-9.]*", name) and len(argv) > 1:
        if argv[1:3] == ["-m", "lockdown"]:
            name, argv = "lockdown", ["lockdown", *argv[3:]]
        elif Path(argv[1]).parent.name == "bench":
            return f"the bench script {argv[1]}"
    if name == "lockdown":
        return None if argv[1:] and argv[1] in ("-h", "--help", "--version") else "lockdown " + " ".join(argv[1:2])
    if SERVERS.fullmatch(name) and not QUESTIONS.intersection(argv[1:]):
        return name
    return None


_running: dict = {"item": None}
_popen_init = subprocess.Popen.__init__


def _guarded_popen_init(self, *args, **kwargs):
    item = _running["item"]
    if item is not None and item.get_closest_marker("server") is None:
        program = server_program(kwargs["args"] if "args" in kwargs else args[0] if args else ())
        if program:
            pytest.fail(f"{item.nodeid} starts {program} but is not marked `server`: add "
                        f"@pytest.mark.server (or pytestmark = pytest.mark.server for the module), "
                        f"so that `make unit` leaves it out", pytrace=False)
    _popen_init(self, *args, **kwargs)


def pytest_sessionstart(session):
    subprocess.Popen.__init__ = _guarded_popen_init


def pytest_sessionfinish(session):
    subprocess.Popen.__init__ = _popen_init


def pytest_itemcollected(item):
    if any(name in item.fixturenames for name in SERVER_FIXTURES):
        item.add_marker(pytest.mark.server)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _running["item"] = item           # its setup, call and teardown
    try:
        yield
    finally:
        _running["item"] = None
