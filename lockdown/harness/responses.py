"""Do both arms of an A/B comparison serve the same pages? A fix that makes a page faster by
making it different (a cache that returns stale data, a module that no longer loads) is not
the fix it claims to be, so `verify` fetches every URL of the target from both arms after
their warmup and compares the bodies.

Parts of a page that change by themselves (request ids, timings, cache timestamps) are masked
with the target's `[verify] volatile` regular expressions; each arm's own address (port) is
masked too, as written and URL-encoded. What is left must be byte-identical.

Each URL is viewed twice on the before arm (three times when the two views agree and the after
arm's page does not: a clock in whole seconds reads the same in two views taken back to back
and may tick before the after arm's). Where two views differ, the page has a part
that changes by itself which the target does not declare (a nonce, a counter, a clock): those
parts are learned from the two views (`learn_template`) and the after arm's page must equal
the before page everywhere else. A page whose views differ too much to learn from (over
`MAX_LEARNED_SHARE` of it) is reported as unstable instead of compared.
"""
from __future__ import annotations

import re
from difflib import SequenceMatcher
from urllib.parse import quote

from .bench import fetch

MASK = "\u2026"
CONTEXT = 60
MIN_ANCHOR = 8             # fixed text between two learned parts shorter than this joins them
MAX_LEARNED_SHARE = 0.2    # a page changing by itself in more than this is not compared
WORD = re.compile(r"[^\s\"'<>]")             # a changed part is widened to a whole run of these
TOKEN = re.compile(r"[^\s\"'<>]+|[\s\"'<>]+")


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


def _common(a: str, b: str) -> str:
    """The longest common start of two texts."""
    n = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return a[:n]


def first_difference(a: str, b: str) -> dict:
    """Where two texts part, with a little context from each."""
    i = len(_common(a, b))
    start = max(0, i - CONTEXT)
    return {"offset": i, "before": a[start:i + CONTEXT], "after": b[start:i + CONTEXT]}


def compare_pages(before: tuple[int, str], after: tuple[int, str]) -> dict:
    """One URL's verdict from the (status, normalized body) of each arm."""
    (sa, ta), (sb, tb) = before, after
    row = {"status_before": sa, "status_after": sb, "same": sa == sb and ta == tb}
    if not row["same"] and ta != tb:
        row["first_difference"] = first_difference(ta, tb)
    return row


def _word_start(text: str, i: int) -> int:
    while i > 0 and WORD.match(text[i - 1]):
        i -= 1
    return i


def _parts(x: str, y: str) -> list[str]:
    """`x`'s text that `y` shares, in order: a changed part lies between each two. The common
    start and end are cut where a run of WORD characters begins or ends, so a token that
    changed (a nonce, a number, a time such as 12:30:01) is masked whole; the middle is
    compared again token by token."""
    p = _word_start(x, len(_common(x, y)))
    tail = len(_common(x[p:][::-1], y[p:][::-1]))
    while tail and WORD.match(x[len(x) - tail]):
        tail -= 1
    mx, my = x[p:len(x) - tail], y[p:len(y) - tail]
    segments = [x[:p]]
    if mx and my:
        tx, ty = TOKEN.findall(mx), TOKEN.findall(my)
        for op, i1, i2, _, _ in SequenceMatcher(None, tx, ty).get_opcodes():
            if op == "equal":
                segments[-1] += "".join(tx[i1:i2])
            elif segments[-1] or len(segments) == 1:
                segments.append("")
    else:
        segments.append("")
    segments[-1] += x[len(x) - tail:]
    return segments


def learn_template(a: str, b: str) -> list[str] | None:
    """The fixed text of a page seen as `a` and then as `b`, in order; what changed between the
    two views lies between each two items. Line by line, then word by word inside a changed
    block. Fixed text shorter than MIN_ANCHOR between two changed parts joins them. None when
    the changed parts are over MAX_LEARNED_SHARE of the page: too little left to compare."""
    la, lb = a.splitlines(keepends=True), b.splitlines(keepends=True)
    fixed = [""]
    for op, i1, i2, j1, j2 in SequenceMatcher(None, la, lb, autojunk=False).get_opcodes():
        if op == "equal":
            fixed[-1] += "".join(la[i1:i2])
            continue
        first, *rest = _parts("".join(la[i1:i2]), "".join(lb[j1:j2]))
        fixed[-1] += first
        fixed.extend(rest)
    if len(fixed) > 2:
        fixed = [fixed[0], *(f for f in fixed[1:-1] if len(f) >= MIN_ANCHOR), fixed[-1]]
    if len(a) - sum(map(len, fixed)) > MAX_LEARNED_SHARE * len(a):
        return None
    return fixed


