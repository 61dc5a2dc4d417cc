"""The command line itself: version, help on every command, one-line errors."""
from lockdown import __version__
from lockdown.cli.main import main
from lockdown.cli.reference import reference

from conftest import REPO


def test_version(lockdown):
    r = lockdown("--version")
    assert r.returncode == 0
    assert __version__ in r.stdout


def test_help_on_every_command(lockdown):
    assert main.list_commands(None), "no commands registered"
    for name in main.list_commands(None):
        r = lockdown(name, "--help")
        assert r.returncode == 0, (name, r.stderr)
        assert "Usage: lockdown " + name in r.stdout


def test_command_reference_is_the_commands_own_help():
    """docs/commands.md is every command's --help; a changed option without a regenerated
    reference fails here (python3 -m lockdown.cli.reference > docs/commands.md)."""
    committed = (REPO / "docs" / "commands.md").read_text()
    assert committed == reference(), "docs/commands.md is stale: python3 -m lockdown.cli.reference > docs/commands.md"
    for name in main.list_commands(None):
        assert f"## lockdown {name}\n" in committed and f"Usage: lockdown {name} " in committed


def test_targets_lists_builtins(lockdown):
    r = lockdown("targets")
    assert r.returncode == 0
    names = [line.split()[0] for line in r.stdout.splitlines()]
    assert {"hello", "wordpress", "mediawiki"} <= set(names)


def test_unknown_target_is_one_line(lockdown):
    r = lockdown("bench", "no-such-target")
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0
    assert "unknown target 'no-such-target'" in r.stderr
    assert "Traceback" not in r.stderr


def test_missing_target_path_is_one_line(lockdown, tmp_path):
    r = lockdown("bench", tmp_path / "nowhere")
    assert r.returncode == 2
    assert "not found" in r.stderr and r.stderr.strip().count("\n") == 0


def test_bad_php_ini_option(lockdown):
    r = lockdown("bench", "hello", "--php-ini", "opcache.enable")
    assert r.returncode == 2
    assert "expected KEY=VALUE" in r.stderr and "Traceback" not in r.stderr


def test_usage_errors_are_one_line_too(lockdown, tmp_path):
    """click's usage errors (a bad option value, a missing argument, an unknown command) in
    the one-line form of every other error, naming the --help to read."""
    for args, words in ((("analyze", tmp_path, "--top", "0"), "Invalid value for '--top'"),
                        (("bench",), "Missing argument 'TARGET'"),
                        (("nosuch",), "No such command 'nosuch'"),
                        (("report", tmp_path, "-o", tmp_path), "is a directory")):
        r = lockdown(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("lockdown: error: ") and words in r.stderr, \
            (args, r.stderr)
        assert "--help`)" in r.stderr and "Usage:" not in r.stderr
