"""repeated-call: an expensive user function called many times per request doing the same work
each time -- a memoization candidate.

Mechanism (docs/pathologies.md section 6): WordPress 6.1 calls `wp_get_global_settings` ->
`WP_Theme_JSON_Resolver::get_merged_data` 71 times while rendering the home page, re-reading
and merging the same theme.json data each time; a per-request static cache removes all but one.

Signature, per xhprof-instrumented request: a user (non-builtin) function called at least
`min_calls_per_request` times (or `min_calls_when_costly` times when a cache would save at least
`costly_share_pct` of the request: an audit app's theme_get, 39 calls and 12% of the page,
verified +20% RPS) whose inclusive time is at least `min_inclusive_share_pct` of the
request (its measured wall time), at least `min_us_per_call` per call (cheap getters are not
worth a cache), and whose calls all do the same work: every callee is called
a whole multiple of the function's own call count (each call makes the same child calls). xhprof
keeps no arguments, so "same work per call" stands in for "same arguments"; it separates
memoizable functions from dispatchers (apply_filters, do_action), whose calls run different
callbacks. Functions that run callbacks they are given, themselves or through their callees
(call_user_func*, array_map, usort... running a named user function or a closure written
elsewhere), are dispatchers and are skipped; callbacks of the function's own (closures written
in it, builtins, through usort and its kind a method of its own class) are the same code on
every call and do not count (`dispatchers`: an unseen app's pure pricing function, sorting and
filtering with its own closures, was skipped before, at 18.9% of the samples). So are functions
xhprof saw re-entered (`f@1`): their inclusive time counts nested calls twice (render_block), and a
recursive walker belongs to fs-scan. Functions that send SQL themselves (wpdb::_do_query) are
left to the query detectors, and so is any function each of whose calls ends in a query.
A function each of whose calls reaches a builtin that changes the process's or the world's state
(starts a timer, sends a header, writes a file, draws a random number: `STATE_CHANGING`) is no
candidate either: a memo would skip the effect (MediaWiki's `enterCriticalSection`, 23 calls a
page, each arming an `ExcimerTimer`).
Loaders are skipped too: when Excimer shows that at least `max_include_share_pct` of the time
under a function is spent in script files it includes itself (`drupal_load` ->
`modules/x/x.module`), each call loads a different file -- xhprof, which keeps neither
arguments nor includes, cannot tell that from a repeat.

Share of request time: the function's inclusive time less the one-time work done inside its
calls (a connection or a file its first call opens: Drupal's db_escape_table, 95-98% of whose
time is the connection; `one_time_share`), less what one call would cost, over the request's
wall time (what memoization would save), median over the profiled requests; the cost per call
leaves the one-time work out too. The argument probe then rescales the share to the time its
timed repeats took (`judge`).
"""
from __future__ import annotations

import re
import statistics
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from ..builtins import base_name
from ..findings import Evidence, Finding, severity_for
from ..round_trip import is_client_call
from .context import Context
from .related import unlink_nested

ID = "repeated-call"
SUBJECT = "function"  # what tells its findings apart (findings.SUBJECT_KEYS)
SAVE_LABEL = "share of request time a cache would save, %"
ONE_TIME_LABEL = "one-time work inside its calls, % of request time (a cache does not save it)"
ONE_TIME_SHOWN_PCT = 0.1    # one-time work under this share of the request goes unmentioned


DISPATCH = {"call_user_func", "call_user_func_array", "array_map", "array_walk", "usort", "uasort",
            "uksort", "array_filter", "array_reduce", "iterator_apply"}
# ... of which those that only call (hook runners, `call_user_func([$this, $action])`): a method
# of the caller's own class run through them can be any of its methods, picked per call
INVOKERS = {"call_user_func", "call_user_func_array", "iterator_apply"}


def recursive_functions(profile: dict) -> set[str]:
    """Functions xhprof saw re-entered (a `f@N` callee: f was already on the stack): their
    inclusive time counts nested calls more than once."""
    out = set()
    for key in profile:
        child = key.partition("==>")[2]
        if base_name(child) != child:
            out.add(base_name(child))
    return out


# Builtins that send SQL: the round trip's statement senders (one list, so that
# mysqli_execute_query, multi_query and the rest are not missed here), prepares, and pgsql's
PREPARES_AND_OTHERS = frozenset(("mysqli_prepare", "mysqli::prepare", "mysqli_stmt_prepare", "mysqli_stmt::prepare",
                                 "pdo::prepare", "pg_query", "pg_query_params", "pg_execute", "pg_send_query"))


def sends_sql(name: str) -> bool:
    return is_client_call(name) or name.lower() in PREPARES_AND_OTHERS


CLOSURE = re.compile(r"^(?:(?P<cls>[^:]+)::)?(?P<ns>(?:[^\\{]+\\)*)\{closure(?::(?P<owner>.*?)(?:\(\))?:\d+)?\}$")


