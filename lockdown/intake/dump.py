"""The user's database, read once: a consistent dump through a DSN (`mariadb-dump
--single-transaction`, which only reads: one transaction with a consistent snapshot, no table
locks, no FLUSH), or a dump file the user made, copied as it is. The password never reaches a
file or a command line: the client's option file exists only in lockdown's memory
(harness/mariadb.py, `parse_dsn`)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import urllib.parse
from pathlib import Path

from ..errors import LockdownError
from ..harness.mariadb import dsn_parts, parse_dsn
from ..redact import redact_dsn
from ..harness.toolchain import tool

DUMP_FORM = "mysql://USER[:PASSWORD]@HOST[:PORT]/DATABASE (or ?socket=PATH)"
# a dump that selects its database would load into that name, not the target's
_USE = re.compile(rb"^(USE|CREATE DATABASE)\b", re.M | re.I)


def dsn_database(dsn: str) -> str:
    name = urllib.parse.unquote(dsn_parts(dsn).path.strip("/"))
    if not name or "/" in name:
        raise LockdownError(f"--db {redact_dsn(dsn)!r} names no database: expected {DUMP_FORM}")
    return name


def dump(dsn: str, dest: Path, timeout: float = 3600) -> str:
    """Dump the DSN's database into `dest`; returns the server's version."""
    name = dsn_database(dsn)
    server = parse_dsn(dsn)
    argv = [tool("mariadb-dump"), f"--defaults-file={server.client_cnf}", server.protocol(),
            "--single-transaction", "--skip-lock-tables", "--no-tablespaces", "--hex-blob", "--skip-dump-date",
            "--default-character-set=utf8mb4", name]
    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as out:
            proc = subprocess.run(argv, stdout=out, stderr=subprocess.PIPE, timeout=timeout)
        if proc.returncode != 0:
            message = proc.stderr.decode("utf-8", "replace").strip().splitlines()
            raise LockdownError(f"dumping {name} from {server.where()} failed: "
                                f"{message[-1] if message else 'no message'}; the account needs SELECT "
                                f"(and SHOW VIEW, TRIGGER for views and triggers) on it")
        os.replace(tmp, dest)
    except subprocess.TimeoutExpired:
        raise LockdownError(f"dumping {name} from {server.where()} took more than {timeout:g} s; make a dump "
                            f"yourself (mariadb-dump --single-transaction {name}) and give it with --db-dump")
    finally:
        tmp.unlink(missing_ok=True)
    return server.version


def copy_dump(src: Path, dest: Path) -> None:
    """The user's dump copied byte for byte (a plain SQL file of one database)."""
    if not src.is_file():
        raise LockdownError(f"--db-dump {src}: no such file")
    with open(src, "rb") as f:
        head = f.read(4)
        f.seek(0)
        if head[:2] == b"\x1f\x8b":
            raise LockdownError(f"--db-dump {src} is compressed (gzip); give the SQL itself (gunzip -k it)")
        for chunk in iter(lambda: f.read(1 << 20), b""):
            m = _USE.search(chunk)
            if m:
                raise LockdownError(f"--db-dump {src} selects its database ({m.group(0).decode()} ...): make it "
                                    f"for one database without --databases or --all-databases")
    shutil.copyfile(src, dest)
