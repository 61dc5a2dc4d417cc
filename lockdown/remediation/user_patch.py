"""A change of the user's own (`--patch FILE`, a unified diff of the app's files), handled the
way lockdown handles its own fixes: `compare` measures it against the target as it is,
`verify` measures it as the fix of a finding, and `run` and `profile` start from it.

Engine and framework engineers hunting a hot builtin write the patch themselves (a memo, a
cheaper call); these are the A/B and the re-capture they would otherwise build by hand. The
diff is read and checked before anything starts: it must name files inside the app tree, and
apply, in the order given, to a link copy of the prepared tree (`base.patched_tree`), so a
patch that does not fit is one line, not a stack torn down halfway. It reaches only the
run's copies. Its Remediation carries `--patch FILE` as its description (base.own_patch_path),
which names it in every output.

`verify --patch` also takes SQL: a file that is not a diff and whose first statement (after
comments) starts with an SQL verb is statements for the target's database, a remediation of
kind sql applied as lockdown's own SQL fixes are (remediation/apply.py, to the after arm's
database copy only). It is checked before anything starts by running it on a private copy of
the prepared database (after the run's base SQL), with registry_probe's `database_copy`; a
statement that fails there is one line, with MariaDB's error. A diff and SQL together are two
`--patch` options, one file each, applied in the order given.
"""
from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path, PurePosixPath

from ..analyzers.findings import Remediation
from ..errors import LockdownError, PhaseFailed, UsageError
from ..harness.app_tree import diff_files
from ..harness.prepare import Prepared, prepare
from ..targets.config import Target
from .base import PATCH_MARK, base_refused, patched_tree
from .registry_probe import database_copy

# comments MariaDB's client skips: `-- ` to the end of the line, `#` to the end of the line, /* ... */
SQL_COMMENT = re.compile(r"(?:--(?:[ \t][^\n]*)?$|#[^\n]*$|/\*.*?\*/|\s+)", re.M | re.S)
SQL_VERB = re.compile(r"(?:DELETE|UPDATE|INSERT|REPLACE|TRUNCATE|CREATE|ALTER|DROP|RENAME|SET|SELECT|WITH|DO|CALL|"
                      r"START|BEGIN|COMMIT|LOCK|UNLOCK|ANALYZE|OPTIMIZE|FLUSH)\b", re.I)


def is_sql(text: str) -> bool:
    """`text` reads as SQL statements: after the comments, it starts with a statement's verb."""
    pos = 0
    while m := SQL_COMMENT.match(text, pos):
        if m.end() == pos:
            break
        pos = m.end()
    return bool(SQL_VERB.match(text, pos))