def closure_scope(name: str) -> tuple[str, str, str | None] | None:
    """A closure as xhprof names it -> (its class or "", its namespace, the function whose
    body defines it when the name says so); None for a named function. tideways names a
    closure by where it was written: `{closure}` (global code or a global function),
    `Ns\\{closure}` (a namespaced function), `Cls::Ns\\{closure}` (a method of Cls, static
    closures too); PHP 8.4 adds the enclosing function: `{closure:Ns\\Cls::method():42}`."""
    m = CLOSURE.match(name)
    if m is None:
        return None
    owner = m["owner"]
    if owner is not None and ("/" in owner or owner.endswith((".php", ".inc"))):
        owner = None                 # a file-scope closure: `{closure:/app/index.php:12}`
    return (m["cls"] or "", m["ns"].rstrip("\\"), owner)


def own_closure(fn: str, callback: str) -> bool:
    """`callback` is a closure written in `fn`'s own code: its enclosing function when the name
    says it, else its scope (fn's class for a method, fn's namespace and no class for a
    function). Two methods of one class share a scope, so a closure one passes to the other
    looks like the other's own: the argument probe then sees a new closure object on each call."""
    scope = closure_scope(callback)
    if scope is None:
        return False
    cls, ns, owner = scope
    if owner is not None:
        return owner.lower() == fn.lower()
    fn_cls, sep, _ = fn.partition("::")
    if sep:
        return cls.lower() == fn_cls.lower()
    return not cls and ns.lower() == fn.rpartition("\\")[0].lower()


def own_callback(fn: str, callback: str, builtin: str) -> bool:
    """`callback`, run by `builtin`, is `fn`'s own code: a closure written in it, or (through
    a builtin that transforms data: usort, array_filter, array_map...) a method of fn's own
    class (`usort($rows, [$this, 'byPriority'])`)."""
    if own_closure(fn, callback):
        return True
    cls, sep, _ = fn.partition("::")
    return (bool(sep) and builtin not in INVOKERS and closure_scope(callback) is None
            and callback.partition("::")[0].lower() == cls.lower())


def dispatchers(edges: dict, internal: Callable[[str], bool] = lambda name: False) -> set[str]:
    """Functions that run callbacks they are given, directly or one call away (do_action ->
    apply_filters -> call_user_func_array): each call can run different code, so they are not
    memoization candidates. A deeper callback (get_merged_data -> get_theme_data ->
    apply_filters) is part of the work and does not disqualify.

    Running a callback through a builtin (usort, array_filter, array_map...) makes a function a
    dispatcher only when what the builtin ran can be something the function was given: a
    named user function or method, or a closure written elsewhere. Closures written in the
    function's own code (`usort($rules, static fn ($a, $b) => ...)`) and builtins named as
    callbacks (`array_map('trim', ...)`) are the same code on every call. xhprof keeps one
    level of context, so a builtin's callbacks are pooled over all its callers: a closure
    written in another caller's code is that caller's; a named callback could be anyone's and
    counts against every caller."""
    ran: dict[str, set[str]] = defaultdict(set)        # callback-running builtin -> what it ran
    callers: dict[str, set[str]] = defaultdict(set)    # ... -> the functions that called it
    for (p, c) in edges:
        if p in DISPATCH:
            ran[p].add(c)
        if c in DISPATCH:
            callers[c].add(p)
    direct = set()
    for builtin, fns in callers.items():
        for fn in fns:
            others = fns - {fn}
            given = [c for c in ran[builtin]
                     if not own_callback(fn, c, builtin) and not any(own_callback(o, c, builtin) for o in others)
                     and not (internal(c) and c not in DISPATCH)]
            # call_user_func* always runs something: when xhprof shows nothing, assume the worst
            if given or (builtin in INVOKERS and not ran[builtin]):
                direct.add(fn)
    return direct | {p for (p, c) in edges if c in direct}


def reached_each_call(edges: dict, fn: str, calls: int, wanted: Callable[[str], bool]) -> str | None:
    """The first callee `wanted` says yes to that every call of `fn` reaches, if any: followed
    only along edges called at least once per call of `fn`, so work a function's first call
    alone does (a cache filled from the database or written to a file) does not count."""
    todo, seen = [fn], {fn}
    while todo:
        f = todo.pop()
        for (p, c), v in edges.items():
            if p == f and v["ct"] >= calls and c not in seen:
                if wanted(c):
                    return c
                seen.add(c)
                todo.append(c)
    return None


def sends_sql_each_call(edges: dict, fn: str, calls: int) -> bool:
    """Every call of `fn` ends in a query (setting() -> db_value() -> db_query() ->
    mysqli::query, each at least once per call): a query pattern, the query detectors'
    business; a function whose first call fills a cache from the database (get_merged_data)
    is not one."""
    return reached_each_call(edges, fn, calls, sends_sql) is not None


