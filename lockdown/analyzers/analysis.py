"""`lockdown analyze`: every view of one bundle, as plain data (a pure function of the bundle).

Every view is computed over a selection of the capture's requests: all of them, one URL, or one
request, so the same tables answer "where does this site spend time", "and on this page", "and
in this request"."""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import asdict
from weakref import WeakKeyDictionary

from ..bundle.model import PerfSample
from ..bundle.store import Bundle
from ..errors import LockdownError
from . import budget, db_status, engine_state, off_cpu, query_digest, round_trip, subsystems, tail
from .builtins import hot_builtins
from .native_functions import hot_native
from .php_functions import hot_functions
from .symbolize import Identity, jit_name, symbolize, tables_for


_SYMBOLIZED: WeakKeyDictionary = WeakKeyDictionary()


def symbolized(bundle: Bundle) -> tuple[list[PerfSample], Identity]:
    """Every perf sample of the bundle with its frames named (symbolize.symbolize), and the
    counts of what was named: computed once per opened bundle and kept while it lives, since
    `analyze` and the detectors' Context (detectors/context.py) both read them, on one Bundle
    in a `run`. The samples and counts are shared: read them, do not change them."""
    got = _SYMBOLIZED.get(bundle)
    if got is None:
        identity = Identity()
        samples = symbolize(bundle.perf_samples(), tables_for(bundle.build_ids()), identity,
                            jit_name(bundle.manifest))
        got = _SYMBOLIZED[bundle] = (samples, identity)
    return got


class SelectionError(LockdownError):
    """--request or --url names nothing in the bundle."""


def select(requests: list, request: str | None = None, url: str | None = None,
           source: str | os.PathLike = "the bundle's requests.jsonl") -> list:
    """The requests a view covers; one clear error when the selection is empty. `source` is
    the bundle's requests file, named when it holds no request at all."""
    if not requests:
        raise SelectionError(f"{source} holds no requests; capture again")
    chosen = [r for r in requests if (request is None or r.id == request)
              and (url is None or (r.url or r.uri) == url)]
    if not chosen:
        if request is not None:
            what = f"request {request!r}" + (f" for URL {url!r}" if url is not None else "")
            known = [r.id for r in requests[:3]]
        else:
            what, known = f"URL {url!r}", sorted({r.url or r.uri for r in requests})[:5]
        raise SelectionError(f"no {what} in this bundle (it has e.g. {', '.join(known)}); "
                             f"see `lockdown analyze BUNDLE --json` for the list")
    return chosen


def query_classes(bundle: Bundle, url: str | None = None) -> tuple[list, int]:
    """Every query class of the capture (or of one URL's requests), and the requests they are
    of: what `analyzers/versus.py` compares, beyond an analysis' top rows."""
    requests = select(bundle.requests(), None, url, bundle.root / "requests.jsonl")
    ids = {r.id for r in requests}
    statements = [s for s in bundle.statements() if url is None or s.request in ids]
    return query_digest.digest(statements, requests), len(requests)


def analyze(bundle: Bundle, top: int = 20, request: str | None = None, url: str | None = None,
            queries: int | None = None) -> dict:
    """Every view of `bundle` (or of one request or URL's requests), `top` rows per table;
    `queries` query classes (None: `top`; 0: every class)."""
    requests = select(bundle.requests(), request, url, bundle.root / "requests.jsonl")
    ids = {r.id for r in requests}
    whole = request is None and url is None
    instrumented = {r.id for r in requests if r.instrumented}
    url_of = {r.id: (r.url or r.uri) for r in requests}
    named, identity = symbolized(bundle)
    samples = [s for s in named if s.request in ids and s.request not in instrumented]
    statements = [s for s in bundle.statements() if whole or s.request in ids]
    out: dict = {"bundle": str(bundle.root), "target": bundle.manifest["target"]["name"],
                 "selection": {"request": request, "url": url}, "requests": len(requests),
                 "instrumented_left_out": len(instrumented)}
    if samples:
        out.update(_native_views(samples, url_of, identity, top))
    out.update(_time_views(bundle.manifest, requests, statements, samples, instrumented, url_of))
    profiles = [p for p in bundle.excimer() if p.request in ids]
    if profiles:
        funcs, total, count = hot_functions(profiles, exclude=instrumented)
        # samples: the summed weights (timer periods) every share rests on; sample_count: the
        # samples themselves (a late one weighs more than 1)
        out["php_functions"] = {"samples": total, "top": [asdict(f) for f in funcs[:top]],
                                "sample_count": count}
    xh = {i: bundle.xhprof(i) for i in bundle.xhprof_ids() if i in ids}
    waits = _off_cpu(bundle.manifest, requests, profiles, samples, xh, instrumented)
    if waits is not None:
        out["off_cpu"] = waits
    out.update(_engine_views(bundle.manifest, requests, whole, xh, top))
    trip = _round_trip(xh, statements, requests)
    if trip is not None:
        out["db_round_trip"] = trip
    if statements:
        out["queries"] = _queries(statements, requests, request, top if queries is None else queries or None)
    return out


