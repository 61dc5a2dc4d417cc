"""Where lockdown keeps its state: prepared targets, run directories, records of live runs.

Everything lives under `$LOCKDOWN_HOME` (default `~/.local/share/lockdown`, and
`/var/lib/lockdown` for root), never under /etc or /usr.
"""
from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

from .errors import UsageError

# root's default home: as root, lockdown's servers run as an unprivileged account
# (harness/service_account.py), which must pass through the directories above a run, and
# root's own home (/root, mode 0700) lets no one through
ROOT_HOME = Path("/var/lib/lockdown")


def home() -> Path:
    env = os.environ.get("LOCKDOWN_HOME")
    if env:
        return Path(env).expanduser().resolve()
    return default_home()


def default_home() -> Path:
    """The home without LOCKDOWN_HOME: $XDG_DATA_HOME/lockdown, else ~/.local/share/lockdown,
    and /var/lib/lockdown for root."""
    if os.environ.get("XDG_DATA_HOME"):
        return Path(os.environ["XDG_DATA_HOME"]) / "lockdown"
    if os.geteuid() == 0:
        return ROOT_HOME
    return Path.home() / ".local" / "share" / "lockdown"


def servers_dir() -> Path:
    """Records about users' MariaDB servers (`--mysql`): the settings a capture changed and the
    databases a command loaded. One place for every LOCKDOWN_HOME of this account, so that the
    next command, whichever its home, puts back what a killed one left on a server.
    `LOCKDOWN_SERVERS_DIR`, else $XDG_STATE_HOME/lockdown/servers (~/.local/state/...), and
    /var/lib/lockdown/servers for root."""
    env = os.environ.get("LOCKDOWN_SERVERS_DIR")
    if env:
        return Path(env).expanduser().resolve()
    if os.geteuid() == 0:
        return ROOT_HOME / "servers"
    base = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(base) / "lockdown" / "servers"


def active_dir() -> Path:
    return home() / "active"


def prepared_dir() -> Path:
    """Prepared targets; `LOCKDOWN_PREPARED_DIR` lets several homes share one cache."""
    env = os.environ.get("LOCKDOWN_PREPARED_DIR")
    return Path(env).expanduser().resolve() if env else home() / "prepared"


def runs_dir() -> Path:
    return home() / "runs"


# The built-in targets: in a checkout, a link to its fixtures/apps; in an installed wheel, a
# copy of them (pyproject.toml's package data follows the link)
BUILTIN_TARGETS = Path(__file__).resolve().parent / "targets" / "builtin"


def builtin_targets_dir() -> Path:
    return Path(os.environ.get("LOCKDOWN_TARGETS", BUILTIN_TARGETS.resolve()))


# What a run directory's path may hold: nginx.conf, php-fpm.conf (an ini file) and my.cnf name
# files under it unquoted, and a space, '=', ';', '#', '$', '~', ':', '(' and more each broke
# one of them (nginx, php-fpm or MariaDB did not start, with its own parse error as evidence).
CONFIG_SAFE = "/._+@,%-"


def check_config_path(path: Path, todo: str) -> None:
    """Refuse a run directory the servers' config files cannot name; `todo` says what to change."""
    bad = sorted({c for c in str(path) if not (c.isalnum() or c in CONFIG_SAFE)})
    if bad:
        raise UsageError(f"cannot run in {path}: nginx, php-fpm and MariaDB must find it in their "
                            f"config files, which cannot hold {' '.join(repr(c) for c in bad)}; {todo} "
                            f"(letters, digits and {' '.join(CONFIG_SAFE)} only)")


def run_copies(run_dir: Path) -> tuple[Path, Path]:
    """A stack's own copies in its run directory, (the app tree, MariaDB's data directory): tens
    to hundreds of MB, removed as the command ends (harness/stack.py) or, after a kill, by the
    next command's sweep (harness/processes.sweep_orphans); configs and logs stay."""
    run_dir = Path(run_dir)
    return run_dir / "app", run_dir / "mysql" / "data"


def new_run_dir(target: str, command: str) -> Path:
    """A fresh, uniquely named run directory for one command on one target."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = runs_dir() / f"{stamp}-{command}-{target}"
    check_config_path(base, "set LOCKDOWN_HOME to a directory whose path has none, or give --run-dir")
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    try:
        path.mkdir(parents=True)
    except OSError as e:
        raise UsageError(f"cannot create a run directory in {runs_dir()}: {e.strerror or e}; set "
                            f"LOCKDOWN_HOME to a writable directory, or give --run-dir where there is one")
    return path


def make_dir(path: Path, option: str) -> Path:
    """`path` made with its parents when missing; one that cannot be made (a read-only or full
    file system, no permission) is one line naming `option`, the flag to change."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot create {path}: {e.strerror or e}; choose another {option}")
    return path


def empty_dir(path: Path, option: str) -> Path:
    """`path` resolved and made when missing, for a command to run in and fill; one with files
    in it is refused (`option` names the flag to change), so two runs' outputs never mix, and
    so is one the servers' configs cannot name (`check_config_path`)."""
    path = path.resolve()
    check_config_path(path, f"choose another {option}")
    try:
        filled = path.exists() and any(path.iterdir())
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror or e}; choose another {option}")
    if filled:
        raise UsageError(f"{path} is not empty; choose another {option} or remove it")
    return make_dir(path, option)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def remove_abandoned(directory: Path, name: str) -> None:
    """Remove what a killed lockdown left half-written in `directory`: the entries whose name
    fullmatches the regex `name`, whose group `pid` names a process that is gone (a staging
    directory `.DEST.partial-PID`, a verification's `.KEY.tmp-PID`). Nothing else reads them,
    and no later command would remove them."""
    pattern = re.compile(name)
    try:
        entries = list(Path(directory).iterdir())
    except OSError:
        return
    for entry in entries:
        m = pattern.fullmatch(entry.name)
        if m and not pid_alive(int(m.group("pid"))):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
