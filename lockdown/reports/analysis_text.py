"""The analysis of a bundle as terminal text: a baseline comparison, the time accounting, subsystems,
engine caches, the time budget with the scheduler, tails, PHP functions and builtins, the database
server, queries."""
from __future__ import annotations

from ..analyzers.budget import QUEUE_NOTE_PCT
from ..analyzers.query_digest import plan_text
from ..analyzers.tail import MIN_REQUESTS, NOTE_RATIO
from . import numbers


def _ms(us: float) -> str:
    return f"{us / 1000:8.1f}"


def _ms_or_dash(us: float | None) -> str:
    return f"{'-':>8s}" if us is None else _ms(us)


def scheduling_lines(s: dict | None) -> list[str]:
    """The run queue and context switches under the budget table (analysis.json scheduling)."""
    if not s:
        return []
    setting = ", ".join(p for p in (f"concurrency {s['concurrency']}" if s.get("concurrency") else "",
                                    numbers.plural(s["workers"], "worker") if s.get("workers") else "",
                                    numbers.plural(s["cpus"], "CPU") if s.get("cpus") else "") if p)
    queue = ("" if s["cpu_queue_us"] is None else
             f"{s['cpu_queue_us'] / 1000:.1f} ms a request waiting for a CPU beyond db wait ({s['cpu_queue_pct']:.1f}% "
             f"of the wall time; {s['run_delay_us'] / 1000:.1f} ms in the run queue in all); ")
    out = [f"  scheduler: {queue}{s['voluntary_switches']:.1f} voluntary and {s['involuntary_switches']:.1f} "
           f"involuntary context switches a request" + (f" (captured at {setting})" if setting else "")]
    if (s.get("other_threads_cpu_us") or 0) >= 50:
        out.append(f"  the worker's other threads (Excimer's timer) used {s['other_threads_cpu_us'] / 1000:.2f} ms "
                   f"CPU a request, lockdown's cost: the cpu column is the request thread's alone")
    if s["cpu_queue_pct"] is not None and s["cpu_queue_pct"] >= QUEUE_NOTE_PCT:
        out.append("  the timings include that queueing: more was runnable than there were CPUs (other workers, "
                   "perf, lockdown's own bookkeeping, other processes); the application's own cost is the rest")
    return out


def tail_lines(tails: list | None, top: int = 5) -> list[str]:
    """Each URL's slowest tenth against its middle half (analysis.json tail): the parts of the
    budget that grew, largest first, and what the slow requests did besides."""
    if not tails:
        return []
    lines = ["", f"tail latency (URLs with at least {MIN_REQUESTS} timed requests: the slowest tenth "
                 "against the middle half by the worker's wall time, mean ms):"]
    calm = [t for t in tails if t["ratio"] < NOTE_RATIO]
    long = [t for t in tails if t["ratio"] >= NOTE_RATIO]
    for t in long[:top]:
        grew = ", ".join(f"{'+' if v >= 0 else ''}{v / 1000:.1f} {k}" for k, v in tail_parts(t))
        lines.append(f"  {t['url'][:40]}: {numbers.plural(t['tail']['requests'], 'request')} at "
                     f"{t['tail']['wall_us'] / 1000:.1f} against {t['middle']['wall_us'] / 1000:.1f} "
                     f"({t['ratio']:.2f}x; p50 {t['p50_wall_us'] / 1000:.1f}, p90 {t['p90_wall_us'] / 1000:.1f}): "
                     f"{grew or 'no part grew'}")
        lines += [f"    {x}" for x in tail_besides(t)]
        lines.append(f"    slowest: {' '.join(t['slowest'][:5])}" + (" ..." if len(t["slowest"]) > 5 else ""))
    if len(long) > top:
        lines.append(f"  {len(long) - top} more with a long tail: analysis.json tail (or analyze --json)")
    if calm and long:
        lines.append(f"  {numbers.plural(len(calm), 'other URL')}: the slowest tenth within {NOTE_RATIO:.2f}x "
                     "of the middle half")
    elif calm:
        lines.append(f"  no slowest tenth beyond {NOTE_RATIO:.2f}x its middle half ({numbers.plural(len(calm), 'URL')} "
                     "compared)")
    return lines


