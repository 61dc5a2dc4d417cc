"""The fast tier, `make unit` (`pytest -m "not server"`): which children only tests marked
`server` may start, that a test without the mark cannot start one, and that the tests using
the fixtures which run lockdown commands are marked (tests/conftest.py)."""
from __future__ import annotations

import subprocess
import sys

import pytest

import conftest
from conftest import server_program


@pytest.mark.parametrize("argv, program", [
    (["/usr/sbin/mariadbd", "--defaults-file=/r/mysql/my.cnf"], "mariadbd"),
    (["mariadb-install-db", "--no-defaults", "--datadir=/d"], "mariadb-install-db"),
    (["/usr/sbin/php-fpm8.2", "--nodaemonize", "--fpm-config", "/r/php/php-fpm.conf"], "php-fpm8.2"),
    (["/usr/sbin/nginx", "-p", "/r/nginx", "-c", "/r/nginx/nginx.conf"], "nginx"),
    (["/usr/bin/wrk", "-t1", "-c1", "http://127.0.0.1:8080/"], "wrk"),
    (["/usr/bin/chromedriver", "--port=4444"], "chromedriver"),
    ([sys.executable, "-m", "lockdown", "run", "hello", "-o", "/o"], "lockdown run"),
    (["/venv/bin/lockdown", "bench", "hello"], "lockdown bench"),
    (["python3", "/repo/bench/overhead.py", "--runs", "1"], "the bench script /repo/bench/overhead.py"),
    ("nginx -p /r/nginx -c /r/nginx/nginx.conf", "nginx"),
    # questions answered without a server
    (["/usr/sbin/php-fpm8.2", "-c", "/r/php/php.ini", "-i"], None),
    (["/usr/sbin/php-fpm8.2", "-n", "-tt", "-y", "/r/php/php-fpm.conf"], None),
    (["/usr/bin/wrk", "-v"], None),
    (["/usr/bin/ab", "-V"], None),
    ([sys.executable, "-m", "lockdown", "--version"], None),
    (["lockdown", "--help"], None),
    # other programs
    (["/usr/bin/php8.2", "-r", "echo 1;"], None),
    (["mariadb", "--defaults-file=/r/mysql/client-root.cnf", "-e", "SELECT 1"], None),
    (["patch", "-p1", "--dry-run"], None),
    ([sys.executable, "-c", "print(1)"], None),
    ("true", None),
])
def test_which_children_only_server_tests_may_start(argv, program):
    assert server_program(argv) == program


def test_a_test_without_the_mark_cannot_start_a_server():
    """The guard fails the test before the child is started."""
    with pytest.raises(pytest.fail.Exception, match="not marked `server`"):
        subprocess.Popen(["/nonexistent/nginx", "-c", "/nonexistent/nginx.conf"])
    with pytest.raises(pytest.fail.Exception, match="starts lockdown profile"):
        subprocess.run([sys.executable, "-m", "lockdown", "profile", "hello", "-o", "/nonexistent"])


@pytest.mark.server
def test_a_marked_test_can():
    with pytest.raises(FileNotFoundError):
        subprocess.Popen(["/nonexistent/nginx", "-c", "/nonexistent/nginx.conf"])


class _Item:
    def __init__(self, *fixturenames):
        self.fixturenames = list(fixturenames)
        self.marks = []

    def add_marker(self, mark):
        self.marks.append(mark.name)


@pytest.mark.parametrize("fixture", conftest.SERVER_FIXTURES)
def test_a_test_using_a_fixture_that_runs_lockdown_is_marked(fixture):
    item = _Item("tmp_path", fixture)
    conftest.pytest_itemcollected(item)
    assert item.marks == ["server"]


def test_a_test_using_none_is_not():
    item = _Item("tmp_path", "monkeypatch", "tmp_path_factory")
    conftest.pytest_itemcollected(item)
    assert item.marks == []
