"""Resolve a TARGET argument: a built-in name (fixtures/apps/NAME) or a path to a directory."""
from __future__ import annotations

from pathlib import Path

from .. import paths
from ..errors import LockdownError
from .config import Target, load_target


def builtin_names() -> list[str]:
    root = paths.builtin_targets_dir()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "target.toml").is_file())


def resolve(spec: str) -> Target:
    """A path wins when it exists (or contains a slash); otherwise a built-in name."""
    candidate = Path(spec).expanduser()
    if "/" in spec or spec.startswith(".") or candidate.is_dir():
        if not candidate.exists():
            raise LockdownError(f"target {spec!r} not found: no such directory")
        return load_target(candidate)
    builtin = paths.builtin_targets_dir() / spec
    if (builtin / "target.toml").is_file():
        return load_target(builtin)
    names = ", ".join(builtin_names()) or "none"
    raise LockdownError(f"unknown target {spec!r}: give a built-in name ({names}) "
                        f"or a path to a directory with target.toml")