def tail_parts(t: dict) -> list[tuple[str, float]]:
    """The budget parts worth naming for a URL's tail, largest first: those that moved by at
    least 0.1 ms and 5% of what the tail adds (a part 0.3 ms lower is noise, not a cause)."""
    excess = t["tail"]["wall_us"] - t["middle"]["wall_us"]
    floor = max(100.0, 0.05 * abs(excess))
    return [(k, v) for k, v in t["excess_us"].items() if abs(v) >= floor]


def tail_besides(t: dict) -> list[str]:
    """What a URL's slow requests did besides, where it differs from its middle ones."""
    out = []
    tl, md = t["tail"], t["middle"]
    for key, what in (("statements", "statements"), ("gc_runs", "cycle-collector runs"),
                      ("compiles", "OPcache compiles")):
        if tl.get(key) is not None and md.get(key) is not None and abs(tl[key] - md[key]) >= 0.5:
            out.append(f"{what} per request: {tl[key]:.1f} against {md[key]:.1f}")
    if md["peak_memory"] and tl["peak_memory"] >= 1.25 * md["peak_memory"]:
        out.append(f"peak memory: {numbers.size(tl['peak_memory'])} against {numbers.size(md['peak_memory'])}")
    s = t.get("statement")
    if s:
        out.append(f"statement time grew most in: {s['fingerprint'][:90]} ({s['tail_us'] / 1000:.1f} ms in "
                   f"{s['tail_count']:.1f} executions against {s['middle_us'] / 1000:.1f} ms in "
                   f"{s['middle_count']:.1f})")
    return out


def database_status_lines(d: dict | None) -> list[str]:
    """The server's counters over the capture (analysis.json database_status); flagged rows
    start with "!" and name the setting to look at."""
    if not d:
        return []
    where = ("lockdown's private server" if d["private"] else "a shared server: other clients count too")
    where += ("; lockdown's own status reads taken out, its marker statement (one a request) counts in "
              "Questions, bytes and connections")
    lines = ["", f"database server over the capture (SHOW GLOBAL STATUS differences, per timed request, "
                 f"{d['requests']} requests; {where}):"]
    for c in d["checks"]:
        lines.append(f"  {'!' if c['flagged'] else ' '} {c['name']:24s} {c['value']}"
                     + (f"; look at {c['setting']}" if c["flagged"] else ""))
    return lines


def off_cpu_lines(o: dict | None, top: int = 10) -> list[str]:
    """Where PHP waited off the CPU (analysis.json off_cpu), rows that stand out of their error."""
    if not o:
        return []
    queue = (f"; waiting for a CPU is taken as {o['queue_per_cpu']:.2f} ms per ms of a function's CPU "
             f"(the capture's run-queue delay) and taken out" if o["queue_per_cpu"] else "")
    lines = ["", f"off the CPU, by PHP function (Excimer wall samples less perf's on-CPU samples, "
                 f"{o['requests']} requests): {o['off_cpu_us'] / 1000:.1f} of {o['wall_us'] / 1000:.1f} ms "
                 f"a request{queue}; blocked: waits in one builtin call longer than the {o['excimer_period_ms']:g} ms "
                 f"Excimer period (a lower bound; shorter waits count only in the total), listed where it stands "
                 f"out of its sampling error" + ("" if o["sql_known"] else " (no xhprof: senders of SQL not marked)")]
    if not o["functions"]:
        lines.append(f"  none of the {o['functions_sampled']} functions sampled does")
        return lines
    lines.append(f"  {'blocked':>8s} {'+-':>6s} {'queued':>7s} {'of wall':>7s}  function (the stack that waited "
                 f"most, last frames), ms a request")
    for f in o["functions"][:top]:
        share = 100 * f["blocked_us"] / f["wall_us"] if f["wall_us"] else 0.0
        lines.append(f"  {f['blocked_us'] / 1000:8.2f} {f['error_us'] / 1000:6.2f} {f['queue_us'] / 1000:7.2f} "
                     f"{share:6.0f}%  {f['name']}{' [sends SQL]' if f['sql'] else ''}  <- {f['stack'][-90:]}")
    return lines


