"""The next round of a lockdown: `lockdown run TARGET --on-top-of VERIFIED` serves TARGET with
fixes already verified (a `lockdown verify` result: DIR/verify/all, DIR/verify/KEY) applied to
every copy it starts, so that what it finds is what is left once they are in.

Once the first fixes are in, the bottleneck moves: on WordPress, `verify --all` of the two
memoizations (+23.8%) re-captured two new repeated calls. A second `run` of the unpatched
target would find the first ones again; this one starts from the patched state. Its bench,
capture, argument probe and patch checks all see the patched copy, its findings' patches are
made against the patched files, and `lockdown verify` of its findings applies the base to
both arms, so each fix is measured against the site as the earlier round left it. Rounds
chain: a base's own base comes along.

Only a confirmed verification is a base: a fix that did not measure faster, or whose finding
stayed, is not a state to build on.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from ..analyzers.findings import Remediation, remediation_names
from ..errors import LockdownError, UsageError
from ..harness.app_tree import diff_files, link_copy, own
from .apply import PATCH

VERIFY_FILE = "verify.json"


PATCH_MARK = "--patch "      # a user's own diff (`--patch FILE`): its Remediation.description


def own_patch_path(r) -> str | None:
    """The file of a user's own diff (`--patch FILE`), from a Remediation or its JSON dict;
    None for lockdown's own remediations."""
    desc = str((r.get("description") if isinstance(r, dict) else r.description) or "")
    return desc[len(PATCH_MARK):] if desc.startswith(PATCH_MARK) else None


@dataclass
class Base:
    """What a run starts from: fixes confirmed by a verification (earlier rounds' first), the
    php.ini its after arm ran with, and the user's own diffs (`--patch`, last), all applied
    to every copy the run serves and to both arms of its verifications."""
    source: str | None                # the verify result directory the fixes were confirmed in
    remediations: list[Remediation]   # the verified fixes, then the user's patches (own_patch_path)
    php_ini: dict

    def to_json(self) -> dict:
        return {"source": self.source, "php_ini": self.php_ini,
                "remediations": [asdict(r) for r in self.remediations]}

    @classmethod
    def from_json(cls, d) -> "Base | None":
        """A recorded base (findings.json run.base); None when the run had none."""
        if not d:
            return None
        source = d.get("source")
        return cls(str(source) if source is not None else None,
                   [Remediation(**r) for r in d["remediations"]], dict(d["php_ini"]))

    def describe(self) -> str:
        """In words, for the terminal, the reports and bench.json: "the 2 fix(es) verified in
        DIR", "the patch /x/memo.diff", or both joined by "and"."""
        return describe(self.source, self.remediations)


def describe(source: str | None, remediations: list) -> str:
    """`Base.describe` from its parts; `remediations` as Remediation objects or JSON dicts."""
    patches = [p for p in map(own_patch_path, remediations) if p is not None]
    fixes = len(remediations) - len(patches)
    parts = [f"the {fixes} fix(es) verified in {source}"] if fixes else []
    if patches:
        parts.append(f"the patch{'es' if len(patches) > 1 else ''} {', '.join(patches)}")
    return " and ".join(parts) or "nothing"


def applied_words(remediations: list) -> str:
    """The fix a verification applied: "diff config.php", or for the user's own diffs (verify
    --patch) "the patch /x/memo.diff (diff config.php)"."""
    names = remediation_names(remediations)
    if any(own_patch_path(r) for r in remediations):
        return f"{describe(None, remediations)} ({names})"
    return names


def with_patches(base: Base | None, patches: list[Remediation]) -> Base | None:
    """`base` with the user's checked patches applied after its fixes (or those alone)."""
    if not patches:
        return base
    if base is None:
        return Base(None, list(patches), {})
    return Base(base.source, base.remediations + list(patches), base.php_ini)


def load_base(path: Path, target_name: str) -> Base:
    """The confirmed verification at `path` (a verify result directory, or a run directory,
    meaning its verify/all) as the base of a run of `target_name`."""
    where = path / VERIFY_FILE if (path / VERIFY_FILE).is_file() else path / "verify" / "all" / VERIFY_FILE
    hint = ("give a `lockdown verify` result directory (DIR/verify/all or DIR/verify/KEY) of a confirmed "
            "verification")
    try:
        data = json.loads(where.read_text())
        remediations = [Remediation(**r) for r in data["remediations"]]
        earlier = [Remediation(**r) for r in data.get("base_remediations") or []]
        after_ini = dict(data["php_ini"]["after"])
        target, confirmed = data["target"], data["confirmed"]
    except FileNotFoundError:
        raise LockdownError(f"--on-top-of {path}: no {VERIFY_FILE} there or in its verify/all; {hint}")
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise LockdownError(f"--on-top-of {path}: {where} is damaged ({type(e).__name__}: {e}); "
                            f"verify again, or {hint}")
    if target != target_name:
        raise LockdownError(f"--on-top-of {path}: those fixes were verified on {target!r}, not {target_name!r}")
    if not confirmed:
        raise LockdownError(f"--on-top-of {path}: that verification did not confirm its fixes (not faster, or "
                            f"a finding stayed); build only on confirmed fixes")
    return Base(str(where.parent.resolve()), earlier + remediations, after_ini)


def patched_tree(app: Path, remediations: list[Remediation], dest: Path, refused) -> Path:
    """`dest`: a copy of the prepared app tree `app` with the diffs among `remediations`
    applied in order, for making and checking patches against the files as those leave them.
    The copy is links, each patched file made its own first; SQL and a diff's follow-up steps
    (a cache rebuild) do not change source files and are not run here. A diff that does not
    apply raises LockdownError(`refused(remediation, patch's last line)`)."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    link_copy(app, dest)
    for r in remediations:
        if r.kind != "diff":
            continue
        for rel in diff_files(r.content):
            own(dest, rel)
        # rejects discarded (-r -): the copy is removed, and "saving rejects to file" would mislead
        done = subprocess.run([*PATCH, "--forward", "-r", "-"], input=r.content, text=True, cwd=dest,
                              capture_output=True)
        if done.returncode != 0:
            said = [line for line in (done.stdout + done.stderr).strip().splitlines()
                    if not line.startswith("patching file ")]
            raise UsageError(refused(r, "; ".join(said[-2:]) if said else f"patch exit {done.returncode}"))
    return dest


def base_refused(r: Remediation, why: str) -> str:
    return (f"--on-top-of: the base's diff against {r.file} does not apply to the prepared app tree "
            f"({why}); the target changed since it was verified: verify again")
