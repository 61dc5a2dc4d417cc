"""Everything detectors read, built once from a bundle (a pure function of it).

Detectors get ready-made views instead of the raw bundle: requests and which of them are timed
(xhprof-instrumented ones are slower and left out of timing), statements per request in log
order, xhprof function totals and caller->callee edges per instrumented request, Excimer's
folded PHP stacks per request, the named native samples, and the engine's configuration as the
capture saw it. Shares of request time are estimated from Excimer (wall-clock samples by
default) and from statement durations."""
from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property

from ...bundle.model import ExcimerProfile, PerfSample, RequestRecord, Statement
from ...bundle.store import Bundle
from ..builtins import ROOT, entries, function_totals
from ..closure_names import Joins, join
from ..engine_state import EngineState, app_tree, summarize
from ..query_digest import by_request, fingerprint
from ..round_trip import Applied, RoundTrip, app_statements, applied, measure
from ..sql_caller import caller_of
from ..analysis import symbolized


@dataclass
class Context:
    requests: list[RequestRecord]
    statements: list[Statement]
    xhprof_profiles: dict[str, dict]            # request id -> raw xhprof array
    excimer: dict[str, dict[str, float]]        # request id -> {folded PHP stack: weight}
    native: list[PerfSample]                    # named samples of timed requests
    manifest: dict
    thresholds: dict = field(default_factory=dict)
    excimer_profiles: list[ExcimerProfile] = field(default_factory=list)   # with sample times
    # engine events per request of a watched worker: request id -> {event: count}
    # (collectors/engine_events.py; {} when the bundle did not count them)
    engine_events: dict[str, dict[str, int]] = field(default_factory=dict)

    # -- requests -------------------------------------------------------------------------
    @cached_property
    def url_of(self) -> dict[str, str]:
        return {r.id: (r.url or r.uri) for r in self.requests}

    @cached_property
    def timed(self) -> list[RequestRecord]:
        return [r for r in self.requests if not r.instrumented]

    @cached_property
    def timed_ids(self) -> frozenset[str]:
        return frozenset(r.id for r in self.timed)

    @cached_property
    def wall_us_total(self) -> float:
        return float(sum(r.wall_us for r in self.timed))

    @cached_property
    def by_url(self) -> dict[str, list[RequestRecord]]:
        out: dict[str, list[RequestRecord]] = {}
        for r in self.requests:
            out.setdefault(self.url_of[r.id], []).append(r)
        return out

    # -- statements -----------------------------------------------------------------------
    @cached_property
    def statements_of(self) -> dict[str, list[Statement]]:
        """Request id -> its statements in log order (every request has an entry)."""
        got = by_request(self.statements)
        return {r.id: got.get(r.id, []) for r in self.requests}

    @cached_property
    def after_release(self) -> frozenset[int]:
        """Seqs of the statements sent after the app released its response
        (fastcgi_finish_request, then shutdown functions): the last `after_release_statements`
        of each such request, which the client did not wait for."""
        late: set[int] = set()
        for r in self.requests:
            n = r.after_release_statements if r.released_early else 0
            mine = self.statements_of.get(r.id, [])
            if not n or n <= 0 or not mine:
                continue
            # on the request's own connection (the one most of its statements used): once the
            # response is out the client's next request starts, and its first statements may
            # be credited to this one (both list the new connection)
            own = Counter(s.thread_id for s in mine).most_common(1)[0][0]
            late.update(s.seq for s in sorted((s for s in mine if s.thread_id == own), key=lambda s: s.seq)[-n:])
        return frozenset(late)

    @cached_property
    def round_trip(self) -> RoundTrip | None:
        """The mean client-side time a statement costs beyond its server time, measured on
        the instrumented requests (`round_trip.measure`); None without client calls in xhprof."""
        return measure(self.xhprof_profiles, self.statements_of)

    @cached_property
    def round_trip_applied(self) -> Applied | None:
        """That round trip as the timed requests can have spent it: per request, at most what
        its own statements left of its wall time (`round_trip.applied`)."""
        rt = self.round_trip
        return None if rt is None else applied(rt, self.timed, self.statements_of)

    @cached_property
    def overfull(self) -> frozenset[str]:
        """Timed requests whose statements took longer in the server than the request's wall
        time: impossible for statements the request sent one after the other, so some are not
        its own (a statement tied to the wrong request). Their part of any share is at most
        their wall time."""
        return frozenset(r.id for r in self.timed
                         if sum(s.duration_us for s in app_statements(self.statements_of[r.id])) > r.wall_us)

    def shapes_on_urls(self, matches: Callable[[Statement], bool], min_share: float,
                       among: Callable[[RequestRecord], bool] | None = None) -> list[tuple[str, list[str], dict]]:
        """Statements that `matches`, by fingerprint: (fingerprint, the URLs on at least
        `min_share` of whose requests one ran, {URL: request ids}), fingerprints in order; those
        on no such URL left out. What a query detector calls 'on most views of a page'. With
        `among`, only the requests it accepts count, sending or not (write-on-read: the GETs)."""
        chosen = (lambda r: True) if among is None else among
        seen: dict[str, dict[str, set]] = defaultdict(lambda: defaultdict(set))
        for r in self.requests:
            if not chosen(r):
                continue
            for s in self.statements_of[r.id]:
                if matches(s):
                    seen[fingerprint(s.sql)][self.url_of[r.id]].add(r.id)
        out = []
        for fp, per_url in sorted(seen.items()):
            urls = sorted(u for u, rids in per_url.items()
                          if len(rids) >= min_share * sum(1 for r in self.by_url[u] if chosen(r)))
            if urls:
                out.append((fp, urls, per_url))
        return out

    def _share(self, statements: Iterable[Statement], round_trips: bool) -> float:
        """% of the timed requests' wall time these statements of theirs cost: per request,
        server time (plus the round trip applied to that request, each), at most its wall time."""
        trip = self.round_trip_applied if round_trips else None
        part: dict[str, float] = defaultdict(float)
        for s in statements:
            if s.request in self.timed_ids:
                part[s.request] += s.duration_us + (trip.per_call_us.get(s.request, 0.0) if trip else 0.0)
        if not self.wall_us_total:
            return 0.0
        us = sum(min(v, self.request_of[rid].wall_us) for rid, v in part.items())
        return 100.0 * us / self.wall_us_total

    def server_share_of(self, statements: Iterable[Statement]) -> float:
        """Server-side duration of these statements of timed requests, as % of their wall time."""
        return self._share(statements, round_trips=False)

    def share_of(self, statements: Iterable[Statement]) -> float:
        """What these statements of timed requests cost the requests, as % of their wall time:
        server time plus one round trip each, as applied to their request (server time only when
        none was measured). Never above 100: a request's part is at most its wall time."""
        return self._share(statements, round_trips=self.round_trip is not None)

    @cached_property
    def sent_by(self) -> Counter:
        """Timed requests' statements per PHP sender they name (`sql_caller.caller_of`)."""
        return Counter(caller_of(s.sql) for s in self.statements if s.request in self.timed_ids)

    # -- xhprof ---------------------------------------------------------------------------
    @cached_property
    def xhprof(self) -> dict[str, dict[str, dict]]:
        """Request id -> function -> {calls, inclusive_us, exclusive_us, allocations}."""
        return {rid: function_totals(p, self.is_internal) for rid, p in self.xhprof_profiles.items()}

    @cached_property
    def xhprof_edges(self) -> dict[str, dict[tuple[str, str], dict]]:
        """Request id -> (caller, callee) -> {ct, wt}, recursion markers removed (and
        tideways' doubled internal self-calls, as in `builtins.entries`). A call made by a
        file's top-level code has no caller in tideways' array (WordPress: 90 keys such
        as `define` or `do_action` from wp-settings.php); its caller is `main()`, xhprof's name
        for that code, so that such calls count like any other."""
        out = {}
        for rid, p in self.xhprof_profiles.items():
            edges: dict[tuple[str, str], dict] = {}
            for parent, child, v in entries(p, self.is_internal):
                if child == ROOT:
                    continue                # the root's own entry, not a call
                e = edges.setdefault((parent or ROOT, child), {"ct": 0, "wt": 0})
                e["ct"] += v.get("ct", 0)
                e["wt"] += v.get("wt", 0)
            out[rid] = edges
        return out

    @cached_property
    def closure_joins(self) -> Joins:
        """Excimer closure frames (`{closure:FILE(LINE)}`) joined to xhprof's names of them
        (`Cls::Ns\\{closure}`), where the call graph tells (analyzers/closure_names.py)."""
        if not self.xhprof_profiles:
            return Joins()
        stacks = {s for stacks in self.excimer.values() for s in stacks}
        stacks.update(s for p in self.excimer_profiles for s in p.stacks)
        return join(stacks, {e for edges in self.xhprof_edges.values() for e in edges},
                    self.is_internal if self.internal_functions else None)

    @property
    def closure_names(self) -> dict[str, str]:
        return self.closure_joins.names

    def xhprof_name(self, frame: str) -> str:
        """The name xhprof's profiles count an Excimer frame's calls under: a closure's joined
        name when the graph shows no other closure under it (`Joins.sole`), else the frame."""
        return self.closure_joins.names[frame] if frame in self.closure_joins.sole else frame

    def call_chain(self, rid: str, function: str, depth: int = 8) -> list[str]:
        """The heaviest caller path to `function` in one request (xhprof keeps one level of
        context: each step picks the caller that spent the most inclusive time in it)."""
        edges = self.xhprof_edges.get(rid, {})
        chain, seen = [function], {function}
        while len(chain) < depth:
            callers = [(v["wt"], p) for (p, c), v in edges.items() if c == chain[0] and p not in seen]
            if not callers:
                break
            _, parent = max(callers)
            chain.insert(0, parent)
            seen.add(parent)
        return chain

    def wall_us(self, rid: str) -> int:
        """A request's measured wall time: the denominator of xhprof shares (tideways' own
        `main()` closes when the function that enabled it returns, so it is no total)."""
        return self.request_of[rid].wall_us if rid in self.request_of else 0

    @cached_property
    def profiled_by_url(self) -> dict[str, list[str]]:
        """URL -> its xhprof-instrumented request ids, sorted."""
        out: dict[str, list[str]] = {}
        for rid in sorted(self.xhprof_profiles):
            out.setdefault(self.url_of.get(rid, "?"), []).append(rid)
        return out

    @cached_property
    def request_of(self) -> dict[str, RequestRecord]:
        return {r.id: r for r in self.requests}

    # -- Excimer --------------------------------------------------------------------------
    @cached_property
    def excimer_total(self) -> float:
        return float(sum(w for rid, st in self.excimer.items() if rid in self.timed_ids for w in st.values()))

    @cached_property
    def excimer_frames(self) -> set[str]:
        """Every function name on any Excimer stack."""
        return {f for stacks in self.excimer.values() for stack in stacks for f in stack.split(";")}

    def php_share_pct(self, frame_matches: Callable[[str], bool]) -> float:
        """% of timed requests' PHP samples with a matching frame anywhere on the stack."""
        if not self.excimer_total:
            return 0.0
        hit = 0.0
        for rid, stacks in self.excimer.items():
            if rid in self.timed_ids:
                for stack, w in stacks.items():
                    if any(frame_matches(f) for f in stack.split(";")):
                        hit += w
        return 100.0 * hit / self.excimer_total

    # -- engine ---------------------------------------------------------------------------
    @property
    def php(self) -> dict:
        return self.manifest.get("php", {})

    @property
    def ini(self) -> dict:
        return self.php.get("ini") or {}

    @cached_property
    def engine_state(self) -> EngineState | None:
        """OPcache and the realpath cache as the timed requests left them (engine_state.py);
        None for bundles that did not record them."""
        return summarize(self.requests, self.ini, app_tree(self.manifest))

    @cached_property
    def internal_functions(self) -> set[str]:
        return {f.lower() for f in self.php.get("internal_functions") or []}

    @cached_property
    def internal_classes(self) -> set[str]:
        return {c.lower() for c in self.php.get("internal_classes") or []}

    def is_internal(self, name: str) -> bool:
        """A PHP builtin by the engine's own lists (`Class::method` by its class)."""
        cls, sep, _ = name.partition("::")
        return cls.lower() in self.internal_classes if sep else name.lower() in self.internal_functions

    @property
    def events_counted(self) -> list[str]:
        """The engine events the capture counted (a request without one hit none)."""
        return list((self.manifest.get("collected", {}).get("perf") or {}).get("events", {}).get("events") or [])

    def threshold(self, detector: str, name: str):
        """A documented threshold (thresholds.toml, overridable with --thresholds)."""
        return self.thresholds[detector][name]


def build_context(bundle: Bundle, thresholds: dict) -> Context:
    requests = bundle.requests()
    timed = {r.id for r in requests if not r.instrumented}
    native = [s for s in symbolized(bundle)[0] if s.request in timed]     # named once per bundle
    profiles = bundle.excimer()
    return Context(
        requests=requests,
        statements=bundle.statements(),
        xhprof_profiles={rid: bundle.xhprof(rid) for rid in bundle.xhprof_ids()},
        excimer={p.request: p.folded() for p in profiles},
        native=native,
        manifest=bundle.manifest,
        thresholds=thresholds,
        excimer_profiles=profiles,
        engine_events={e.request: e.counts for e in bundle.engine_events()},
    )
