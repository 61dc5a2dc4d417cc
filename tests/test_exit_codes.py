"""Every command's exit status (lockdown/errors.py; docs/commands.md, "Exit status"): 0 success,
1 a runtime failure (the command line was right, the work failed), 2 a usage error (what was
given is wrong), 3 a check that says no (verify's fix not confirmed; validate's coverage and
doctor's required checks, tested in test_bundle.py and test_doctor.py).

One table, a row per command: a usage error lockdown finds itself, a runtime failure, and
success where it is cheap (the commands that measure a target succeed in their own tests). A
command without a row fails `test_every_command_has_a_row`. Runtime failures are real ones: a
full disk (stdout or -o on /dev/full, ENOSPC), a target whose install step fails, --timeout."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import HELLO, REPO, VERIFY_ARGS, lockdown_argv, lockdown_runner, _env
from lockdown.cli.main import main

GOLDEN = REPO / "fixtures" / "golden" / "minicms" / "bundle"
NOWHERE = "/nonexistent/lockdown-exit-codes"

# command -> a usage error lockdown itself finds (click's own, an unknown option, is tried for
# every command too), and the words of its one line
USAGE = {
    "agent": (("off", NOWHERE), "not a directory"),
    "analyze": ((NOWHERE,), "no such bundle directory"),
    "bench": (("no-such-target",), "unknown target 'no-such-target'"),
    "compare": (("hello",), "nothing to compare"),
    "doctor": (("extra",), "unexpected extra argument"),
    "export": ((NOWHERE, "-o", "{tmp}/x"), "no such bundle directory"),
    "flamegraph": ((GOLDEN, "-o", "{tmp}/graph.png"), "cannot tell the format from 'graph.png'"),
    "fleet": (("urls", "--store", "{tmp}", "--since", "soon"), "--since: 'soon' is not a duration"),
    "init": (("-o", "{tmp}/t", "--app", NOWHERE, "--db-dump", "{tmp}/x.sql"), f"--app {NOWHERE}: no such directory"),
    "profile": (("hello", "-o", "{tmp}/b", "--requests", "5", "--duration", "2"),
                "give --requests or --duration, not both"),
    "report": ((NOWHERE,), NOWHERE),
    "restore": (("extra",), "unexpected extra argument"),
    "run": (("no-such-target", "-o", "{tmp}/r"), "unknown target 'no-such-target'"),
    "serve": (("no-such-target",), "unknown target 'no-such-target'"),
    "targets": (("extra",), "unexpected extra argument"),
    "validate": ((NOWHERE,), "no such bundle directory"),
    "verify": ((NOWHERE, "--all"), NOWHERE),
    "writeup": ((NOWHERE, "-o", "{tmp}/w"), NOWHERE),
}

SCHEMA = REPO / "fixtures" / "apps" / "catalog" / "schema.sql"     # a dump for `init`: plain SQL
BROKEN = "{tmp}/broken"       # hello with an [install] command that fails
# command -> (args, stdout to /dev/full) of a runtime failure; {run}: a `lockdown run hello`
FAILURE = {
    "agent": (("snippet",), True),
    "analyze": ((GOLDEN,), True),
    "bench": ((BROKEN,), False),
    "compare": ((BROKEN, "--with", "opcache.enable=0"), False),
    "doctor": ((), True),
    "export": ((GOLDEN, "-o", "{tmp}/exported"), True),
    "flamegraph": ((GOLDEN, "-o", "/dev/full", "--format", "svg"), False),
    "fleet": (("collect", "--redis", "redis://127.0.0.1:1/0", "--store", "{tmp}/store"), False),
    "init": (("-o", "{tmp}/t", "--app", HELLO / "app", "--db-dump", SCHEMA), True),
    "profile": ((BROKEN, "-o", "{tmp}/b"), False),
    "report": (("{run}", "-o", "/dev/full"), False),
    "restore": ((), True),
    "run": ((BROKEN, "-o", "{tmp}/r"), False),
    "serve": ((BROKEN,), False),
    "targets": ((), True),
    "validate": ((GOLDEN,), True),
    "verify": (("{run}", "--finding", "hot-builtins", "--patch", "{tmp}/same.diff", *VERIFY_ARGS,
                "--timeout", "1"), False),
    "writeup": (("{run}", "-o", "{tmp}/issues"), True),
}

# command -> args that succeed, where that is cheap; None: in the named tests
SUCCESS = {
    "analyze": (GOLDEN,), "flamegraph": (GOLDEN, "-o", "{tmp}/g.svg"), "export": (GOLDEN, "-o", "{tmp}/x"),
    "validate": (GOLDEN,), "targets": (), "restore": (), "report": ("{run}",), "agent": ("snippet",),
    "fleet": None,       # test_fleet_server.py (collect, report, urls on real agents)
    "writeup": ("{run}", "-o", "{tmp}/w"), "run": None,    # the `run` fixture below
    "init": ("-o", "{tmp}/t", "--app", HELLO / "app", "--db-dump", SCHEMA),   # test_init.py: with a stack
    "bench": None,       # test_bench_hello.py
    "compare": None,     # test_compare.py
    "profile": None,     # test_profile.py
    "serve": None,       # test_serve.py: Ctrl-C exits 0
    "verify": None,      # test_verify.py (a confirmed fix)
    "doctor": None,      # test_doctor.py (0 or 3 by what this host has)
}

# `$items = [];` -> `$items = array();`: the same page, the same profile
SAME = """--- a/index.php
+++ b/index.php
@@ -4,3 +4,3 @@
 $name = isset($_GET['name']) ? $_GET['name'] : 'world';
