"""fs-scan's SQL: which registry rows point at files that are not there.

The scan happens because a lookup returns a row whose file is missing (a module recorded as
enabled after its code was removed). The capture saw the lookups but not their results, so the
candidate lookups -- single-table SELECTs by key that returned a row, in the requests that
scanned -- are run again on a private copy of the target's prepared database, and every value
that names a file is looked for in the app tree. Registries store paths relative to a directory
of their own (a plugin table's `seo/seo.php` lives under `plugins/`), so a value is there when
any file of the tree ends with it; only a value no file ends with is missing (a row wrongly
kept costs a scan, a row wrongly deleted breaks the site). A row whose file is missing gets a DELETE
built from its lookup's own FROM and WHERE (any table or column names).

On a live site the row is not the whole fix: caches filled while it was there still name the
item, and the app looks it up again (Drupal 7's cache_bootstrap 'system_list'). So every text
and blob column of every other table of the copy is searched for the item's path and name
(`mentions`; no application's table names assumed); a cache table's entries that name it get
a DELETE too (the app refills them from the repaired registry), any other table's rows are
named in the description and left alone. Every statement is checked on the same copy, as warm
as the target's install left it: after them the lookups return no row and no cache entry names
the item. Nothing touches the run's or the user's database."""
from __future__ import annotations

import os
import re
import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

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


@contextmanager
def database_copy(prepared_datadir: Path, work: Path):
    """A private MariaDB serving a copy of a prepared datadir, its files under `work` (a run's
    or a check's own directory): yields the server; stopped, and the copy removed, on every way
    out. Nothing it does reaches the prepared database or the user's."""
    with ProcessGroup(work) as procs:
        _, datadir = paths.run_copies(work)
        server = PrivateMariaDB(procs, work / "mysql", datadir)
        try:
            copy_datadir(prepared_datadir, datadir)
            yield server.start()
        finally:
            procs.stop_all()
            ports.remove_short_socket_dir(server.socket)
            shutil.rmtree(datadir, ignore_errors=True)


def zombies_of(db, database: str, found: list[Statement], index: set[str]) -> list[Probe]:
    """The lookups among `found` that return a value naming a file missing from the app tree."""
    texts = [" ".join(s.sql.split()) for s in found]
    out = []
    for sql, values in zip(texts, _run_probes(db, database, texts)):
        missing = [v for v in values if is_missing(v, index)]
        if missing:
            m = LOOKUP.match(sql)
            out.append(Probe(sql, m.group("table"), m.group("where"), values, missing))
    return out


# --- the rest of the fix: cache entries that still name the missing item -------------------
# A live site's caches were filled while the registry still named the item: Drupal 7's
# cache_bootstrap 'system_list' holds the module list, names and files, and module_list()
# reads it before the registry. Repairing the row alone leaves the cached list naming the
# module, every request still misses its file, the lookup now returns nothing, and the scan
# goes on until the cache is cleared (issue 30, the warm Drupal 7.103).

STRING_KEY = re.compile(r"`?\w+`?\s*=\s*'((?:[^'\\]|\\.)*)'")
NAME = re.compile(r"^[\w.\-/]{3,255}$")
TEXT_TYPES = ("char", "varchar", "tinytext", "text", "mediumtext", "longtext", "binary", "varbinary", "tinyblob",
              "blob", "mediumblob", "longblob")
CACHE_TABLE = re.compile(r"cache", re.I)
MAX_KEYS = 10


@dataclass
class Mention:
    """A table other than the registry whose text or blob columns name a missing item."""
    table: str
    columns: list[str]
    rows: int
    names: list[str]        # which of the items' names its rows hold
    keys: list[str]         # primary-key values of the first rows, to say which entries
    cache: bool             # a cache table (its name says so): its entries are removed