def _around(a: str, i: int, b: str, j: int) -> dict:
    """A difference at a[i] / b[j], with context from each (the shape of first_difference)."""
    return {"offset": j, "before": a[max(0, i - CONTEXT):i + CONTEXT],
            "after": b[max(0, j - CONTEXT):j + CONTEXT]}


def _stops(part: str, text: str, at: int) -> dict:
    """Where `text`, from `at` on, stops reading as `part`: from the first place that starts as
    `part` does, as far as it reads the same."""
    lo, hi = 0, len(part)           # the longest start of `part` that is there at all
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if text.find(part[:mid], at) >= 0 else (lo, mid - 1)
    j = text.find(part[:min(lo, MIN_ANCHOR)], at)     # its first place, not its longest
    k = len(_common(part, text[j:]))
    return _around(part, k, text, j + k)


def fit(fixed: list[str], text: str) -> dict | None:
    """Where `text` stops reading as the `fixed` parts in order with anything between them,
    as first_difference shows it; None when it fits."""
    if len(fixed) == 1:
        return None if text == fixed[0] else first_difference(fixed[0], text)
    if not text.startswith(fixed[0]):
        return first_difference(fixed[0], text)
    at = len(fixed[0])
    for part in fixed[1:-1]:
        i = text.find(part, at)
        if i < 0:
            return _stops(part, text, at)
        at = i + len(part)
    last = fixed[-1]
    if text.endswith(last) and len(text) - len(last) >= at:
        return None
    return _stops(last, text, at)


def compare_learned(first: tuple[int, str], again: tuple[int, str], after: tuple[int, str]) -> dict:
    """One URL whose two before views differ: the parts that changed between them are masked
    (learn_template) and the after page must match the rest. Unstable (same None) when the
    views differ too much, or in their status, to learn from."""
    fixed = learn_template(first[1], again[1]) if first[0] == again[0] else None
    views = first_difference(first[1], again[1])
    if fixed is None:
        return {"same": None, "unstable": True, "status_before": first[0], "status_after": after[0],
                "views_differ": views}
    where = fit(fixed, after[1])
    row = {"status_before": again[0], "status_after": after[0],
           "same": where is None and again[0] == after[0], "learned_parts": len(fixed) - 1,
           "views_differ": views}
    if where is not None:
        row["first_difference"] = where
    return row


def compare_arms(stacks: dict, paths: list[str], volatile: tuple[str, ...],
                 reference: str = "before", other: str = "after") -> dict:
    """Fetch each path twice from the `reference` arm and once from the `other` arm (`stacks`:
    arm -> running Stack) and compare. A page that differs between the two views of the same arm
    changes by itself: what changed is learned and masked (compare_learned)."""
    def get(arm: str, path: str) -> tuple[int, str]:
        stack = stacks[arm]
        try:
            status, body = fetch(stack.base_url + path)
        except OSError as e:
            status, body = 0, str(e).encode()
        return status, normalize(body, stack.base_url, volatile)

    rows = []
    for path in dict.fromkeys(paths):
        first, again, after = get(reference, path), get(reference, path), get(other, path)
        if first == again and after != again:
            # a clock in whole seconds reads the same in two views fetched back to back and
            # may have ticked by the other arm's: a third view, taken after it, tells
            later = get(reference, path)
            if later != again:
                first = later
        row = compare_pages(again, after) if first == again else compare_learned(first, again, after)
        rows.append({"url": path, **row})
    return {"urls": len(rows), "same": sum(r["same"] is True for r in rows),
            "unstable": sum(r["same"] is None for r in rows),
            "learned": sum("learned_parts" in r for r in rows),
            "volatile_patterns": len(volatile), "pages": rows}
