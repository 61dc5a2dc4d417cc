"""`lockdown serve` from Python: the target's stack started as `run` starts it (on copies, the
servers unprivileged, on loopback), kept up until a signal, with what a person needs to look
at it by hand: the URL, a database client command, the logs and pids, and the capture's
request log, which a request carrying `X-Lockdown-Capture` goes through."""
from __future__ import annotations

import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..collectors import request_log
from ..collectors.settings import CaptureSettings
from ..errors import PhaseFailed
from ..harness.mariadb import _option_value
from ..harness.prepare import write_secret
from ..harness.stack import Stack, StackOptions
from ..targets.config import Target

# What a request sent by hand may collect: the request log, Excimer's stacks and, on the
# one-worker pool that loads it, xhprof's call counts (no perf, no slow log: those belong to a
# capture's driver, `lockdown profile`)
BY_HAND = CaptureSettings(collect=frozenset({"excimer", "xhprof"}), xhprof_every=1)
REQUEST_ID = "by-hand-1"
POLL_S = 0.5


@dataclass
class ServeOptions:
    workers: int = 4
    port: int | None = None
    php_ini: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Serving:
    """What `serve` prints once the stack is up."""
    url: str
    run_dir: Path
    db_client: str | None          # a command line; the password is in a 0600 file it names
    paths: dict                    # label -> path (logs, pid files, php.ini, the capture)
    capture_by_hand: str


def client_file(stack: Stack) -> Path | None:
    """The app account's password in a 0600 option file of the run, for the mariadb client's
    --defaults-extra-file: the command line printed names it, never the password."""
    if stack.mysql is None or not stack.db_password:
        return None
    return write_secret(stack.run_dir / "mysql" / "serve-client.cnf",
                        f"[client]\npassword={_option_value(stack.db_password)}")


def describe(stack: Stack, cap: request_log.CaptureDir) -> Serving:
    run_dir, url = stack.run_dir, stack.base_url
    db_client = None
    cnf = client_file(stack)
    if cnf is not None:
        db_client = shlex.join(["mariadb", f"--defaults-extra-file={cnf}", f"--socket={stack.mysql.socket}",
                                f"--user={stack.db_user}", stack.db_name])
    logs = run_dir / "logs"
    paths = {"nginx access log": logs / "nginx-access.log", "nginx error log": logs / "nginx-error.log",
             "php-fpm log": logs / "php-fpm.log", "php-fpm pid": run_dir / "php" / "php-fpm.pid",
             "php-fpm socket": Path(stack.fpm.socket), "php.ini": stack.php.ini_file,
             "app tree (a copy)": stack.app_dir}
    if stack.mysql is not None:
        paths["MariaDB error log"] = stack.mysql.error_log
    paths["capture records"] = cap.out
    path = shlex.quote(f"{url}{stack.target.sanity_url}")
    by_hand = (f"curl -s -o /dev/null -H 'X-Lockdown-Capture: 1' -H 'X-Lockdown-Request: {REQUEST_ID}' "
               f"-H 'X-Lockdown-Xhprof: 1' {path}  # then: {cap.out}/requests.jsonl (the request log), "
               f"excimer.jsonl (its stacks), xhprof/{REQUEST_ID}.json (its call counts)")
    return Serving(url=url, run_dir=run_dir, db_client=db_client, paths=paths, capture_by_hand=by_hand)


def serve(target: Target, run_dir: Path, options: ServeOptions, ready: Callable[[Serving], None],
          say=print) -> None:
    """Start the stack, call `ready` with what to print, and keep it up until a signal
    (KeyboardInterrupt, or Terminated for SIGTERM) unwinds it: everything started is stopped
    and the copies removed. A server that dies meanwhile is a PhaseFailed naming its log."""
    cap = request_log.install(run_dir / "capture", {**target.php_ini, **options.php_ini}.get("auto_prepend_file"))
    stack_opts = StackOptions(workers=options.workers, port=options.port, php_ini=dict(options.php_ini),
                              extensions=BY_HAND.extensions(),
                              instrumented_extension=BY_HAND.instrumented_extension(),
                              pool_ini=request_log.pool_ini(cap, False))
    with Stack(target, run_dir, stack_opts, say=say) as stack:
        request_log.write_config(cap, BY_HAND, None)
        ready(describe(stack, cap))
        while True:
            time.sleep(POLL_S)
            gone = [c for c in stack.procs.children if not c.alive()]
            if gone:
                raise PhaseFailed(f"{gone[0].name} stopped by itself while serving; see {gone[0].log}")
