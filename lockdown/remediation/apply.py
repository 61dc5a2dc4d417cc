"""Apply remediations to a running stack's own copies: diffs to its private app tree, SQL to
its database copy, steps in its app tree; php.ini lines become overrides before it starts.

A stack's app tree is hard links to the prepared tree: every file is made the run's own
(`Stack.own`, harness/app_tree.py) before anything here writes it, so nothing done here can
reach the prepared tree or the user's files.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

from ..analyzers.findings import Remediation
from ..errors import UsageError
from ..harness.app_tree import diff_files
from ..harness.prepare import run_target_command
from ..harness.stack import Stack

INI_LINE = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*=\s*(.*?)\s*$")


REMOVE_LINE = re.compile(r"^\s*;\s*remove:\s*(.+?)\s*$")


def ini_changes(remediations: list[Remediation], overrides: dict) -> dict:
    """`overrides` (the run's php.ini overrides) changed as the `ini` remediations say: their
    KEY=VALUE lines set, their `; remove: KEY=VALUE` lines (an extension to unload) dropped."""
    out = dict(overrides)
    for r in remediations:
        if r.kind != "ini":
            continue
        for line in r.content.splitlines():
            removed = REMOVE_LINE.match(line)
            if removed:
                m = INI_LINE.match(removed.group(1))
                if not m or out.get(m.group(1)) != m.group(2).strip('"'):
                    raise UsageError(f"cannot verify {line.strip()!r}: lockdown can only unload an "
                                        f"extension it loaded itself (--php-ini); remove it from the "
                                        f"system php.ini and run again")
                del out[m.group(1)]
                continue
            if not line.strip() or line.lstrip().startswith((";", "#", "[")):
                continue
            m = INI_LINE.match(line)
            if not m:
                raise UsageError(f"ini remediation line {line!r} is not KEY = VALUE")
            out[m.group(1)] = m.group(2).strip('"')
    return out


PATCH = ["patch", "-p1", "--batch", "--no-backup-if-mismatch"]


def apply_diff(stack: Stack, r: Remediation, log: Path, say=print) -> None:
    """Patch the stack's copy. A diff whose change is already there (an earlier fix of the same
    verification made it: two findings, one remedy) is skipped and said so; any other failure
    stops the verification."""
    files = diff_files(r.content)
    for rel in files:
        stack.own(rel)
    run = subprocess.run([*PATCH, "--forward"], input=r.content, text=True, cwd=stack.app_dir,
                         capture_output=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as out:
        out.write(run.stdout + run.stderr)
    if run.returncode == 0:
        return
    for rel in files:
        (stack.app_dir / f"{rel}.rej").unlink(missing_ok=True)
    applied = subprocess.run([*PATCH, "--reverse", "--dry-run", "--fuzz=0"], input=r.content, text=True,
                             cwd=stack.app_dir, capture_output=True)
    if applied.returncode == 0:
        say(f"[remedy] the diff against {r.file} is already applied (an earlier fix made the same change)")
        return
    raise UsageError(f"the diff against {r.file} does not apply to this run's copy "
                        f"(patch exit {run.returncode}, log {log}); re-run `lockdown run` "
                        f"if the target changed since, or verify conflicting fixes one at a time")


def apply_steps(stack: Stack, r: Remediation, say) -> None:
    """Run a diff's or SQL's follow-up commands (argv lists, e.g. a cache rebuild) in the app
    tree. An ini remediation's steps are an operator's words (restart php-fpm): the stack
    starts php-fpm with the new settings anyway."""
    steps = [s for s in r.steps if isinstance(s, list)]
    if steps and r.writes is None:
        say("[remedy] the steps name nothing they write: the whole app tree becomes this run's own copy")
        stack.own_all()
    elif steps:
        for rel in r.writes:
            stack.own(rel)
    env = stack.app_env()
    for i, step in enumerate(steps):
        say(f"[remedy] {' '.join(step)}")
        run_target_command(stack.procs, stack.target, f"remedy-step-{i + 1}", tuple(step), env, 900,
                           cwd=stack.app_dir)


def applied(remediations: list[Remediation]) -> list[dict]:
    """What a capture was patched with, as its manifest records it (target.applied)."""
    return [{"kind": r.kind, "file": r.file, "description": r.description} for r in remediations]


def remedy(remediations: list[Remediation], say=print):
    """The `StackOptions.remedy` callback applying `remediations` (ini lines excepted: pass
    `ini_changes()` as the stack's php_ini)."""
    def apply(stack: Stack) -> None:
        for r in remediations:
            if r.kind == "diff":
                say(f"[remedy] patch -p1 {r.file} in {stack.app_dir}")
                apply_diff(stack, r, stack.run_dir / "logs" / "remedy-patch.log", say)
            elif r.kind == "sql":
                if stack.db is None:
                    raise UsageError("an SQL remediation needs the target's database, and this "
                                        "target has none")
                say(f"[remedy] SQL on this run's copy of {stack.db_name}")
                stack.db.sql(r.content, database=stack.db_name)
            elif r.kind != "ini":
                raise UsageError(f"unknown remediation kind {r.kind!r}")
            if r.steps and r.kind != "ini":
                apply_steps(stack, r, say)
    return apply
