"""Prepare a target once (app tree, database, install script) and cache it, then give each run
its own copy: a hard-link copy of the app tree and a full copy of the datadir.

The cache key covers the target directory's files and the app source's state, so editing a
target or upgrading the Debian package prepares it again. A preparation is built in a
temporary directory and renamed into place only when complete: nothing half-prepared is used.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from .. import paths
from ..errors import LockdownError, PhaseFailed
from ..targets.config import Target
from . import ports, service_account
from .logs import tail
from .mariadb import DatabaseServer, PrivateMariaDB
from .processes import ProcessGroup
from .toolchain import tool

# 2: the private server's administrator logs in by socket only, the app's account has a
# random password (prepared.app_password), the datadir is root's between runs
# 3: an app source copied with its files' modification times
PREPARE_FORMAT = 3
APP_USER = "lockdown"
APP_HOSTS = ("localhost", "127.0.0.1")
PLACEHOLDER_URL = "http://127.0.0.1:8080"


@dataclass
class Prepared:
    target: Target
    root: Path

    @property
    def app(self) -> Path:
        return self.root / "app"

    @property
    def datadir(self) -> Path | None:
        d = self.root / "data"
        return d if d.is_dir() else None

    @property
    def dump(self) -> Path | None:
        d = self.root / "dump.sql"
        return d if d.is_file() else None

    def app_password(self) -> str:
        """The app account's password in the prepared database (random, in a 0600 file)."""
        try:
            return (self.root / "app-password").read_text().strip()
        except OSError:
            return ""


def new_password() -> str:
    """A random password of letters and digits (nothing to quote in PHP, SQL or an ini file)."""
    return secrets.token_hex(16)


def write_secret(path: Path, value: str) -> Path:
    """`value` in a file only its owner reads, created so (never readable, not even briefly)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(value + "\n")
    return path


def app_account_sql(password: str, create: bool) -> str:
    """Create the app's account (or give it a new password) on every host it connects from."""
    verb = "CREATE USER" if create else "ALTER USER"
    return "".join(f"{verb} '{APP_USER}'@'{h}' IDENTIFIED BY '{password}';" for h in APP_HOSTS)


def cache_key(target: Target) -> str:
    h = hashlib.sha256(f"format {PREPARE_FORMAT}\n".encode())
    for path in sorted(p for p in target.directory.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(target.directory)).encode() + b"\0")
        h.update(path.read_bytes())
    if target.app_source:
        src = target.app_source
        if not src.is_dir():
            raise LockdownError(f"target {target.name}: app source {src} does not exist; "
                                f"run `make setup` to install it")
        for entry in sorted(os.scandir(src), key=lambda e: e.name):
            st = entry.stat(follow_symlinks=True) if os.path.exists(entry.path) else None
            h.update(f"{entry.name} {st.st_mtime_ns if st else 0}\n".encode())
    return h.hexdigest()[:16]


def app_env(target: Target, app_dir: Path, base_url: str, db: DatabaseServer | None,
            db_name: str | None, db_user: str = APP_USER, db_password: str = "") -> dict:
    """The environment of install and configure commands (docs/targets.md)."""
    env = dict(os.environ)
    php_dir = os.path.dirname(tool("php"))
    env["PATH"] = f"{php_dir}:{env.get('PATH', '')}"
    env.update(LOCKDOWN_TARGET_DIR=str(target.directory), LOCKDOWN_APP_DIR=str(app_dir),
               LOCKDOWN_BASE_URL=base_url, LOCKDOWN_PHP=tool("php"))
    if db is not None:
        env.update(LOCKDOWN_DB_HOST=db.host, LOCKDOWN_DB_PORT=str(db.port),
                   LOCKDOWN_DB_SOCKET=db.socket or "", LOCKDOWN_DB_NAME=db_name or "",
                   LOCKDOWN_DB_USER=db_user, LOCKDOWN_DB_PASSWORD=db_password)
    return env


