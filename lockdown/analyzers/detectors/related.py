"""Findings that are one problem seen twice. When a query finding's statements name their PHP
sender (MediaWiki's `LCStoreDB::get`) and a repeated-call finding's function is reached through
that sender, the repeated calls are the query finding's own machinery (e.g. a connection lookup
per localisation query): fixing the query finding removes them. Such a repeated-call finding is
kept, and says so, so that the reader verifies the query fix first.

Likewise a repeated-call finding whose time is largely spent inside the calls of another
flagged function (WordPress: wp_get_registered_image_subsizes under wp_get_global_settings):
caching the outer one removes that part too, so their shares overlap (`link_nested_calls`).

And a repeated-call finding whose calls are mostly made for the statements that query findings
report (`link_statement_builders`): an audit app's quoting helper `q()`, called twice per
translated message by `t($key)` (one query per message: db-static-cache) and once per
`setting($name)` (the same settings query again and again: repeated-query). Which statements a
function sends is taken from the data, not from names: the statements name it
(`sql_caller`), or, in every instrumented request, each of its calls sends one statement
(xhprof, through the client calls of `round_trip`) and it has exactly as many calls as the
request has statements of one shape, and of no other shape."""
from __future__ import annotations

from collections import Counter

from ...bundle.model import Statement
from ..findings import Evidence, Finding
from ..round_trip import is_client_call
from ..sql_caller import caller_of
from .context import Context
from ..sql_text import fp_of, is_marker, normalize

CHAIN_DEPTH = 16     # callers followed up from the repeated function
MAX_CALL_DEPTH = 400  # callees followed down by sent_per_call (Python's recursion limit is 1000)
MIN_INSIDE_PCT = 25.0   # of a repeated function's samples (or calls) under flagged work, to say so
# The query findings whose fix takes their statements out of the request, and with them the PHP
# that builds them: a cache (db-static-cache), a memo (repeated-query: all but the first
# execution), one batched query (n-plus-one), no write on a GET (write-on-read). Not
# unindexed-query: an index leaves the statement, and the code sending it, as it was.
REMOVED_BY_FIX = ("db-static-cache", "n-plus-one", "repeated-query", "write-on-read")
ONE_PER_CALL = 0.1   # statements per call of a sender: 1, within this


def link_consequences(ctx: Context, findings: list[Finding]) -> list[Finding]:
    return link_nested_calls(ctx, link_statement_builders(ctx, _link_query_senders(ctx, findings)))


def inside_pct(ctx: Context, fn: str, outer: str) -> float | None:
    """% of the timed requests' Excimer weight with `fn` on the stack that is spent inside a
    call of `outer` (`outer` above `fn`'s innermost frame); None without samples of `fn`."""
    on = inside = 0.0
    for rid, stacks in ctx.excimer.items():
        if rid not in ctx.timed_ids:
            continue
        for stack, w in stacks.items():
            frames = stack.split(";")
            if fn in frames:
                on += w
                if outer in frames[:len(frames) - frames[::-1].index(fn) - 1]:
                    inside += w
    return 100.0 * inside / on if on else None


def link_nested_calls(ctx: Context, findings: list[Finding]) -> list[Finding]:
    calls = [f for f in findings if f.id == "repeated-call" and f.details.get("function")]
    for inner in calls:
        fn = inner.details["function"]
        shares = [(pct, outer.details["function"]) for outer in calls if outer is not inner
                  for pct in [inside_pct(ctx, fn, outer.details["function"])] if pct is not None]
        pct, outer = max(shares, default=(0.0, None))
        if outer is None or pct < MIN_INSIDE_PCT:
            continue
        describe_inside(inner, outer, pct)
    return findings


def describe_inside(inner: Finding, outer: str, pct: float) -> None:
    """`inner`'s calls spend `pct` % of their time inside calls of `outer`, flagged too."""
    fn = inner.details["function"]
    what = f"time spent inside calls of {outer}, flagged too"
    sentence = (f" {pct:.0f}% of its time is spent inside calls of {outer}, also flagged as a "
                f"repeated call: caching that removes this part too, so the two shares overlap; "
                f"verify the {outer} fix first.")
    inner.summary += sentence
    inner.evidence.append(Evidence(what, f"{pct:.0f}%", f"Excimer: samples with {fn} on the stack "
                                                      f"under {outer}, timed requests"))
    inner.details["inside"] = {"function": outer, "pct": round(pct, 1), "sentence": sentence, "what": what}