def notable_lines(a: dict) -> list[str]:
    """What `lockdown run` says after analysing, when anything is notable: a capture that
    mostly queued for the CPUs, the database server's flagged counters, the longest tail."""
    out = []
    s = a.get("scheduling")
    if s and s.get("cpu_queue_pct") is not None and s["cpu_queue_pct"] >= QUEUE_NOTE_PCT:
        out.append(f"  the timed requests spent {s['cpu_queue_pct']:.1f}% of their wall time waiting for a CPU"
                   + (f" (concurrency {s['concurrency']} on {numbers.plural(s['cpus'], 'CPU')})"
                      if s.get("concurrency") and s.get("cpus") else "")
                   + ": shares of request time are of a busy host")
    d = a.get("database_status")
    flagged = [c["name"] for c in (d or {}).get("checks", []) if c["flagged"]]
    if flagged:
        out.append(f"  database server: {', '.join(flagged)} (its counters over the capture)")
    long = [t for t in a.get("tail") or [] if t["ratio"] >= NOTE_RATIO]
    if long:
        t = long[0]
        part, ms = next(iter(t["excess_us"].items()))
        out.append(f"  longest tail: {t['url'][:60]}, slowest tenth {t['ratio']:.2f}x its middle half "
                   f"(mostly {part}, +{ms / 1000:.1f} ms)")
    return out


def _pct(c: dict) -> str:
    return "" if c["change_pct"] is None else f" ({c['change_pct']:+.1f}%)"


def versus_lines(v: dict | None) -> list[str]:
    """This capture against a baseline's (analysis.json baseline, analyzers/versus.py)."""
    if not v:
        return []
    o = v["overall"]
    lines = ["", f"against the baseline {v['bundle']} ({v['target']}): means per timed request, ms, before -> after",
             "  all URLs: " + ", ".join(f"{k[:-3].replace('_', ' ')} {o[k]['before'] / 1000:.1f} -> "
                                        f"{o[k]['after'] / 1000:.1f}{_pct(o[k])}" for k in o)]
    for u in v["urls"][:10]:
        w, st = u["wall_us"], u["statements"]
        stmts = ("" if st["before"] is None or st["after"] is None else
                 f", statements {st['before']:.1f} -> {st['after']:.1f}")
        lines.append(f"  {u['url'][:40]:40s} wall {w['before'] / 1000:7.1f} -> {w['after'] / 1000:7.1f}{_pct(w)}, "
                     f"cpu {u['cpu_us']['before'] / 1000:.1f} -> {u['cpu_us']['after'] / 1000:.1f}, db "
                     f"{u['db_wait_us']['before'] / 1000:.1f} -> {u['db_wait_us']['after'] / 1000:.1f}{stmts}")
    for key, what in (("urls_only_in_baseline", "only in the baseline"), ("urls_only_here", "only in this capture")):
        if v[key]:
            lines.append(f"  URLs {what}: {', '.join(v[key][:8])}")
    if v["subsystems_ms"]:
        lines.append("  engine subsystems, CPU ms per request: " + ", ".join(
            f"{r['subsystem']} {r['before']:.1f} -> {r['after']:.1f}" for r in v["subsystems_ms"]))
    for r in v["queries"]:
        lines.append(f"  query {r['state']:10s} {r['count']['before']:6.1f} -> {r['count']['after']:6.1f} a request, "
                     f"{r['ms']['before']:6.2f} -> {r['ms']['after']:6.2f} ms: {r['fingerprint'][:70]}")
    if v["functions_self_pct"]:
        lines.append("  PHP functions, self % of samples: " + ", ".join(
            f"{r['function']} {r['before']:.1f} -> {r['after']:.1f}" for r in v["functions_self_pct"][:6]))
    if v.get("native_self_pct"):
        lines.append("  native functions, self % of samples: " + ", ".join(
            f"{r['function']} {r['before']:.1f} -> {r['after']:.1f}" for r in v["native_self_pct"][:6]))
    return lines