def run_target_command(procs: ProcessGroup, target: Target, which: str, argv: tuple, env: dict,
                       timeout: float, cwd: Path | None = None) -> None:
    """A target's command (install, configure, a remediation's step): `php` is the PHP CLI
    lockdown uses; it runs in the target directory unless `cwd` says otherwise."""
    argv = [tool("php") if argv[0] == "php" else argv[0], *argv[1:]]
    log = procs.run_dir / "logs" / f"{which}.log"
    result = procs.run(which, argv, timeout=timeout, env=env, cwd=cwd or target.directory, log=log)
    if result.returncode != 0:
        raise PhaseFailed(f"target {target.name}: {which} command failed (exit {result.returncode}); "
                          f"log in {log}", tail(log, 20))


def copy_app(target: Target, dest: Path) -> None:
    dest.mkdir(parents=True)
    if target.app_files:
        shutil.copytree(target.app_files, dest, dirs_exist_ok=True)
        return
    for entry in sorted(os.listdir(target.app_source)):
        if entry in target.app_exclude:
            continue
        src = target.app_source / entry
        if not os.path.exists(src):  # dangling symlink into a config dir we do not use
            continue
        # modification times kept: an app compares them (a cache newer than its source is
        # fresh; DokuWiki re-renders and rewrites every page whose cache looks older)
        subprocess.run(["cp", "-rL", "--preserve=mode,timestamps", str(src), str(dest / entry)], check=True)


def prepared_stem(target: Target) -> str:
    """What a target's preparations are named by (STEM-KEY): a built-in target's name, the same
    whatever checkout or installed package it comes from (a newer one replaces it); any other
    target's name and where its directory is (8 hex digits of its resolved path's SHA-256).
    By name alone, a user's target named like a built-in one (`catalog`) and the built-in
    removed each other's preparation as their own older version."""
    where = target.directory.resolve()
    if where.parent == paths.builtin_targets_dir().resolve():
        return target.name
    return f"{target.name}-{hashlib.sha256(str(where).encode()).hexdigest()[:8]}"