def unlink_nested(findings: list[Finding], dismissed: set[str]) -> None:
    """Take back what `link_nested_calls` said about an outer function the argument probe
    dismissed: it is no finding any more."""
    for f in findings:
        inside = f.details.get("inside")
        if inside and inside["function"] in dismissed:
            f.summary = f.summary.replace(inside["sentence"], "")
            f.evidence = [e for e in f.evidence if e.what != inside["what"]]
            del f.details["inside"]


def _link_query_senders(ctx: Context, findings: list[Finding]) -> list[Finding]:
    senders = [(f, f.details["sender"]) for f in findings if f.details.get("sender")]
    if not senders:
        return findings
    for f in findings:
        if f.id != "repeated-call":
            continue
        function = f.details["function"]
        profiles = [rid for rid, totals in ctx.xhprof.items() if function in totals]
        if not profiles:
            continue
        for query, sender in senders:
            through = [rid for rid in profiles if sender in ctx.call_chain(rid, function, CHAIN_DEPTH)[:-1]]
            if len(through) * 2 <= len(profiles):
                continue
            describe_follows(f, query, sender, len(through), len(profiles))
            break
    return findings


def describe_follows(f: Finding, query: Finding, sender: str, through: int, profiles: int) -> None:
    """`f`'s calls come through `sender`, which sends `query`'s statements, in `through` of
    `profiles` instrumented requests."""
    f.details["follows"] = {"id": query.id, "subject": query.subject, "sender": sender}
    f.evidence.append(Evidence(
        f"reached through {sender}, the sender of the {query.id} statements",
        f"{through} of {profiles} profiles",
        "xhprof: heaviest caller chain of each instrumented request"))
    f.summary += (f" Its calls come through `{sender}`, which sends the statements of the "
                  f"{query.id} finding (\"{query.title}\"): fixing that removes them, so "
                  "verify that fix first.")


def link_statement_builders(ctx: Context, findings: list[Finding]) -> list[Finding]:
    """A repeated-call finding at least MIN_INSIDE_PCT of whose calls are made for the
    statements of query findings (`for_statements`) says so: the query fixes remove those
    calls, so the shares overlap. Findings `_link_query_senders` already linked are left as
    they are."""
    queries = [q for q in findings if q.id in REMOVED_BY_FIX
               and (q.details.get("statement") or q.details.get("fingerprint"))]
    calls = [f for f in findings if f.id == "repeated-call" and f.details.get("function")
             and "follows" not in f.details]
    if not queries or not calls:
        return findings
    senders = statement_senders(ctx)
    if not senders:
        return findings
    for f in calls:
        fn = f.details["function"]
        rids = [r["request"] for r in f.details.get("rows") or [] if r.get("request") in ctx.xhprof] or \
            [rid for rid in sorted(ctx.xhprof) if fn in ctx.xhprof[rid]]
        got = for_statements(ctx, fn, rids, queries, senders)
        if got is None:
            continue
        pct, by_query, by_sender = got
        if pct < MIN_INSIDE_PCT:
            continue
        describe_for_statements(f, pct, by_query, by_sender, queries, senders, len(rids))
    return findings


