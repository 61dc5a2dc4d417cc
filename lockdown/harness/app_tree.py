"""A run's copy of the prepared app tree: hard links, and files made the run's own before a
remediation writes them.

A full copy is slow here (bench/app_copy.py: a median 9 s for minicms, 13 s for MediaWiki;
about 1 s as links, docs/verify.md), and `verify` serves the patched app three times. So
every run links the tree, and a writer gives a file an inode of its own before writing it:
a diff's files and a recipe step's declared `writes` through `own`, a step that declares
nothing through `own_all`; the argument probe and the targets' configure scripts write a new
file and rename it over. Writing through a shared inode would change the prepared tree, and
every later run with it; `written_through` catches a writer that did.
"""
from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

from ..errors import LockdownError


def link_copy(src: Path, dest: Path) -> None:
    """`dest` as a tree of hard links to `src`'s files (directories are the run's own, so new
    files and deletions stay in the copy). Links cannot cross file systems: a run directory
    on another one than the prepared tree (`-o /tmp/x` with /tmp a tmpfs) gets a full copy,
    whose files are its own already."""
    argv = ["cp", "-al" if _can_link(src, dest.parent) else "-a", str(src), str(dest)]
    run = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "LC_ALL": "C"})
    if run.returncode != 0:
        shutil.rmtree(dest, ignore_errors=True)
        problem = (run.stderr.strip().splitlines() or ["no message"])[-1]
        raise LockdownError(f"cannot copy the application into {dest} ({problem}); free some space "
                            f"or choose a run directory on another file system")


def _can_link(src: Path, dest_dir: Path) -> bool:
    """Whether a file of `src` can be hard-linked into `dest_dir` (not across file systems, nor
    across mount points of one)."""
    probe = next((Path(d, f) for d, _, files in os.walk(src) for f in files
                  if not os.path.islink(os.path.join(d, f))), None)
    if probe is None:
        return True
    link = dest_dir / f".lockdown-link-test-{os.getpid()}"
    try:
        os.link(probe, link)
    except OSError as e:
        return e.errno != errno.EXDEV
    link.unlink()
    return True


def own(root: Path, rel: str) -> Path:
    """Make `root/rel` the copy's own: a new inode with the same bytes, mode and owner for a
    file, and for each file under it for a directory, so writing them cannot reach the tree
    they were linked from. A path that does not exist yet needs nothing; one that leads out of
    `root` is refused."""
    path = root / rel
    if not path.resolve().is_relative_to(root.resolve()):
        raise LockdownError(f"{rel!r} is outside the app tree; a remediation may only change the app's own files")
    if path.is_dir() and not path.is_symlink():
        for dirpath, _, files in os.walk(path):
            for name in files:
                _own_file(Path(dirpath, name))
    elif path.exists():
        _own_file(path)
    return path


def _own_file(path: Path) -> None:
    st = path.lstat()
    if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
        tmp = path.with_name(f".{path.name}.lockdown-own")
        shutil.copy2(path, tmp)
        os.chown(tmp, st.st_uid, st.st_gid)
        os.replace(tmp, path)


def own_all(root: Path) -> None:
    """Make every file under `root` the copy's own (for a step that names nothing it writes).
    One `cp -a` of the linked tree and a swap: faster than a file at a time (MediaWiki: 12 s
    against 16 s), and the files' own changes so far come along."""
    fresh, linked = root.with_name(root.name + ".own"), root.with_name(root.name + ".linked")
    subprocess.run(["cp", "-a", str(root), str(fresh)], check=True)
    root.rename(linked)
    fresh.rename(root)
    shutil.rmtree(linked)


def written_through(root: Path, since_ns: int) -> list[str]:
    """Files under `root` still linked to the tree they were copied from but changed after
    `since_ns` (time.time_ns() before the copy): a writer that did not `own` them first
    changed the original too. Linking keeps a file's mtime, so any later mtime is a write."""
    out = []
    for dirpath, _, files in os.walk(root):
        for name in files:
            st = os.lstat(os.path.join(dirpath, name))
            if stat.S_ISREG(st.st_mode) and st.st_nlink > 1 and st.st_mtime_ns > since_ns:
                out.append(os.path.relpath(os.path.join(dirpath, name), root))
    return sorted(out)


HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")


def diff_files(diff: str) -> list[str]:
    """The files a unified diff changes, as `patch -p1` names them (first path part dropped).
    Hunk bodies are skipped by their line counts: a removed line `-- x` reads `--- x` there."""
    out: list[str] = []
    old_left = new_left = 0
    for line in diff.splitlines():
        if old_left > 0 or new_left > 0:
            tag = line[:1]
            old_left -= tag in (" ", "-", "")
            new_left -= tag in (" ", "+", "")
            continue
        hunk = HUNK.match(line)
        if hunk:
            old_left = int(hunk.group(1) or 1)
            new_left = int(hunk.group(2) or 1)
        elif line.startswith(("--- ", "+++ ")):
            name = line[4:].split("\t", 1)[0].strip()
            rel = name.split("/", 1)[-1]
            if name != "/dev/null" and rel not in out:
                out.append(rel)
    return out
