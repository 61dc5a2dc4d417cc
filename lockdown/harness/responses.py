"""Do both arms of an A/B comparison serve the same pages? A fix that makes a page faster by
making it different (a cache that returns stale data, a module that no longer loads) is not
the fix it claims to be, so `verify` fetches every URL of the target from both arms after
their warmup and compares the bodies.

Parts of a page that change by themselves (request ids, timings, cache timestamps) are masked
with the target's `[verify] volatile` regular expressions; each arm's own address (port) is
masked too, as written and URL-encoded. What is left must be byte-identical. A page that
differs between two views of the before arm has a part that changes by itself which the
target does not declare: it is reported as unstable instead of compared.
"""
from __future__ import annotations

import re
from urllib.parse import quote

from .bench import fetch

MASK = "\u2026"
CONTEXT = 60


def normalize(body: bytes, base_url: str, volatile: tuple[str, ...]) -> str:
    """The body as text with the arm's address and the volatile parts masked."""
    text = body.decode("utf-8", "replace")
    host = base_url.rstrip("/").split("://", 1)[-1]
    encoded = quote(host, safe="")
    for form in (host, encoded, encoded.lower()):   # as written, and URL-encoded (oEmbed links)
        text = text.replace(form, "HOST")
    for rx in volatile:
        text = re.sub(rx, MASK, text, flags=re.S)
    return text


def first_difference(a: str, b: str) -> dict:
    """Where two texts part, with a little context from each."""
    i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    start = max(0, i - CONTEXT)
    return {"offset": i, "before": a[start:i + CONTEXT], "after": b[start:i + CONTEXT]}


def compare_pages(before: tuple[int, str], after: tuple[int, str]) -> dict:
    """One URL's verdict from the (status, normalized body) of each arm."""
    (sa, ta), (sb, tb) = before, after
    row = {"status_before": sa, "status_after": sb, "same": sa == sb and ta == tb}
    if not row["same"] and ta != tb:
        row["first_difference"] = first_difference(ta, tb)
    return row


def compare_arms(stacks: dict, paths: list[str], volatile: tuple[str, ...]) -> dict:
    """Fetch each path twice from the before arm and once from the after arm (`stacks`: arm ->
    running Stack) and compare. A page that differs between the two views of the same arm
    changes by itself (an undeclared volatile part): it is marked unstable, not different."""
    def get(arm: str, path: str) -> tuple[int, str]:
        stack = stacks[arm]
        try:
            status, body = fetch(stack.base_url + path)
        except OSError as e:
            status, body = 0, str(e).encode()
        return status, normalize(body, stack.base_url, volatile)

    rows = []
    for path in dict.fromkeys(paths):
        first, again, after = get("before", path), get("before", path), get("after", path)
        if first != again:
            rows.append({"url": path, "same": None, "unstable": True,
                         "status_before": first[0], "status_after": after[0],
                         "views_differ": first_difference(first[1], again[1])})
            continue
        rows.append({"url": path, **compare_pages(again, after)})
    return {"urls": len(rows), "same": sum(r["same"] is True for r in rows),
            "unstable": sum(r["same"] is None for r in rows),
            "volatile_patterns": len(volatile), "pages": rows}
