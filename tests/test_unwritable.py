"""Where lockdown cannot write (-o in a read-only directory, a run directory under a file, a
full disk, a run directory on another file system than the prepared tree): one line naming
the place and what to do, exit 2, nothing started; no traceback."""
import errno
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from lockdown.cli.main import main
from lockdown.errors import LockdownError
from lockdown.harness import app_tree
from lockdown.remediation import verify as verify_module


def _one_line(r, *wanted):
    assert r.returncode == 2, (r.args, r.stderr)
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr
    for w in wanted:
        assert w in r.stderr, r.stderr


def test_output_under_a_file_is_one_line(lockdown, tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a directory\n")
    cases = [
        (("run", "hello", "-o", blocker / "x"), f"cannot create {blocker / 'x'}: Not a directory; choose another -o"),
        (("bench", "hello", "--run-dir", blocker / "rd"), "choose another --run-dir"),
        (("compare", "hello", "--with", "opcache.enable=0", "--run-dir", blocker / "c"), "choose another --run-dir"),
        (("profile", "hello", "-o", tmp_path / "b", "--run-dir", blocker / "rd"), "choose another --run-dir"),
    ]
    for args, message in cases:
        _one_line(lockdown(*args), message)
    r = lockdown("bench", "hello", extra_env={"LOCKDOWN_HOME": str(blocker / "home")})
    _one_line(r, "cannot create a run directory in", "set LOCKDOWN_HOME to a writable directory")
    assert not (tmp_path / "b").exists()


@pytest.fixture
def read_only_dir(tmp_path):
    """A directory even root cannot write into (immutable)."""
    d = tmp_path / "ro"
    d.mkdir()
    if subprocess.run(["chattr", "+i", str(d)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i not available here")
    try:
        yield d
    finally:
        subprocess.run(["chattr", "-i", str(d)], check=True)


def test_output_in_a_read_only_directory_is_one_line(lockdown, read_only_dir):
    ro = read_only_dir
    _one_line(lockdown("run", "hello", "-o", ro / "x"), f"cannot create {ro / 'x'}: Operation not permitted")
    _one_line(lockdown("profile", "hello", "-o", ro / "b"), f"cannot write {ro / 'b'}: Operation not permitted")
    _one_line(lockdown("bench", "hello", "--run-dir", ro / "rd"), "choose another --run-dir")
    # before the benchmark, not after it: the result would have been lost
    _one_line(lockdown("bench", "hello", "--json", ro / "j.json"),
              f"cannot write {ro / 'j.json'}: directory {ro} is not writable; choose another --json FILE")
    assert list(ro.iterdir()) == []


def test_verify_into_a_run_directory_it_cannot_write(tmp_path):
    (tmp_path / "verify").write_text("not a directory\n")
    run = SimpleNamespace(directory=tmp_path)
    with pytest.raises(LockdownError, match=r"cannot write .*/verify: .*make it writable, or copy it"):
        verify_module.verify(run, [], [], None, None, lambda *args: {}, key="fs-scan")


def test_app_tree_on_another_file_system_is_copied(tmp_path):
    """Hard links cannot cross file systems: `-o /tmp/x` with /tmp a tmpfs failed with
    cp's 'Invalid cross-device link' as a traceback. Now such a run gets a full copy."""
    other = Path("/dev/shm")
    if not other.is_dir() or os.stat(other).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("no second file system to copy to")
    src = tmp_path / "prepared-app"
    (src / "sub").mkdir(parents=True)
    (src / "index.php").write_text("<?php echo 'hi';\n")
    (src / "sub" / "lib.php").write_text("<?php\n")
    run_dir = Path(os.path.realpath(other)) / f"lockdown-test-{os.getpid()}"
    run_dir.mkdir()
    try:
        app_tree.link_copy(src, run_dir / "app")
        assert (run_dir / "app" / "sub" / "lib.php").read_text() == "<?php\n"
        assert os.stat(run_dir / "app" / "index.php").st_nlink == 1        # its own file
        assert sorted(p.name for p in run_dir.iterdir()) == ["app"]          # no link probe left
    finally:
        subprocess.run(["rm", "-rf", str(run_dir)], check=True)
    linked = tmp_path / "run" / "app"
    linked.parent.mkdir()
    app_tree.link_copy(src, linked)                                          # same file system: links
    assert os.stat(linked / "index.php").st_nlink == 2


def test_a_failed_app_copy_is_one_line(tmp_path):
    with pytest.raises(LockdownError, match=r"cannot copy the application into .*\(cp: "):
        app_tree.link_copy(tmp_path / "missing", tmp_path / "app")


def test_full_disk_is_one_line(tmp_path, monkeypatch):
    """Any write can meet a full disk (logs, the load generator's output, perf.data): one
    line naming the file when the error names one, exit 1 (a runtime failure, not a usage
    error), instead of a traceback."""
    @main.command("fill-the-disk")
    def fill():
        raise OSError(errno.ENOSPC, "No space left on device", "/runs/x/perf/perf.data", None,
                      "/out/.b.partial-1/perf/perf.data")

    @main.command("flush-to-a-full-disk")
    def flush():
        raise OSError(errno.ENOSPC, "No space left on device")

    @main.command("a-bug")
    def bug():
        raise OSError(errno.EBADF, "Bad file descriptor")
    monkeypatch.setenv("LOCKDOWN_HOME", str(tmp_path))
    try:
        r = CliRunner().invoke(main, ["fill-the-disk"])
        assert r.exit_code == 1
        assert r.stderr == ("lockdown: error: cannot write /out/.b.partial-1/perf/perf.data: No space "
                            "left on device; free some space and run it again\n")
        r = CliRunner().invoke(main, ["flush-to-a-full-disk"])
        assert r.exit_code == 1
        assert r.stderr == ("lockdown: error: a write failed: No space left on device; "
                            "free some space and run it again\n")
        r = CliRunner().invoke(main, ["a-bug"])                 # not a file system's refusal: not hidden
        assert isinstance(r.exception, OSError) and r.exception.errno == errno.EBADF
    finally:
        for name in ("fill-the-disk", "flush-to-a-full-disk", "a-bug"):
            main.commands.pop(name, None)


def test_run_directory_the_configs_cannot_name_is_one_line(lockdown, tmp_path):
    """nginx.conf, php-fpm.conf and my.cnf name files in the run directory unquoted: a space
    (or '=', ';', '#', '~', ':', '(' ...) in its path made a server fail to start, with its
    parse error as evidence, after the target was prepared. Now one line before anything."""
    spaced = tmp_path / "my runs"
    _one_line(lockdown("run", "hello", "-o", spaced), f"cannot run in {spaced}: nginx, php-fpm and MariaDB",
              "cannot hold ' '; choose another -o")
    _one_line(lockdown("bench", "hello", "--run-dir", tmp_path / "a:b"), "cannot hold ':'; choose another --run-dir")
    _one_line(lockdown("bench", "hello", extra_env={"LOCKDOWN_HOME": str(spaced)}), "set LOCKDOWN_HOME")
    (spaced / "findings.json").parent.mkdir()
    (spaced / "findings.json").write_text('{"format": 1, "target": "hello", "findings": []}\n')
    _one_line(lockdown("verify", spaced, "--all"), "copy the run directory to a path without them")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my runs"]
    assert [p.name for p in spaced.iterdir()] == ["findings.json"]
