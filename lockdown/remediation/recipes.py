"""Diff remediations from the recipe catalogue (recipes.toml), checked by applying each diff
with patch(1) to a copy of the file."""
from __future__ import annotations

import difflib
import re
import subprocess
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from ..analyzers.findings import Finding, Remediation
from ..targets.config import is_patchable

CATALOGUE = Path(__file__).with_name("recipes.toml")


@dataclass
class Recipe:
    finding: str
    file: str
    replace: str
    source: str
    match: str | None = None
    regex: str | None = None
    steps: list = field(default_factory=list)
    writes: list | None = None   # what the steps write (files, directories); unset: anything
    when: dict = field(default_factory=dict)

    def edit(self, text: str) -> str | None:
        """The file's new text, or None when the recipe does not apply to it."""
        if self.regex is not None:
            new, n = re.subn(self.regex, lambda _m: self.replace, text, count=1)
            return new if n else None
        if self.match is not None and self.match in text:
            return text.replace(self.match, self.replace, 1)
        return None


def load_recipes(path: Path = CATALOGUE) -> list[Recipe]:
    return [Recipe(**r) for r in tomllib.loads(path.read_text())["recipe"]]


def unified_diff(rel: str, old: str, new: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        f"a/{rel}", f"b/{rel}"))


PREPARED_TREE = "the prepared app tree"


def check_applies(app_dir: Path, rel: str, diff: str, tree: str = PREPARED_TREE) -> str:
    """Apply the diff with patch(1) to a copy of the file; return how it was checked (`tree`:
    what `app_dir` is, in words)."""
    with tempfile.TemporaryDirectory(prefix="lockdown-patch-") as tmp:
        copy = Path(tmp) / rel
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes((app_dir / rel).read_bytes())
        run = subprocess.run(["patch", "-p1", "--forward", "--batch", "-s"], input=diff, text=True,
                             cwd=tmp, capture_output=True)
        if run.returncode != 0:
            raise ValueError(f"patch does not apply to {rel}: {(run.stdout + run.stderr).strip()[:200]}")
    return f"applies cleanly with patch -p1 to a copy of {rel} from {tree}"


def propose(finding: Finding, patchable: list[str], app_dir: Path, recipes: list[Recipe],
            tree: str = PREPARED_TREE) -> list[Remediation]:
    out = []
    for r in recipes:
        if r.finding != finding.id or not is_patchable(r.file, patchable):
            continue
        if any(finding.details.get(k) != v for k, v in r.when.items()):
            continue
        path = app_dir / r.file
        if not path.is_file():
            continue
        old = path.read_text(errors="replace")
        new = r.edit(old)
        if new is None or new == old:
            continue
        diff = unified_diff(r.file, old, new)
        out.append(Remediation(kind="diff", content=diff, checked=check_applies(app_dir, r.file, diff, tree),
                               file=r.file, steps=[list(s) for s in r.steps],
                               writes=list(r.writes) if r.writes is not None else None,
                               description=f"{r.source}", origin="recipe"))
    return out