def item_names(z: Probe) -> list[str]:
    """What names the missing item elsewhere in the database: its missing paths, and the
    lookup's string keys that are the file's stem or its directory in one of them
    ('devel_generate' for sites/all/modules/devel/devel_generate/devel_generate.module; not
    'module', the lookup's type, which names every module)."""
    own = set()
    for path in z.missing:
        parts = PurePosixPath(path).parts
        own.update(p.split(".")[0] for p in parts[-2:])
    keys = [k for k in STRING_KEY.findall(z.where) if k in own]
    return sorted({n for n in [*z.missing, *keys] if NAME.match(n)})


def name_pattern(names: list[str]) -> str:
    """A MariaDB REGEXP (inside a quoted SQL string) for any of `names` standing alone: not
    inside a longer identifier ('devel' does not match 'devel_generate'). Names hold only
    word characters, '.', '-' and '/' (`NAME`), each outside \\w put in brackets."""
    alts = "|".join("".join(c if c.isalnum() or c == "_" else f"[{c}]" for c in n) for n in names)
    return f"(^|[^[:alnum:]_])({alts})([^[:alnum:]_]|$)"


def _quote(ident: str) -> str:
    return "`" + ident.replace("`", "``") + "`"


def _where(columns: list[str], pattern: str) -> str:
    return " OR ".join(f"{_quote(c)} REGEXP '{pattern}'" for c in columns)


def mentions(db, database: str, names: list[str], registry: set[str]) -> list[Mention]:
    """Every table but the registry's (`registry`: its names as the lookups wrote them) whose
    text or blob columns name one of `names`, searched on the copy: any table, any column,
    no name of any application's tables assumed."""
    listed = db.sql("SELECT c.TABLE_NAME, c.COLUMN_NAME FROM information_schema.COLUMNS c JOIN "
                    "information_schema.TABLES t ON t.TABLE_SCHEMA = c.TABLE_SCHEMA AND t.TABLE_NAME = c.TABLE_NAME "
                    "WHERE c.TABLE_SCHEMA = DATABASE() AND t.TABLE_TYPE = 'BASE TABLE' AND c.DATA_TYPE IN ("
                    + ", ".join(f"'{t}'" for t in TEXT_TYPES) + ") ORDER BY c.TABLE_NAME, c.ORDINAL_POSITION;",
                    database=database)
    skip = {r.strip("`").split(".")[-1].strip("`").lower() for r in registry}
    columns: dict[str, list[str]] = {}
    for line in listed.splitlines():
        table, column = line.split("\t")
        if table.lower() not in skip:
            columns.setdefault(table, []).append(column)
    if not columns or not names:
        return []
    pattern = name_pattern(names)
    tables = list(columns)
    counts = _run_probes(db, database, [f"SELECT COUNT(*) FROM {_quote(t)} WHERE {_where(columns[t], pattern)}"
                                        for t in tables])
    out = []
    for table, count in zip(tables, counts):
        if count and int(count[0]) > 0:
            out.append(_mention(db, database, table, columns[table], names, int(count[0])))
    return out


def _mention(db, database: str, table: str, columns: list[str], names: list[str], rows: int) -> Mention:
    """What `table`'s matching rows hold: which names, in which columns, and their keys."""
    has = _run_probes(db, database, [f"SELECT COUNT(*) FROM {_quote(table)} WHERE {_where(columns, name_pattern([n]))}"
                                     for n in names])
    named = [n for n, c in zip(names, has) if c and int(c[0]) > 0]
    pattern = name_pattern(named)
    hit = _run_probes(db, database, [f"SELECT COUNT(*) FROM {_quote(table)} WHERE {_where([c], pattern)}"
                                     for c in columns])
    cols = [c for c, n in zip(columns, hit) if n and int(n[0]) > 0]
    pk = db.sql("SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() AND "
                f"TABLE_NAME = '{table}' AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX;", database=database)
    keys: list[str] = []
    if pk.split():
        got = db.sql(f"SELECT CONCAT_WS(', ', {', '.join(_quote(k) for k in pk.split())}) FROM {_quote(table)} "
                     f"WHERE {_where(cols, pattern)} LIMIT {MAX_KEYS};", database=database)
        keys = [k for k in got.splitlines() if k]
    return Mention(table, cols, rows, named, keys, bool(CACHE_TABLE.search(table)))


