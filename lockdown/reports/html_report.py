"""`lockdown report`: one self-contained HTML page (templates/report.html.j2) from a
`lockdown run` directory: the time accounting (how much of the sampled request time the
findings explain, and the top unexplained hotspots), methodology, benchmark, findings with
their patches and verification, engine subsystems, time budget, PHP functions, builtins, query
digest, flame graphs and a per-request drill-down.

Pure reading: every number comes as it is from bench.json, analysis.json, accounting.json,
findings.json, verify/*/verify.json or the bundle's records; this module only picks, sorts and
formats (a report never computes a statistic; error bars are the 95% CIs the harness computed).

Safety: everything from the target (URIs, SQL, function names, evidence, patches) goes through
jinja2's autoescaping and is shown as text. The only markup taken as it is: our own charts, and
flame graph SVGs from our renderer. A Content-Security-Policy allows no network access and runs
only the page's own scripts (by hash), so even a mistake in escaping could not execute injected
script or load anything."""
from __future__ import annotations

import base64
import datetime
import hashlib
import json
import re
import shlex
from importlib import resources
from pathlib import Path

import jinja2
from markupsafe import Markup

from ..analyzers.budget import QUEUE_NOTE_PCT
from ..analyzers.findings import SEVERITIES, origin_text, split_steps
from ..analyzers.query_digest import by_request, plan_text
from ..analyzers.tail import MIN_REQUESTS as TAIL_MIN_REQUESTS, NOTE_RATIO as TAIL_NOTE_RATIO
from ..analyzers.stacks import stacks
from ..bundle.store import Bundle, BundleError
from ..errors import LockdownError
from . import charts
from . import numbers
from .analysis_text import HOTSPOT_KINDS, caller_shares, tail_besides, tail_parts
from .bench_table import canonical_text, set_aside_lines
from .charts import Bar, Segment, StackedRow
from .flamegraph import FlameOptions, count_name, php_builtins, inline_svg, render_flamegraph
from .reproduce import run_command, suggest_verify
from ..remediation.base import own_patch_path
from .run_results import base_text, reading
from ..rundir.model import (AccountingHotspot, Analysis, HotFunctions, RequestRow, Arm, BenchConfig, BenchResult,
                            BenchSummary, Change, EachRow, Responses, TimeAccounting, Verification)
from ..rundir.store import REDO_RUN, open_run
from .verify_text import diff_graph_kind, recaptured_new
from .writeup import pages_line

MAX_REQUESTS = 200        # requests in the drill-down (slowest first)
MAX_STATEMENTS = 10       # statements shown per request, in log order
MAX_SQL = 400             # characters of one statement shown in the drill-down
MAX_DETAILS = 20000       # characters of a finding's detector details (JSON)
PATH_FRAMES = 5           # a hotspot's call path: its last frames shown (the whole path on hover)
FLAME_WIDTH = 1200
FLAME_MINWIDTH = 0.5      # pixels: keeps big captures' graphs to a reasonable size
FLAME_MARKER = 'class="lockdown-flamegraph'

_ENV = jinja2.Environment(loader=jinja2.PackageLoader("lockdown.reports", "templates"),
                          autoescape=True, undefined=jinja2.StrictUndefined,
                          trim_blocks=True, lstrip_blocks=True,
                          finalize=lambda v: "" if v is None else v)   # a missing optional value
_SCRIPT = re.compile(r"<script\b[^>]*>(.*?)</script>", re.S)
_CDATA = re.compile(r"<!\[CDATA\[(.*?)\]\]>", re.S)


# ---------------------------------------------------------------- reading

def load_run(run_dir: Path) -> dict:
    """Every file of a run directory the report reads (rundir/store.py open_run), checked;
    one clear error otherwise."""
    run = open_run(run_dir)
    analysis = run.analysis()
    bench = run.bench()
    bundle = run.open_bundle()
    verify = {key: (run.verification_path(key), v) for key, v in run.verifications().items()}
    accounted = run.accounting()
    return {"dir": run.directory, "findings": run.document, "analysis": analysis,
            "bench": bench, "bundle": bundle, "verify": verify, "redo": REDO_RUN,
            "accounting": accounted}


# ---------------------------------------------------------------- formatting

def _num(v, spec: str = ",.1f", none: str = "\u2013") -> str:
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)):
        return none if v is None else str(v)
    try:
        return format(v, spec)
    except ValueError:              # e.g. a float where a count was expected
        return format(v, ",g")


def _pick(d, keys: str) -> dict:
    """The fields a template shows, None where a record lacks one (optional or older keys)."""
    d = d if isinstance(d, dict) else {}
    return {k: d.get(k) for k in keys.split()}


BUDGET = "wall_us cpu_us db_wait_us other_wait_us residual_us cpu_by_subsystem_us requests cpu_queue_us"
SCHEDULING = ("requests voluntary_switches involuntary_switches cpu_queue_us cpu_queue_pct run_delay_us "
              "other_threads_cpu_us concurrency workers cpus")