def caller_shares(b: dict) -> list[tuple]:
    """A hot builtin's callers (analysis.json builtins.top[].callers) as (name, % of the
    builtin's inclusive time); none when it took no time."""
    total = b.get("inclusive_us") or 0
    callers = b.get("callers") if isinstance(b.get("callers"), list) else []
    return [(c.get("name"), 100 * (c.get("inclusive_us") or 0) / total)
            for c in callers if isinstance(c, dict)] if total else []


def callers_text(b: dict) -> str:
    """` <- f 62%, g 20%`: a builtin's top callers by their share of its inclusive time."""
    shares = caller_shares(b)
    return "  <- " + ", ".join(f"{name} {pct:.0f}%" for name, pct in shares) if shares else ""


def native_lines(n: dict | None, top: int = 15) -> list[str]:
    """The hot native functions, as `perf report` lists them, with their subsystem."""
    if not n or not n.get("samples") or not n.get("top"):
        return []
    total = n["samples"]
    lines = ["", f"hot native functions (perf, {total} samples of the timed requests; self: the leaf, "
                 f"incl: anywhere on the stack): self% incl% subsystem name [file]"]
    for f in n["top"][:top]:
        lines.append(f"  {100 * f['self_samples'] / total:5.1f} {100 * f['inclusive_samples'] / total:5.1f}  "
                     f"{f['subsystem']:12s} {f['name']} [{f['dso']}]")
    return lines


HOTSPOT_KINDS = (("self", "PHP functions, self"),
                 ("inclusive", "PHP functions, inclusive (the entry script left out)"),
                 ("builtin_family", "builtin families (perf, on the CPU)"),
                 ("subsystem", f"native subsystems (perf; {'off-cpu'}: the rest of each PHP sample's time, "
                               "off the CPU)"))


def _path_text(path: list, frames: int = 5) -> str:
    shown = path[-frames:]
    return ("... > " if len(path) > frames else "") + " > ".join(shown)


def _share(v) -> str:
    return "-" if v is None else numbers.share(v)


