"""autoload: an autoloader that looks for each class file in several places -- the directories
of an include path, a list of prefixes, candidate names -- with a filesystem test per place, on
every request (docs/detectors.md, "An autoloader that walks").

Mechanism: PHP runs the registered autoloaders (`spl_autoload_register`) the first time a
request names a class it does not know yet, and again for every lookup of a class that does
not exist (`class_exists` of an optional class). A loader in the PEAR / Zend Framework 1 idiom
turns `Foo_Bar` into `Foo/Bar.php` and tests each include-path directory in turn
(`file_exists`, `is_file`, `stream_resolve_include_path`) until one has it: every class costs
as many system calls as directories before its own, and PHP's realpath cache keeps no failed
lookup, so every request pays them again. The fix is a class map: an array class => file built
once (Composer's `composer dump-autoload -o`, "optimized autoloader",
https://getcomposer.org/doc/articles/autoloader-optimization.md, or a generated array the
loader reads first), one lookup and one include per class, no test.

Signature, per xhprof-profiled request: a user function PHP runs as an autoloader (xhprof
shows it called by a builtin that runs autoloaders: `class_exists`, `spl_autoload_call`...;
or its name says it: `autoload`, `loadClass`; or it is a closure -- `{closure}`, `Ns\\{closure}`,
`Cls::Ns\\{closure}` -- of a class whose methods, or a namespace whose code, call
`spl_autoload_register`: PHP runs a loader from wherever a class is first named, so a closure
has no other mark) whose calls make at least `min_lookups_per_class`
file tests each on average (it and the user functions it calls; one per class is a PSR-4
loader's single candidate, not a walk), on at least `min_request_share` of the profiled
requests of a URL. Share of request time: Excimer's samples with the loader on the stack (the
tests and the class files it includes), % of the timed requests' samples; xhprof's inclusive
time over the request's wall time when Excimer does not name it (a closure), median. Reported
from `min_share_pct`.
"""
from __future__ import annotations

import re
import statistics
from collections import Counter
from dataclasses import dataclass

from ..findings import Evidence, Finding, severity_for
from ..off_cpu import app_relative
from .context import Context

ID = "autoload"
SUBJECT = "function"  # what tells its findings apart (findings.SUBJECT_KEYS)

RUNS_AUTOLOADERS = frozenset({"class_exists", "interface_exists", "trait_exists", "enum_exists",
                              "spl_autoload_call", "is_subclass_of", "is_a", "method_exists"})
FILE_TESTS = frozenset({"file_exists", "is_file", "is_readable", "stream_resolve_include_path", "realpath",
                        "is_dir", "stat", "fopen"})
_NAMED = re.compile(r"(autoload|load_?class)", re.I)


def closure_scope(name: str) -> tuple[str, str] | None:
    """(class, namespace) of a closure as xhprof names it (`{closure}`, `Ns\\{closure}`,
    `Ns\\Cls::Ns\\{closure}`); None for any other function."""
    cls, _, fn = name.rpartition("::")
    if not fn.endswith("{closure}"):
        return None
    return cls, fn[:-len("{closure}")].rstrip("\\")


def _registers_closures(edges: dict) -> set[str]:
    """The scopes whose code calls spl_autoload_register: a class (`Cls`, for a method of it) or a
    namespace (`Ns`, for main() or a function of it; "" for the global one)."""
    out = set()
    for (parent, child), _ in edges.items():
        if child != "spl_autoload_register":
            continue
        cls, sep, _ = parent.rpartition("::")
        out.add(cls if sep else ("" if parent == "main()" else parent.rpartition("\\")[0]))
    return out


def autoloaders(ctx: Context) -> set[str]:
    """User functions PHP runs as autoloaders (module docstring)."""
    out = set()
    for edges in ctx.xhprof_edges.values():
        registering = _registers_closures(edges)
        for (parent, child), _ in edges.items():
            if ctx.is_internal(child):
                continue
            scope = closure_scope(child)
            if parent in RUNS_AUTOLOADERS or _NAMED.search(child.rsplit("::", 1)[-1].rsplit("\\", 1)[-1]) or \
                    (scope is not None and (scope[0] in registering if scope[0] else
                                            bool({"", scope[1]} & registering))):
                out.add(child)
    return out


def tests_under(edges: dict, fn: str, is_internal) -> tuple[Counter, int]:
    """File-test builtins called by `fn` and the user functions under it: ({builtin: calls},
    include-path reads)."""
    tests: Counter = Counter()
    reads = 0
    seen, todo = {fn}, [fn]
    while todo:
        f = todo.pop()
        for (parent, child), v in edges.items():
            if parent != f:
                continue
            if child in FILE_TESTS:
                tests[child] += v["ct"]
            elif child == "get_include_path":
                reads += v["ct"]
            elif not is_internal(child) and child not in seen:
                seen.add(child)
                todo.append(child)
    return tests, reads


@dataclass
class Case:
    """One autoloader that walks."""
    function: str
    share: float                    # % of request time under it
    by_excimer: bool
    calls: float                    # autoloader calls per profiled request (median): classes asked for
    tests: dict                     # file-test builtin -> calls per profiled request (median of the total)
    per_class: float                # file tests per autoloader call
    include_path_reads: float       # get_include_path calls per profiled request
    found_in: list                  # directories of the class files it included (Excimer), most first
    urls: list
    profiles: list                  # the profiled requests it rests on
    callers: list                   # what asked for classes, most first