# Builtins whose effect a memo would skip: timers and signals, output and headers, writes,
# sessions, shared-memory writes, random numbers. Clocks (microtime, hrtime) are not here: a
# timing wrapper around pure work is common and leaves the work memoizable.
STATE_CHANGING = frozenset((
    "excimertimer::start", "excimertimer::stop", "excimerprofiler::start", "excimerprofiler::stop",
    "pcntl_alarm", "pcntl_signal", "set_time_limit", "ignore_user_abort",
    "header", "header_remove", "setcookie", "setrawcookie", "http_response_code", "flush", "ob_flush",
    "printf", "vprintf", "readfile", "fpassthru",
    "fwrite", "fputs", "fputcsv", "file_put_contents", "error_log", "syslog", "mail", "unlink", "rename",
    "mkdir", "rmdir", "touch", "copy", "flock", "socket_write", "socket_send", "stream_socket_sendto",
    "session_start", "session_write_close", "session_regenerate_id", "session_destroy",
    "apcu_store", "apcu_add", "apcu_inc", "apcu_dec", "apcu_cas", "apcu_delete",
    "register_shutdown_function",
    "mt_rand", "rand", "random_int", "random_bytes", "uniqid", "openssl_random_pseudo_bytes", "shuffle",
    "str_shuffle", "array_rand", "lcg_value", "mt_srand", "srand"))


def changes_state_each_call(edges: dict, fn: str, calls: int) -> str | None:
    """The state-changing builtin (`STATE_CHANGING`) every call of `fn` reaches, if any; a
    function whose first call writes a cache file is still a candidate."""
    found = reached_each_call(edges, fn, calls, lambda c: base_name(c).lower() in STATE_CHANGING)
    return base_name(found) if found else None


def uniform_callees(edges: dict, fn: str, calls: int) -> tuple[bool, int]:
    """(every callee called a whole multiple of `calls` times, number of callees)."""
    out = [(c, v["ct"]) for (p, c), v in edges.items() if p == fn and c != fn]
    return bool(out) and all(ct % calls == 0 for _, ct in out), len(out)


def is_script_frame(frame: str) -> bool:
    """An Excimer frame that is an included file, not a function (`/app/modules/x/x.module`)."""
    return "/" in frame and not frame.startswith("{")


def include_share_pct(ctx: Context, fn: str) -> float | None:
    """Of the Excimer samples with `fn` on the stack, the % whose frame right under its
    innermost occurrence is a script file: time spent in files `fn` includes itself.
    None without samples of `fn`."""
    on = included = 0.0
    for stacks in ctx.excimer.values():
        for stack, w in stacks.items():
            frames = stack.split(";")
            if fn not in frames:
                continue
            on += w
            below = len(frames) - frames[::-1].index(fn)
            if below < len(frames) and is_script_frame(frames[below]):
                included += w
    return 100.0 * included / on if on else None


def call_graph(edges: dict) -> tuple[dict[str, list[tuple[str, dict]]], dict[str, set[str]]]:
    """(caller -> [(callee, edge)], callee -> its callers) of one request, self-calls left out."""
    children: dict[str, list[tuple[str, dict]]] = defaultdict(list)
    callers: dict[str, set[str]] = defaultdict(set)
    for (p, c), v in edges.items():
        if p != c:
            children[p].append((c, v))
            callers[c].add(p)
    return children, callers


def once_under_us(edges: dict, fn: str, graph=None) -> tuple[float, list[tuple[float, str]]]:
    """xhprof's time of one-time work inside `fn`'s calls in one request: the calls (of user
    functions or builtins) made at most once in the request by `fn` or by a function that only
    `fn`'s calls reach, and (their time, "caller > callee") heaviest first. xhprof keeps one
    level of context, so a once-called function under a shared helper (Drupal's
    `Database::getConnection` -> `openConnection`, whose callers are many) is left to the
    Excimer stacks (`once_under_share`). `graph`: the request's `call_graph`, when known."""
    children, callers = graph or call_graph(edges)
    # the functions only fn's calls reach, through calls made more than once
    inside, todo, waiting = {fn}, [fn], set()
    while todo:
        for c, v in children.get(todo.pop(), ()):
            if v["ct"] > 1 and c not in inside:
                waiting.add(c)
        ready = [c for c in waiting if callers[c] <= inside]
        for c in ready:
            waiting.discard(c)
            inside.add(c)
            todo.append(c)
    once = sorted(((v["wt"], f"{p} > {c}") for p in inside for c, v in children.get(p, ())
                   if c not in inside and v["ct"] <= 1), reverse=True)
    return float(sum(us for us, _ in once)), once


def once_functions(ctx: Context) -> dict[str, set[str]]:
    """URL -> the functions called at most once in every xhprof-instrumented request of it:
    work a request does once, such as opening its database connection."""
    out = {}
    for url, rids in ctx.profiled_by_url.items():
        most: dict[str, int] = defaultdict(int)
        for rid in rids:
            for f, t in ctx.xhprof.get(rid, {}).items():
                most[f] = max(most[f], t["calls"])
        out[url] = {f for f, n in most.items() if n <= 1 and f != "main()"}
    return out


def once_under(ctx: Context, fn: str, rid: str, once: dict[str, set[str]]) -> tuple[float, dict[str, float]]:
    """In one timed request's Excimer stacks: the weight of the samples with `fn` on the stack
    and, under it, a function its URL calls once per request (`once_functions`): time spent
    once, inside one of fn's calls (its first, in practice), which a cache of fn does not
    save; and that weight by the outermost such function."""
    funcs = once.get(ctx.url_of.get(rid, "?")) or set()
    total, by_fn = 0.0, defaultdict(float)
    if not funcs:
        return total, by_fn
    for stack, w in (ctx.excimer.get(rid) or {}).items():
        frames = stack.split(";")
        if fn not in frames:
            continue
        below = frames[len(frames) - frames[::-1].index(fn):]
        hit = next((f for f in below if f in funcs), None)
        if hit is not None:
            total += w
            by_fn[hit] += w
    return total, by_fn