-$items = [];
+$items = array();
 for ($i = 0; $i < 50; $i++) {
"""


def _fill(args, tmp: Path, run: Path | None = None) -> list[str]:
    return [str(a).format(tmp=tmp, run=run) for a in args]


def test_every_command_has_a_row():
    commands = set(main.list_commands(None))
    for table in (USAGE, FAILURE, SUCCESS):
        assert set(table) == commands, (f"add a row for {sorted(commands - set(table))} "
                                        f"(drop {sorted(set(table) - commands)})")


@pytest.mark.parametrize("command", sorted(USAGE))
def test_usage_errors_exit_2(command, tmp_path, monkeypatch):
    monkeypatch.setenv("LOCKDOWN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LOCKDOWN_SERVERS_DIR", str(tmp_path / "servers"))
    r = CliRunner().invoke(main, [command, "--no-such-option"])
    assert r.exit_code == 2 and "No such option" in r.stderr, (command, r.output)
    args, words = USAGE[command]
    r = CliRunner().invoke(main, [command, *_fill(args, tmp_path)])
    assert r.exit_code == 2, (command, r.output)
    assert r.stderr.startswith("lockdown: error: ") and r.stderr.count("\n") == 1 and words in r.stderr, r.stderr
    assert not (tmp_path / "home" / "runs").exists() or not any((tmp_path / "home" / "runs").iterdir())


@pytest.fixture(scope="module")
def hello_run(home, tmp_path_factory) -> Path:
    """A `lockdown run hello` without the benchmark: findings (hot-builtins) to verify, a
    report and write-ups to rebuild."""
    out = tmp_path_factory.mktemp("exit-codes") / "run"
    r = lockdown_runner(home)("run", "hello", "-o", out, "--no-bench", "--requests", "10", "--no-probe")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return out


def _broken_target(tmp: Path) -> None:
    target = tmp / "broken"
    shutil.copytree(HELLO, target)
    toml = target / "target.toml"
    toml.write_text(toml.read_text().replace('name = "hello"', 'name = "broken"')
                    + '\n[install]\ncommand = ["false"]\n')
    (tmp / "same.diff").write_text(SAME)


@pytest.mark.server
@pytest.mark.parametrize("command", sorted(FAILURE))
def test_runtime_failures_exit_1(command, home, hello_run, tmp_path):
    _broken_target(tmp_path)
    args, to_full = FAILURE[command]
    env = {**_env(home), "LOCKDOWN_PREPARED_DIR": str(tmp_path / "prepared")}    # broken: never prepared
    with open("/dev/full" if to_full else "/dev/null", "w") as out:
        r = subprocess.run(lockdown_argv(command, *_fill(args, tmp_path, hello_run)), stdout=out,
                           stderr=subprocess.PIPE, text=True, env=env, cwd=REPO, timeout=300)
    assert r.returncode == 1, (command, r.stderr[-2000:])
    line = r.stderr.strip().splitlines()[0]
    assert line.startswith("lockdown: error: ") and "Traceback" not in r.stderr, r.stderr
    assert any(w in line for w in ("No space left on device", "install command failed", "timed out after 1 s",
                                   "cannot reach Redis")), line


@pytest.mark.server
@pytest.mark.parametrize("command", sorted(c for c, args in SUCCESS.items() if args is not None))
def test_success_exits_0(command, home, hello_run, tmp_path):
    r = lockdown_runner(home)(command, *_fill(SUCCESS[command], tmp_path, hello_run))
    assert r.returncode == 0, (command, r.stderr[-2000:])


@pytest.mark.server
def test_verify_not_confirmed_exits_3(home, hello_run, tmp_path):
    """A change that changes nothing: the finding is still there in the re-capture, so the fix
    is not confirmed, whatever the RPS did."""
    (tmp_path / "same.diff").write_text(SAME)
    r = lockdown_runner(home)("verify", hello_run, "--finding", "hot-builtins", "--patch", tmp_path / "same.diff",
                              *VERIFY_ARGS, "--no-probe")
    assert r.returncode == 3, r.stdout[-3000:] + r.stderr[-3000:]
    assert "NOT CONFIRMED" in r.stdout


def _complete(words: str, cword: int) -> list[str]:
    r = CliRunner().invoke(main, [], prog_name="lockdown", env={
        "_LOCKDOWN_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": str(cword)})
    assert r.exit_code == 0, r.output
    return [line.split(",", 1)[1] for line in r.output.splitlines()]


def test_shell_completion_as_documented():
    """docs/commands.md's `eval "$(_LOCKDOWN_COMPLETE=bash_source lockdown)"`: the script, then
    what it asks for: commands (loaded on demand too), options and their choices."""
    r = CliRunner().invoke(main, [], prog_name="lockdown", env={"_LOCKDOWN_COMPLETE": "bash_source"})
    assert r.exit_code == 0 and "complete -o nosort -F _lockdown_completion lockdown" in r.output, r.output
    assert "_LOCKDOWN_COMPLETE=bash_source lockdown" in (REPO / "docs" / "commands.md").read_text()
    assert _complete("lockdown fla", 1) == ["flamegraph"]
    assert _complete("lockdown flamegraph --ki", 2) == ["--kind"]
    assert _complete("lockdown flamegraph --kind ", 3) == ["native", "php", "php-offcpu"]
    assert _complete("lockdown analyze --qu", 2) == ["--queries"]