def statements(zombies: list[Probe], found: list[Mention]) -> list[tuple[str, str]]:
    """(SQL, what it does) for each statement of the fix: the registry rows first, then the
    cache entries that name the items."""
    out = []
    for z in zombies:
        out.append((f"DELETE FROM {z.table} WHERE {z.where};",
                    f"removes the registry row the lookup `{z.sql}` returns: it names "
                    f"{', '.join(z.missing)}, missing from the app tree"))
    for m in found:
        if not m.cache:
            continue
        which = f" ({', '.join(m.keys)}{', ...' if m.rows > len(m.keys) else ''})" if m.keys else ""
        out.append((f"DELETE FROM {_quote(m.table)} WHERE {_where(m.columns, name_pattern(m.names))};",
                    f"removes the {m.rows} entr{'y' if m.rows == 1 else 'ies'} of cache table {m.table}{which} "
                    f"that still name{'s' if m.rows == 1 else ''} {', '.join(m.names)}: a warm cache keeps the app "
                    f"looking the items up after the registry repair; the app fills "
                    f"{'it' if m.rows == 1 else 'them'} again from the repaired registry"))
    return out


def _content(steps: list[tuple[str, str]]) -> str:
    return "".join(f"-- {i}. {why}\n{sql}\n" for i, (sql, why) in enumerate(steps, 1))


def _describe(steps: list[tuple[str, str]], caches: list[Mention], left: list[Mention]) -> str:
    said = "; ".join(f"({i}) {why}" for i, (_, why) in enumerate(steps, 1))
    kept = "".join(f"; left as is, not a cache table: {m.table} ({m.rows} row(s) naming {', '.join(m.names)})"
                   for m in left)
    what = " and the cache entries that still name them" if caches else " (no cache entry names them)"
    return (f"remove the registry rows whose files are gone (the lookups that miss and fall back to "
            f"scanning){what}: {said}{kept}")


def propose(finding: Finding, statements_seen: list[Statement], target: Target, run_dir: Path,
            say=print) -> list[Remediation]:
    """SQL removing exactly the registry rows whose files are missing, and the cache entries
    that still name those items, checked on a copy of the prepared database (whose caches are
    as warm as the target's install left them)."""
    if not target.database:
        return []
    found = candidates(finding, statements_seen)
    if not found:
        return []
    prepared = prepare(target, say=say)
    if prepared.datadir is None:
        return []
    index = file_index(prepared.app)
    say(f"[remedy] fs-scan: re-running {len(found)} lookup(s) on a copy of {target.name}'s database")
    with database_copy(prepared.datadir, run_dir) as db:
        zombies = zombies_of(db, target.database, found, index)
        if not zombies:
            return []
        names = sorted({n for z in zombies for n in item_names(z)})
        named = mentions(db, target.database, names, {z.table for z in zombies})
        steps = statements(zombies, named)
        db.sql(_content(steps), database=target.database)
        after = _run_probes(db, target.database, [z.sql for z in zombies])
        still = [m for m in mentions(db, target.database, names, {z.table for z in zombies}) if m.cache]
    if any(after) or still:
        return []
    caches = [m for m in named if m.cache]
    lookups = "; ".join(f"{z.sql} -> {', '.join(z.missing)}" for z in zombies)
    return [Remediation(
        kind="sql", content=_content(steps),
        checked=(f"on a copy of the prepared database: {len(zombies)} lookup(s) return files missing from the "
                 f"app tree ({lookups}); every text and blob column of its other tables searched for "
                 f"{', '.join(names)}: {len(caches)} cache table(s) name them"
                 + (f" ({', '.join(m.table for m in caches)})" if caches else "")
                 + "; after the statements the lookups return no row and no cache entry names them"),
        description=_describe(steps, caches, [m for m in named if not m.cache]))]