def once_under_share(ctx: Context, fn: str) -> tuple[float, dict[str, float]]:
    """% of the timed requests' samples spent in one-time work under `fn` (`once_under`), and
    that % by function."""
    if not ctx.excimer_total:
        return 0.0, {}
    once = once_functions(ctx)
    total, by_fn = 0.0, defaultdict(float)
    for r in ctx.timed:
        w, per = once_under(ctx, fn, r.id, once)
        total += w
        for f, x in per.items():
            by_fn[f] += x
    return 100.0 * total / ctx.excimer_total, {f: 100.0 * x / ctx.excimer_total for f, x in by_fn.items()}


def timed_per_call_us(ctx: Context, fn: str, rows: list[dict]) -> float | None:
    """Inclusive time per call of `fn` in the timed requests of the URLs it was flagged on: each
    request's wall time x the share of its Excimer samples with `fn` on the stack, averaged,
    over the mean calls xhprof counted there. xhprof's own inclusive time comes from the
    instrumented requests, which run several times slower (most in call-heavy code like this:
    WordPress's wp_get_global_settings, 2767 us per call under xhprof, about 400 us timed)."""
    urls = {r["url"] for r in rows}
    once = once_functions(ctx)
    spent = []
    for r in ctx.timed:
        stacks = ctx.excimer.get(r.id) or {}
        total = sum(stacks.values())
        if ctx.url_of[r.id] in urls and total:
            on = sum(w for s, w in stacks.items() if fn in s.split(";")) - once_under(ctx, fn, r.id, once)[0]
            spent.append(r.wall_us * on / total)
    if not spent:
        return None
    return statistics.fmean(spent) / statistics.fmean(r["calls"] for r in rows)


def one_time_share(ctx: Context, fn: str, rows: list[dict]) -> tuple[float, float, list[str], str]:
    """(% of request time `fn`'s calls take, % of it spent in one-time work inside them, the
    heaviest one-time work by name, where that came from: "excimer" or "xhprof"). With Excimer
    samples: their share with fn on the stack, and of those, the share under a function called
    once per request (`once_under_share`) or, when xhprof saw more, xhprof's one-time fraction
    of fn's time (`once_under_us`, which also sees builtins, such as a connect or a sleep in a
    helper only fn calls) applied to it. Without samples: xhprof's inclusive and one-time time
    over the request's wall time."""
    xh_frac = statistics.median(min(1.0, r.get("once_us", 0) / r["inclusive_us"]) if r["inclusive_us"] else 0.0
                                for r in rows)
    xh_names = max((r.get("once", []) for r in rows), key=len)
    if ctx.excimer_total:          # sampled wall time: no instrumentation overhead in it
        on = ctx.php_share_pct(lambda f: f == fn)
        once, by_fn = once_under_share(ctx, fn)
        if on * xh_frac > once:
            return on, on * xh_frac, xh_names, "xhprof"
        return on, min(once, on), [f for f, _ in sorted(by_fn.items(), key=lambda kv: (-kv[1], kv[0]))][:3], "excimer"
    on = statistics.median(100.0 * min(r["inclusive_us"], r["main_us"]) / r["main_us"] for r in rows)
    return on, on * xh_frac, xh_names, "xhprof"


def saved_share(ctx: Context, fn: str, rows: list[dict]) -> float:
    """% of request time a per-request cache of `fn` would save: the time of its calls, less
    the one-time work done inside them (`one_time_share`: a connection opened or a file loaded
    by its first call, which a cache does not save), less one call's worth. Excimer's samples
    of the timed requests; xhprof's inclusive time (inflated by instrumentation) only without
    them."""
    if not ctx.excimer_total:
        return statistics.median(r["saved_pct"] for r in rows)     # one-time work left out (`_hits`)
    calls_med = statistics.median(r["calls"] for r in rows)
    on, once, _, _ = one_time_share(ctx, fn, rows)
    return (on - once) * (calls_med - 1) / calls_med


def _callers(ctx: Context, fn: str) -> set[str]:
    return {p for edges in ctx.xhprof_edges.values() for (p, c) in edges if c == fn}


