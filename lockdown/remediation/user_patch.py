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
"""
from __future__ import annotations

import shutil
import tempfile
from dataclasses import replace
from pathlib import Path, PurePosixPath

from ..analyzers.findings import Remediation
from ..errors import LockdownError
from ..harness.app_tree import diff_files
from ..harness.prepare import prepare
from ..targets.config import Target
from .base import PATCH_MARK, base_refused, patched_tree


def load_patch(path: Path) -> Remediation:
    """The diff in `path` as a remediation (kind diff; `file`: the files it changes), or one
    line saying why it cannot be one."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise LockdownError(f"cannot read --patch {path}: {getattr(e, 'strerror', None) or e}")
    files = diff_files(text)
    if not files:
        raise LockdownError(f"--patch {path} is not a unified diff (no ---/+++ file lines): make it with "
                            f"`diff -u` or `git diff` against the app tree")
    for rel in files:
        parts = PurePosixPath(rel).parts
        if PurePosixPath(rel).is_absolute() or ".." in parts:
            raise LockdownError(f"--patch {path} changes {rel!r}, outside the app tree: name files relative "
                                f"to it, as `patch -p1` run in the app tree reads them")
    return Remediation(kind="diff", content=text, file=", ".join(files),
                       description=f"{PATCH_MARK}{path.resolve()}", checked="")


def checked(target: Target, patches: list[Remediation], say=print,
            before: list[Remediation] = ()) -> list[Remediation]:
    """`check_patches` against `target`'s prepared app tree (prepared first if need be)."""
    return check_patches(prepare(target, say=say).app, patches, target.name, before)


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
