"""Hot builtins: PHP's internal functions by exclusive time and call count, from the xhprof
profiles of the instrumented requests. A function is internal when the target engine's own
function list says so (`php.internal_functions` / `php.internal_classes` in the manifest)."""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

_RECURSION = re.compile(r"@\d+$")
ROOT = "main()"      # xhprof's name for code outside any function

# PHP 7.4-8.x compiles a call of these to a VM opcode instead of a function call (TYPE_CHECK,
# STRLEN, COUNT, ARRAY_KEY_EXISTS, CAST, DEFINED, INIT_USER_CALL, ...: zend_compile.c's
# zend_try_compile_special_func) when the call site is in the global namespace or fully
# qualified, unless an extension sets ZEND_COMPILE_NO_BUILTINS -- and tideways_xhprof does as
# soon as it is loaded. It is loaded only in the instrumented worker, so there these are real
# calls with xhprof time (WordPress: is_array 94,530 calls and 13.9 ms per request), while in
# the timed workers the same code runs them as opcodes inside execute_ex (`vm`). in_array (with a
# literal array) and array_slice (of func_get_args()) are compiled so only in special cases and
# are not listed.
COMPILED_TO_OPCODES = frozenset({
    "strlen", "is_null", "is_bool", "is_long", "is_int", "is_integer", "is_float", "is_double",
    "is_string", "is_array", "is_object", "is_resource", "is_scalar", "boolval", "intval",
    "floatval", "doubleval", "strval", "defined", "chr", "ord", "call_user_func_array",
    "call_user_func", "count", "sizeof", "get_class", "get_called_class", "gettype",
    "func_num_args", "func_get_args", "array_key_exists"})


def compiled_to_opcode(name: str) -> bool:
    """A builtin whose calls exist only under xhprof (COMPILED_TO_OPCODES)."""
    return name.lower() in COMPILED_TO_OPCODES


@dataclass(frozen=True)
class Builtin:
    name: str
    calls: int
    exclusive_us: int
    inclusive_us: int
    allocations: int | None     # mem.na, with --xhprof-flags memory_alloc
    compiled_to_opcode: bool = False  # a call only under xhprof (COMPILED_TO_OPCODES)
    # the functions that call it most, by the inclusive time of their calls of it: name,
    # calls, inclusive_us (CALLERS of them; "main()" for the script's own top level)
    callers: tuple = ()


CALLERS = 3


def base_name(name: str) -> str:
    """A function name without xhprof's recursion marker (`foo@2` -> `foo`)."""
    return _RECURSION.sub("", name)


def entries(profile: dict, is_internal: Callable[[str], bool] | None = None) -> Iterator[tuple[str | None, str, dict]]:
    """(caller or None, callee, values) of one xhprof array, recursion markers removed.

    tideways_xhprof 5 on PHP 8 records every call of an internal function twice: as
    `caller==>f` and again as a direct self-call `f==>f@1` with the same count (an internal
    function cannot call itself directly). Given `is_internal`, those self-edges are dropped so
    call counts are the real ones; a user function's self-edge is real recursion and is kept."""
    for key, v in profile.items():
        parent, sep, child = key.partition("==>")
        if not sep:
            parent, child = None, key
        child = base_name(child)
        if parent is not None:
            parent = base_name(parent)
            if parent == child and is_internal is not None and is_internal(child):
                continue
        yield parent, child, v


def function_totals(profile: dict, is_internal: Callable[[str], bool] | None = None) -> dict[str, dict]:
    """One xhprof array -> per function: calls, inclusive and exclusive wall time (us) and
    allocation count. xhprof stores caller==>callee edges with inclusive values only; see
    `entries` for the edges left out."""
    return totals_of_entries(entries(profile, is_internal))


def totals_of_entries(edges: Iterable[tuple[str | None, str, dict]]) -> dict[str, dict]:
    """`function_totals` of one profile's `entries`, for a caller that walks them itself too."""
    calls: Counter = Counter()
    incl: Counter = Counter()
    out_edges: Counter = Counter()
    allocs: Counter = Counter()
    has_allocs = False
    for parent, child, v in edges:
        calls[child] += v.get("ct", 0)
        incl[child] += v.get("wt", 0)
        if "mem.na" in v:
            has_allocs = True
            allocs[child] += v["mem.na"]
        if parent is not None:
            out_edges[parent] += v.get("wt", 0)
    return {f: {"calls": calls[f], "inclusive_us": incl[f], "exclusive_us": incl[f] - out_edges[f],
                "allocations": allocs[f] if has_allocs else None} for f in calls}


