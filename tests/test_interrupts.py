"""A signal at a bad moment: while children are being stopped, between a child's fork and its
record, while a capture's slow log is being set up, while the CLI is being imported. Each
must still leave nothing running and say one line. Unit-level: children are `sleep`s."""
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import REPO
from lockdown.collectors import server_settings
from lockdown.harness import processes
from lockdown.harness.processes import ProcessGroup


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A LOCKDOWN_HOME of the test's own: the records of its children go there."""
    monkeypatch.setenv("LOCKDOWN_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _kill(pids) -> None:
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass


def test_ctrl_c_while_stopping_stops_every_child_first(home, tmp_path):
    """stop_all stops newest first; the newest ignores SIGTERM, so stopping it takes its grace
    period, and Ctrl-C comes meanwhile. It used to leave the older children running (a
    compare interrupted as its stacks were stopped left MariaDB and php-fpm behind) and their
    record in active/; now the Ctrl-C takes effect once all are stopped."""
    procs = ProcessGroup(tmp_path / "run")
    older = [procs.spawn(f"server-{i}", ["sleep", "60"]) for i in range(2)]
    ready = tmp_path / "ready"
    stubborn = procs.spawn("stubborn", ["sh", "-c", f"trap '' TERM; touch {ready}; exec sleep 60"])
    pids = [c.pid for c in older + [stubborn]]
    deadline = time.monotonic() + 30
    while not ready.exists() and time.monotonic() < deadline:      # SIGTERM ignored from here on
        time.sleep(0.02)
    assert list((home / "active").glob("*.json"))
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    try:
        timer.start()
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            procs.stop_all(grace=1.5)
        assert time.monotonic() - started >= 1.0          # raised after the stop, not during it
        assert [p for p in pids if _alive(p)] == []
        assert procs.children == []
        assert list((home / "active").glob("*.json")) == []
    finally:
        timer.cancel()
        _kill(pids)


def test_signal_between_fork_and_record_leaves_no_untracked_child(home, tmp_path, monkeypatch):
    """A Ctrl-C arriving as Popen returns (the child forked, not yet recorded) used to unwind
    out of spawn: a server nobody would stop. Now it is raised once the child is recorded, so
    stop_all finds it."""
    real_popen = subprocess.Popen
    started = []

    def popen_then_ctrl_c(*args, **kwargs):
        p = real_popen(*args, **kwargs)
        started.append(p.pid)
        os.kill(os.getpid(), signal.SIGINT)
        return p

    procs = ProcessGroup(tmp_path / "run")
    monkeypatch.setattr(processes.subprocess, "Popen", popen_then_ctrl_c)
    try:
        with pytest.raises(KeyboardInterrupt):
            procs.spawn("server", ["sleep", "60"])
        with pytest.raises(KeyboardInterrupt):
            procs.run("loadgen", ["sleep", "60"], timeout=30)
        monkeypatch.undo()
        assert [c.pid for c in procs.children] == started[:1]     # run() stopped its own child
        assert not _alive(started[1])
        procs.stop_all()
        assert [p for p in started if _alive(p)] == []
    finally:
        _kill(started)


class _RefusingServer:
    """A database whose first statement is cut short by Ctrl-C."""
    socket, host, port, user, password = None, "127.0.0.1", 1, "u", "p"

    def sql(self, statement):
        raise KeyboardInterrupt()

    def where(self):
        return "127.0.0.1:1"


def test_interrupted_slow_log_setup_leaves_no_temporary_directory(home, tmp_path, monkeypatch):
    """Ctrl-C while the server's settings were read (before anything was changed) left the
    /tmp/lockdown-slowlog-* directory behind."""
    monkeypatch.setattr(server_settings.tempfile, "tempdir", str(tmp_path))
    for private in (True, False):
        with pytest.raises(KeyboardInterrupt):
            with server_settings.SlowLogCapture(_RefusingServer(), tmp_path / "run", private=private):
                pass
    assert list(tmp_path.glob("lockdown-slowlog-*")) == []


IMPORT_INTERRUPTED = """
import os, signal, sys
class CtrlC:
    def find_spec(self, name, path=None, target=None):
        if name == "lockdown.cli.bench":
            os.kill(os.getpid(), signal.SIGINT)
sys.meta_path.insert(0, CtrlC())
from lockdown.cli import main
main(["targets"], prog_name="lockdown")
"""


def test_ctrl_c_while_the_cli_is_imported_is_one_line(home):
    """The group first (lockdown.cli.main), then the one command's module, imported only when
    that command is asked for (`bench` here): a Ctrl-C during either is one line."""
    for module, command in (("lockdown.cli.main", "targets"), ("lockdown.cli.bench", "bench")):
        code = IMPORT_INTERRUPTED.replace("lockdown.cli.bench", module).replace('["targets"]', f'["{command}"]')
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
        assert r.returncode == 130, (module, r.stderr)
        assert r.stderr == "lockdown: interrupted while starting; nothing was started\n"
        assert r.stdout == ""


def test_ctrl_c_while_verify_swaps_its_result_keeps_one(tmp_path, monkeypatch):
    """verify replaces DIR/verify/KEY by renaming the old one away and the new one in; a
    Ctrl-C between the two renames used to leave neither (the new one was removed as
    unfinished, the old one hidden as .KEY.old-PID)."""
    from lockdown.remediation import verify as verify_module
    final = tmp_path / "verify" / "fs-scan"
    final.mkdir(parents=True)
    (final / "verify.json").write_text('{"old": true}\n')
    real_rename = Path.rename

    def rename_then_ctrl_c(self, target):
        moved = real_rename(self, target)
        if Path(target).name.startswith(".fs-scan.old-"):
            os.kill(os.getpid(), signal.SIGINT)
        return moved

    monkeypatch.setattr(Path, "rename", rename_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        verify_module.verify(SimpleNamespace(directory=tmp_path), [], [], None, None, lambda *args: {"new": True},
                             key="fs-scan")
    monkeypatch.undo()
    assert (final / "verify.json").read_text() == '{\n  "new": true\n}\n'
    assert sorted(p.name for p in final.parent.iterdir()) == ["fs-scan"]


def test_preparation_left_by_a_killed_lockdown_is_removed_and_no_other_targets(home, tmp_path, monkeypatch):
    """A lockdown killed (-9) while it prepared a target left .NAME-KEY.tmp-PID (minicms: 52 MB)
    in prepared/ for good. The next preparation of that target removes it. Replacing a target's
    older version used to remove every `NAME-*`: preparing minicms removed minicms-clean's; and
    by name alone, a user's target named as a built-in one removed the built-in's preparation."""
    from lockdown.harness.prepare import prepare, prepared_stem
    from lockdown.targets.registry import resolve
    prepared = tmp_path / "prepared"
    monkeypatch.setenv("LOCKDOWN_PREPARED_DIR", str(prepared))
    gone = subprocess.Popen(["true"])
    gone.wait()
    alive = os.getpid()
    hello = prepared_stem(resolve("hello"))
    left = {f".{hello}-{'1' * 16}.tmp-{gone.pid}": False,          # killed build of hello: removed
            f".{hello}-{'2' * 16}.discarded-{gone.pid}": False,
            f"{hello}-{'3' * 16}": False,                           # hello's older version: replaced
            f".{hello}-{'4' * 16}.tmp-{alive}": True,               # a live process's: kept
            f".hello-world-{'a' * 8}-{'5' * 16}.tmp-{gone.pid}": True,  # another target's: not this lock's
            f"hello-world-{'a' * 8}-{'6' * 16}": True,              # another target's preparation
            f"hello-{'b' * 8}-{'7' * 16}": True}                    # a user's target named hello
    for name in left:
        (prepared / name / "app").mkdir(parents=True)
        (prepared / name / "prepared.json").write_text("{}\n")
    root = prepare(resolve("hello"), say=lambda *_: None).root
    kept = {p.name for p in prepared.iterdir()}
    assert kept == {root.name, f"{hello}.lock"} | {name for name, stays in left.items() if stays}


def test_staging_left_by_a_killed_capture_or_verify_is_removed_by_the_next(tmp_path, monkeypatch):
    """kill -9 of `profile -o b` left .b.partial-PID beside b, and of `verify DIR` left
    DIR/verify/.KEY.tmp-PID (minicms: 138 MB, the arms' app and database copies): hidden,
    never read, never removed. The next capture to the same -o, and the next verify of the
    run, remove those whose process is gone."""
    from lockdown.bundle.store import BundleWriter
    from lockdown.remediation import verify as verify_module
    gone = subprocess.Popen(["true"])
    gone.wait()
    live = os.getppid()
    names = {f".b.partial-{gone.pid}": False, f".b.partial-{live}": True, f".c.partial-{gone.pid}": True,
             f"verify/.fs-scan.tmp-{gone.pid}": False, f"verify/.all.old-{gone.pid}": False,
             f"verify/.all.tmp-{live}": True, "verify/fs-scan": True}
    for name in names:
        (tmp_path / name / "ab").mkdir(parents=True)
    BundleWriter(tmp_path / "b").abandon()
    verify_module.verify(SimpleNamespace(directory=tmp_path), [], [], None, None, lambda *args: {"new": True},
                         key="n-plus-one")
    for name, stays in names.items():
        assert (tmp_path / name).exists() == stays, name
    assert (tmp_path / "verify" / "n-plus-one" / "verify.json").is_file()
