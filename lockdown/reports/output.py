"""Writing report files so that a failure never leaves half a file, nor a temporary one."""
from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path
from typing import Mapping

from ..errors import LockdownError, write_failed
from ..rundir.store import write_text_atomic as write_whole


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write to a temporary file beside `path` and rename it into place. A symlink is
    followed (its target is replaced, the link stays), and a path that is not a regular file
    (/dev/stdout, a pipe) is written to directly: renaming over it would replace the device
    node or link itself."""
    given, path = str(path), Path(path)
    if not given or not path.name or path.name in (".", ".."):
        raise LockdownError(f"cannot write {given!r}: not a file name; choose another -o")
    if writes_through(path):
        return _write_through(path, text)
    if path.is_symlink():
        path = Path(os.path.realpath(path))
    return write_whole(path, text)


def writes_through(path: Path) -> bool:
    """Whether `path` is written to in place rather than renamed over: anything under /dev or
    /proc (/dev/stdout, /dev/fd/3) and anything there that is neither a regular file nor a
    directory (a pipe, a device). Links are followed, /dev/stdout's to the pipe too; nothing
    there yet (or a link to nothing yet) is a new regular file."""
    if str(Path(path).absolute()).startswith(("/dev/", "/proc/")):
        return True
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def _write_through(path: Path, text: str) -> Path:
    """A character device or a pipe: no rename, and no half-file to leave behind. Appended:
    /dev/stdout may be a file the shell opened (`>` emptied it already, `>>` must keep it)."""
    try:
        with open(path, "a", encoding="utf-8", newline="\n") as f:
            f.write(text)
    except BrokenPipeError:
        pass                                  # the reader stopped early (`| head`): its choice
    except OSError as e:
        raise write_failed(path, e) from None
    return path


def write_json_atomic(path: str | os.PathLike, data, indent: int | None = 2) -> Path:
    return write_text_atomic(path, json.dumps(data, indent=indent, ensure_ascii=False) + "\n")


def write_dir_atomic(dest: str | os.PathLike, files: Mapping[str, bytes | str],
                     mtimes: Mapping[str, float] | None = None) -> Path:
    """Create directory `dest` holding `files` (path relative to `dest` -> contents; str is
    written as UTF-8; subdirectories are created), each with its time from `mtimes` if given.

    Everything is written into a hidden staging directory beside `dest`, which is then
    renamed into place (over an empty directory too), so `dest` is never half-written; on
    any failure, Ctrl-C included, the staging directory is removed. A `dest` that exists and
    is not empty makes the rename fail: check it first for a better message."""
    dest = Path(dest)
    for rel in files:
        parts = Path(rel).parts
        if not parts or Path(rel).is_absolute() or ".." in parts:
            # names come from the input (a finding's key, a request id): a damaged one is bad input
            raise LockdownError(f"cannot write {dest}: {rel!r} is not a file name inside it (a "
                                f"damaged key or id in the input?)")
    staging = dest.parent / f".{dest.name}.partial-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        staging.mkdir()
        for rel, data in files.items():
            path = staging / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
            if mtimes and mtimes.get(rel) is not None:
                os.utime(path, (mtimes[rel], mtimes[rel]))
        staging.rename(dest)
    except OSError as e:
        raise write_failed(dest, e) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return dest
