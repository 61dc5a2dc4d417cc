"""The running application for one command: MariaDB -> php-fpm -> nginx, in one run directory.

Use as a context manager: everything started is stopped on exit, whatever the exit.
"""
from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .. import paths
from ..errors import LockdownError, PhaseFailed
from ..signals import held
from ..targets.config import Target, users_server_database
from ..progress import as_reporter
from . import app_tree, ports, service_account
from .db_claim import claim
from .mariadb import DatabaseServer, PrivateMariaDB, copy_datadir, parse_dsn
from .nginx import Nginx
from .phpfpm import PhpConfig, PhpFpm, build_php_config, check_ini
from .prepare import (APP_USER, app_account_sql, app_env, discard, new_password, prepare,
                      run_target_command, write_secret)
from .processes import ProcessGroup


@dataclass
class StackOptions:
    workers: int = 4
    port: int | None = None
    mysql_dsn: str | None = None
    php_ini: dict = field(default_factory=dict)       # command-line overrides, win over the target's
    extensions: frozenset = frozenset()               # collector extensions to load
    instrumented_extension: str | None = None         # loaded only in a one-worker pool
    pool_env: dict = field(default_factory=dict)
    pool_ini: dict = field(default_factory=dict)      # php_admin_value[...] in the pool
    keep_data: bool = False
    # A change to this run's copies (app tree, database), applied after `configure` and before
    # php-fpm starts: how `verify` serves a patched target. The app tree is hard links to the
    # prepared one (harness/app_tree.py): a remedy calls `Stack.own` (or `own_all`) on what it
    # is about to write, so nothing it writes can reach the prepared tree.
    remedy: Callable[["Stack"], None] | None = None


