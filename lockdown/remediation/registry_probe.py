"""fs-scan's SQL: which registry rows point at files that are not there.

The scan happens because a lookup returns a row whose file is missing (a module recorded as
enabled after its code was removed). The capture saw the lookups but not their results, so the
candidate lookups -- single-table SELECTs by key that returned a row, in the requests that
scanned -- are run again on a private copy of the target's prepared database, and every value
that names a file is looked for in the app tree. Registries store paths relative to a directory
of their own (a plugin table's `seo/seo.php` lives under `plugins/`), so a value is there when
any file of the tree ends with it; only a value no file ends with is missing (a row wrongly
kept costs a scan, a row wrongly deleted breaks the site). A row whose file is missing gets a DELETE
built from its lookup's own FROM and WHERE (any table or column names), checked on the same
copy: after it, the lookup returns no row. Nothing touches the run's or the user's database."""
from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from .. import paths
from ..analyzers.findings import Finding, Remediation
from ..bundle.model import Statement
from ..harness import ports
from ..harness.mariadb import PrivateMariaDB, copy_datadir
from ..harness.prepare import prepare
from ..harness.processes import ProcessGroup
from ..targets.config import Target

# A key lookup: columns FROM one table WHERE col = literal [AND col = literal ...] [LIMIT n]
_EQ = r"`?\w+`?\s*=\s*(?:'(?:[^'\\]|\\.)*'|\d+)"
LOOKUP = re.compile(r"^\s*(?:/\*.*?\*/\s*)*SELECT\s+(?P<cols>[\w`.,\s]+?)\s+FROM\s+(?P<table>[\w`.]+)\s+"
                    rf"WHERE\s+(?P<where>{_EQ}(?:\s+AND\s+{_EQ})*)\s*(?:LIMIT\s+1\s*)?;?\s*$", re.I | re.S)
# A value that names a file: path characters only, with a directory or a source-file suffix
FILE_LIKE = re.compile(r"^[\w.\-/]+$")
FILE_HINT = re.compile(r"/|\.(php|inc|module|info|yml|phtml|twig|tpl|theme|engine|profile)$", re.I)
MAX_PROBES = 400


@dataclass
class Probe:
    sql: str
    table: str
    where: str
    values: list[str]
    missing: list[str]


def candidates(finding: Finding, statements: list[Statement]) -> list[Statement]:
    """Distinct single-table lookups by key (equalities only, at most LIMIT 1) that returned
    exactly one row, in the requests that scanned."""
    rids = set(finding.details.get("requests") or finding.requests)
    seen, out = set(), []
    for s in statements:
        text = " ".join(s.sql.split())
        if s.request in rids and s.rows_sent == 1 and text not in seen and LOOKUP.match(text):
            seen.add(text)
            out.append(s)
    return out[:MAX_PROBES]


def file_index(app_dir: Path) -> set[str]:
    """Every file and directory of the app tree as each of its path suffixes
    ('plugins/seo/seo.php', 'seo/seo.php', 'seo.php'): the set a registry value, relative to
    any directory, is looked up in."""
    out: set[str] = set()
    for root, dirs, files in os.walk(app_dir):
        rel = Path(root).relative_to(app_dir).parts
        for name in files + dirs:
            parts = rel + (name,)
            out.update("/".join(parts[i:]) for i in range(len(parts)))
    return out


def is_missing(value: str, index: set[str]) -> bool:
    """`value` names a file (path characters, a directory or a source suffix) that is in no
    directory of the app tree (`index`: file_index); an absolute path is looked up as is."""
    if len(value) > 400 or not FILE_LIKE.match(value) or not FILE_HINT.search(value):
        return False
    p = Path(value)
    if p.is_absolute():
        return not p.exists()
    rel = "/".join(part for part in p.parts if part not in (".", ""))
    return ".." not in p.parts and rel not in index


def _run_probes(db, database: str, sqls: list[str]) -> list[list[str]]:
    script = "".join(f"SELECT 'lockdown-probe-{i}';\n{sql.rstrip().rstrip(';')};\n" for i, sql in enumerate(sqls))
    out: list[list[str]] = [[] for _ in sqls]
    current = None
    for line in db.sql(script, database=database).splitlines():
        m = re.fullmatch(r"lockdown-probe-(\d+)", line)
        if m:
            current = int(m.group(1))
        elif current is not None:
            out[current].extend(v for v in line.split("\t") if v and v != "NULL")
    return out


def propose(finding: Finding, statements: list[Statement], target: Target, run_dir: Path,
            say=print) -> list[Remediation]:
    """SQL removing exactly the registry rows whose files are missing, checked on a copy."""
    if not target.database:
        return []
    found = candidates(finding, statements)
    if not found:
        return []
    prepared = prepare(target, say=say)
    if prepared.datadir is None:
        return []
    index = file_index(prepared.app)
    say(f"[remedy] fs-scan: re-running {len(found)} lookup(s) on a copy of {target.name}'s database")
    with ProcessGroup(run_dir) as procs:
        _, datadir = paths.run_copies(run_dir)
        db = None
        try:
            copy_datadir(prepared.datadir, datadir)
            db = PrivateMariaDB(procs, run_dir / "mysql", datadir).start()
            texts = [" ".join(s.sql.split()) for s in found]
            results = _run_probes(db, target.database, texts)
            zombies = []
            for sql, values in zip(texts, results):
                missing = [v for v in values if is_missing(v, index)]
                if missing:
                    m = LOOKUP.match(sql)
                    zombies.append(Probe(sql, m.group("table"), m.group("where"), values, missing))
            if not zombies:
                return []
            deletes = [f"DELETE FROM {z.table} WHERE {z.where};" for z in zombies]
            db.sql("\n".join(deletes), database=target.database)
            after = _run_probes(db, target.database, [z.sql for z in zombies])
        finally:
            procs.stop_all()
            ports.remove_short_socket_dir(db.socket if db is not None else None)
            shutil.rmtree(datadir, ignore_errors=True)
    if any(after):
        return []
    names = "; ".join(f"{z.sql} -> {', '.join(z.missing)}" for z in zombies)
    return [Remediation(
        kind="sql", content="\n".join(deletes) + "\n",
        checked=(f"on a copy of the prepared database: {len(zombies)} lookup(s) return files missing "
                 f"from the app tree ({names}); after the DELETE they return no row"),
        description="remove the registry rows whose files are gone (the lookups that miss and fall "
                    "back to scanning)")]
