"""Counts of builtin calls credited up an xhprof call graph.

xhprof keeps one level of context (caller -> callee edges with call counts), so "how many
freads happen under this function" has no exact answer when the reader has several callers.
`attributed` credits each caller with its part of a callee's count, in proportion to the
calls it made to that callee, walking strongly connected components (mutual recursion) callees
first. Used by detectors that ask what a function does underneath (file-static-cache).
"""
from __future__ import annotations

from collections import Counter, defaultdict


def call_graph(edges: dict[tuple[str, str], dict]) -> tuple[dict[str, list[tuple[str, int]]], Counter]:
    """Caller -> [(callee, calls)] and callee -> calls received, self-calls left out."""
    children: dict[str, list[tuple[str, int]]] = defaultdict(list)
    calls_in: Counter = Counter()
    for (parent, child), e in edges.items():
        if parent != child:
            children[parent].append((child, e["ct"]))
            calls_in[child] += e["ct"]
    return children, calls_in


def components(children: dict[str, list[tuple[str, int]]]) -> dict[str, int]:
    """Function -> its strongly connected component (Tarjan, iterative: call graphs can be
    deeper than Python's recursion limit). Mutually recursive functions share one."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    comp: dict[str, int] = {}
    on_stack: list[str] = []
    done = 0
    for root in children:
        if root in index:
            continue
        index[root] = low[root] = len(index)
        on_stack.append(root)
        work = [(root, iter(children.get(root, ())))]
        while work:
            fn, todo = work[-1]
            for child, _ in todo:
                if child not in index:
                    index[child] = low[child] = len(index)
                    on_stack.append(child)
                    work.append((child, iter(children.get(child, ()))))
                    break
                if child not in comp:
                    low[fn] = min(low[fn], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[fn])
                if low[fn] == index[fn]:
                    while True:
                        member = on_stack.pop()
                        comp[member] = done
                        if member == fn:
                            break
                    done += 1
    return comp


def attributed(edges: dict[tuple[str, str], dict], *leaves) -> dict[str, float] | list[dict[str, float]]:
    """Function -> calls of the `leaf` builtins made under it, each caller credited with its
    part of a callee's calls in proportion to the calls it made to that callee. Within a set
    of mutually recursive functions the credit goes one call deep (a callee's reads outside
    the set): going round the cycle would count the same reads again. Several leaf tests give
    one such mapping each (the call graph is built once)."""
    children, calls_in = call_graph(edges)
    comp = components(children)
    members: dict[int, list[str]] = defaultdict(list)
    for fn, c in comp.items():
        members[c].append(fn)
    out = [_credit(children, calls_in, comp, members, leaf) for leaf in leaves]
    return out[0] if len(out) == 1 else out


def _credit(children, calls_in, comp, members, leaf) -> dict[str, float]:
    value: dict[str, float] = {}
    # Tarjan numbers components callees first: walk them in that order.
    for c in sorted(members):
        own = {}
        for fn in members[c]:
            got = 0.0
            for child, ct in children.get(fn, ()):
                if leaf(child):
                    got += ct
                elif comp.get(child, -1) != c and calls_in[child]:
                    got += ct / calls_in[child] * value.get(child, 0.0)
            own[fn] = got
        for fn in members[c]:
            value[fn] = own[fn] + sum(ct / calls_in[child] * own[child]
                                      for child, ct in children.get(fn, ())
                                      if child != fn and comp.get(child, -1) == c and not leaf(child))
    return value