def load_patch(path: Path, sql: bool = False) -> Remediation:
    """The diff in `path` as a remediation (kind diff; `file`: the files it changes), or, with
    `sql` (verify --patch), the SQL statements in it (kind sql); or one line saying why it
    cannot be one (empty, unreadable, neither)."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise LockdownError(f"cannot read --patch {path}: {getattr(e, 'strerror', None) or e}")
    what = "a unified diff of the app's files" + (" or SQL statements for the database" if sql else "")
    if not text.strip():
        raise LockdownError(f"--patch {path} is empty: give {what}")
    files = diff_files(text)
    if not files and sql and is_sql(text):
        return Remediation(kind="sql", content=text, description=f"{PATCH_MARK}{path.resolve()}", checked="")
    if not files:
        raise LockdownError(f"--patch {path} is not a unified diff (no ---/+++ file lines)"
                            + (" nor SQL (no statement verb after the comments)" if sql else "")
                            + ": make it with `diff -u` or `git diff` against the app tree"
                            + (", or write the statements for the target's database copy" if sql else ""))
    for rel in files:
        parts = PurePosixPath(rel).parts
        if PurePosixPath(rel).is_absolute() or ".." in parts:
            raise LockdownError(f"--patch {path} changes {rel!r}, outside the app tree: name files relative "
                                f"to it, as `patch -p1` run in the app tree reads them")
    return Remediation(kind="diff", content=text, file=", ".join(files),
                       description=f"{PATCH_MARK}{path.resolve()}", checked="")


def checked(target: Target, patches: list[Remediation], say=print,
            before: list[Remediation] = ()) -> list[Remediation]:
    """`patches` checked against `target` as prepared (prepared first if need be): the diffs
    with `check_patches` on its app tree, the SQL with `check_sql` on a copy of its database;
    in the order given, each with `checked` saying how."""
    prepared = prepare(target, say=say)
    diffs = [p for p in patches if p.kind != "sql"]
    sqls = [p for p in patches if p.kind == "sql"]
    # the base's diffs are checked with SQL alone too: a stale one is one line here, not a failed arm
    done_diffs = iter(check_patches(prepared.app, diffs, target.name, before)
                      if diffs or any(r.kind == "diff" for r in before) else [])
    done_sqls = iter(check_sql(prepared, sqls, before, say) if sqls else [])
    return [next(done_sqls) if p.kind == "sql" else next(done_diffs) for p in patches]


def check_sql(prepared: Prepared, patches: list[Remediation], before: list[Remediation] = (),
              say=print) -> list[Remediation]:
    """The user's SQL run, in order, on a private copy of the prepared database (after the
    base's SQL, `before`), in a directory beside the prepared copies, removed afterwards:
    LockdownError with MariaDB's own error for the first statement that fails. The copy is
    thrown away; the statements run again on each arm's copy that gets them."""
    target = prepared.target
    first = patches[0].description
    if not target.database or prepared.datadir is None:
        raise LockdownError(f"{first} is SQL, and {target.name} has no database to run it on: give a "
                            f"unified diff of the app's files")
    on_top = " with the verified fixes applied" if any(r.kind == "sql" for r in before) else ""
    say(f"[patch] running {len(patches)} SQL patch(es) on a copy of {target.name}'s database{on_top}")
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}-sql-check-", dir=prepared.root.parent))
    try:
        work.chmod(0o711)       # the servers' account passes through to its database directory
        with database_copy(prepared.datadir, work) as db:
            for r in [*before, *patches]:
                if r.kind != "sql":
                    continue
                try:
                    db.sql(r.content, database=target.database)
                except PhaseFailed as e:
                    why = str(e).split("refused a statement: ", 1)[-1]
                    if r not in patches:
                        raise UsageError(f"--on-top-of: the base's SQL fails on a copy of {target.name}'s "
                                            f"database ({why}): verify again") from None
                    raise UsageError(f"{r.description} fails on a copy of {target.name}'s database{on_top} "
                                        f"({why}); nothing was run on any other copy: correct the statements "
                                        f"and run again") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return [replace(r, checked=f"runs without error on a copy of the prepared database{on_top}")
            for r in patches]


def check_patches(app: Path, patches: list[Remediation], target: str,
                  before: list[Remediation] = ()) -> list[Remediation]:
    """`patches` checked against a link copy of the prepared app tree `app` (beside the
    prepared tree, so the links are cheap; removed afterwards), after the diffs `before` (a
    run's verified fixes: `--on-top-of`), each with `checked` saying so; LockdownError naming
    the first that does not apply, and the tree to make it against."""
    on_top = " with the verified fixes applied" if before else ""

    def refused(r: Remediation, why: str) -> str:
        if r not in patches:
            return base_refused(r, why)
        return (f"{r.description} does not apply to {target}'s app tree{on_top} ({why}); make the diff "
                f"against the files in {app}{on_top}, with paths as `patch -p1` run there reads them")
    work = Path(tempfile.mkdtemp(prefix=f".{target}-patch-check-", dir=app.parent.parent))
    try:
        patched_tree(app, [*before, *patches], work / "app", refused)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    n = len(patches)
    return [replace(r, checked=f"applies with patch -p1 to a copy of the prepared app tree{on_top}"
                               + (f" (patch {i} of {n}, after the ones before it)" if n > 1 else ""))
            for i, r in enumerate(patches, 1)]