def accounting_lines(t: dict | None, top: int = 8) -> list[str]:
    """How much of the sampled request time the findings explain, per URL and overall, and the
    top unexplained hotspots (analysis time_accounting, analyzers/accounting.py)."""
    if not t:
        return []
    what = t["basis_text"] + (f", {t['period_ms']:g} ms period" if t.get("period_ms") else "")
    split = ", split by perf's samples" if t["perf"] and t["basis"].startswith("excimer") else ""
    lines = ["", f"time accounting ({what}{split}, {numbers.plural(t['sampled_requests'], 'timed request')} "
                 f"with samples; findings: {t['findings_source']}):"]
    if not t["requests"]:
        lines.append("  no timed request in the selection (xhprof-instrumented requests are left out of timings)")
        return lines + [f"  note: {n}" for n in t["notes"]]
    if not t["total_us"]:
        lines.append(f"  no samples of timed requests to account for ({numbers.plural(t['requests'], 'timed request')} "
                     "selected; was the excimer or perf collector on?)")
        return lines + [f"  note: {n}" for n in t["notes"]]
    lines.append(f"  the findings explain {_share(t['explained_pct'])} of {t['mean_us'] / 1000:.1f} ms a request; "
                 f"{_share(t['unexplained_pct'])} is unexplained (each sample counted once, however many findings "
                 "own it)")
    lines.append(f"  {'url':40s} {'n':>4s} {'ms/req':>8s} {'explained':>9s} {'unexpl.':>8s}  top unexplained (self)")
    for u in t["urls"]:
        mean = "-" if u["mean_us"] is None else f"{u['mean_us'] / 1000:.1f}"
        tops = ", ".join(f"{h['name']} {_share(h['share_pct'])}" for h in u.get("top") or [])
        lines.append(f"  {u['url'][:40]:40s} {u['requests']:4d} {mean:>8s} {_share(u['explained_pct']):>9s} "
                     f"{_share(u['unexplained_pct']):>8s}  {tops}")
    if t["findings"]:
        overlap = t.get("overlap_pct") or 0.0
        lines.append("  each finding's own samples" + (f" (they overlap by {numbers.share(overlap)} where findings "
                                                      "nest, counted once above)" if overlap >= 0.05 else "") + ":")
        for f in t["findings"]:
            lines.append(f"    {_share(f['owned_pct']):>6s}  {f['key']:22s} (its estimate {_share(f['share_pct'])}): "
                         f"{f['how']}")
    hot = [k for k in t["informational"] if k == "hotspot" or k.startswith("hotspot-")]
    info = [k for k in t["informational"] if k not in hot]
    if info:
        lines.append(f"  informational, explaining nothing: {', '.join(info)}")
    if hot:
        lines.append(f"  hotspot findings, owning none of it (they point at the unexplained time): {', '.join(hot)}")
    lines.append("  top unexplained hotspots: % of the sampled time (ms a request), the most common call path "
                 "(its part), the requests with most of it")
    for kind, title in HOTSPOT_KINDS:
        rows = t["hotspots"].get(kind) or []
        if not rows:
            continue
        lines.append(f"   {title}:")
        for h in rows[:top]:
            name = h["name"] + (f" [{', '.join(h['members'][:3])}]" if h["members"] else "")
            noted = f"; named by {', '.join(h['noted_by'])}" if h["noted_by"] else ""
            more = f" +{h['request_count'] - len(h['requests'])}" if h["request_count"] > len(h["requests"]) else ""
            lines.append(f"    {_share(h['share_pct']):>6s} ({h['us_per_request'] / 1000:5.1f})  {name}  <- "
                         f"{_path_text(h['path'])} ({h['path_pct']:.0f}%)  {' '.join(h['requests'])}{more}"
                         f" on {', '.join(h['urls'][:3])}{' ...' if len(h['urls']) > 3 else ''}{noted}")
    lines += [f"  note: {n}" for n in t["notes"]]
    return lines


def format_analysis(a: dict, top: int = 15, queries: int | None = None) -> str:
    """The analysis for the terminal, `top` rows per table; `queries` query classes (None:
    `top`; 0: all the analysis holds)."""
    lines = [f"analysis of {a['bundle']} ({a['target']}, {a['requests']} requests, "
             f"{a['instrumented_left_out']} xhprof-instrumented left out of timings)"]
    lines += versus_lines(a.get("baseline"))
    lines += accounting_lines(a.get("time_accounting"), min(top, 8))
    lines += subsystem_lines(a.get("subsystems"))
    lines += native_lines(a.get("native_functions"), top)
    lines += engine_lines(a.get("engine_state"))
    lines += budget_lines(a)
    lines += slowest_lines(a["by_request"], top)
    lines += tail_lines(a.get("tail"))
    lines += php_function_lines(a.get("php_functions"), top)
    lines += off_cpu_lines(a.get("off_cpu"), top)
    lines += builtin_lines(a.get("builtins"), top)
    lines += database_status_lines(a.get("database_status"))
    lines += query_lines(a.get("queries"), a, top if queries is None else queries or None)
    return "\n".join(lines)


def subsystem_lines(sub: dict | None) -> list[str]:
    """On-CPU time by engine subsystem, and how many leaf frames stayed without a name."""
    if not sub:
        return []
    lines = ["", f"on-CPU by engine subsystem ({sub['samples']} perf samples inside the timed requests, "
                 f"xhprof-instrumented ones left out):"]
    lines += [f"  {k:13s} {v:5.1f}%" for k, v in sub["overall"].items()]
    ident = sub.get("symbols")
    if ident and ident["samples"]:
        # symbolized before the timed requests are picked: its own base, every perf sample
        before = 100.0 * ident["leaf_unknown_before"] / ident["samples"]
        lines.append(f"  leaf frame with no function identity: {ident['leaf_unknown_after']} of all "
                     f"{ident['samples']} perf samples of the capture ({ident['leaf_unknown_pct']:.1f}%; "
                     f"{before:.1f}% before naming {ident['frames_named']} frames from symbol tables "
                     f"and .eh_frame)")
    return lines