def describe_for_statements(f: Finding, pct: float, by_query: dict[int, float], by_sender: dict[str, float],
                            queries: list[Finding], senders: dict[str, tuple[str, str]], requests: int) -> None:
    """`pct` % of `f`'s calls are made for the statements of `queries` (`for_statements`)."""
    fn = f.details["function"]
    credited = sorted(((p, i) for i, p in by_query.items()), reverse=True)
    shown = [(p, i) for p, i in credited if round(p) > 0]     # the summary's; details keep all
    named = [f'{p:.0f}% for {queries[i].id} ("{queries[i].title}")' for p, i in shown[:3]]
    if len(shown) > 3:
        named.append(f"{sum(p for p, _ in shown[3:]):.0f}% for {len(shown) - 3} more")
    through = sorted(by_sender, key=lambda s: -by_sender[s])
    fixes = "that fix" if len(shown) == 1 else "those fixes"
    what = "calls made for the statements of query findings, flagged too"
    sentence = (f" {pct:.0f}% of its calls are made inside calls of {_describe_names(through)}, for the "
                f"statements that query findings report: {'; '.join(named)}. Fixing "
                f"{'it' if len(shown) == 1 else 'them'} removes these calls too, so the shares "
                f"overlap; verify {fixes} first.")
    f.summary += sentence
    shapes = "; ".join(f"{s}: {senders[s][1] if senders[s][0] == 'shape' else 'named in its statements'}"
                       for s in through[:3])
    f.evidence.append(Evidence(what, f"{pct:.0f}%", (
        f"xhprof: calls of {fn} under functions that send one statement per call ({shapes}), "
        f"{requests} instrumented request{'s' * (requests != 1)}; the findings' statements "
        "in the same requests (statements.jsonl)")))
    f.details["for_statements"] = {
        "pct": round(pct, 1), "sentence": sentence, "what": what,
        "findings": [{"id": queries[i].id, "subject": queries[i].subject, "pct": round(p, 1)}
                     for p, i in credited],
        "senders": {s: {"statements": senders[s][1] if senders[s][0] == "shape" else None,
                        "named": senders[s][0] == "named", "pct": round(by_sender[s], 1)}
                    for s in through}}


def _describe_names(functions: list[str]) -> str:
    shown = functions[:3] + ([f"{len(functions) - 3} more"] if len(functions) > 3 else [])
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]


def statement_senders(ctx: Context) -> dict[str, tuple[str, str]]:
    """Function -> ("named", function) when statements name it as their sender (`sql_caller`),
    or ("shape", fingerprint) when, in every instrumented request that calls it, each of its
    calls sends one statement (`sent_per_call`) and its calls are as many as the request's
    statements of that fingerprint, and of no other (several requests with different counts
    single one out; a tie left in every request leaves the function out)."""
    candidates: dict[str, set[str]] = {}
    left_out: set[str] = set()
    for rid in sorted(ctx.xhprof):
        totals = ctx.xhprof[rid]
        shapes = Counter(fp_of(s.sql) for s in ctx.statements_of.get(rid, ()) if not is_marker(s.sql))
        by_count: dict[int, set[str]] = {}
        for shape, n in shapes.items():
            by_count.setdefault(n, set()).add(shape)
        rate = sent_per_call(ctx.xhprof_edges[rid], totals)
        for fn, t in totals.items():
            if fn == "main()" or fn in left_out or ctx.is_internal(fn):
                continue
            same = by_count.get(t["calls"])
            if not same or abs(rate(fn) - 1.0) > ONE_PER_CALL:
                left_out.add(fn)
                candidates.pop(fn, None)
                continue
            candidates[fn] = candidates[fn] & same if fn in candidates else set(same)
    out = {fn: ("shape", next(iter(shapes))) for fn, shapes in candidates.items() if len(shapes) == 1}
    for name in {caller_of(s.sql) for s in ctx.statements if not is_marker(s.sql)} - {None}:
        out[name] = ("named", name)
    return out


def sent_per_call(edges: dict[tuple[str, str], dict], totals: dict[str, dict]):
    """A function of one request's xhprof: statements sent per call under a function (client
    calls, `round_trip`), each callee counted at its own rate per call for the calls it gets
    from the caller (xhprof keeps one level of context: a callee called from several places is
    taken to send as much per call from each)."""
    children: dict[str, list[tuple[str, int]]] = {}
    for (parent, child), v in edges.items():
        children.setdefault(parent, []).append((child, v["ct"]))
    exact: dict[str, float] = {}    # rates whose walk no recursion cut short: the same from any walk
    cut = [0]

    def rate(fn: str) -> float:
        # each function's own walk: a memo shared between walks kept the rate of a function first
        # reached inside another's walk, where a recursion back to a caller on that walk's path
        # counted 0 (Laravel's getRelationshipFromMethod, reached under its middleware pipeline:
        # 0 for good). What no cut touched is shared.
        return _walk(fn, frozenset(), {})

    def _walk(fn: str, seen: frozenset, memo: dict[str, float]) -> float:
        if is_client_call(fn):
            return 1.0
        if fn in exact:
            return exact[fn]
        if fn in memo:
            return memo[fn]
        calls = (totals.get(fn) or {}).get("calls") or 0
        if not calls:
            return 0.0
        if fn in seen or len(seen) >= MAX_CALL_DEPTH:
            cut[0] += 1
            return 0.0           # a recursion's back edge counts 0
        before = cut[0]
        value = sum(ct * _walk(child, seen | {fn}, memo) for child, ct in children.get(fn, ()) if child != fn) / calls
        (exact if cut[0] == before else memo)[fn] = value
        return value
    return rate