def _native_views(samples: list, url_of: dict, identity: Identity, top: int) -> dict:
    """`subsystems` and `native_functions`, from the perf samples."""
    overall = subsystems.breakdown(samples)
    per_url = subsystems.breakdown(samples, key=lambda s: url_of[s.request])
    natives, total = hot_native(samples, top)
    return {"subsystems": {"samples": sum(overall.values()), "overall": _shares(overall),
                           "symbols": identity.to_json(),
                           "by_url": {u: _shares(c) for u, c in sorted(per_url.items())},
                           # each URL's shares rest on this many samples: 8 make 12.5% steps
                           "samples_by_url": {u: sum(c.values()) for u, c in sorted(per_url.items())}},
            "native_functions": {"samples": total, "top": [asdict(f) for f in natives]}}


def _time_views(manifest: dict, requests: list, statements: list, samples: list, instrumented: set,
                url_of: dict) -> dict:
    """Each request's time budget, by URL and overall; the scheduler's summary, the slow
    tails, and one row per request."""
    budgets = budget.request_budgets(requests, statements, samples)
    out: dict = {"budget_by_url": {u: asdict(b) for u, b in sorted(budget.by_url(requests, budgets).items())}}
    out["budget_overall"] = asdict(budget.mean_budget(
        [b for rid, b in budgets.items() if rid not in instrumented]))
    sched = budget.scheduling(requests, budgets)
    if sched is not None:
        driver, host = manifest.get("driver") or {}, manifest.get("host") or {}
        out["scheduling"] = {**sched, "concurrency": driver.get("concurrency"),
                             "workers": driver.get("workers"), "cpus": host.get("cpus")}
    slow_tails = tail.tails(requests, budgets, statements)
    if slow_tails:
        out["tail"] = [asdict(t) for t in slow_tails]
    counts = Counter(s.request for s in statements if s.request)
    out["by_request"] = [{"id": r.id, "url": url_of[r.id], "status": r.status, "pid": r.pid,
                          "instrumented": r.instrumented, "statements": counts[r.id], "sched": r.sched,
                          **asdict(budgets[r.id])} for r in requests]
    return out


def _engine_views(manifest: dict, requests: list, whole: bool, xh: dict, top: int) -> dict:
    """`engine_state`, `database_status` (the whole capture only) and the hot `builtins`."""
    out: dict = {}
    php = manifest.get("php", {})
    state = engine_state.summarize(requests, php.get("ini"), engine_state.app_tree(manifest))
    if state is not None:
        out["engine_state"] = state.to_json()
    server = db_status.summarize(manifest.get("database")) if whole else None
    if server is not None:      # server-wide counters: the whole capture only
        out["database_status"] = server.to_json()
    if xh and php.get("internal_functions"):
        rows = hot_builtins(xh.values(), php["internal_functions"], php.get("internal_classes") or [])
        out["builtins"] = {"profiles": len(xh), "top": [dict(asdict(b), calls_per_request=b.calls / len(xh))
                                                         for b in rows[:top]]}
    return out


def _round_trip(xh: dict, statements: list, requests: list) -> dict | None:
    """`db_round_trip`: the statements' client side, which db wait (the server's Query_time)
    leaves in cpu and other wait: minicms 22.8 ms of db wait, and 185 statements x 128 us
    besides. Measured on the instrumented requests, applied to the timed ones at most what
    each one's statements left of its wall time (round_trip.applied): per_call_us is the mean
    so applied, measured_per_call_us the instrumented requests' own."""
    statements_of = query_digest.by_request(statements)
    rt = round_trip.measure(xh, statements_of) if xh else None
    timed = [r for r in requests if not r.instrumented]
    if rt is None or not timed:
        return None
    trip = round_trip.applied(rt, timed, statements_of)
    return {**asdict(rt), "measured_per_call_us": rt.per_call_us,
            "per_call_us": trip.mean_us,
            "capped_requests": trip.capped,
            "statements_per_request": round(trip.statements / len(timed), 2),
            "us_per_request": round(trip.us / len(timed), 1)}


def _queries(statements: list, requests: list, request: str | None, top: int | None) -> dict:
    """`queries`: the statements' classes (the first `top`, or all with None), and with one
    request selected, its statements in order."""
    classes = query_digest.digest(statements, requests)
    out = {"statements": len(statements),
           "attribution": dict(Counter(s.attribution for s in statements)),
           "classes": [asdict(c) for c in classes[:top]],
           "class_count": len(classes)}
    if request is not None:
        out["in_order"] = [
            {"seq": s.seq, "duration_us": s.duration_us, "rows_sent": s.rows_sent,
             "rows_examined": s.rows_examined, "attribution": s.attribution, "sql": s.sql}
            for s in query_digest.by_request(statements).get(request, [])]
    return out


def _off_cpu(manifest: dict, requests: list, profiles: list, samples: list, xh: dict, instrumented: set,
             top: int = 15) -> dict | None:
    """Where PHP waited off the CPU (analyzers/off_cpu.py): Excimer on the wall clock and perf
    both collected. Rows kept only where the estimate stands out of its sampling error."""
    found = off_cpu.of_capture(manifest, requests, profiles, samples, list(xh.values()), instrumented)
    if found is None:
        return None
    rows = off_cpu.significant(found.functions)
    return {**{k: v for k, v in asdict(found).items() if k != "functions"},
            "excimer_period_ms": (manifest.get("capture") or {}).get("excimer_period_ms"),
            "functions": [asdict(r) for r in rows[:top]], "functions_significant": len(rows),
            "functions_sampled": len(found.functions)}


def _shares(counts: Counter) -> dict:
    total = sum(counts.values())
    return {k: round(100.0 * v / total, 2) for k, v in counts.most_common()} if total else {}