REQUEST = f"id url status pid instrumented statements {BUDGET}"
BUILTIN = "name calls exclusive_us inclusive_us allocations calls_per_request compiled_to_opcode"
QUERY_CLASS = ("id fingerprint count count_per_request max_per_request time_total time_min time_max time_avg "
               "time_p95 time_median time_stddev lock_total rows_sent_total rows_sent_avg rows_examined_total "
               "rows_examined_avg requests urls example")


def _ms(us) -> str:
    return _num(None if us is None else us / 1000, ",.1f")


def _text(v) -> str:
    """An evidence value as text (reports/numbers.py: 1613 and 1613.0 read the same, no
    float noise, lists and dicts as JSON)."""
    return numbers.value(v)


def _patch_lines(kind, content: str) -> list[tuple[str, str]]:
    """A patch's lines with a class each (diff additions, removals, hunk headers), so the page
    can colour them; joined with newlines they are the patch itself, which Copy copies."""
    out = []
    for line in content.split("\n"):
        cls = ""
        if kind == "diff":
            cls = ("meta" if line.startswith(("+++", "---")) else "add" if line.startswith("+")
                   else "del" if line.startswith("-") else "hunk" if line.startswith("@@") else "")
        out.append((cls, line))
    return out


def _when(unix) -> str:
    if not isinstance(unix, (int, float)):
        return "\u2013"
    return datetime.datetime.fromtimestamp(unix, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def _ci(pair) -> tuple:
    if isinstance(pair, (list, tuple)) and len(pair) == 2 and all(isinstance(v, (int, float)) for v in pair):
        return pair[0], pair[1]
    return None, None


# ---------------------------------------------------------------- sections

def _methodology(run: dict) -> dict:
    bench, m = run["bench"], run["bundle"].manifest
    cfg = bench.config if bench and bench.config else BenchConfig()
    versions = {**(m.get("versions") or {}), **cfg.versions}
    host = m.get("host") or {}
    settings = run["findings"].run.to_json() if run["findings"].run else None      # (reproduce.py takes its JSON)
    rows = [("target", run["findings"].target or m.get("target", {}).get("name")),
            ("run directory", str(run["dir"])),
            ("host", f"{cfg.host or host.get('node') or '?'}, {cfg.cpus or host.get('cpus') or '?'} "
                     f"CPUs, {host.get('machine') or ''}".rstrip(", ")),
            ("captured", m.get("created")), ("lockdown", m.get("lockdown_version")),
            ("command", run_command(run["dir"], run["findings"].target or "?", settings,
                                    run["bench"]))]
    started = base_text(settings)
    if started:
        rows.append(("starting point", started))
    bench_rows = []
    if bench:
        bench_rows = [
            ("load generator", f"{cfg.load} ({versions.get('load') or 'version unknown'})"),
            ("concurrency", f"{cfg.concurrency} connections, {cfg.workers} php-fpm workers"),
            ("warmup", f"{cfg.warmup_requests} requests one at a time, then "
                       f"{_num(cfg.warmup_duration, 'g')} s at concurrency {cfg.concurrency} "
                       f"(not measured)"),
            ("measured", f"{cfg.runs} runs x {_num(cfg.duration, 'g')} s"),
            ("URLs (weight)", ", ".join(f"{u.path} ({u.weight})" for u in cfg.urls)),
            ("php.ini overrides", ", ".join(f"{k}={v}" for k, v in cfg.php_ini.items()) or "none"),
            ("canonical", canonical_text(bench)),
        ]
        s = bench.summary or BenchSummary()
        lo, hi = _ci(s.rps_ci95)
        cv = s.rps_cv
        bench_rows.append(("result", f"mean {numbers.rps(s.rps_mean)} req/s, standard deviation "
                                     f"{numbers.sd(s.rps_stddev)} "
                                     f"(CV {_num(None if cv is None else 100 * cv, '.2f')}%), "
                                     f"{numbers.rps_ci_text(lo, hi, s.runs)} over {_or(s.runs, '?')} run(s)"))
    cap = m.get("capture") or {}
    drv, reqs, over = m.get("driver") or {}, m.get("requests") or {}, m.get("overhead") or {}
    capture_rows = [
        ("collectors", ", ".join(cap.get("collect") or [])),
        ("sampling", f"perf {cap.get('perf_freq', '?')} Hz; Excimer every {cap.get('excimer_period_ms', '?')} "
                     f"ms ({cap.get('excimer_clock', '?')} clock); xhprof on 1 in "
                     f"{cap.get('xhprof_every', '?')} requests of each URL, sent after the timed ones"),
        ("requests", f"{reqs.get('sent', drv.get('requests'))} sent at concurrency {drv.get('concurrency')} "
                     f"after {drv.get('warmup_requests')} warmup requests; {reqs.get('logged')} logged, "
                     f"{reqs.get('lost', 0)} lost, {reqs.get('instrumented', 0)} xhprof-instrumented "
                     f"(left out of timings)"),
        ("capture overhead", f"{_num(over.get('capture_rps'))} req/s captured vs {_num(over.get('baseline_rps'))} "
                             f"req/s uncollected (ratio {_num(over.get('ratio'), '.3f')})" if over else "\u2013"),
        ("host CPU during capture", f"busy {_num((m.get('host_cpu') or {}).get('busy_pct'))}%, steal "
                                    f"{_num((m.get('host_cpu') or {}).get('steal_pct'))}%"),
        ("bundle", str(run["bundle"].root)),
    ]
    return {"rows": rows, "bench": bench_rows, "capture": capture_rows,
            "versions": sorted((k, str(v)) for k, v in versions.items() if v),
            "servers": "nginx, php-fpm and MariaDB" if versions.get("mariadb") else "nginx and php-fpm"}


def _or(v, instead):
    """`v`, or `instead` where the document does not have it (None)."""
    return instead if v is None else v


def _speed_line(values: list[float], top: float) -> Markup:
    """The run's host speed probe by probe, on the scale of every run's fastest probe: a
    stretch at a lower speed shows where the host slowed within the run."""
    if len(values) < 2:
        return Markup("")
    return charts.sparkline(values, top, f"host speed probe by probe, one every 0.1 s: min {min(values):,.1f}, "
                                         f"max {max(values):,.1f} iterations/\u00b5s (axis 0 to {top:,.1f})")


def _bench(bench: BenchResult | None) -> dict | None:
    if not bench:
        return None
    runs = []
    top = max((v for r in bench.runs for v in r.host_speed.series), default=0.0)
    for i, r in enumerate(bench.runs, 1):
        lat, host = r.latency_ms, r.host_cpu
        runs.append({"n": _or(r.run, i), "rps": r.rps, "p50": lat.p50, "p90": lat.p90,
                     "p99": lat.p99, "max": lat.max, "errors": r.errors, "requests": r.requests,
                     "statuses": " ".join(f"{k}:{v}" for k, v in r.status_counts.items()),
                     "busy": host.busy_pct, "steal": host.steal_pct, "speed": r.host_speed.speed,
                     "speed_line": _speed_line([float(v) for v in r.host_speed.series], top),
                     "cpu_ms": r.server_cpu.ms_per_request})
    s = bench.summary or BenchSummary()
    lo, hi = _ci(s.rps_ci95)
    mean, sd, n = s.rps_mean, s.rps_stddev, _or(s.runs, len(runs))
    bars = [Bar(f"run {r['n']}", r["rps"], text=f"{_num(r['rps'])} req/s", color=charts.color_of("run"))
            for r in runs if r["rps"] is not None]
    problem = numbers.rps_interval_problem(lo, n)
    if mean is not None:
        text = f"mean {numbers.rps(mean)}" + (f", CI {numbers.interval(lo, hi)}" if lo is not None else "")
        label = ("mean, 95% CI (too wide)" if problem else "mean, 95% CI") if lo is not None else "mean"
        bars.append(Bar(label, mean, lo, hi, points=[b.value for b in bars], text=text,
                        color=charts.color_of("mean"),
                        tooltip=f"mean {numbers.rps(mean)} req/s; {numbers.rps_ci_text(lo, hi, n)}; "
                                f"runs as dots"))
    chart = charts.bar_chart(bars, "Requests per second by run", "req/s") if bars else None
    return {"runs": runs, "mean": mean, "sd": sd, "cv_pct": _pct_of(s.rps_cv),
            "lo": lo, "hi": hi, "n": n, "chart": chart,
            "ci_text": numbers.rps_ci_text(lo, hi, n), "ci_problem": problem,
            "sanity": bench.sanity,
            # the host under the runs (docs/bench.md, "Host speed" and "Steal time")
            "speed_cv_pct": _pct_of(s.host_speed_cv), "steal_max": s.host_steal_pct_max,
            "adjusted_cv_pct": _pct_of(s.rps_cv_speed_adjusted),
            "elasticity": s.speed_elasticity,
            "explains_nothing": numbers.speed_explains_nothing(s.speed_elasticity),
            # runs the host disturbed, measured again (harness/steady_runs.py)
            "set_aside": set_aside_lines(bench) if bench.runs else [],
            "latency_note": numbers.latency_note(bench.runs)}


def _pct_of(fraction) -> float | None:
    return 100 * fraction if isinstance(fraction, (int, float)) else None


def _subsystems(a: Analysis) -> dict | None:
    sub = a.subsystems
    if not sub:
        return None
    overall = sub.get("overall") or {}
    bars = [Bar(k, v, text=f"{_num(v, '.1f')}%", color=charts.color_of(k)) for k, v in overall.items()]
    names = list(overall)
    by_url = []
    for url, shares in (sub.get("by_url") or {}).items():
        names += [k for k in shares if k not in names]
        by_url.append({"url": url, "shares": shares, "samples": (sub.get("samples_by_url") or {}).get(url)})
    ident = sub.get("symbols") or {}
    return {"samples": sub.get("samples"), "chart": charts.bar_chart(bars, "On-CPU samples by engine subsystem", "%"),
            "names": names, "by_url": by_url,
            "unknown_pct": ident.get("leaf_unknown_pct"), "named": ident.get("frames_named"),
            # the share is of every perf sample of the capture (symbolized before the timed
            # requests are picked), not of the `samples` above: name its own base
            "unknown_n": ident.get("leaf_unknown_after"), "all_samples": ident.get("samples"),
            "native": _native(a.native_functions)}


def _native(n: HotFunctions | None) -> dict | None:
    """analysis.json native_functions with each row's shares; None when not analysed."""
    if n is None or not n.samples:
        return None
    total = n.samples
    rows = [_fields(f, "name dso subsystem self_samples inclusive_samples") for f in n.top]
    for r in rows:
        r["self_pct"] = 100 * (r["self_samples"] or 0) / total
        r["incl_pct"] = 100 * (r["inclusive_samples"] or 0) / total
    return {"samples": total, "rows": rows} if rows else None


def _budget(a: Analysis) -> dict:
    rows = []
    for url, b in sorted(a.budget_by_url.items(), key=lambda kv: -(kv[1].wall_us or 0)):
        rows.append({"url": url, **_fields(b, BUDGET),
                     "top": sorted(b.cpu_by_subsystem_us.items(), key=lambda kv: -kv[1])[:3]})
    overall = _fields(a.budget_overall, BUDGET)
    queued = bool(rows) and all(r["cpu_queue_us"] is not None for r in rows)
    chart_rows = [StackedRow(r["url"], [Segment(name, value / 1000) for name, value in _budget_parts(r, queued)],
                             text=f"{_ms(r['wall_us'])} ms") for r in rows]
    chart = charts.stacked_chart(chart_rows, "Mean time per request by URL", "ms") if chart_rows else None
    rt = a.db_round_trip
    trip = None if rt is None else {
        "us": float(rt["us_per_request"]), "statements": float(rt["statements_per_request"]),
        "per_call": float(rt["per_call_us"]), "requests": int(rt["requests"]), "calls": int(rt["calls"]),
        "pct": 100 * float(rt["us_per_request"]) / overall["wall_us"] if overall.get("wall_us") else None}
    sched = _pick(a.scheduling, SCHEDULING) if a.scheduling is not None else None
    note = sched is not None and (sched["cpu_queue_pct"] or 0) >= QUEUE_NOTE_PCT
    return {"rows": rows, "overall": overall, "chart": chart, "round_trip": trip,
            "queued": queued, "scheduling": sched, "queue_note": note}


def _budget_parts(row: dict, queued: bool) -> list[tuple[str, float]]:
    """A URL's bar: cpu, db wait and other wait, the last split into the run queue and the rest
    when the capture recorded the run queue."""
    other = row["other_wait_us"] or 0
    parts = [("cpu", row["cpu_us"] or 0), ("db wait", row["db_wait_us"] or 0)]
    if not queued:
        return parts + [("other wait", other)]
    return parts + [("waiting for a CPU", row["cpu_queue_us"]), ("other wait", other - row["cpu_queue_us"])]


def _db_status(a: Analysis) -> dict | None:
    """The server's counters over the capture (analysis.json database_status)."""
    d = a.database_status
    if not isinstance(d, dict):
        return None
    return {"requests": d["requests"], "private": bool(d.get("private")),
            "checks": [_pick(c, "name value flagged setting") for c in d.get("checks") or []]}


def _tails(a: Analysis, anchors: dict) -> dict | None:
    """Each URL's slowest tenth against its middle half (analysis.json tail), the long tails
    first; the slowest requests link to their drill-down when it is on the page."""
    tails = a.tail
    if not isinstance(tails, list) or not tails:
        return None
    rows = []
    for t in tails:
        rows.append({"url": t["url"], "requests": t["requests"], "middle_us": t["middle"]["wall_us"],
                     "tail_us": t["tail"]["wall_us"], "tail_n": t["tail"]["requests"], "ratio": t["ratio"],
                     "p50_us": t["p50_wall_us"], "p90_us": t["p90_wall_us"], "long": t["ratio"] >= TAIL_NOTE_RATIO,
                     "grew": tail_parts(t),
                     "besides": tail_besides(t),
                     "slowest": [(rid, anchors.get(rid)) for rid in t["slowest"][:5]]})
    return {"rows": rows, "min_requests": TAIL_MIN_REQUESTS, "note_ratio": TAIL_NOTE_RATIO}


OPCACHE = ("enabled requests lookups_per_request misses_per_request requests_with_misses misses_by_url restarts "
           "cache_full cached_scripts cached_keys max_cached_keys used_memory free_memory wasted_memory interned_size "
           "interned_used interned_free blacklist_misses_per_request keys_full memory_full interned_full")


def _engine(a: Analysis) -> dict | None:
    """OPcache and the realpath cache as the workers reported them; None for older analyses."""
    e = a.engine_state
    if not isinstance(e, dict):
        return None
    o = e.get("opcache")
    opcache = _pick(o, OPCACHE) if isinstance(o, dict) else None
    if opcache is not None:
        opcache["restarts"] = ", ".join(f"{k} {numbers.count(v)}" for k, v in
                                        sorted((opcache["restarts"] or {}).items())) or "none"
        opcache["misses_by_url"] = sorted((opcache["misses_by_url"] or {}).items(), key=lambda kv: -kv[1])
        opcache["uncached"] = list((o.get("uncached") or {}).items())
    return {"requests": e.get("requests"), "opcache": opcache,
            "gc": _pick(e["gc"], "requests runs_per_request collected_per_request requests_with_runs threshold "
                                 "roots_max")
            if isinstance(e.get("gc"), dict) else None,
            "realpath": _pick(e.get("realpath"), "bytes_max limit_bytes used_pct full workers")}


def _functions(a: Analysis) -> dict:
    f = a.php_functions or HotFunctions()
    total = f.samples or 0
    rows = []
    for h in f.top:
        own, incl = h.self_samples or 0, h.inclusive_samples or 0
        rows.append({"name": _text(h.name), "self": own, "incl": incl,
                     "self_pct": 100 * own / total if total else None,
                     "incl_pct": 100 * incl / total if total else None})
    b = a.builtins or {}
    return {"samples": total, "base": numbers.excimer_weight(total, f.sample_count),
            "rows": rows, "profiles": b.get("profiles"),
            "builtins": [_builtin(x) for x in b.get("top") or []], "off_cpu": _off_cpu(a)}


def _builtin(x) -> dict:
    """A hot builtin's row, with its callers' shares of its inclusive time."""
    row = _pick(x, BUILTIN)
    row["callers"] = [(_text(name), pct) for name, pct in caller_shares(x if isinstance(x, dict) else {})]
    return row


OFF_CPU = "requests wall_us cpu_us off_cpu_us queue_per_cpu sql_known excimer_period_ms functions_sampled"
OFF_CPU_ROW = "name wall_us cpu_us off_cpu_us queue_us blocked_us error_us sql stack"


def _off_cpu(a: Analysis) -> dict | None:
    """analysis.json off_cpu with each row's share of its wall time; None when not analysed."""
    o = a.off_cpu
    if not isinstance(o, dict):
        return None
    rows = []
    for r in o.get("functions") or []:
        row = _pick(r, OFF_CPU_ROW)
        row["share_pct"] = 100 * row["blocked_us"] / row["wall_us"] if row["wall_us"] else None
        rows.append(row)
    return {**_pick(o, OFF_CPU), "rows": rows}


def _queries(a: Analysis) -> dict | None:
    q = a.queries
    if not q:
        return None
    return {"statements": q.get("statements"), "class_count": q.get("class_count"),
            "attribution": q.get("attribution") or {},
            "classes": [dict(_pick(c, QUERY_CLASS), plan_text=_plan(c)) for c in q.get("classes") or []]}


def _plan(c) -> str | None:
    """A class's server plan flags in words; None for analyses from before they were recorded."""
    if not isinstance(c, dict) or not c.get("plan_known"):
        return None                 # older analyses, or no execution logged with plan lines
    return plan_text(c.get("plan") or {}, c["plan_known"]) or None


def _slowest(a: Analysis) -> list[RequestRow]:
    """analysis.json's requests, slowest first."""
    return sorted(a.by_request, key=lambda r: -(r.wall_us or 0))


def _anchor_map(a: Analysis) -> dict:
    """Request id -> anchor of its drill-down entry (slowest first, at most MAX_REQUESTS)."""
    return {r.id: f"req-{i}" for i, r in enumerate(_slowest(a)[:MAX_REQUESTS], 1)}


def _requests(a: Analysis, records: dict, stmts: dict, anchors: dict, findings: list) -> dict:
    named: dict = {}
    for f in findings:
        for rid, _ in f["requests"]:
            named.setdefault(rid, []).append((f["anchor"], f["key"], f["title"]))
    rows = []
    all_rows = _slowest(a)
    for r in all_rows[:MAX_REQUESTS]:
        rec = records.get(r.id)
        mine = stmts.get(r.id, [])
        rows.append({
            **_fields(r, REQUEST), "anchor": anchors[r.id],
            "subsystems": sorted(r.cpu_by_subsystem_us.items(), key=lambda kv: -kv[1]),
            "method": rec.method if rec else None, "uri": rec.uri if rec else None,
            "peak_mb": rec.peak_memory / 2 ** 20 if rec else None,
            "started": _when(rec.start_unix) if rec else "\u2013",
            "client_status": rec.client_status if rec else None,
            "db_threads": rec.db_threads if rec else None,
            "sched": rec.sched if rec else None,
            "statements_shown": [{"seq": s.seq, "us": s.duration_us, "sent": s.rows_sent,
                                  "examined": s.rows_examined, "attribution": s.attribution,
                                  "sql": s.sql[:MAX_SQL] + ("\u2026" if len(s.sql) > MAX_SQL else "")}
                                 for s in mine[:MAX_STATEMENTS]],
            "statements_more": max(0, len(mine) - MAX_STATEMENTS),
            "findings": named.get(r.id, []),
        })
    return {"rows": rows, "total": len(all_rows), "shown": len(rows)}


WHOLE_CAPTURE = "all requests except the xhprof-instrumented ones"


def capture_flamegraph(bundle: Bundle, kind: str, title: str, **options) -> str:
    """The SVG of a whole capture's `kind` stacks (the xhprof-instrumented requests left out,
    exact builtin colours from the bundle's manifest), as the report embeds it and `lockdown
    run` writes it (reports/run_documents.py); LockdownError when that collector was off or
    saw nothing."""
    folded = stacks(bundle, kind, counts=True)
    opts = FlameOptions(title=title, subtitle=WHOLE_CAPTURE, palette="native" if kind == "native" else "php",
                        builtins=php_builtins(bundle.manifest.get("php") or {}), count_name=count_name(kind),
                        **options)
    return render_flamegraph(folded, opts)


FLAME_TITLES = {"php": "PHP stacks (Excimer)", "native": "Native stacks (perf)",
                "php-offcpu": "PHP stacks off the CPU (Excimer's wall samples less perf's on-CPU samples; width = us)"}


def _flame(bundle: Bundle, kind: str) -> dict:
    title = FLAME_TITLES[kind]
    try:
        svg = capture_flamegraph(bundle, kind, title, width=FLAME_WIDTH, minwidth=FLAME_MINWIDTH,
                                 id_prefix=f"ld-{kind}")
    except BundleError:
        raise
    except LockdownError as e:          # that collector was off, or saw nothing
        return {"kind": kind, "title": title, "svg": None, "note": str(e)}
    return {"kind": kind, "title": title, "svg": Markup(inline_svg(svg)), "note": ""}


def _read_svg(ref, vdir: Path) -> tuple[Markup | None, str]:
    """A verify run's differential flame graph, if it is there and is one of ours."""
    if not isinstance(ref, str) or not ref:
        return None, "not drawn (one of the two captures has no such stacks)"
    p = Path(ref)
    candidates = [p if p.is_absolute() else vdir / p, vdir / p.name]
    path = next((c for c in candidates if c.is_file()), None)
    if path is None:
        return None, f"{ref}: missing"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        return None, f"{path}: cannot read it ({e})"
    if FLAME_MARKER not in text[:2000]:
        return None, f"{path}: not a lockdown flame graph; left out"
    return Markup(inline_svg(text)), str(path)


def _path_text(path: list) -> str:
    """A call path, root first, as its last PATH_FRAMES frames."""
    shown = [str(f) for f in path[-PATH_FRAMES:]]
    return ("\u2026 > " if len(path) > PATH_FRAMES else "") + " > ".join(shown)


def _fields(doc, names: str) -> dict:
    """The fields of a document (rundir/model.py) a template shows, by name."""
    return {k: getattr(doc, k) for k in names.split()}


def _hotspot(h: AccountingHotspot, anchors: dict) -> dict:
    more = (h.request_count or 0) - len(h.requests)
    return {**_fields(h, "name share_pct us_per_request path_pct request_count"), "members": h.members,
            "path": _path_text(h.path), "full_path": " > ".join(h.path),
            "requests": [(r, anchors.get(r)) for r in h.requests],
            "more": more if more > 0 else 0, "urls": h.urls, "noted_by": h.noted_by}


def _accounting(t: TimeAccounting | None, anchors: dict, finding_anchor: dict) -> dict | None:
    """accounting.json: explained against unexplained, overall and per URL, each finding's own
    part, the top unexplained hotspots of each kind; None for a run written before it."""
    if t is None:
        return None
    urls = [{**_fields(u, "url requests sampled_requests mean_us explained_pct unexplained_pct"),
             "top": [(h.name, h.share_pct) for h in u.top]}
            for u in t.urls]
    findings = [{**_fields(f, "key title severity share_pct owned_pct how"), "anchor": finding_anchor.get(f.key)}
                for f in t.findings]
    hotspots = [{"kind": kind, "title": title, "rows": [_hotspot(h, anchors) for h in getattr(t.hotspots, kind)]}
                for kind, title in HOTSPOT_KINDS]
    return {**_fields(t, "basis_text period_ms perf requests sampled_requests total_us explained_us unexplained_us "
                         "explained_pct unexplained_pct mean_us overlap_pct findings_source"),
            "split": t.perf and t.basis.startswith("excimer"),
            "urls": urls, "findings": findings, "informational": t.informational,
            "hotspots": [k for k in hotspots if k["rows"]], "lead": hotspots[0]["rows"][:3],
            "notes": t.notes}


def _arm(arm: Arm) -> dict:
    s = arm.stats
    lo, hi = _ci(s.rps_ci95)
    runs = [r.rps for r in arm.runs if r.rps is not None]
    return {"mean": s.rps_mean, "sd": s.rps_stddev, "cv": s.rps_cv,
            "lo": lo, "hi": hi, "runs": runs, "ci_text": numbers.rps_ci_text(lo, hi, len(runs))}


def _verification(vpath: Path, data: Verification, seen_ids: set) -> dict:
    bench = data.bench
    before, after = _arm(bench.before), _arm(bench.after)
    change = bench.change or Change()
    clo, chi = _ci(change.ci95_pct)
    bars = []
    for name, arm in (("before", before), ("after", after)):
        if arm["mean"] is not None:
            problem = numbers.rps_interval_problem(arm["lo"], len(arm["runs"]))
            bars.append(Bar(f"{name}, CI too wide" if problem else name, arm["mean"], arm["lo"], arm["hi"],
                            points=arm["runs"],
                            text=f"mean {numbers.rps(arm['mean'])}" + (f", CI {numbers.interval(arm['lo'], arm['hi'])}"
                                                                       if arm["lo"] is not None else ""),
                            color=charts.color_of(name)))
    re_ = data.reprofile
    diffs = []
    for kind, ref in (data.diff_svg or {}).items():
        svg, note = _read_svg(ref, vpath.parent)
        if svg is not None:
            m = re.search(r'<svg\b[^>]*\bid="([^"]+)"', svg)
            if m and m.group(1) in seen_ids:
                svg, note = None, f"{note}: the same graph is already on this page"
            elif m:
                seen_ids.add(m.group(1))
        graph_of, before_widths = diff_graph_kind(kind)
        label = (f"{graph_of} stacks, widths from before (what the patch removed shows, blue)" if before_widths
                 else f"{graph_of} stacks, widths from after")
        diffs.append({"kind": kind, "label": label, "svg": svg, "note": note})
    return {"path": str(vpath), "confirmed": data.confirmed,
            "design": bench.design, "runs_per_arm": bench.runs_per_arm,
            "duration": bench.duration, "concurrency": bench.concurrency,
            "before": before, "after": after,
            "change_pct": change.change_pct, "ratio": change.ratio, "clo": clo, "chi": chi,
            "method": change.method, "significant": change.significant,
            # what the change is: not the after mean over the before mean (docs/verify.md)
            "estimate": numbers.estimate_name(change), "paired": numbers.paired_clause(bench),
            "resolution": numbers.resolution_clause(bench), "server_cpu": numbers.server_cpu_clause(bench),
            "chart": charts.bar_chart(bars, "Requests per second, before and after", "req/s") if bars else None,
            "gone": re_.gone, "remaining": re_.remaining or [], "reprofile_bundle": re_.bundle,
            "new": recaptured_new(re_.new, re_.findings),
            "gone_of": _gone_of(re_.gone_by_finding),
            "gone_by": re_.gone_by_finding or {},
            "pages": _pages(data.responses),
            "remediations": [{**r, "own_patch": own_patch_path(r)} for r in data.remediations if isinstance(r, dict)],
            "diffs": diffs}


def _each_rows(each: list[EachRow] | None) -> list[dict]:
    """verify --each: per fix left out, all-but-it and all RPS and the change, as recorded."""
    rows = []
    for e in each or []:
        if e.change is None:
            continue
        lo, hi = _ci(e.change.ci95_pct)
        rows.append({"findings": [_text(k) for k in e.findings], "without": e.without_rps,
                     "all": e.all_rps, "change_pct": e.change.change_pct, "lo": lo, "hi": hi,
                     "significant": e.change.significant})
    return rows


def _gone_of(by_finding: dict[str, bool] | None) -> tuple[int, int] | None:
    """(gone, verified) of a verification of several findings together; None for one."""
    if not by_finding or len(by_finding) < 2:
        return None
    return sum(1 for gone in by_finding.values() if gone is True), len(by_finding)


def _pages(responses: Responses | None) -> str | None:
    """The page comparison's line, or None when verify.json has none (older) or a damaged one."""
    try:
        return pages_line(responses) if responses is not None else None
    except (KeyError, TypeError, IndexError, ValueError):
        return None


def _findings(run: dict, anchors: dict, seen_ids: set) -> tuple[list, list]:
    out = []
    verify = dict(run["verify"])
    for i, f in enumerate(run["findings"].findings, 1):
        key = f.key or f.id or f"finding-{i}"
        rems = []
        for j, r in enumerate(f.remediations, 1):
            tree, operator = split_steps(r.steps)
            rems.append({"kind": r.kind, "file": r.file, "description": r.description or "",
                         "checked": r.checked or "", "origin": origin_text(r.origin), "steps": tree,
                         "operator_steps": operator, "lines": _patch_lines(r.kind, _text(r.content)),
                         "pre_id": f"patch-{i}-{j}"})
        v = None
        if key in verify:
            vpath, data = verify.pop(key)
            with reading(vpath, f"run `lockdown verify` again or remove {vpath.parent}"):
                v = _verification(vpath, data, seen_ids)
        writeup = run["dir"] / "findings" / f"{key}.md"
        details = json.dumps(f.details, indent=1, ensure_ascii=False, default=str)
        out.append({
            "n": i, "anchor": f"finding-{i}", "key": key, "id": f.id or key,
            "title": f.title or key, "severity": _text(f.severity or "low"),
            "sev_class": f.severity if f.severity in SEVERITIES else "info",
            "share": f.share_pct, "summary": f.summary or "",
            "evidence": [{"what": _text(e.what), "value": _text(e.value), "source": _text(e.source)}
                         for e in f.evidence],
            "urls": [_text(u) for u in f.urls],
            "requests": [(_text(r), anchors.get(r)) for r in f.requests],
            "remediations": rems,
            "no_patch": _text(f.details.get("no_patch")),
            "informational": f.severity == "info",
            # a command that can work: verify refuses a finding without a remediation
            "suggest": suggest_verify(run["dir"], key) if rems else None,
            "together": [],
            "details": details[:MAX_DETAILS] + ("\n\u2026" if len(details) > MAX_DETAILS else ""),
            "writeup": f"findings/{key}.md" if writeup.is_file() else None,
            "verify": v})
    orphans = []
    anchor_of = {f["key"]: f["anchor"] for f in out}
    for key, (vpath, data) in sorted(verify.items()):
        with reading(vpath, f"run `lockdown verify` again or remove {vpath.parent}"):
            # several findings fixed together (verify --all): each links to its finding
            together = [(_text(g.key), anchor_of.get(g.key)) for g in data.findings]
            orphans.append({"key": key, "anchor": f"verify-{len(orphans) + 1}",
                            "title": _text(data.finding.title),
                            "together": together if len(together) > 1 else [],
                            "each": _each_rows(data.each),
                            "verify": _verification(vpath, data, seen_ids)})
    # each finding measured together with others links to that measurement, and says whether
    # it is gone from that re-capture (as the write-ups do)
    by_key = {f["key"]: f for f in out}
    for o in orphans:
        for k, _ in o["together"]:
            if k in by_key:
                by_key[k]["together"].append({"anchor": o["anchor"], "key": o["key"], "others": len(o["together"]) - 1,
                                              "gone": o["verify"]["gone_by"].get(k), "v": o["verify"]})
    return out, orphans


def build_model(run: dict) -> dict:
    """The page as plain data: every section, formatted, nothing computed."""
    redo = run["redo"]
    fpath, apath = run["dir"] / "findings.json", run["dir"] / "analysis.json"
    a = run["analysis"]
    with reading(apath, redo):
        anchors = _anchor_map(a)
    seen_ids = {"ld-php", "ld-native"}
    with reading(fpath, redo):
        findings, orphans = _findings(run, anchors, seen_ids)
    with reading(run["dir"] / "bench.json", redo):
        bench = _bench(run["bench"])
    with reading(run["dir"] / "accounting.json", redo):
        accounted = _accounting(run["accounting"], anchors, {f["key"]: f["anchor"] for f in findings})
    with reading(run["bundle"].root / "manifest.json", "the bundle is damaged: capture it again"):
        method = _methodology(run)
    bundle = run["bundle"]
    with reading(bundle.root, "the bundle is damaged: capture it again"):
        records = {r.id: r for r in bundle.requests()}
        stmts = by_request(bundle.statements())
        flames = [_flame(bundle, "php"), _flame(bundle, "php-offcpu"), _flame(bundle, "native")]
    with reading(apath, redo):
        model = {"subsystems": _subsystems(a), "engine": _engine(a), "budget": _budget(a), "tail": _tails(a, anchors),
                 "db_status": _db_status(a), "functions": _functions(a),
                 "queries": _queries(a), "requests": _requests(a, records, stmts, anchors, findings),
                 "analysis_requests": a.requests, "left_out": a.instrumented_left_out}
    severities = {}
    for f in findings:
        severities[f["severity"]] = severities.get(f["severity"], 0) + 1
    return {**model, "target": run["findings"].target or "?", "dir": str(run["dir"]),
            "bundle": str(run["bundle"].root),
            "analyze_cmd": shlex.join(["lockdown", "analyze", str(run["bundle"].root)]),
            "method": method, "bench": bench, "findings": findings, "orphans": orphans, "accounting": accounted,
            "dismissed": [{k: str(d.get(k, "")) for k in ("id", "function", "defined_at", "reason")}
                          for d in run["findings"].dismissed],
            "severities": severities, "flames": flames}


# ---------------------------------------------------------------- rendering

_ENV.filters["ms"] = _ms
_ENV.globals["num"] = _num
_ENV.globals["fmt"] = numbers


def _asset(name: str) -> str:
    return resources.files("lockdown.reports").joinpath("templates", name).read_text(encoding="utf-8")


def _script_hashes(page_scripts: list[str]) -> list[str]:
    """CSP hashes of the page's own scripts, as the browser sees their text (CDATA markers of
    the SVG scripts dropped)."""
    out = []
    for text in page_scripts:
        src = _CDATA.sub(lambda m: m.group(1), text)
        digest = hashlib.sha256(src.encode("utf-8")).digest()
        out.append("'sha256-" + base64.b64encode(digest).decode() + "'")
    return sorted(set(out))


def render(model: dict) -> str:
    js = _asset("report.js")
    svgs = [f["svg"] for f in model["flames"] if f["svg"]]
    for f in model["findings"] + model["orphans"]:
        if f["verify"]:
            svgs += [d["svg"] for d in f["verify"]["diffs"] if d["svg"]]
    scripts = [js] + [m.group(1) for s in svgs for m in _SCRIPT.finditer(str(s))]
    return _ENV.get_template("report.html.j2").render(
        m=model, css=Markup(_asset("report.css")), js=Markup(js),
        script_hashes=" ".join(_script_hashes(scripts)))


def report_html(run_dir: Path) -> str:
    """The report of a run directory, as one HTML document (text)."""
    run_dir = Path(run_dir)
    run = load_run(run_dir)
    with reading(run_dir, REDO_RUN):          # a shape the loading checks let through
        return render(build_model(run))