def _hits(ctx: Context) -> dict[str, list[dict]]:
    """Function -> a row per profiled request where it is a candidate (module docstring):
    called often enough, costly enough, the same callees on every call, not a dispatcher, not
    recursive, not a query sender, no state change on every call."""
    min_calls = ctx.threshold(ID, "min_calls_per_request")
    costly_calls = ctx.threshold(ID, "min_calls_when_costly")
    min_share = ctx.threshold(ID, "min_inclusive_share_pct")
    min_per_call = ctx.threshold(ID, "min_us_per_call")
    hits: dict[str, list[dict]] = defaultdict(list)
    for rid in sorted(ctx.xhprof):
        totals, edges = ctx.xhprof[rid], ctx.xhprof_edges[rid]
        main = ctx.wall_us(rid)
        if not main:
            continue
        skip = recursive_functions(ctx.xhprof_profiles[rid]) | dispatchers(edges, ctx.is_internal)
        graph = call_graph(edges)
        for fn, t in totals.items():
            if fn == "main()" or t["calls"] < min(min_calls, costly_calls) or ctx.is_internal(fn):
                continue
            if fn in skip:
                continue                  # recursive (a walk) or a callback dispatcher
            share = 100.0 * t["inclusive_us"] / main
            if share < min_share or t["inclusive_us"] / t["calls"] < min_per_call:
                continue
            uniform, ncallees = uniform_callees(edges, fn, t["calls"])
            if not uniform or sends_sql_each_call(edges, fn, t["calls"]):
                continue
            if changes_state_each_call(edges, fn, t["calls"]):
                continue                  # a memo would skip the effect
            once_us, once = once_under_us(edges, fn, graph)
            once_us = min(once_us, t["inclusive_us"])
            if (t["inclusive_us"] - once_us) / t["calls"] < min_per_call:
                continue                  # cheap once its first call's one-time work is left out
            saved = (t["inclusive_us"] - once_us) * (t["calls"] - 1) / t["calls"]
            callers = sorted(((v["ct"], p) for (p, c), v in edges.items() if c == fn), reverse=True)
            hits[fn].append({"request": rid, "url": ctx.url_of.get(rid, "?"), "calls": t["calls"],
                             "inclusive_us": t["inclusive_us"], "main_us": main,
                             "saved_pct": 100.0 * min(saved, main) / main, "callees": ncallees,
                             "callers": [f"{p} ({ct})" for ct, p in callers[:3]],
                             # one-time work inside its calls, when xhprof saw some
                             **({"once_us": once_us, "once": [f"{name} ({us:.0f} us)" for us, name in once[:3]]}
                                if once_us else {})})
    max_include = ctx.threshold(ID, "max_include_share_pct")
    loaders = {fn for fn in hits if (include_share_pct(ctx, fn) or 0.0) >= max_include}
    # a loader's helpers get its different argument on each call (drupal_get_filename)
    callers_of = {fn: _callers(ctx, fn) for fn in hits}
    helpers = {fn for fn in hits if callers_of[fn] and callers_of[fn] <= loaders}
    hits = {fn: rows for fn, rows in hits.items() if fn not in loaders | helpers}
    # fewer calls than min_calls_per_request: a candidate only when a cache would save a lot
    return {fn: rows for fn, rows in hits.items()
            if statistics.median(r["calls"] for r in rows) >= min_calls
            or saved_share(ctx, fn, rows) >= ctx.threshold(ID, "costly_share_pct")}


@dataclass
class Case:
    """One memoization candidate."""
    function: str
    rows: list[dict]                # per profiled request (`_hits`)
    share: float                    # % of request time a per-request cache would save
    by_excimer: bool                # that share from Excimer samples (else xhprof)
    per_call: float                 # inclusive us per call under xhprof (median)
    timed_call: float | None        # ... in the timed requests (Excimer)
    nested: list[str]               # flagged functions called only from it, as often
    chain: list[str]                # the heaviest caller chain in the first request
    one_time: float = 0.0           # % of request time in one-time work inside its calls (not saved)
    one_time_in: list[str] = field(default_factory=list)    # ... where: the heaviest, by name
    one_time_by: str = "excimer"    # ... seen in the Excimer stacks, or in xhprof's calls

    @property
    def requests(self) -> list[str]:
        return [r["request"] for r in self.rows]


def decide(ctx: Context) -> list[Case]:
    min_share = ctx.threshold(ID, "min_inclusive_share_pct")
    min_per_call = ctx.threshold(ID, "min_us_per_call")
    hits = _hits(ctx)
    inner = _nested(hits, ctx)
    cases = []
    for fn, rows in hits.items():
        if fn in inner:
            continue
        share = saved_share(ctx, fn, rows)
        if share < min_share:
            continue                      # sampled time says it is not worth it
        timed_call = timed_per_call_us(ctx, fn, rows)
        if timed_call is not None and timed_call < min_per_call:
            # cheap where it counts: xhprof's instrumented calls run 2-3x slower, so a getter of
            # 12 us (minicms-clean's check_markup, 30 us under xhprof) crossed the floor when the
            # host was busy
            continue
        _, once, once_in, once_by = one_time_share(ctx, fn, rows)
        cases.append(Case(fn, rows, share, bool(ctx.excimer_total),
                          statistics.median(r["inclusive_us"] / r["calls"] for r in rows), timed_call,
                          sorted(f for f, outer in inner.items() if outer == fn),
                          ctx.call_chain(rows[0]["request"], fn), once, once_in, once_by))
    return cases


def detect(ctx: Context) -> list[Finding]:
    return [describe(c) for c in decide(ctx)]