def for_statements(ctx: Context, fn: str, rids: list[str], queries: list[Finding],
                   senders: dict[str, tuple[str, str]]) -> tuple[float, dict[int, float], dict[str, float]] | None:
    """(% of `fn`'s calls made for statements the `queries` remove, that % per query finding
    (index), per sender) over the instrumented requests `rids`; None without calls.

    A call made inside a sender's call counts for the part of that sender's statements in the
    request that a finding removes. A caller that sends nothing passes on its own callers'
    parts, in proportion to the calls it gets from each (xhprof's one level of context)."""
    calls_total = 0
    credit: Counter = Counter()
    for rid in rids:
        calls = (ctx.xhprof[rid].get(fn) or {}).get("calls") or 0
        if not calls:
            continue
        calls_total += calls
        stmts = [s for s in ctx.statements_of.get(rid, ()) if not is_marker(s.sql)]
        removed = [{id(s) for s in _removed(q, stmts)} if ctx.url_of.get(rid) in q.urls else set()
                   for q in queries]
        weights: dict[str, dict[tuple[int, str], float]] = {}
        for sender, how in senders.items():
            sent = [s for s in stmts if (caller_of(s.sql) == how[1] if how[0] == "named" else fp_of(s.sql) == how[1])]
            if sent:
                weights[sender] = {(i, sender): len(gone & {id(s) for s in sent}) / len(sent)
                                   for i, gone in enumerate(removed) if gone}
        for key, part in _parts(ctx.xhprof_edges[rid], fn, weights).items():
            credit[key] += calls * part
    if not calls_total:
        return None
    by_query: Counter = Counter()
    by_sender: Counter = Counter()
    for (i, sender), n in credit.items():
        by_query[i] += 100.0 * n / calls_total
        by_sender[sender] += 100.0 * n / calls_total
    by_query = Counter({i: p for i, p in by_query.items() if p > 0})
    by_sender = Counter({s: p for s, p in by_sender.items() if p > 0})
    return sum(by_query.values()), dict(by_query), dict(by_sender)


def _removed(query: Finding, statements: list[Statement]) -> list[Statement]:
    """The statements of one request that fixing `query` takes out: its own, but for the
    first execution of a repeated one, which a memo still sends."""
    d = query.details
    if query.id == "repeated-query":
        return [s for s in statements if normalize(s.sql) == d["statement"]][1:]
    return [s for s in statements if fp_of(s.sql) == d["fingerprint"]]


def _parts(edges: dict[tuple[str, str], dict], fn: str,
           weights: dict[str, dict[tuple[int, str], float]]) -> dict[tuple[int, str], float]:
    """Per (query finding, sender): the part of `fn`'s calls in one request made inside that
    sender's calls for that finding's statements (`for_statements`)."""
    callers: dict[str, list[tuple[str, int]]] = {}
    for (parent, child), v in edges.items():
        if parent != child:
            callers.setdefault(child, []).append((parent, v["ct"]))
    memo: dict[str, dict] = {}

    def part(f: str, seen: frozenset) -> dict:
        if f in weights:
            return weights[f]
        if f in memo:
            return memo[f]
        ins = callers.get(f, [])
        total = sum(ct for _, ct in ins)
        out: Counter = Counter()
        if total and len(seen) < CHAIN_DEPTH:
            for parent, ct in ins:
                if parent not in seen:
                    for key, v in part(parent, seen | {f}).items():
                        out[key] += ct * v / total
        memo[f] = dict(out)
        return memo[f]
    return part(fn, frozenset())