class Stack:
    def __init__(self, target: Target, run_dir: Path, options: StackOptions, say=print):
        self.target = target
        self.run_dir = run_dir
        self.options = options
        self.say = say
        self.procs = ProcessGroup(run_dir)
        self.db: DatabaseServer | None = None
        self.mysql: PrivateMariaDB | None = None
        self.db_name: str | None = None
        self.db_claim = None          # --mysql: this command's hold on db_name (db_claim.py)
        self.db_user: str | None = None
        self.db_password: str | None = None
        self.php: PhpConfig | None = None
        self.fpm: PhpFpm | None = None
        self.nginx: Nginx | None = None
        self.app_dir, self.data_dir = paths.run_copies(run_dir)

    @property
    def base_url(self) -> str:
        return self.nginx.base_url

    def own(self, rel: str) -> Path:
        """`app_dir/rel`, made this run's own file before something writes it."""
        return app_tree.own(self.app_dir, rel)

    def own_all(self) -> None:
        """Every file of this run's app tree made its own, for a writer that names no files."""
        app_tree.own_all(self.app_dir)

    def app_env(self) -> dict:
        """The environment of the target's configure command and of remediation steps."""
        env = app_env(self.target, self.app_dir, self.nginx.base_url, self.db, self.db_name,
                      self.db_user, self.db_password)
        if self.db is not None and not self.options.mysql_dsn:
            # The app talks to the private server over loopback TCP, as most production
            # set-ups do; it also lets a capture tie its connections to requests.
            env["LOCKDOWN_DB_SOCKET"] = ""
        return env

    def __enter__(self) -> "Stack":
        try:
            with as_reporter(self.say).counted(f"starting {self.target.name}", None):
                self._start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        with held():     # a Ctrl-C meanwhile waits until everything is stopped and removed
            self.procs.stop_all()
            if self.fpm is not None:
                ports.remove_short_socket_dir(self.fpm.socket)
                ports.remove_short_socket_dir(self.fpm.instrumented_socket)
            if self.mysql is not None:   # also when it never started (a port in use, a bad datadir)
                ports.remove_short_socket_dir(self.mysql.socket)
            if not self.options.keep_data:
                for copy in (self.data_dir, self.app_dir):
                    shutil.rmtree(copy, ignore_errors=True)
                self._drop_users_copy()

    def _drop_users_copy(self) -> None:
        """With --mysql, the target's database loaded into the user's server is this run's copy
        too: dropped when the command ends, so that the server keeps nothing of the run (the
        next command on the target drops and loads it again anyway), then the claim on it is
        released (db_claim.py)."""
        if self.db_claim is None:     # no --mysql, or another command holds it: not ours to drop
            return
        try:
            self.db.sql(f"DROP DATABASE IF EXISTS `{self.db_name}`;", timeout=60)
        except (PhaseFailed, OSError) as e:
            self.say(f"[stop] warning: could not drop {self.db_name} on {self.db.where()}: {e}")
        finally:
            self.db_claim.close()
            self.db_claim = None

    def _new_app_password(self) -> str:
        """This run's own random password for the app's account, kept in a 0600 file of the run
        (mysql/app-password); the target's configure writes it where the app reads it."""
        password = new_password()
        self.db.sql(app_account_sql(password, create=False))
        write_secret(self.run_dir / "mysql" / "app-password", password)
        return password

    def _start(self) -> None:
        t, o = self.target, self.options
        paths.check_config_path(self.run_dir,
                                "choose a run directory (-o, --run-dir, LOCKDOWN_HOME) whose path has none")
        acct = service_account.account()
        service_account.check_reachable(self.run_dir, acct, "the run directory",
                                        "choose a run directory (-o, --run-dir, LOCKDOWN_HOME)")
        service_account.share(self.run_dir, acct)     # its servers enter it, no other account
        port = o.port or ports.free_port()
        ports.ensure_free(port, "nginx", "--port")
        overrides = {**t.php_ini, **o.php_ini}
        self.php = build_php_config(self.run_dir / "php", overrides, set(o.extensions))
        check_ini(self.php)
        prepared = prepare(t, say=self.say)
        self.say(f"[start] run directory {self.run_dir}")
        linked_at = time.time_ns()
        app_tree.link_copy(prepared.app, self.app_dir)
        for rel in t.writable:            # what the app writes in place: this run's own files
            app_tree.own(self.app_dir, rel)
        db_user, db_password = APP_USER, prepared.app_password()
        if t.database:
            if o.mysql_dsn:
                self.db = parse_dsn(o.mysql_dsn, self.run_dir)
                self.db_name = users_server_database(t.name)
                self.db_claim = claim(self.db.where(), self.db_name, self.run_dir)
                self.say(f"[start] loading {t.name}'s database into {self.db_name} on "
                         f"{self.db.where()}")
                self.db.sql(f"DROP DATABASE IF EXISTS `{self.db_name}`; "
                            f"CREATE DATABASE `{self.db_name}` CHARACTER SET utf8mb4;")
                self.db.load_file(prepared.dump, self.db_name)
                db_user, db_password = self.db.user, self.db.password
            else:
                copy_datadir(prepared.datadir, self.data_dir)
                self.mysql = PrivateMariaDB(self.procs, self.run_dir / "mysql", self.data_dir)
                self.db = self.mysql.start()
                self.db_name = t.database
                if t.configure:
                    db_password = self._new_app_password()
            self.say(f"[start] MariaDB {self.db.version} at {self.db.where()}")
        elif o.mysql_dsn:
            self.say(f"[start] {t.name} has no database: --mysql is not used")
        self.fpm = PhpFpm(self.procs, self.run_dir / "php", self.php, o.workers, o.pool_env,
                          o.pool_ini, o.instrumented_extension)
        self.nginx = Nginx(self.procs, self.run_dir / "nginx", port, self.app_dir / t.docroot,
                           t.front_controller, self.fpm.socket, self.fpm.instrumented_socket)
        self.db_user, self.db_password = db_user, db_password
        if t.configure:
            run_target_command(self.procs, t, "configure", t.configure, self.app_env(), 300)
        if o.remedy is not None:
            o.remedy(self)
            changed = app_tree.written_through(self.app_dir, linked_at)
            if changed:
                discard(prepared)
                raise LockdownError(
                    f"this run changed {len(changed)} file(s) of its app copy in place while they "
                    f"were still hard links into the prepared tree ({', '.join(changed[:3])}); the "
                    f"prepared copy of {t.name} was discarded and will be rebuilt on next use; a "
                    f"recipe's steps must name what they write (`writes` in recipes.toml), and a "
                    f"configure script must write a new file and rename it over")
        # the workers may add, rename and remove files in the app copy, never write through
        # its files (hard links into the prepared tree)
        service_account.give_dirs(self.app_dir, acct)
        for rel in t.writable:            # ... and these, their own copies, written in place too
            if (self.app_dir / rel).exists():
                service_account.give(self.app_dir / rel, acct, recursive=True)
        self.fpm.start()
        self.say(f"[start] php-fpm: {o.workers} static workers on {self.fpm.socket}"
                 + (f", and 1 with {o.instrumented_extension}" if o.instrumented_extension else ""))
        self.nginx.start()
        self.say(f"[start] nginx at {self.nginx.base_url}")
