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
callbacks. Functions that run callbacks themselves or through their callees
(call_user_func*, array_map, usort...) are dispatchers and are skipped, and so are functions xhprof
saw re-entered (`f@1`): their inclusive time counts nested calls twice (render_block), and a
recursive walker belongs to fs-scan. Functions that send SQL themselves (wpdb::_do_query) are
left to the query detectors, and so is any function each of whose calls ends in a query.
Loaders are skipped too: when Excimer shows that at least `max_include_share_pct` of the time
under a function is spent in script files it includes itself (`drupal_load` ->
`modules/x/x.module`), each call loads a different file -- xhprof, which keeps neither
arguments nor includes, cannot tell that from a repeat.

Share of request time: the function's inclusive time minus what one call would cost, over
the request's wall time (what memoization would save), median over the profiled requests.
"""
from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass

from ..builtins import base_name
from ..findings import Evidence, Finding, severity_for
from ..round_trip import is_client_call
from .context import Context
from .related import unlink_nested

ID = "repeated-call"
SUBJECT = "function"  # what tells its findings apart (findings.SUBJECT_KEYS)
SAVE_LABEL = "share of request time a cache would save, %"


DISPATCH = {"call_user_func", "call_user_func_array", "array_map", "array_walk", "usort", "uasort",
            "uksort", "array_filter", "array_reduce", "iterator_apply"}


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


def dispatchers(edges: dict) -> set[str]:
    """Functions that run callbacks directly or one call away (do_action -> apply_filters ->
    call_user_func_array): each call runs different code, so they are not memoization
    candidates. A deeper callback (get_merged_data -> get_theme_data -> apply_filters) is part
    of the work and does not disqualify."""
    direct = {p for (p, c) in edges if c in DISPATCH}
    return direct | {p for (p, c) in edges if c in direct}


def sends_sql_each_call(edges: dict, fn: str, calls: int) -> bool:
    """Every call of `fn` ends in a query (setting() -> db_value() -> db_query() ->
    mysqli::query, each at least once per call): a query pattern, the query detectors'
    business. Followed only along edges called at least once per call of `fn`, so a function
    whose first call fills a cache from the database (get_merged_data) is not one."""
    todo, seen = [fn], {fn}
    while todo:
        f = todo.pop()
        for (p, c), v in edges.items():
            if p == f and v["ct"] >= calls and c not in seen:
                if sends_sql(c):
                    return True
                seen.add(c)
                todo.append(c)
    return False


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


def timed_per_call_us(ctx: Context, fn: str, rows: list[dict]) -> float | None:
    """Inclusive time per call of `fn` in the timed requests of the URLs it was flagged on: each
    request's wall time x the share of its Excimer samples with `fn` on the stack, averaged,
    over the mean calls xhprof counted there. xhprof's own inclusive time comes from the
    instrumented requests, which run several times slower (most in call-heavy code like this:
    WordPress's wp_get_global_settings, 2767 us per call under xhprof, about 400 us timed)."""
    urls = {r["url"] for r in rows}
    spent = []
    for r in ctx.timed:
        stacks = ctx.excimer.get(r.id) or {}
        total = sum(stacks.values())
        if ctx.url_of[r.id] in urls and total:
            spent.append(r.wall_us * sum(w for s, w in stacks.items() if fn in s.split(";")) / total)
    if not spent:
        return None
    return statistics.fmean(spent) / statistics.fmean(r["calls"] for r in rows)


def saved_share(ctx: Context, fn: str, rows: list[dict]) -> float:
    """% of request time a per-request cache of `fn` would save: Excimer's share of the timed
    requests' samples with `fn` on the stack, less one call's worth; xhprof's inclusive time
    (inflated by instrumentation) only without Excimer samples."""
    calls_med = statistics.median(r["calls"] for r in rows)
    if ctx.excimer_total:          # sampled wall time: no instrumentation overhead in it
        return ctx.php_share_pct(lambda f: f == fn) * (calls_med - 1) / calls_med
    return statistics.median(r["saved_pct"] for r in rows)


def _callers(ctx: Context, fn: str) -> set[str]:
    return {p for edges in ctx.xhprof_edges.values() for (p, c) in edges if c == fn}


def _hits(ctx: Context) -> dict[str, list[dict]]:
    """Function -> a row per profiled request where it is a candidate (module docstring):
    called often enough, costly enough, the same callees on every call, not a dispatcher, not
    recursive, not a query sender."""
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
        skip = recursive_functions(ctx.xhprof_profiles[rid]) | dispatchers(edges)
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
            saved = t["inclusive_us"] * (t["calls"] - 1) / t["calls"]
            callers = sorted(((v["ct"], p) for (p, c), v in edges.items() if c == fn), reverse=True)
            hits[fn].append({"request": rid, "url": ctx.url_of.get(rid, "?"), "calls": t["calls"],
                             "inclusive_us": t["inclusive_us"], "main_us": main,
                             "saved_pct": 100.0 * min(saved, main) / main, "callees": ncallees,
                             "callers": [f"{p} ({ct})" for ct, p in callers[:3]]})
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
        cases.append(Case(fn, rows, share, bool(ctx.excimer_total),
                          statistics.median(r["inclusive_us"] / r["calls"] for r in rows), timed_call,
                          sorted(f for f, outer in inner.items() if outer == fn),
                          ctx.call_chain(rows[0]["request"], fn)))
    return cases


def detect(ctx: Context) -> list[Finding]:
    return [describe(c) for c in decide(ctx)]


def describe(c: Case) -> Finding:
    fn, rows, share, per_call, timed_call, nested = c.function, c.rows, c.share, c.per_call, c.timed_call, c.nested
    calls = [r["calls"] for r in rows]
    share_source = ("Excimer samples with it on the stack x (calls-1)/calls, timed requests" if c.by_excimer
                    else "xhprof: inclusive time x (calls-1)/calls over the request's wall time")
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
                 f"save about {share:.1f}% of the request."),
        evidence=[Evidence("calls per request", lo if lo == hi else f"{lo}..{hi}", f"xhprof of {len(rids)} request{'s' * (len(rids) != 1)}: {', '.join(rids[:3])}{' ...' if len(rids) > 3 else ''}"),
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
                  *([Evidence("repeated inside it, as often", ", ".join(nested), "xhprof edges")] if nested else [])],
        urls=urls, requests=rids[:5], details={"function": fn, "nested": nested, "rows": rows})


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
    return {"function": fn, "located": located[fn], "requests": len(probed), "calls": calls,
            "repeats": repeats, "repeat_pct": round(100.0 * repeats / calls, 1), "rows": probed}


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
    dismissed = ("different" if probe["repeat_pct"] < min_repeat
                 else "small" if saved is not None and saved < min_share else None)
    return Verdict(fn, outer, probe, assumed, saved, dismissed, min_repeat, min_share)


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
                f.evidence[i] = Evidence(SAVE_LABEL, saved, f"{e.source}; x {repeats} repeats "
                                         f"measured / {v.assumed} assumed (argument probe)")
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
                  + (f". Counting only those repeats, a cache would save about {saved:.1f}% of "
                     f"the request." if saved is not None else "."))
    f.evidence[1:1] = [
        Evidence(f"calls of {where} that repeat an earlier (object, arguments) pair",
                 f"{repeats} of {calls} ({probe['repeat_pct']:.0f}%)", source),
        Evidence("distinct (object, arguments) pairs per request", distinct, source),
        Evidence("defined at", probe["located"], "the target's files (PHP tokenizer)")]
    if where != fn:
        f.evidence.insert(4, Evidence(f"calls of {fn} that repeat an earlier pair",
                                      f"{outer['repeats']} of {outer['calls']} ({outer['repeat_pct']:.0f}%)",
                                      source))
