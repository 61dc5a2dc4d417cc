"""Start child processes so that they can always be stopped again.

Every server and load generator lockdown starts goes through a `ProcessGroup`: each child
gets its own process group (so its workers can be signalled with it), dies with lockdown
(PR_SET_PDEATHSIG), and is recorded in the run directory and in `$LOCKDOWN_HOME/active/`.
If lockdown itself is killed with SIGKILL, the next lockdown command finds the record and
stops what was left (`sweep_orphans`).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import LockdownError, PhaseFailed
from .. import paths
from ..signals import held
# moved below the stages (run_marker needs them); kept here for every other importer
from ..owner import owner_alive, owner_record, stat_fields
from . import ports
from .service_account import Account, demote, die_with_parent

# Every child `ProcessGroup.run` starts (install and configure commands, hooks, load
# generators) has this in its environment, set to its run directory, and so has whatever it
# starts in turn: a `sleep 300 &` in a target's install command names no run directory in its
# command line, and may leave the child's process group, but it keeps the environment.
MARKER = "LOCKDOWN_SWEEP_RUN_DIR"


def _preexec(user: Account | None):
    """Runs in the child between fork and exec: become `user` (a server's unprivileged account,
    service_account.py), then ask the kernel for SIGTERM when lockdown dies (after, as a change
    of user clears that request)."""
    become = demote(user)

    def child() -> None:
        become()
        die_with_parent()
    return child


@dataclass
class Child:
    name: str
    argv: list[str]
    popen: subprocess.Popen
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None


@dataclass
class ProcessGroup:
    """The children of one lockdown command, stopped in reverse start order by `stop_all`."""

    run_dir: Path
    children: list[Child] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._record = paths.active_dir() / f"{os.getpid()}-{self.run_dir.name}.json"

    # -- starting ---------------------------------------------------------------------------
    def spawn(self, name: str, argv: list[str], *, log: Path | None = None,
              env: dict | None = None, cwd: Path | None = None,
              stdout_to_log: bool = True, user: Account | None = None) -> Child:
        """Start a long-running child (a server); its stdout and stderr go to `log`; `user`: the
        unprivileged account it runs as (None: as lockdown)."""
        log = log or self.run_dir / "logs" / f"{name}.out"
        log.parent.mkdir(parents=True, exist_ok=True)
        with held(), open(log, "ab") as out:     # no signal between fork and the record
            try:
                popen = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=out if stdout_to_log else subprocess.PIPE,
                    stderr=out, env=env, cwd=cwd, start_new_session=True, preexec_fn=_preexec(user))
            except FileNotFoundError:
                raise LockdownError(f"cannot start {name}: {argv[0]} not found; run `make setup` "
                                    f"or `lockdown doctor` to see what is missing")
            return self._track(Child(name, list(argv), popen, log))

    def _track(self, child: Child) -> Child:
        self.children.append(child)
        self._write_record()
        return child

    def run(self, name: str, argv: list[str], *, timeout: float, env: dict | None = None,
            cwd: Path | None = None, log: Path | None = None,
            capture: bool = False, stdout_file: Path | None = None,
            user: Account | None = None) -> subprocess.CompletedProcess:
        """Run a child to completion (install scripts, load generators); kill it on timeout.
        Output goes to `log`, or stdout to `stdout_file` (truncated) when one is given."""
        log = log or self.run_dir / "logs" / f"{name}.out"
        log.parent.mkdir(parents=True, exist_ok=True)
        env = marked(env, self.run_dir)
        with open(log, "ab") as out, open(stdout_file or os.devnull, "wb") as data:
            child = None
            try:
                with held():                      # no signal between fork and the record
                    try:
                        popen = subprocess.Popen(
                            argv, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE if capture else data if stdout_file else out,
                            stderr=out, env=env, cwd=cwd,
                            start_new_session=True, preexec_fn=_preexec(user))
                    except FileNotFoundError:
                        raise LockdownError(f"cannot run {name}: {argv[0]} not found; run `make setup`")
                    child = self._track(Child(name, list(argv), popen, log))
                stdout, _ = popen.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                raise PhaseFailed(f"{name} did not finish within {timeout:.0f} s; its output is in {log}")
            finally:
                if child is not None:
                    self.stop(child, grace=2.0)
        return subprocess.CompletedProcess(argv, popen.returncode,
                                           stdout.decode("utf-8", "replace") if capture else None, None)

    # -- stopping ---------------------------------------------------------------------------
    def stop(self, child: Child, grace: float = 10.0) -> None:
        with held():              # a Ctrl-C meanwhile takes effect once it is stopped
            _stop_group(child.popen, grace)
            if child in self.children:
                self.children.remove(child)
            self._write_record()

    def stop_all(self, grace: float = 10.0) -> None:
        """Stop every child, newest first: the load generator, nginx, php-fpm, then MariaDB.
        Signals wait until all are stopped (signals.held): a Ctrl-C in the middle had left
        the older ones running."""
        with held():
            for child in reversed(list(self.children)):
                try:
                    _stop_group(child.popen, grace)
                except Exception:  # keep stopping the others whatever happens
                    pass
            self.children.clear()
            self._write_record()

    def __enter__(self) -> "ProcessGroup":
        return self

    def __exit__(self, *exc) -> None:
        self.stop_all()

    # -- record for orphan sweeps -----------------------------------------------------------
    def _write_record(self) -> None:
        groups = [{"name": c.name, "pgid": c.pid} for c in self.children]
        if not groups:
            self._record.unlink(missing_ok=True)
            return
        data = {**owner_record(),
                "run_dir": str(self.run_dir), "groups": groups}
        self._record.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._record.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(self._record)


def _stop_group(popen: subprocess.Popen, grace: float) -> None:
    """SIGTERM the child's process group, wait, then SIGKILL whatever is left of it."""
    pgid = popen.pid
    if popen.poll() is None or _group_alive(pgid):
        _killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            popen.poll()
            if popen.returncode is not None and not _group_alive(pgid):
                break
            time.sleep(0.05)
        if _group_alive(pgid) or popen.poll() is None:
            _killpg(pgid, signal.SIGKILL)
    try:
        popen.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(pgid: int) -> bool:
    """True while any non-zombie process is in process group `pgid`."""
    return bool(_group_members(pgid))


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        fields = stat_fields(int(entry.name))
        if fields and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def dead_records(directory: Path):
    """(path, data) of each record in `directory` whose owning lockdown is gone, in name order;
    unreadable records are removed on the way."""
    for record in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        try:
            data = json.loads(record.read_text())
        except (OSError, ValueError):
            record.unlink(missing_ok=True)
            continue
        if not owner_alive(data):
            yield record, data


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def marked(env: dict | None, run_dir: Path) -> dict:
    """`env` (this process's own when None) with the sweep's marker naming `run_dir`."""
    return {**(os.environ if env is None else env), MARKER: str(run_dir)}


