"""The weighted URL list from access logs in the combined format (nginx's default `combined`,
Apache's `%h %l %u %t \"%r\" %>s %b \"%{Referer}i\" \"%{User-agent}i\"`).

Counted: GET requests answered 2xx; left out: static files (by extension, or a file the docroot
holds that is not PHP), anything else (POST, redirects, errors, malformed lines, counted apart).
The query string is kept: `/?p=42` and `/?p=43` are pages of their own. The list is the top
paths by count until they cover `COVER` of the counted requests (at most `MAX_URLS`), each
weighted by its count, scaled down only when the target file's bounds need it (a weight at most
1000, their sum at most 10000), so that the proportions are the log's.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from ..targets.config import MAX_TOTAL_WEIGHT, MAX_WEIGHT

COMBINED = re.compile(r'^\S+ \S+ \S+ \[[^\]]*\] "(?P<method>[A-Z]+) (?P<target>\S+)(?: [^"]*)?" (?P<status>\d{3}) ')
STATIC = {"css", "js", "mjs", "map", "png", "jpg", "jpeg", "gif", "webp", "avif", "svg", "ico", "bmp", "tif",
          "tiff", "woff", "woff2", "ttf", "otf", "eot", "mp3", "mp4", "webm", "ogg", "ogv", "wav", "flac", "pdf",
          "zip", "gz", "tgz", "bz2", "xz", "7z", "rar", "txt", "csv", "swf", "json", "xml", "html", "htm"}
COVER = 0.95
MAX_URLS = 50


@dataclass
class LogCounts:
    pages: Counter = field(default_factory=Counter)      # path with query -> count
    static: int = 0
    other: int = 0           # not GET, not 2xx
    unreadable: int = 0      # not the combined format

    @property
    def lines(self) -> int:
        return sum(self.pages.values()) + self.static + self.other + self.unreadable


def is_static(target: str, docroot_files: frozenset = frozenset()) -> bool:
    """Whether a request target is a static file: by its extension, or because the docroot
    holds it as a file that is not PHP (`docroot_files`: relative paths)."""
    path = target.split("?", 1)[0]
    suffix = PurePosixPath(path).suffix.lower().lstrip(".")
    if suffix in STATIC:
        return True
    rel = path.lstrip("/")
    return bool(rel) and rel in docroot_files and suffix != "php"


def count(lines, docroot_files: frozenset = frozenset(), into: LogCounts | None = None) -> LogCounts:
    counts = into or LogCounts()
    for line in lines:
        m = COMBINED.match(line)
        if m is None:
            counts.unreadable += 1
            continue
        target = m["target"]
        if (m["method"] != "GET" or not m["status"].startswith("2") or not target.startswith("/")
                or "#" in target):
            counts.other += 1
        elif is_static(target, docroot_files):
            counts.static += 1
        else:
            counts.pages[target] += 1
    return counts


def weighted(pages: Counter, cover: float = COVER, most: int = MAX_URLS) -> list[tuple[str, int, int]]:
    """[(path, weight, count)]: the top paths until `cover` of the requests (at most `most`),
    ties by path; weights are the counts, scaled by one factor when the bounds need it (each at
    least 1)."""
    total = sum(pages.values())
    if not total:
        return []
    ranked = sorted(pages.items(), key=lambda kv: (-kv[1], kv[0]))
    kept, covered = [], 0
    for path, n in ranked:
        if len(kept) >= most or (kept and covered >= cover * total):
            break
        kept.append((path, n))
        covered += n
    top, kept_total = kept[0][1], sum(n for _, n in kept)
    # room for each weight rounded up by half a unit, or raised to 1
    scale = min(1.0, MAX_WEIGHT / top, (MAX_TOTAL_WEIGHT - len(kept)) / kept_total)
    return [(path, max(1, math.floor(n * scale + 0.5)) if scale < 1 else n, n) for path, n in kept]