def is_internal(name: str, functions: set[str], classes: set[str]) -> bool:
    cls, sep, _ = name.partition("::")
    return cls.lower() in classes if sep else name.lower() in functions


def hot_builtins(profiles: Iterable[dict], internal_functions: list[str],
                 internal_classes: list[str]) -> list[Builtin]:
    functions = {f.lower() for f in internal_functions}
    classes = {c.lower() for c in internal_classes}
    total: dict[str, Counter] = {}
    edges: dict[str, dict[str, Counter]] = {}
    with_allocs = False

    def internal(name: str) -> bool:
        return is_internal(name, functions, classes)

    for p in profiles:
        edges_of_p = list(entries(p, internal))
        for parent, child, v in edges_of_p:
            # a call from a file's top-level code has no caller in tideways' array: main()'s
            if child != ROOT and (parent or ROOT) != child and internal(child):
                e = edges.setdefault(child, {}).setdefault(parent or ROOT, Counter())
                e["calls"] += v.get("ct", 0)
                e["inclusive_us"] += v.get("wt", 0)
        for name, t in totals_of_entries(edges_of_p).items():
            if not internal(name):
                continue
            c = total.setdefault(name, Counter())
            c["calls"] += t["calls"]
            c["exclusive_us"] += t["exclusive_us"]
            c["inclusive_us"] += t["inclusive_us"]
            if t["allocations"] is not None:
                with_allocs = True
                c["allocations"] += t["allocations"]
    rows = [Builtin(n, c["calls"], c["exclusive_us"], c["inclusive_us"],
                    c["allocations"] if with_allocs else None, compiled_to_opcode(n), top_callers(edges.get(n, {})))
            for n, c in total.items()]
    return sorted(rows, key=lambda b: (-b.exclusive_us, -b.calls, b.name))


def top_callers(by_caller: dict[str, Counter]) -> tuple:
    """The CALLERS callers with the most inclusive time in their calls (then calls, then name);
    `by_caller`: caller -> Counter of calls and inclusive_us."""
    ranked = sorted(by_caller.items(), key=lambda kv: (-kv[1]["inclusive_us"], -kv[1]["calls"], kv[0]))
    return tuple({"name": name, "calls": c["calls"], "inclusive_us": c["inclusive_us"]}
                 for name, c in ranked[:CALLERS])


def is_doubled_edge(parent: str | None, child: str, is_internal: Callable[[str], bool]) -> bool:
    """True for an edge `entries` leaves out: a direct self-call of an internal function
    (`f==>f@1`), tideways_xhprof's second record of a call to it."""
    return parent is not None and base_name(parent) == base_name(child) and is_internal(base_name(child))


def _level(name: str) -> int:
    """xhprof's recursion depth of a name (`foo@2` -> 2, `foo` -> 0)."""
    m = _RECURSION.search(name)
    return int(m.group()[1:]) if m else 0


def undouble(profile: dict, is_internal: Callable[[str], bool]) -> tuple[dict, int]:
    """One xhprof array without tideways_xhprof's doubled records of internal functions, keys
    and recursion markers otherwise as xhprof writes them; and how many edges were left out.

    The edges left out are the ones `entries` drops (`is_doubled_edge`). An internal function
    with such an edge is doubled at every depth: depth 2k is the real call, 2k+1 its copy,
    and what the function calls back hangs from the copy (`preg_replace_callback@1==>{closure}`,
    `{closure}==>preg_replace_callback@2` for a nested real call). So `f@2k` and `f@2k+1`
    both become `f@k` (`f` for k = 0), which keeps callees under the real call and real
    recursion numbered from 1. Edges that end up with the same key have their metrics added.
    Other functions are untouched, so are internal functions without a self-edge (a profile
    from a profiler that does not double them)."""
    doubled = set()
    for key in profile:
        parent, sep, child = key.partition("==>")
        if sep and is_doubled_edge(parent, child, is_internal):
            doubled.add(base_name(child))

    def name(n: str) -> str:
        base = base_name(n)
        if base not in doubled:
            return n
        k = _level(n) // 2
        return f"{base}@{k}" if k else base

    out: dict = {}
    dropped = 0
    for key, v in profile.items():
        parent, sep, child = key.partition("==>")
        if sep and is_doubled_edge(parent, child, is_internal):
            dropped += 1
            continue
        new = f"{name(parent)}==>{name(child)}" if sep else name(key)
        if new in out:
            out[new] = {m: out[new].get(m, 0) + v.get(m, 0) for m in {**out[new], **v}}
        else:
            out[new] = dict(v)
    return out, dropped