def _environ_has(pid: int, entry: bytes) -> bool:
    try:
        return entry in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def _own_line() -> set[int]:
    """This process and its ancestors: never swept, whatever their environment says (a
    lockdown started by a killed lockdown's hook inherited its marker)."""
    pids, pid = set(), os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        fields = stat_fields(pid)
        try:
            pid = int(fields[1])
        except (TypeError, ValueError, IndexError):
            break
    return pids


def _state(pid: int) -> str | None:
    fields = stat_fields(pid)
    return fields[0] if fields else None


def marked_processes(run_dir: str) -> list[int]:
    """Live processes whose environment carries the marker of `run_dir` (MARKER): what the
    children `ProcessGroup.run` started under it left running, wherever they went."""
    entry = f"{MARKER}={run_dir}".encode()
    own = _own_line()
    found = []
    for proc in os.scandir("/proc"):
        if proc.name.isdigit() and int(proc.name) not in own and _state(int(proc.name)) not in (None, "Z") \
                and _environ_has(int(proc.name), entry):
            found.append(int(proc.name))
    return found


def _stop_pids(pids: list[int]) -> None:
    """SIGTERM each of `pids`, then SIGKILL what is left after a few seconds."""
    for pid in pids:
        _kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_state(p) not in (None, "Z") for p in pids):
        time.sleep(0.05)
    for pid in pids:
        _kill(pid, signal.SIGKILL)


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# A bundle's staging directory beside its -o (bundle/store.py: `.NAME.partial-PID`).
_STAGING = re.compile(r"\..+\.partial-(?P<pid>\d+)")


