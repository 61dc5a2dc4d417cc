"""Files the warmup wrote, which OPcache does not cache yet.

OPcache compiles but does not cache a file modified less than `opcache.file_update_protection`
seconds (PHP's default: 2) before the request that includes it. An application that builds a
PHP cache file on its first request (minicms-clean's cache/l10n_en.php, template or container
caches) therefore had that file compiled again on every captured request when the app is fast:
its whole capture fits in those two seconds after the warmup (minicms-clean: 2 scripts compiled
per request, which the workers' OPcache counters showed and production would not see). The
profile waits the protection out when the warmup wrote such files, and serves each URL once
more, so the capture sees the cache the application has a few seconds after it starts.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from ..php_ini import is_off

DEFAULT_PROTECTION_S = 2.0      # PHP's default opcache.file_update_protection
MARGIN_S = 0.2


def protection_seconds(overrides: dict) -> float:
    """The run's opcache.file_update_protection (an override, else PHP's default)."""
    try:
        return max(0.0, float(str(overrides.get("opcache.file_update_protection", DEFAULT_PROTECTION_S)).strip()))
    except ValueError:
        return DEFAULT_PROTECTION_S


def written_since(roots: list[Path], since: float, limit: int = 200_000) -> list[tuple[float, Path]]:
    """(mtime, path) of the regular files under `roots` modified at or after `since` (Unix
    time), newest first. At most `limit` entries are looked at (a safety bound on huge trees)."""
    found: list[tuple[float, Path]] = []
    seen = 0
    stack = [r for r in roots if r.is_dir()]
    while stack and seen < limit:
        top = stack.pop()
        try:
            entries = list(os.scandir(top))
        except OSError:
            continue
        for e in entries:
            seen += 1
            try:
                if e.is_dir(follow_symlinks=False):
                    stack.append(Path(e.path))
                elif e.is_file(follow_symlinks=False):
                    m = e.stat(follow_symlinks=False).st_mtime
                    if m >= since:
                        found.append((m, Path(e.path)))
            except OSError:
                continue
    return sorted(found, reverse=True)


def pending(root: Path, served_from: float, warmed_from: float, protection: float) -> list[tuple[float, Path]]:
    """The files of `root` that may not be in OPcache yet: changed within `protection` before
    the app was first served (`served_from`) or since; none when all of them were already old
    enough as the warmup began (`warmed_from`), whose first requests then cached them."""
    written = written_since([root], served_from - protection - MARGIN_S)
    if not written or written[0][0] + protection + MARGIN_S <= warmed_from:
        return []
    return written


def wait_needed(files: list[tuple[float, Path]], protection: float, now: float | None = None) -> float:
    """Seconds to wait until the newest of `files` is older than the protection."""
    if not files or protection <= 0:
        return 0.0
    now = time.time() if now is None else now
    return max(0.0, files[0][0] + protection + MARGIN_S - now)


def young_files(app_dir: Path, overrides: dict, served_from: float,
                warmed_from: float) -> tuple[list[tuple[float, Path]], float] | None:
    """After a warmup: the app's files OPcache may still not cache, and the seconds to wait
    until it will; None when OPcache is off or no file is that young."""
    if is_off(overrides.get("opcache.enable", "1")):
        return None
    protection = protection_seconds(overrides)
    written = pending(app_dir, served_from, warmed_from, protection)
    return (written, wait_needed(written, protection)) if written else None


def settled_line(app_dir: Path, written: list[tuple[float, Path]], wait: float, statuses: dict) -> str:
    """The progress line saying what was waited for."""
    newest = written[0][1]
    shown = newest.relative_to(app_dir) if newest.is_relative_to(app_dir) else newest
    return (f"[warmup] {len(written)} file(s) of the app tree changed just before it was served or since "
            f"(newest {shown}), which OPcache caches only once they are older than "
            f"opcache.file_update_protection: waited {wait:.1f} s, then served each URL once more: {statuses}")