def describe(c: Case) -> Finding:
    fn, rows, share, per_call, timed_call, nested = c.function, c.rows, c.share, c.per_call, c.timed_call, c.nested
    calls = [r["calls"] for r in rows]
    share_source = ("Excimer samples with it on the stack x (calls-1)/calls, timed requests" if c.by_excimer
                    else "xhprof: inclusive time x (calls-1)/calls over the request's wall time")
    shown_once = c.one_time >= ONE_TIME_SHOWN_PCT
    if shown_once:
        share_source += ", less the one-time work inside its calls"
    cost = (f"about {timed_call:.0f} us per call in the timed requests ({per_call:.0f} us under "
            f"xhprof's instrumentation)" if timed_call is not None else
            f"{per_call:.0f} us per call under xhprof's instrumentation (slower than untimed)")
    rids = c.requests
    urls = sorted({r["url"] for r in rows})
    lo, hi = min(calls), max(calls)
    return Finding(
        id=ID, title=f"{fn} runs {statistics.median(calls):.0f} times per request doing the same work",
        severity=severity_for(share, high=10, medium=3), share_pct=round(share, 2),
        summary=(f"{fn} was called {lo if lo == hi else f'{lo}-{hi}'} times in each of {len(rows)} "
                 f"profiled request(s), {cost}, and every call made the same "
                 f"child calls: a candidate for a per-request cache (memoization), which would "
                 f"save about {share:.1f}% of the request."
                 + (f" Left out of that: {c.one_time:.1f}% of the request spent on work done once per "
                    f"request inside its calls ({', '.join(c.one_time_in)}), which its first call "
                    f"still does with a cache." if shown_once else "")),
        evidence=[Evidence("calls per request", lo if lo == hi else f"{lo}..{hi}",
                           f"xhprof of {len(rids)} request{'s' * (len(rids) != 1)}: "
                           f"{', '.join(rids[:3])}{' ...' if len(rids) > 3 else ''}"),
                  *([Evidence("inclusive time per call in timed requests (us)", round(timed_call),
                              "Excimer: wall time x share of samples with it on the stack, over "
                              "xhprof's calls per request, same URLs")] if timed_call is not None else []),
                  Evidence("inclusive time per call under xhprof (us, median)", round(per_call),
                           "xhprof-instrumented requests, which run slower than the timed ones"),
                  Evidence("callees per call, all called the same number of times per call",
                           rows[0]["callees"], f"xhprof edges of {rids[0]}"),
                  Evidence("callers", "; ".join(rows[0]["callers"]), f"xhprof edges of {rids[0]}"),
                  Evidence("call chain", " > ".join(c.chain), f"xhprof of {rids[0]}"),
                  Evidence(SAVE_LABEL, round(share, 2), share_source),
                  *([Evidence(ONE_TIME_LABEL, round(c.one_time, 2), one_time_source(c))] if shown_once else []),
                  *([Evidence("repeated inside it, as often", ", ".join(nested), "xhprof edges")] if nested else [])],
        urls=urls, requests=rids[:5],
        details={"function": fn, "nested": nested, "rows": rows,
                 **({"one_time": {"share_pct": round(c.one_time, 2), "in": c.one_time_in}} if shown_once else {})})


def one_time_source(c: Case) -> str:
    where = ", ".join(c.one_time_in)
    if c.one_time_by == "excimer":
        return (f"Excimer: samples of the timed requests with it on the stack and, under it, a function "
                f"xhprof counts once per request: {where}")
    return (f"xhprof: calls made once per request by it or by a function only its calls reach: {where}"
            + ("; as a part of its time, applied to its Excimer share" if c.by_excimer else ""))


def _nested(hits: dict[str, list[dict]], ctx: Context) -> dict[str, str]:
    """Flagged functions only ever called from another flagged function (get_merged_data under
    wp_get_global_settings, theme_read under theme_settings): one finding, for the outer one."""
    out = {}
    for fn, rows in hits.items():
        for r in rows:
            edges = ctx.xhprof_edges[r["request"]]
            callers = {p for (p, c) in edges if c == fn}
            flagged = [p for p in callers if p in hits and p != fn]
            top = max(callers, key=lambda p: edges[(p, fn)]["ct"], default=None)
            as_often = top in hits and top != fn and abs(edges[(top, fn)]["ct"] - r["calls"]) <= 0.1 * r["calls"]
            if callers and (len(flagged) == len(callers) or as_often):
                out[fn] = max(flagged, key=lambda p: edges[(p, fn)]["ct"])
                break
    # an outer function that is itself nested hands its inner ones up
    for fn, outer in list(out.items()):
        seen = {fn}
        while outer in out and outer not in seen:
            seen.add(outer)
            outer = out[outer]
        out[fn] = outer
    return out


def candidates(findings: list[Finding]) -> dict[str, list[str]]:
    """function -> URLs, for the repeated-call findings the argument probe should check: each
    finding's function and the flagged functions nested in it (wp_get_global_settings gets a
    different path on most calls; the get_merged_data under it, none)."""
    out: dict[str, list[str]] = {}
    for f in findings:
        if f.id == ID and f.details.get("function"):
            for fn in [f.details["function"], *f.details.get("nested", [])]:
                out[fn] = sorted({*out.get(fn, []), *f.urls})
    return out


def mark_unprobed(findings: list[Finding], why: str) -> list[Finding]:
    """The repeated-call findings, each saying its arguments were not checked, and why."""
    for f in findings:
        if f.id == ID and f.details.get("function"):
            f.evidence.insert(1, describe_not_probed(why))
            f.details["probe"] = {"function": f.details["function"], "located": None, "requests": 0,
                                  "not_probed": why}
    return findings


