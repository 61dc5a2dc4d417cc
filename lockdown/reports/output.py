"""Writing report files so that a failure never leaves half a file, nor a temporary one."""
from __future__ import annotations

import json
import os
from pathlib import Path

from ..errors import LockdownError


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write to a temporary file beside `path` and rename it into place."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        tmp.replace(path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise LockdownError(f"cannot write {path}: {e.strerror or e}; choose another -o")
    return path


def write_json_atomic(path: str | os.PathLike, data, indent: int | None = 2) -> Path:
    return write_text_atomic(path, json.dumps(data, indent=indent, ensure_ascii=False) + "\n")
