"""Findings that are one problem seen twice. When a query finding's statements name their PHP
sender (MediaWiki's `LCStoreDB::get`) and a repeated-call finding's function is reached through
that sender, the repeated calls are the query finding's own machinery (e.g. a connection lookup
per localisation query): fixing the query finding removes them. Such a repeated-call finding is
kept, and says so, so that the reader verifies the query fix first.

Likewise a repeated-call finding whose time is largely spent inside the calls of another
flagged function (WordPress: wp_get_registered_image_subsizes under wp_get_global_settings):
caching the outer one removes that part too, so their shares overlap (`link_nested_calls`)."""
from __future__ import annotations

from ..findings import Evidence, Finding
from .context import Context

CHAIN_DEPTH = 16     # callers followed up from the repeated function
MIN_INSIDE_PCT = 25.0   # of a repeated function's samples under another flagged one, to say so


def link_consequences(ctx: Context, findings: list[Finding]) -> list[Finding]:
    return link_nested_calls(ctx, _link_query_senders(ctx, findings))


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
        what = f"time spent inside calls of {outer}, flagged too"
        sentence = (f" {pct:.0f}% of its time is spent inside calls of {outer}, also flagged as a "
                    f"repeated call: caching that removes this part too, so the two shares overlap; "
                    f"verify the {outer} fix first.")
        inner.summary += sentence
        inner.evidence.append(Evidence(what, f"{pct:.0f}%", f"Excimer: samples with {fn} on the stack "
                                                          f"under {outer}, timed requests"))
        inner.details["inside"] = {"function": outer, "pct": round(pct, 1), "sentence": sentence, "what": what}
    return findings


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
            f.details["follows"] = {"id": query.id, "subject": query.subject, "sender": sender}
            f.evidence.append(Evidence(
                f"reached through {sender}, the sender of the {query.id} statements",
                f"{len(through)} of {len(profiles)} profiles",
                "xhprof: heaviest caller chain of each instrumented request"))
            f.summary += (f" Its calls come through `{sender}`, which sends the statements of the "
                          f"{query.id} finding (\"{query.title}\"): fixing that removes them, so "
                          "verify that fix first.")
            break
    return findings