def _rows(ctx: Context, fn: str) -> list[dict]:
    rows = []
    for rid in sorted(ctx.xhprof):
        t = ctx.xhprof[rid].get(fn)
        if not t or not t["calls"]:
            continue
        tests, reads = tests_under(ctx.xhprof_edges[rid], fn, ctx.is_internal)
        rows.append({"request": rid, "url": ctx.url_of.get(rid, "?"), "calls": t["calls"], "tests": tests,
                     "reads": reads, "inclusive_us": t["inclusive_us"], "wall_us": ctx.wall_us(rid)})
    return rows


def _found_in(ctx: Context, fn: str) -> list[str]:
    dirs: Counter = Counter()
    for rid, stacks in ctx.excimer.items():
        for stack, w in stacks.items():
            frames = stack.split(";")
            for a, b in zip(frames, frames[1:]):
                if a == fn and "/" in b and not b.startswith("{closure"):
                    dirs[app_relative(b, ctx.manifest.get("run_dir")).rsplit("/", 1)[0]] += w
    return [d for d, _ in dirs.most_common(5)]


def decide(ctx: Context) -> list[Case]:
    min_tests = ctx.threshold(ID, "min_lookups_per_class")
    min_request_share = ctx.threshold(ID, "min_request_share")
    cases = []
    for fn in sorted(autoloaders(ctx)):
        rows = _rows(ctx, fn)
        walks = [r for r in rows if sum(r["tests"].values()) >= min_tests * r["calls"]]
        urls = sorted({r["url"] for r in walks if sum(1 for x in walks if x["url"] == r["url"])
                       >= min_request_share * len(ctx.profiled_by_url.get(r["url"], []))})
        if not urls:
            continue
        by_excimer = fn in ctx.excimer_frames
        share = (ctx.php_share_pct(lambda f, fn=fn: f == fn) if by_excimer else
                 statistics.median(100.0 * r["inclusive_us"] / r["wall_us"] for r in walks if r["wall_us"]))
        if share < ctx.threshold(ID, "min_share_pct"):
            continue
        calls = statistics.median(r["calls"] for r in walks)
        names = sorted({n for r in walks for n in r["tests"]})
        tests = {n: statistics.median(r["tests"].get(n, 0) for r in walks) for n in names}
        callers: Counter = Counter()
        for r in walks:
            for (parent, child), v in ctx.xhprof_edges[r["request"]].items():
                if child == fn and parent != fn:
                    callers[parent] += v["ct"]
        cases.append(Case(fn, share, by_excimer, calls, tests,
                          statistics.median(sum(r["tests"].values()) / r["calls"] for r in walks),
                          statistics.median(r["reads"] for r in walks), _found_in(ctx, fn), urls,
                          [r["request"] for r in walks], [c for c, _ in callers.most_common(5)]))
    return cases


def detect(ctx: Context) -> list[Finding]:
    return [describe(c) for c in decide(ctx)]


def describe(c: Case) -> Finding:
    src_x = f"xhprof of {', '.join(c.profiles[:3])}{' ...' if len(c.profiles) > 3 else ''}"
    tests = ", ".join(f"{n} {v:g}" for n, v in c.tests.items())
    total = sum(c.tests.values())
    evidence = [
        Evidence("time under the autoloader, % of request time", round(c.share, 2),
                 "Excimer: timed requests' samples with it on the stack" if c.by_excimer
                 else "xhprof: its inclusive time over the request's wall time (Excimer does not name it)"),
        Evidence("autoloader calls per request (classes asked for)", f"{c.calls:g}", src_x),
        Evidence("file tests per request under it", tests, src_x),
        Evidence("file tests per class", round(c.per_class, 2), src_x),
        Evidence("include path read per request (get_include_path)", f"{c.include_path_reads:g}", src_x),
    ]
    if c.found_in:
        evidence.append(Evidence("directories its class files came from", ", ".join(c.found_in),
                                 "Excimer: script files on the stack right under it"))
    if c.callers:
        evidence.append(Evidence("what asked for the classes", ", ".join(c.callers), src_x))
    fix = ("Use a class map: `composer dump-autoload -o` (Composer's optimized autoloader) or an array "
           "class => file generated once and read first by the loader, so that each class is one lookup "
           "and one include, with no file test; failing that, put the directory that holds most classes "
           "first in the include path.")
    return Finding(
        id=ID, title=f"Autoloader {c.function} tests {c.per_class:.1f} files per class", severity=severity_for(c.share),
        share_pct=round(c.share, 2),
        summary=(f"{c.function} looks for each class in several places: {total:g} file tests per request for "
                 f"{c.calls:g} classes asked for ({c.per_class:.1f} a class), {c.share:.1f}% of the request "
                 f"time under it. {fix}"),
        urls=c.urls, evidence=evidence,
        details={"function": c.function, "calls_per_request": c.calls, "tests_per_request": c.tests,
                 "tests_per_class": round(c.per_class, 2), "include_path_reads": c.include_path_reads,
                 "found_in": c.found_in, "callers": c.callers, "requests": c.profiles,
                 "no_patch": "the class map is the app's own build step (composer dump-autoload -o, or a generated "
                             "array); lockdown generates one only from the app's files, when it runs the target"})
