"""`extends = "../base"` in target.toml: a variant (a control, a configuration) is a small
directory holding its target.toml and only the files it overrides.

The merged target is made as a directory of its own, `$LOCKDOWN_HOME/targets/NAME-HASH/`: the
base's files (its own bases' first), each replaced by the variant's file of the same relative
path, and a target.toml that is the base's with the variant's keys over it. Everything
downstream (the prepared cache key, which hashes the target directory's files; the commands,
which run in it) then sees one ordinary target. A top-level key of the variant replaces the
base's (`urls` whole); a table ([app], [database], [sanity], ...) is merged key by key, except
that [app] `files` and `source` replace each other. `name` is not inherited: it is the
variant's, or its directory's name. A relative `[app] source` of a base is made absolute,
since it is relative to that base's directory.
"""
from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Callable

from .. import paths
from ..errors import LockdownError
from . import toml_out

MAX_DEPTH = 16


def _fail(path: Path, problem: str) -> LockdownError:
    return LockdownError(f"bad target file {path}: {problem}")


def base_of(path: Path, directory: Path, value) -> Path:
    """The directory `extends` names (relative to `directory`, or absolute), which must hold a
    target.toml."""
    if not isinstance(value, str) or not value:
        raise _fail(path, "`extends` must be a string: the base target's directory, relative to "
                          "this one (e.g. \"../base\")")
    base = Path(value).expanduser()
    base = (directory / base) if not base.is_absolute() else base
    try:
        base = base.resolve()
    except (OSError, RuntimeError) as e:
        raise _fail(path, f"extends {value!r} cannot be resolved ({e}); give the base target's directory")
    if not (base / "target.toml").is_file():
        raise _fail(path, f"extends {value!r}: no target at {base} (no target.toml there); give the "
                          f"base target's directory, relative to this one")
    return base


def chain(directory: Path, data: dict, read: Callable[[Path, Path], dict]) -> list[tuple[Path, dict]]:
    """[(directory, its target.toml's data)] from the variant to its last base; a loop or a
    missing base is one line naming the file that extends."""
    out = [(directory, data)]
    seen = [directory]
    while "extends" in out[-1][1]:
        here, here_data = out[-1]
        base = base_of(here / "target.toml", here, here_data["extends"])
        if base in seen or len(seen) >= MAX_DEPTH:
            loop = " -> ".join(str(d) for d in seen + [base])
            raise _fail(directory / "target.toml", f"extends makes a loop ({loop}); a base cannot "
                                                   f"extend its variant")
        seen.append(base)
        out.append((base, read(base / "target.toml", base)))
    return out


def merged_data(links: list[tuple[Path, dict]]) -> dict:
    """The target.toml of the merged target: the last base's, each variant's keys over it."""
    merged: dict = {}
    for directory, data in reversed(links):
        data = {k: v for k, v in data.items() if k not in ("extends", "name")}
        app = data.get("app")
        if isinstance(app, dict) and isinstance(app.get("source"), str) \
                and not Path(app["source"]).expanduser().is_absolute():
            data["app"] = {**app, "source": str((directory / Path(app["source"]).expanduser()).resolve())}
        for key, value in data.items():
            if isinstance(value, dict) and isinstance(merged.get(key), dict) and key != "php_ini":
                base = dict(merged[key])
                if key == "app" and ({"source", "files"} & set(value)):
                    base.pop("source", None)
                    base.pop("files", None)
                merged[key] = {**base, **value}
            elif isinstance(value, dict) and isinstance(merged.get(key), dict):
                merged[key] = {**merged[key], **value}
            else:
                merged[key] = value
    variant_dir, variant = links[0]
    return {"name": variant.get("name", variant_dir.name), **merged}


def merged_files(links: list[tuple[Path, dict]]) -> dict[str, Path]:
    """Relative path -> the file it comes from: every file of the last base, each replaced by
    a nearer variant's file of the same path (symbolic links followed; target.toml aside)."""
    files: dict[str, Path] = {}
    for directory, _ in reversed(links):
        for root, dirs, names in os.walk(directory, followlinks=True):
            dirs.sort()
            for name in sorted(names):
                src = Path(root) / name
                rel = src.relative_to(directory).as_posix()
                if rel != "target.toml" and src.is_file():
                    files[rel] = src
    return files


def materialize(directory: Path, data: dict, read: Callable[[Path, Path], dict]) -> tuple[Path, list[Path]]:
    """The merged target's directory (made once per content, reused after), and the chain of
    directories it was made from, the variant first."""
    links = chain(directory, data, read)
    toml_text = toml_out.dumps(merged_data(links))
    files = merged_files(links)
    h = hashlib.sha256(toml_text.encode())
    for rel, src in sorted(files.items()):
        h.update(rel.encode() + b"\0" + hashlib.sha256(src.read_bytes()).digest())
    name = str(merged_data(links)["name"])[:55]
    dest = paths.home() / "targets" / f"{name}-{h.hexdigest()[:16]}"
    if not (dest / "target.toml").is_file():
        _build(dest, files, toml_text)
    return dest, [d for d, _ in links]


def _build(dest: Path, files: dict[str, Path], toml_text: str) -> None:
    """Write the merged directory under a temporary name, then rename it into place (a second
    command making the same one meanwhile keeps the first's)."""
    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
        for rel, src in files.items():
            out = tmp / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(src.resolve(), out)          # a seed of gigabytes is not copied
            except OSError:
                shutil.copy2(src, out)
        (tmp / "target.toml").write_text(toml_text)
        os.rename(tmp, dest)
    except OSError as e:
        if (dest / "target.toml").is_file():          # made by another command meanwhile
            return
        raise LockdownError(f"cannot make the merged target in {dest}: {e.strerror or e}; set "
                            f"LOCKDOWN_HOME to a writable directory")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
