"""Findings that are one problem seen twice. When a query finding's statements name their PHP
sender (MediaWiki's `LCStoreDB::get`) and a repeated-call finding's function is reached through
that sender, the repeated calls are the query finding's own machinery (e.g. a connection lookup
per localisation query): fixing the query finding removes them. Such a repeated-call finding is
kept, and says so, so that the reader verifies the query fix first."""
from __future__ import annotations

from ..findings import Evidence, Finding
from .context import Context

CHAIN_DEPTH = 16     # callers followed up from the repeated function


def link_consequences(ctx: Context, findings: list[Finding]) -> list[Finding]:
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