def prepare(target: Target, say=print) -> Prepared:
    """Return the cached preparation of `target`, building it first if needed."""
    key = cache_key(target)
    stem = prepared_stem(target)
    root = paths.prepared_dir() / f"{stem}-{key}"
    if (root / "prepared.json").is_file():
        return Prepared(target, root)
    # the build runs MariaDB there, named in its my.cnf
    paths.check_config_path(root, "set LOCKDOWN_HOME (or LOCKDOWN_PREPARED_DIR) to a directory whose path has none")
    paths.make_dir(paths.prepared_dir(), "LOCKDOWN_HOME (or LOCKDOWN_PREPARED_DIR)")
    with open(paths.prepared_dir() / f"{stem}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (root / "prepared.json").is_file():
            return Prepared(target, root)
        say(f"[prepare] {target.name}: first use of this target version, installing it "
            f"(cached in {root})")
        started = time.monotonic()
        _remove_unfinished(stem)
        tmp = root.with_name(f".{root.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            _build(target, tmp)
            (tmp / "prepared.json").write_text(json.dumps(
                {"target": target.name, "key": key, "seconds": round(time.monotonic() - started, 1),
                 "prepared_at": time.strftime("%Y-%m-%dT%H:%M:%S")}, indent=2))
            version = re.compile(re.escape(stem) + r"-[0-9a-f]{16}")
            for old in paths.prepared_dir().iterdir():
                # this target's older versions only: a glob of `minicms-*` also named
                # minicms-clean-KEY, another target's preparation, and removed it
                if version.fullmatch(old.name) and old != root and old.is_dir():
                    shutil.rmtree(old, ignore_errors=True)
            tmp.rename(root)
            shutil.rmtree(paths.prepared_dir() / f"{stem}.failed-logs", ignore_errors=True)
        except BaseException as e:
            kept = _keep_logs(tmp / "work" / "logs", stem)
            shutil.rmtree(tmp, ignore_errors=True)
            if kept and isinstance(e, PhaseFailed) and str(tmp) in str(e):
                raise PhaseFailed(str(e).replace(str(tmp / "work" / "logs"), str(kept)), e.details) from None
            raise
        say(f"[prepare] {target.name}: ready in {time.monotonic() - started:.0f} s")
    return Prepared(target, root)


def keep_preparation(target: Target, first_key: str) -> None:
    """The preparation made to serve the home page, renamed to the final target.toml's key.

    The sanity text (and, without a log, the URL list) is known only once the new target has
    served its home page, so target.toml is written twice; a preparation is keyed by the target
    directory's files (`cache_key`), and without this the first `lockdown run` prepared the
    target again: the app copied, the dump loaded and configure run a second time, for the same
    result. The two files differ only in `[[urls]]` and `[sanity]`, which no
    preparation reads, so the one made is the final target's. Under the preparation's lock, as
    prepare itself renames a finished build into place; when the final key is prepared already
    (or the first preparation is gone), nothing is changed."""
    root = paths.prepared_dir()
    final_key = cache_key(target)
    stem = prepared_stem(target)
    first, final = root / f"{stem}-{first_key}", root / f"{stem}-{final_key}"
    if first == final:
        return
    with open(root / f"{stem}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (first / "prepared.json").is_file() or final.exists():
            return
        record = json.loads((first / "prepared.json").read_text())
        record["key"] = final_key
        tmp = first / f"prepared.json.tmp-{os.getpid()}"
        tmp.write_text(json.dumps(record, indent=2))
        tmp.replace(first / "prepared.json")
        first.rename(final)


def _keep_logs(logs: Path, name: str) -> Path | None:
    """A failed build's logs (install, configure, MariaDB's), moved out of the build directory
    that is removed, to prepared/STEM.failed-logs/ (the last failure's only): the error names
    the log to read, which must still be there."""
    if not logs.is_dir():
        return None
    kept = paths.prepared_dir() / f"{name}.failed-logs"
    shutil.rmtree(kept, ignore_errors=True)
    try:
        shutil.move(str(logs), str(kept))
    except OSError:
        return None
    return kept


def _remove_unfinished(name: str) -> None:
    """Builds of the target named `name` (its prepared_stem) that a killed lockdown left
    half-done (.STEM-KEY.tmp-PID, and .STEM-KEY.discarded-PID): a hundred megabytes
    each, never used again. Called with the
    target's lock held, so no build of it is running; a live PID is left alone all the same."""
    paths.remove_abandoned(paths.prepared_dir(),
                           re.escape(f".{name}-") + r"[0-9a-f]{16}\.(?:tmp|discarded)-(?P<pid>\d+)")


def discard(prepared: Prepared) -> None:
    """Throw a prepared copy away (its files were changed by a run), so the next use builds it
    again. Runs still using it keep their hard links; the name is freed first."""
    gone = prepared.root.with_name(f".{prepared.root.name}.discarded-{os.getpid()}")
    try:
        prepared.root.rename(gone)
    except OSError:
        return
    shutil.rmtree(gone, ignore_errors=True)


def _build(target: Target, tmp: Path) -> None:
    copy_app(target, tmp / "app")
    with ProcessGroup(tmp / "work") as procs:
        db = None
        mysql = None
        password = ""          # the app account's, when the target has a database
        try:
            if target.database:
                PrivateMariaDB.initialize(procs, tmp / "data")
                mysql = PrivateMariaDB(procs, tmp / "work" / "mysql", tmp / "data")
                db = mysql.start()
                name = target.database
                password = new_password()
                write_secret(tmp / "app-password", password)
                # install-db's socket-only accounts for root and for lockdown's user stay; the
                # one it makes for an OS account `mysql` goes (nobody here logs in as that)
                spare = "" if service_account.os_user() == "mysql" else "DROP USER IF EXISTS 'mysql'@'localhost';"
                db.sql(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4;" + spare
                       + app_account_sql(password, create=True)
                       + "".join(f"GRANT ALL ON `{name}`.* TO '{APP_USER}'@'{h}';" for h in APP_HOSTS))
                for sql in (target.schema, target.seed):
                    if sql:
                        db.load_file(sql, name)
            env = app_env(target, tmp / "app", PLACEHOLDER_URL, db, target.database, db_password=password)
            if target.configure:
                run_target_command(procs, target, "configure", target.configure, env, 300)
            if target.install:
                run_target_command(procs, target, "install", target.install, env, target.install_timeout)
            if db is not None:
                db.dump(target.database, tmp / "dump.sql")
                mysql.stop()
                # root's between runs: each run serves a copy, given to the servers' account then
                service_account.reclaim(tmp / "data")
        finally:
            if mysql is not None:   # a failed build leaves no /tmp socket directory behind either
                ports.remove_short_socket_dir(mysql.socket)
    shutil.rmtree(tmp / "work" / "mysql", ignore_errors=True)