def describe_not_probed(why: str) -> Evidence:
    return Evidence("arguments", f"not probed: {why}", "argument probe")


def _probe_summary(fn: str, located: dict, rows: dict) -> dict | None:
    probed = rows.get(fn) or []
    if fn not in located or not probed:
        return None
    calls = sum(r["calls"] for r in probed)
    repeats = sum(r["calls"] - r["distinct"] for r in probed)
    out = {"function": fn, "located": located[fn], "requests": len(probed), "calls": calls,
           "repeats": repeats, "repeat_pct": round(100.0 * repeats / calls, 1), "rows": probed}
    if all("total_us" in r for r in probed):      # the probe timed every call
        out.update({k: sum(r[k] for r in probed) for k in ("total_us", "first_us", "repeat_us")})
    return out


def whole_share(f: Finding) -> float | None:
    """% of request time all the calls of `f`'s function take, one-time work included: its
    share undone (`saved_share`: (whole - one-time) x (calls-1)/calls)."""
    rows = f.details.get("rows") or []
    if f.share_pct is None or not rows:
        return None
    n = statistics.median(r["calls"] for r in rows)
    once = (f.details.get("one_time") or {}).get("share_pct", 0.0)
    return f.share_pct * n / (n - 1) + once if n > 1 else None


@dataclass
class Verdict:
    """What the argument probe says of one repeated-call finding."""
    function: str
    outer: dict                     # the probe's counts for the finding's function (`_probe_summary`)
    probe: dict                     # ... for the function the cache belongs on (it, or one nested in it)
    assumed: int                    # calls the detector's share assumed a cache saves
    saved: float | None             # the share rescaled to the repeats measured
    dismissed: str | None           # "different" (too few repeats), "small" (too little saved), or None
    min_repeat: float
    min_share: float
    by_time: bool = False           # `saved` from the probe's timing of the repeats (else their count)

    @property
    def first_pct(self) -> float | None:
        """% of the probed function's time spent in its first call of each request."""
        p = self.probe
        return 100.0 * p["first_us"] / p["total_us"] if p.get("total_us") else None

    @property
    def repeat_time_pct(self) -> float | None:
        """% of the probed function's time spent in calls that repeat an earlier pair."""
        p = self.probe
        return 100.0 * p["repeat_us"] / p["total_us"] if p.get("total_us") else None


def judge(f: Finding, located: dict[str, str], rows: dict[str, list[dict]], min_repeat: float,
          min_share: float) -> Verdict | None:
    """The probe's verdict on `f`, None when it could not probe the function."""
    fn = f.details["function"]
    outer = _probe_summary(fn, located, rows)
    if outer is None:
        return None
    # the cache belongs on the outer function if its own calls repeat, else on a nested one
    nested = [p for p in (_probe_summary(n, located, rows) for n in f.details.get("nested", []))
              if p is not None and p["repeat_pct"] >= min_repeat]
    probe = outer if outer["repeat_pct"] >= min_repeat or not nested else \
        max(nested, key=lambda p: p["repeat_pct"])
    # the detector's share assumed every call but one per request would be saved
    assumed = probe["calls"] - len(probe["rows"])
    saved = (None if f.share_pct is None else
             round(f.share_pct * probe["repeats"] / assumed, 2) if assumed > 0 else 0.0)
    # timed by the probe: a cache saves the time of the repeats, not their number -- a first
    # call that opens a connection or loads a file is most of the time and is not saved. The
    # whole time of the finding's function, times the part of it the repeats took (those of a
    # nested function: their time inside the outer function's calls)
    whole = whole_share(f)
    by_time = whole is not None and bool(outer.get("total_us")) and "repeat_us" in probe
    if by_time:
        saved = round(whole * min(1.0, probe["repeat_us"] / outer["total_us"]), 2)
    dismissed = ("different" if probe["repeat_pct"] < min_repeat
                 else "small" if saved is not None and saved < min_share else None)
    return Verdict(fn, outer, probe, assumed, saved, dismissed, min_repeat, min_share, by_time)


def apply_probe(findings: list[Finding], located: dict[str, str], rows: dict[str, list[dict]],
                thresholds: dict) -> tuple[list[Finding], list[dict]]:
    """The repeated-call findings checked against the argument probe (collectors/arg_probe.py):
    (findings kept, candidates dismissed with the reason).

    A call is a repeat when its (object, arguments) pair already came earlier in the same
    request: what a per-request cache keyed on them would answer. The share is rescaled from
    "every call but one" to the repeats measured. Kept when repeats are at least
    `min_repeat_pct` of the calls and the rescaled share is still `min_inclusive_share_pct`;
    dismissed otherwise (different data on most calls, or too little left to save). A function
    the probe could not locate or saw no call of keeps its finding, marked so."""
    kept, dismissed = [], []
    for f in findings:
        fn = f.details.get("function") if f.id == ID else None
        if fn is None:
            kept.append(f)
            continue
        v = judge(f, located, rows, thresholds[ID]["min_repeat_pct"], thresholds[ID]["min_inclusive_share_pct"])
        if v is None:
            mark_unprobed([f], describe_unprobed(fn in located))
            f.details["probe"]["located"] = located.get(fn)
            kept.append(f)
        elif v.dismissed:
            dismissed.append({"id": ID, "function": fn, "defined_at": v.outer["located"],
                              "reason": describe_dismissal(v), "probe": v.probe, "saved_pct": v.saved})
        else:
            if v.saved is not None:
                f.share_pct = v.saved
                f.severity = severity_for(f.share_pct, high=10, medium=3)
            describe_probed(f, v)
            f.details["probe"] = v.probe
            f.details["cache_at"] = v.probe["function"]
            kept.append(f)
    unlink_nested(kept, {d["function"] for d in dismissed})
    return kept, dismissed