@contextlib.contextmanager
def staging_recorded(staging: Path):
    """Record `staging` (a `.NAME.partial-PID` directory this process fills) in
    `$LOCKDOWN_HOME/active/` while the block runs: after a kill -9 the next lockdown command,
    whatever it is, removes it (`sweep_orphans`)."""
    digest = hashlib.sha256(str(staging).encode()).hexdigest()[:12]
    record = paths.active_dir() / f"{os.getpid()}-staging-{digest}.json"
    record.parent.mkdir(parents=True, exist_ok=True)
    tmp = record.with_suffix(".tmp")
    tmp.write_text(json.dumps({**owner_record(), "staging": str(staging)}))
    tmp.replace(record)
    try:
        yield
    finally:
        record.unlink(missing_ok=True)


def _remove_staging(data: dict) -> None:
    """A dead owner's staging directory, if the record names one it made (its pid in the name)."""
    staging = Path(str(data.get("staging") or ""))
    m = _STAGING.fullmatch(staging.name)
    if staging.is_absolute() and m and int(m.group("pid")) == data.get("owner") and not staging.is_symlink():
        shutil.rmtree(staging, ignore_errors=True)


def sweep_orphans() -> list[str]:
    """Stop processes left behind by a lockdown that was killed; return one message per run.

    A record is stale when its owner is gone (or the pid now belongs to another process).
    Only processes that name the run directory are signalled, so a recycled pid is never
    hit: those of a recorded process group whose command line names it, and any process
    whose environment carries its marker (MARKER: what `run`'s children started, such as a
    `sleep 300 &` in an install command, even one that left the group). A dead command's
    bundle staging directory (`staging_recorded`) is removed.
    """
    messages = []
    for record, data in dead_records(paths.active_dir()):
        run_dir = data.get("run_dir", "")
        stopped = []
        with held():              # one record at a time, whole: stopped, then removed
            marker = f"{MARKER}={run_dir}".encode()
            for group in data.get("groups", []):
                pids = [p for p in _group_members(group["pgid"])
                        if run_dir and (run_dir in _cmdline(p) or _environ_has(p, marker))]
                if pids:
                    _killpg(group["pgid"], signal.SIGTERM)
                    deadline = time.monotonic() + 10
                    while time.monotonic() < deadline and _group_alive(group["pgid"]):
                        time.sleep(0.05)
                    _killpg(group["pgid"], signal.SIGKILL)
                    stopped.append(group["name"])
            strays = marked_processes(run_dir) if run_dir else []
            if strays:            # descendants that left their group (setsid, a daemon)
                _stop_pids(strays)
                if not stopped:
                    stopped.append(f"{len(strays)} process(es) its commands started")
            if data.get("staging"):
                _remove_staging(data)
            if run_dir:   # the killed stack's sockets, when its paths were too long to bind
                for part in ("php", "mysql", "mysql/server"):
                    shutil.rmtree(ports.short_socket_dir(Path(run_dir) / part), ignore_errors=True)
                # and its copies of the app and the database (tens to hundreds of MB), which
                # the command removes as it ends (Stack.__exit__); its configs and logs stay
                for copy in paths.run_copies(Path(run_dir)):
                    shutil.rmtree(copy, ignore_errors=True)
            record.unlink(missing_ok=True)
        if stopped:
            messages.append(f"lockdown: stopped {', '.join(stopped)} left running by an "
                            f"interrupted lockdown (run directory {run_dir})")
    return messages
