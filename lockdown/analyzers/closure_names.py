"""Excimer's name of a closure joined to xhprof's: one closure, two names.

The capture names a closure on an Excimer stack by where it was written,
`{closure:/path/File.php(359)}`; tideways_xhprof names it by its scope, `Cls::Ns\\{closure}` (Cls
the class it runs in, Ns the namespace of the file it was written in, kept through traits and
`Closure::bind`), `Ns\\{closure}` or `{closure}`, all of a class's closures alike. Whatever is
learnt from the call graph (which functions call a database client, which send a statement) is
keyed by xhprof's names, so without the join a closure that runs the queries -- Laravel's
`Connection::run` runs every statement in one -- looks like code nobody explains.

The join is read off the call graph. Excimer's stacks hold user functions only, so a closure
handed to a builtin (`array_map`, `call_user_func_array`) hangs, on the stack, from the user
function that called the builtin: xhprof's closures called by builtins are credited to the
builtins' own callers too. A frame is joined when its caller calls, in xhprof, closures of one
name only, and that name's namespace is the closure's directory (its last part: PSR-4 layouts
put `Ns\\Sub` in `.../Sub/`; a global closure has none to check); every stack that shows the frame
must agree. Anything else stays unjoined and is treated as before the join.

Several closures share a name, so what the graph says about the name is not always about the
frame: `sole` holds the frames that are the only closure the graph shows under their name (the
only frame joined to it, and every caller xhprof shows for it one of the frame's own callers),
whose call counts are theirs; `same_callers` the frames whose name's other frames are called
from the same functions (the graph cannot tell them apart: Laravel's select and statement
closures, both run by `runQueryCallback`), for facts the name's calls settle, such as calling a
database client.
"""
from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Iterable

EXCIMER_CLOSURE = re.compile(r"^\{closure:(?P<file>.*)\((?P<line>\d+)\)\}$")
RECURSION = re.compile(r"@\d+$")
LIFT_DEPTH = 3               # builtins calling builtins calling the closure (call_user_func_array -> array_map)


def plain(name: str) -> str:
    """xhprof's name without its recursion marker (`f@1`)."""
    return RECURSION.sub("", name)


def is_xhprof_closure(name: str) -> bool:
    return plain(name).endswith("{closure}")


def namespace_of(name: str) -> str:
    """`Cls::Ns\\Sub\\{closure}` -> `Ns\\Sub`: the namespace the closure was written in."""
    return plain(name).rpartition("::")[2][:-len("{closure}")].strip("\\")


def written_there(name: str, file: str) -> bool:
    """The closure name's namespace fits the file: its last part is the file's directory."""
    ns = namespace_of(name)
    if not ns:
        return True
    parts = file.replace("\\", "/").split("/")
    return len(parts) >= 2 and parts[-2].lower() == ns.rpartition("\\")[2].lower()


@dataclass
class Joins:
    names: dict[str, str] = field(default_factory=dict)     # Excimer frame -> xhprof's name
    sole: set[str] = field(default_factory=set)
    same_callers: set[str] = field(default_factory=set)


def _lifted_edges(edges: Iterable[tuple[str, str]], is_internal: Callable[[str], bool]) -> set[tuple[str, str]]:
    """(caller, closure) pairs, plain names, with a closure a builtin calls also under the
    user functions that called the builtin (through up to LIFT_DEPTH builtins)."""
    callers_of: dict[str, set[str]] = defaultdict(set)
    pairs = set()
    for caller, callee in edges:
        if caller:
            callers_of[plain(callee)].add(plain(caller))
            if is_xhprof_closure(callee):
                pairs.add((plain(caller), plain(callee)))
    out = set(pairs)
    for caller, closure in pairs:
        frontier, seen = {caller}, set()
        for _ in range(LIFT_DEPTH):
            frontier = {c for f in frontier if is_internal(f) for c in callers_of.get(f, ())} - seen
            seen |= frontier
            out.update((c, closure) for c in frontier if not is_internal(c))
    return out


def join(stacks: Iterable[str], edges: Iterable[tuple[str, str]],
         is_internal: Callable[[str], bool] | None = None) -> Joins:
    """The joins of a capture's Excimer closure frames to xhprof's closure names.

    `stacks`: folded Excimer stacks (root first, `;`-joined); `edges`: xhprof (caller, callee)
    pairs of the same capture; `is_internal`: whether a name is a builtin (default: a name
    without namespace or class that is not a closure, as PHP's own functions are)."""
    internal = is_internal or (lambda n: "\\" not in n and "::" not in n and not n.endswith("}"))
    pairs = _lifted_edges(edges, internal)
    closures_of: dict[str, set[str]] = defaultdict(set)
    callers_of: dict[str, set[str]] = defaultdict(set)
    for caller, closure in pairs:
        closures_of[caller].add(closure)
        if not internal(caller):
            callers_of[closure].add(caller)
    seen: dict[str, set[str | None]] = defaultdict(set)
    parents: dict[str, set[str]] = defaultdict(set)
    for stack in stacks:
        frames = stack.split(";")
        named = list(frames)                 # the frames with the closures joined so far
        for i in range(1, len(frames)):
            m = EXCIMER_CLOSURE.match(frames[i])
            if not m:
                continue
            fits = {c for c in closures_of.get(named[i - 1], ()) if written_there(c, m["file"])}
            name = next(iter(fits)) if len(fits) == 1 else None
            seen[frames[i]].add(name)
            parents[frames[i]].add(named[i - 1])
            if name is not None:
                named[i] = name
    names = {f: next(iter(ns)) for f, ns in seen.items() if len(ns) == 1 and None not in ns}
    frames_of: dict[str, list[str]] = defaultdict(list)
    for f, n in names.items():
        frames_of[n].append(f)
    sole = {f for f, n in names.items() if len(frames_of[n]) == 1 and callers_of[n] <= parents[f]}
    same = {f for f, n in names.items() if all(parents[g] == parents[f] for g in frames_of[n])}
    return Joins(names, sole, same)


def closure_names(stacks: Iterable[str], edges: Iterable[tuple[str, str]],
                  is_internal: Callable[[str], bool] | None = None) -> dict[str, str]:
    """Excimer closure frame -> xhprof's name of that closure, where the call graph tells."""
    return join(stacks, edges, is_internal).names


def frames_named(functions: set[str], joins: Joins) -> set[str]:
    """`functions` (xhprof names: what the call graph says of them) with the Excimer closure
    frames joined to one of them whose name's other frames the graph cannot tell apart from
    them (`Joins.same_callers`)."""
    return set(functions) | {f for f, name in joins.names.items() if name in functions and f in joins.same_callers}