def describe_unprobed(located: bool) -> str:
    return ("its definition was not found in the app's files" if not located
            else "the probed requests did not call it")


def describe_dismissal(v: Verdict) -> str:
    outer, probe = v.outer, v.probe
    if v.dismissed == "different":
        return (f"{outer['repeat_pct']:.0f}% of its {outer['calls']} probed calls repeated an "
                f"earlier (object, arguments) pair in their request (below {v.min_repeat:g}%): "
                f"different data each call, not a cache candidate")
    if v.by_time:
        first = (f" (its first call of each request took {v.first_pct:.0f}%: one-time work, such as "
                 f"opening a connection or loading a file, that a cache does not save)"
                 if v.first_pct is not None and v.first_pct >= 50 else "")
        return (f"{probe['repeat_pct']:.0f}% of the {probe['calls']} probed calls of {probe['function']} "
                f"repeated an earlier (object, arguments) pair, but they took {v.repeat_time_pct:.0f}% of "
                f"its time{first}: a cache would save about {v.saved:.1f}% of the request "
                f"(below {v.min_share:g}%)")
    return (f"{probe['repeat_pct']:.0f}% of the {probe['calls']} probed calls of {probe['function']} "
            f"repeated an earlier (object, arguments) pair: a cache would save about "
            f"{v.saved:.1f}% of the request (below {v.min_share:g}%)")


def describe_probed(f: Finding, v: Verdict) -> None:
    """The finding's title, summary and evidence with what the probe measured."""
    fn, outer, probe, saved = v.function, v.outer, v.probe, v.saved
    calls, repeats, probed = probe["calls"], probe["repeats"], probe["rows"]
    if saved is not None:
        for i, e in enumerate(f.evidence):
            if e.what == SAVE_LABEL:   # the share the finding states, with how it was rescaled
                how = (f"all its calls' time x {probe['repeat_us']} us of repeated calls / "
                       f"{outer['total_us']} us of all calls of {fn} (argument probe's timing)" if v.by_time
                       else f"x {repeats} repeats measured / {v.assumed} assumed (argument probe)")
                f.evidence[i] = Evidence(SAVE_LABEL, saved, f"{e.source}; {how}")
    per_request = sorted({r["distinct"] for r in probed})
    distinct = per_request[0] if len(per_request) == 1 else f"{per_request[0]}..{per_request[-1]}"
    source = (f"argument probe: {len(probed)} request(s) of "
              f"{', '.join(sorted({r['uri'] for r in probed})[:3])}"
              f"{' ...' if len({r['uri'] for r in probed}) > 3 else ''}")
    where = probe["function"]
    f.title = (f"{where} runs {round(calls / len(probed))} times per request, "
               f"{probe['repeat_pct']:.0f}% of them with an (object, arguments) pair it already had")
    f.summary += (f" The argument probe confirmed it: {repeats} of {calls} calls of {where} "
                  f"repeated an earlier (object, arguments) pair of their request ({distinct} "
                  f"distinct per request)"
                  + (f"; {fn} itself gets different arguments on {100 - outer['repeat_pct']:.0f}% "
                     f"of its calls, so the cache belongs on {where}, which it calls" if where != fn
                     else "")
                  + (f". Timed by the probe, those repeats took {v.repeat_time_pct:.0f}% of the time of "
                     f"{where}'s calls (its first call of each request {v.first_pct:.0f}%)" if v.by_time else "")
                  + (f". Counting only those repeats, a cache would save about {saved:.1f}% of "
                     f"the request." if saved is not None else "."))
    added = [
        Evidence(f"calls of {where} that repeat an earlier (object, arguments) pair",
                 f"{repeats} of {calls} ({probe['repeat_pct']:.0f}%)", source),
        *([Evidence(f"time of the calls of {where} that repeat an earlier pair",
                    f"{probe['repeat_us'] / 1000:.1f} of {probe['total_us'] / 1000:.1f} ms "
                    f"({v.repeat_time_pct:.0f}%); its first call of each request: {v.first_pct:.0f}%",
                    f"{source}, each call timed")] if v.by_time else []),
        Evidence("distinct (object, arguments) pairs per request", distinct, source),
        Evidence("defined at", probe["located"], "the target's files (PHP tokenizer)")]
    if where != fn:
        added.append(Evidence(f"calls of {fn} that repeat an earlier pair",
                              f"{outer['repeats']} of {outer['calls']} ({outer['repeat_pct']:.0f}%)", source))
    f.evidence[1:1] = added
