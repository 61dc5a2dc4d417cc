"""One lockdown command at a time per database on a user's server (--mysql).

With `--mysql`, a target's database is loaded into the user's server as `lockdown_<target>`,
dropped and loaded again at the start of each command and dropped at its end. Two commands on
the same target and server at once would drop each other's database mid-run. A claim is an
advisory lock (flock) on a file named for the server and the database: the kernel releases it
when the command ends, however it ends, so a killed command never leaves a claim behind."""
from __future__ import annotations

import fcntl
import os
import re
from pathlib import Path
from typing import IO

from .. import paths
from ..errors import LockdownError


def claim_file(where: str, database: str) -> Path:
    return paths.active_dir() / "mysql-claims" / (re.sub(r"[^A-Za-z0-9_.-]", "_", f"{where}-{database}") + ".lock")


def claim(where: str, database: str, run_dir: Path) -> IO:
    """Hold `database` on the server at `where` for this command; the open file is the claim
    (close it, or exit, to release). Refused in one line while another command holds it."""
    path = claim_file(where, database)
    paths.make_dir(path.parent, "LOCKDOWN_HOME")
    f = open(path, "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "another lockdown command"
        f.close()
        raise LockdownError(f"database {database} on {where} is in use by {holder}: run the two "
                            f"commands one after the other, or give this one another --mysql server")
    f.seek(0)
    f.truncate()
    f.write(f"lockdown (pid {os.getpid()}, run directory {run_dir})")
    f.flush()
    return f
