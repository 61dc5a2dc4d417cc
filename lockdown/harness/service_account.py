"""The unprivileged account lockdown's servers run as when lockdown itself runs as root.

MariaDB, the php-fpm workers and the nginx workers never run as root: a local user who reached
one of them (a TCP port on 127.0.0.1 is open to every account) would otherwise act as uid 0.
As root, lockdown runs them as `lockdown-run`, a system account with no shell and no home that
`make setup` creates; run as anyone else, they run as that user, who had those rights already.

The account must be able to pass through every directory above what it serves (the run
directory, the prepared build): `reachable` says which one stops it, before anything starts.
Directories it writes (MariaDB's data, the app copy's directories, PHP's sessions and capture
output, nginx's buffers) are given to it (`give`); the run directory is shared with its group
only (`share`), so that no other account can enter it.
"""
from __future__ import annotations

import ctypes
import grp
import os
import pwd
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..errors import LockdownError

NAME = "lockdown-run"
CREATE = f"useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin {NAME}"


@dataclass(frozen=True)
class Account:
    name: str
    uid: int
    gid: int

    @property
    def group(self) -> str:
        return grp.getgrgid(self.gid).gr_name


def account() -> Account | None:
    """The account the servers run as, or None when lockdown is not root (they run as the user
    then). A root without the account gets one line saying how to create it."""
    if os.geteuid() != 0:
        return None
    try:
        pw = pwd.getpwnam(NAME)
    except KeyError:
        raise LockdownError(f"lockdown runs its servers as the unprivileged account {NAME}, which "
                            f"does not exist: run `make setup`, or `{CREATE}`")
    if pw.pw_uid == 0 or pw.pw_gid == 0:
        raise LockdownError(f"the account {NAME} has uid or gid 0; lockdown will not run its servers "
                            f"as root: give it its own ids (userdel {NAME}, then `make setup`)")
    return Account(pw.pw_name, pw.pw_uid, pw.pw_gid)


def os_user() -> str:
    """The name of the account lockdown runs as (MariaDB's socket login for it)."""
    return pwd.getpwuid(os.geteuid()).pw_name


def _chown_tree(path: Path, uid: int, gid: int, files: bool = True) -> None:
    """`path` and every directory under it (and, with `files`, every file and link) to uid:gid;
    links are changed themselves, never followed."""
    for root, dirs, names in os.walk(path):
        os.chown(root, uid, gid, follow_symlinks=False)
        if files:
            for name in names + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
                os.chown(os.path.join(root, name), uid, gid, follow_symlinks=False)


def give(path: Path, acct: Account | None, recursive: bool = False) -> Path:
    """`path` (and everything under it, when `recursive`) owned by the servers' account, so they
    can write it; nothing to do when lockdown is not root."""
    if acct is None:
        return path
    if recursive and path.is_dir() and not path.is_symlink():
        _chown_tree(path, acct.uid, acct.gid)
    else:
        os.chown(path, acct.uid, acct.gid, follow_symlinks=False)
    return path


def reclaim(path: Path) -> None:
    """`path` and everything under it owned by lockdown's user again (a prepared datadir
    between runs: no server's account may change it)."""
    if os.geteuid() == 0:
        _chown_tree(path, 0, 0)


def give_dirs(path: Path, acct: Account | None) -> None:
    """Every directory under `path` owned by the account, the files left as they are: an app copy
    whose files are hard links into the prepared tree, which the workers may read and replace
    (a new file renamed over) but never write through."""
    if acct is not None:
        _chown_tree(path, acct.uid, acct.gid, files=False)


def share(path: Path, acct: Account | None) -> Path:
    """`path` open to its owner and the account's group only (rwxr-x---, root:lockdown-run): the
    servers enter it, no other account does. Without an account (not root), owner only."""
    if acct is None:
        path.chmod(0o700)
        return path
    os.chown(path, 0, acct.gid)
    path.chmod(0o750)
    return path


def demote(acct: Account | None):
    """A `preexec_fn` body running a child as the account (groups cleared first, then the
    group, then the user; the kernel clears the parent-death signal on a change of user, so
    the caller sets it after this)."""
    def become() -> None:
        if acct is not None:
            os.setgroups([])
            os.setgid(acct.gid)
            os.setuid(acct.uid)
    return become


_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Ask the kernel for SIGTERM when lockdown dies (in the child, after any change of user)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except OSError:
        pass


_FIRST_BLOCKED = 'for d; do test -x "$d" || { printf "%s" "$d"; exit 1; }; done'


def blocked_at(path: Path, acct: Account) -> str | None:
    """The first directory on the way to `path` that `acct` may not pass through, or None.
    Asked of the kernel as that account (so ACLs and groups count as they will)."""
    path = Path(path).resolve()
    while not path.exists() and path != path.parent:   # what is not made yet will be lockdown's
        path = path.parent
    chain = [str(p) for p in reversed(path.parents)] + [str(path)]
    proc = subprocess.run(["sh", "-c", _FIRST_BLOCKED, "sh", *chain], capture_output=True, text=True,
                          preexec_fn=demote(acct), timeout=30)
    return (proc.stdout or None) if proc.returncode else None


def check_reachable(path: Path, acct: Account | None, what: str, todo: str) -> None:
    """Refuse, in one line, a directory the servers could not enter (`what` names it, `todo`
    the option to change)."""
    if acct is None:
        return
    blocked = blocked_at(path, acct)
    if blocked:
        mode = oct(os.stat(blocked).st_mode & 0o777)[2:]
        raise LockdownError(
            f"lockdown's servers run as the unprivileged account {acct.name}, which cannot pass "
            f"through {blocked} (mode {mode}) to reach {what} {path}: {todo}, under a directory "
            f"every account may pass through (such as /var/lib/lockdown or /var/tmp), or allow it "
            f"with `chmod o+x {blocked}`")
