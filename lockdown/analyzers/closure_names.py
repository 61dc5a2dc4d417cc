"""Excimer's name of a closure joined to xhprof's: one closure, two names.

The capture names a closure on an Excimer stack by where it was written,
`{closure:/path/File.php(359)}`; tideways_xhprof names it by its scope, `Cls::Ns\\{closure}` (a
method's closure), `Ns\\{closure}` or `{closure}`, all of a class's closures alike. Whatever is
learnt from the call graph (which functions call a database client, which send a statement) is
keyed by xhprof's names, so without the join a closure that runs the queries -- Laravel's
`Connection::run` runs every statement in one -- looks like code nobody explains.

The join is read off the call graph: a closure frame's caller on the Excimer stack calls, in
xhprof, closures of one name only (or of several, of which one has the class whose file is the
closure's). Every stack that shows the frame must agree; a frame the graph cannot tell stays
unjoined, and is then treated as before.
"""
from __future__ import annotations

import re
from collections import defaultdict
from typing import Iterable

EXCIMER_CLOSURE = re.compile(r"^\{closure:(?P<file>.*)\((?P<line>\d+)\)\}$")
RECURSION = re.compile(r"@\d+$")


def plain(name: str) -> str:
    """xhprof's name without its recursion marker (`f@1`)."""
    return RECURSION.sub("", name)


def is_xhprof_closure(name: str) -> bool:
    return plain(name).endswith("{closure}")


def _class_file(name: str) -> str | None:
    """`Ns\\Cls::Ns\\{closure}` -> `Ns/Cls.php`, the file a PSR-4 layout would put Cls in."""
    cls, sep, _ = plain(name).partition("::")
    return cls.lstrip("\\").replace("\\", "/") + ".php" if sep else None


def _pick(candidates: set[str], file: str) -> str | None:
    if len(candidates) == 1:
        return next(iter(candidates))
    by_file = {c for c in candidates if (where := _class_file(c)) and file.endswith("/" + where)}
    return next(iter(by_file)) if len(by_file) == 1 else None


def closure_names(stacks: Iterable[str], edges: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Excimer closure frame -> xhprof's name of that closure, where the call graph tells.

    `stacks`: folded Excimer stacks (root first, `;`-joined); `edges`: xhprof (caller, callee)
    pairs of the same capture."""
    closures_of: dict[str, set[str]] = defaultdict(set)
    for caller, callee in edges:
        if caller and is_xhprof_closure(callee):
            closures_of[plain(caller)].add(plain(callee))
    seen: dict[str, set[str | None]] = defaultdict(set)
    for stack in stacks:
        frames = stack.split(";")
        named = list(frames)                 # the frames with the closures joined so far
        for i in range(1, len(frames)):
            m = EXCIMER_CLOSURE.match(frames[i])
            if not m:
                continue
            name = _pick(closures_of.get(named[i - 1], set()), m["file"])
            seen[frames[i]].add(name)
            if name is not None:
                named[i] = name
    return {frame: next(iter(names)) for frame, names in seen.items() if len(names) == 1 and None not in names}


def frames_named(functions: set[str], joined: dict[str, str]) -> set[str]:
    """`functions` (xhprof names) with the Excimer closure frames joined to one of them."""
    return set(functions) | {frame for frame, name in joined.items() if name in functions}