def budget_lines(a: dict) -> list[str]:
    """The time budget per URL and overall, the scheduler's summary and the round trips."""
    lines = ["", "time budget per request, mean ms (wall = cpu + db wait + other wait + residual; "
                 "queue: the part of other wait spent waiting for a CPU, beyond db wait):",
             f"  {'url':40s} {'n':>4s} {'wall':>8s} {'cpu':>8s} {'db':>8s} {'other':>8s} {'queue':>8s} {'resid':>8s}"]
    rows = list(a["budget_by_url"].items()) + [("(all)", a["budget_overall"])]
    for url, b in rows:
        lines.append(f"  {url[:40]:40s} {b['requests']:4d} {_ms(b['wall_us'])} {_ms(b['cpu_us'])} "
                     f"{_ms(b['db_wait_us'])} {_ms(b['other_wait_us'])} {_ms_or_dash(b.get('cpu_queue_us'))} "
                     f"{_ms(b['residual_us'])}")
    lines += scheduling_lines(a.get("scheduling"))
    trip = a.get("db_round_trip")
    if trip:
        lines.append(f"  db is the server's time only; the statements' round trips add about "
                     f"{trip['us_per_request'] / 1000:.1f} ms per request ({trip['statements_per_request']:.1f} "
                     f"statements x {trip['per_call_us']:.0f} us, xhprof), inside cpu and other")
    return lines


def slowest_lines(by_request: list[dict], top: int) -> list[str]:
    """The slowest timed requests, with their budgets (several requests only)."""
    slow = sorted((r for r in by_request if not r["instrumented"]), key=lambda r: -r["wall_us"])
    if len(by_request) <= 1 or not slow:
        return []
    lines = ["", "slowest requests, ms (drill down with --request ID):",
             f"  {'id':9s} {'url':36s} {'wall':>8s} {'cpu':>8s} {'db':>8s} {'other':>8s} {'queue':>8s} "
             f"{'stmts':>6s}"]
    for r in slow[:min(top, 10)]:
        lines.append(f"  {r['id']:9s} {r['url'][:36]:36s} {_ms(r['wall_us'])} {_ms(r['cpu_us'])} "
                     f"{_ms(r['db_wait_us'])} {_ms(r['other_wait_us'])} {_ms_or_dash(r.get('cpu_queue_us'))} "
                     f"{r['statements']:6d}")
    return lines


def php_function_lines(f: dict | None, top: int) -> list[str]:
    if not f or not f["samples"]:
        return []
    base = numbers.excimer_weight(f["samples"], f.get("sample_count"))
    lines = ["", f"hot PHP functions (Excimer, {base}): self% incl% name"]
    for h in f["top"][:top]:
        lines.append(f"  {100 * h['self_samples'] / f['samples']:5.1f} "
                     f"{100 * h['inclusive_samples'] / f['samples']:5.1f}  {h['name']}")
    return lines


def builtin_lines(hb: dict | None, top: int) -> list[str]:
    if not hb or not hb["top"]:
        return []
    lines = ["", f"hot builtins (xhprof, {hb['profiles']} instrumented requests): "
                 f"exclusive ms, calls, allocations, name <- its callers, by their share of its time"]
    for b in hb["top"][:top]:
        allocs = "-" if b["allocations"] is None else str(b["allocations"])
        mark = " *" if b.get("compiled_to_opcode") else ""
        lines.append(f"  {b['exclusive_us'] / 1000:8.2f} {b['calls']:8d} {allocs:>8s}  {b['name']}{mark}"
                     + callers_text(b))
    if any(b.get("compiled_to_opcode") for b in hb["top"][:top]):
        lines.append("  * a VM opcode, not a call, in the timed requests: tideways_xhprof makes PHP compile it "
                     "as a call (docs/analysis.md)")
    return lines


def query_lines(q: dict | None, a: dict, top: int | None) -> list[str]:
    """The query digest's classes (the first `top`, None: all the analysis holds; ids as
    pt-query-digest prints them, `0x` and 32 upper-case hex digits), and the selected request's
    statements in order (`a`: the analysis, which names it)."""
    if not q:
        return []
    shown = q["classes"][:top]
    more = q["class_count"] - len(shown)
    lines = ["", f"query digest ({q['statements']} statements, {q['class_count']} classes"
                 f"{f', the top {len(shown)} shown (--queries all for every one)' if more > 0 else ''}; "
                 f"attribution {q['attribution']}):",
             f"  {'id':34s} {'count':>6s} {'/req':>6s} {'total ms':>9s} {'avg us':>8s} "
             f"{'p95 us':>8s} {'rows ex':>8s}  fingerprint"]
    for c in shown:
        per = f"{c['count_per_request']:6.1f}" if c["count_per_request"] is not None else "     -"
        lines.append(f"  {'0x' + c['id']:34s} {c['count']:6d} {per} {c['time_total'] / 1000:9.1f} "
                     f"{c['time_avg']:8.0f} {c['time_p95']:8d} {c['rows_examined_total']:8d}  "
                     f"{c['fingerprint'][:70]}")
        plan = plan_text(c.get("plan") or {}, c["plan_known"]) if "plan_known" in c else ""
        if plan and plan != "-":
            lines.append(f"  {'':34s} server plan: {plan}")
    if "in_order" in q:
        lines += ["", f"statements of {a['selection']['request']} in order: us, rows sent/examined, sql"]
        for st in q["in_order"]:
            lines.append(f"  {st['duration_us']:8d} {st['rows_sent']:5d}/{st['rows_examined']:<6d} "
                         f"{' '.join(st['sql'].split())[:100]}")
    return lines


def engine_lines(e: dict | None) -> list[str]:
    """OPcache and the realpath cache as the workers reported them (analysis.json engine_state)."""
    if not e:
        return []
    out = ["", f"engine caches (the workers' own view after each of {e['requests']} timed requests):"]
    o = e.get("opcache")
    if o is None:
        out.append("  OPcache: no status (not loaded, or opcache.restrict_api)")
    elif not o["enabled"]:
        out.append("  OPcache: disabled in the workers")
    else:
        restarts = ", ".join(f"{k} {v}" for k, v in sorted(o["restarts"].items())) or "none"
        out += [f"  OPcache: {o['lookups_per_request']:.1f} script lookups per request (include/require), "
                f"{o['misses_per_request']:.1f} compiled (missed; in {o['requests_with_misses']} of {o['requests']} "
                f"requests); restarts during the capture: {restarts}",
                f"    keys {o['cached_keys']:,} of {o['max_cached_keys']:,}{_full(o['keys_full'])}; shared memory "
                f"{numbers.size(o['used_memory'])} used, {numbers.size(o['free_memory'])} free, "
                f"{numbers.size(o['wasted_memory'])} wasted{_full(o['memory_full'])}; interned strings "
                f"{numbers.size(o['interned_used'])} of {numbers.size(o['interned_size'])}{_full(o['interned_full'])}"]
        if o.get("uncached"):
            out.append("    not cached after a miss (timed requests): "
                       + ", ".join(f"{path} {n}" for path, n in list(o["uncached"].items())[:5]))
    g = e.get("gc")
    if g:
        out.append(f"  cycle collector: {g['runs_per_request']:.2f} runs per request (in {g['requests_with_runs']} of "
                   f"{g['requests']}), {g['collected_per_request']:,.0f} values freed per request; threshold "
                   f"{g['threshold']:,} roots, at most {g['roots_max']:,} left at a request's end")
    r = e["realpath"]
    limit = numbers.size(r["limit_bytes"], "unknown")
    out.append(f"  realpath cache: {numbers.size(r['bytes_max'])} of {limit} in the fullest of {r['workers']} "
               f"workers{_full(r['full'])}")
    return out


def _full(flag) -> str:
    return " (FULL)" if flag else ""
