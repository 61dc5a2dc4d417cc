"""`lockdown run` as a pipeline: bench, profile, analyze, detect, probe, propose, write.

    from lockdown.pipeline.run import RunOptions, run
    outcome = run("minicms", Path("out"), RunOptions(runs=2, requests=60), say=print)

`say` is the progress callback (a line at a time, as `print` takes it; a progress.Reporter
also draws a live status line). The stages are apart for the CLI, which bounds the measuring
ones with its --timeout and not the writing: `plan_run` checks every input before anything
starts (the target, the thresholds, the verified fixes and diffs to start from, the output
directory), `measure` claims the output directory and measures (its time accounting, what
share of the sampled request time the findings explain, in accounting.json), `write_run` writes
findings.json, the write-ups, the flame graphs and the report, and marks the directory
finished.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .. import paths, run_marker
from ..analyzers import accounting
from ..analyzers.analysis import analyze
from ..analyzers.detectors import build_context, detect, load_thresholds
from ..analyzers.detectors.context import Context
from ..analyzers.findings import Finding, Remediation, remediation_names
from ..analyzers.query_digest import fingerprint
from ..analyzers.sql_caller import lazy_relations_by_count, reaching, senders_by_count
from ..bundle.store import Bundle, open_bundle
from ..collectors.settings import CaptureSettings
from ..errors import LockdownError
from ..harness.bench import BenchOptions, run_bench
from .probe import check_repeated_calls
from ..harness.profile import ProfileOptions, run_profile
from ..remediation.apply import applied as manifest_entries, remedy as stack_patcher
from ..remediation.base import Base, load_base, with_patches
from ..remediation.generate import Called
from ..remediation.propose import propose_all
from ..remediation.user_patch import checked as check_user_patches, load_patch
from ..reports import numbers
from ..reports.analysis_text import notable_lines
from ..reports.bench_table import format_bench
from ..reports.reproduce import RUN_DEFAULTS
from ..reports.run_documents import write_finding_writeups, write_flamegraphs, write_report
from ..rundir.model import Analysis, BenchResult, RunDocument, RunSettings, TimeAccounting
from ..rundir.store import ACCOUNTING, ANALYSIS, BENCH, FINDINGS, write_document
from ..targets.config import Target
from ..targets.registry import resolve
from .hotspots import hotspot_step

Progress = Callable[[str], None]


@dataclass
class RunOptions:
    """What `lockdown run` measures and how (its options; defaults as the command's)."""
    runs: int = RUN_DEFAULTS["runs"]                        # measured benchmark runs
    duration: int = RUN_DEFAULTS["duration"]                # seconds per measured run
    warmup_duration: int = RUN_DEFAULTS["warmup_duration"]  # seconds of the concurrent warmup
    requests: int = RUN_DEFAULTS["requests"]                # requests in the capture
    xhprof_every: int = RUN_DEFAULTS["xhprof_every"]        # xhprof for 1 in K requests of each URL
    thresholds: Path | None = None          # TOML overriding detector thresholds
    php_ini: dict[str, str] = field(default_factory=dict)   # overrides, on top of the base's
    bench: bool = True                      # False: profile and detect only (--no-bench)
    probe: bool = True                      # the argument probe of repeated-call candidates
    on_top_of: Path | None = None           # a confirmed verification to start from (the next round)
    patches: list[Path] = field(default_factory=list)     # the user's own diffs, after its fixes
    recorded: list[str] = field(default_factory=list)     # the options as `lockdown run` takes them
                                                          # again (findings.json run.options)


@dataclass
class RunPlan:
    """A run's inputs, every one checked before anything starts."""
    target: Target
    target_arg: str                 # TARGET as it resolves again from anywhere (findings.json run.target_arg)
    out: Path
    options: RunOptions
    limits: dict                    # the detector thresholds
    base: Base | None               # the verified fixes to start from
    patches: list[Remediation]      # the user's diffs, read (checked against the target in `measure`)
    php_ini: dict[str, str]         # the base's php.ini, the options' on top


@dataclass
class Measured:
    """What `measure` found, before anything of it is written but bench.json, analysis.json and
    accounting.json."""
    out: Path                       # the output directory, claimed
    base: Base | None               # the fixes and the user's checked diffs every copy was served with
    bench: dict | None
    bundle: Bundle
    analysis: dict
    findings: list[Finding]
    dismissed: list[dict]
    accounting: TimeAccounting | None = None     # the share of the sampled time the findings explain


@dataclass
class RunOutcome:
    """A finished run directory."""
    directory: Path
    document: RunDocument           # findings.json
    bench: dict | None              # bench.json (None: --no-bench)
    bundle_dir: Path
    report: Path
    flamegraphs: list[Path]


def is_path(target: str) -> bool:
    """Whether TARGET named a directory rather than a built-in (as targets.registry.resolve
    tells them apart): a path is recorded absolute, so the command works from anywhere."""
    return "/" in target or target.startswith(".") or Path(target).expanduser().is_dir()


def plan_run(target: str, out: Path, options: RunOptions) -> RunPlan:
    """`options` for `target` into `out`, checked: the target resolves, the thresholds,
    the verification to start from and the diffs read, and `out` is no unfinished run's."""
    t = resolve(target)
    limits = load_thresholds(options.thresholds)
    base = load_base(options.on_top_of, t.name) if options.on_top_of is not None else None
    patches = [load_patch(p) for p in options.patches]
    # the base's php.ini (its verified after arm's), the options given on top
    ini = {**(base.php_ini if base else {}), **options.php_ini}
    taken = run_marker.unfinished(out.resolve(), "-o")
    if taken:
        raise LockdownError(taken)
    return RunPlan(t, str(t.directory) if is_path(target) else target, out, options, limits, base, patches, ini)


def measure(plan: RunPlan, say: Progress = print) -> Measured:
    """The user's diffs checked against the target (before the output directory is made: one
    that does not fit leaves nothing), the output directory claimed, then bench, profile,
    analyze, detect, probe and propose, and account for the sampled time."""
    t, base = plan.target, plan.base
    if plan.patches:
        base = with_patches(base, check_user_patches(t, plan.patches, say, base.remediations if base else []))
    out = paths.empty_dir(plan.out, "-o")
    run_marker.claim(out)          # DIR/incomplete.json until the report is written
    patch = stack_patcher(base.remediations, say) if base else None
    if base:
        say(f"[base] on top of {base.describe()}: {remediation_names(base.remediations)}")
    bench = _bench(plan, out, base, patch, say) if plan.options.bench else None
    bundle = _capture(plan, out, base, patch, say)
    analysis = _analyze(bundle, out, say)
    ctx, findings, dismissed = _detect(plan, bundle, out, base, patch, say)
    accounted = _account(ctx, findings, plan.options.probe, out, say)
    return Measured(out, base, bench, bundle, analysis, findings, dismissed, accounted)


def _bench(plan: RunPlan, out: Path, base: Base | None, patch, say: Progress) -> dict:
    o = plan.options
    say(f"== bench {plan.target.name}")
    bench = run_bench(plan.target, out / "bench-run", BenchOptions(runs=o.runs, duration=o.duration,
                                                                   warmup_duration=o.warmup_duration,
                                                                   php_ini=plan.php_ini),
                      say=say, remedy=patch, base=base.describe() if base else None)
    write_document(out, BENCH, BenchResult.from_json(bench))
    say(format_bench(bench))
    return bench


def _capture(plan: RunPlan, out: Path, base: Base | None, patch, say: Progress) -> Bundle:
    say(f"== profile {plan.target.name}")
    settings = CaptureSettings(xhprof_every=plan.options.xhprof_every)
    bundle_dir = run_profile(plan.target, out / "profile-run", out / "bundle",
                             ProfileOptions(requests=plan.options.requests, capture=settings, php_ini=plan.php_ini,
                                            remedy=patch, applied=manifest_entries(base.remediations) if base else []),
                             say=say)
    return open_bundle(bundle_dir)


def _analyze(bundle: Bundle, out: Path, say: Progress) -> dict:
    say("== analyze")
    analysis = analyze(bundle)
    write_document(out, ANALYSIS, Analysis.from_json(analysis))
    for line in notable_lines(analysis):
        say(line)
    say(f"  (all of it: lockdown analyze {shlex.quote(str(bundle.root))})")
    return analysis


def _detect(plan: RunPlan, bundle: Bundle, out: Path, base: Base | None, patch,
            say: Progress) -> tuple[Context, list[Finding], list[dict]]:
    """Detect, probe the repeated-call candidates, propose checked patches; the detectors'
    Context with the findings, for the time accounting."""
    say("== detect")
    ctx = build_context(bundle, plan.limits)
    findings = detect(ctx)
    dismissed: list[dict] = []
    if plan.options.probe:
        findings, dismissed = check_repeated_calls(plan.target, findings, plan.limits, out / "probe-run",
                                                   php_ini=plan.php_ini, remedy=patch, say=say)
        findings = hotspot_step(plan.target, ctx, findings, dismissed, out / "hotspot-probe-run",
                                php_ini=plan.php_ini, remedy=patch, say=say)
    sent = sent_per_request(ctx)
    called = Called(calls_per_request(bundle), senders_of(ctx, sent), lazy_relations_by_count(sent, ctx.xhprof_edges))
    findings = propose_all(findings, bundle.statements(), plan.target, out / "remedy-run", say=say, base=base,
                           called=called)
    findings, refuted = split_refuted(findings)
    return ctx, findings, dismissed + refuted


def split_refuted(findings: list[Finding]) -> tuple[list[Finding], list[dict]]:
    """(the findings, the dismissed entries of those a generator refuted while reading their
    code: a per-call-setup whose loop is passed what the call's arguments made does no setup;
    the same function's repeated-call, when its arguments repeat, is the finding that holds)."""
    kept, refuted = [], []
    for f in findings:
        why = f.details.get("refuted")
        if not why:
            kept.append(f)
            continue
        refuted.append({"id": f.id, "function": str(f.details.get("function") or ""),
                        "defined_at": str(f.details.get("located") or ""), "reason": f"its code: {why}"})
    return kept, refuted


def senders_of(ctx: Context, sent: dict[str, dict[str, int]]) -> dict[str, list[str]]:
    """Statement shape -> the functions that may send it, by their call counts
    (sql_caller.senders_by_count), among those reaching a database client in the call graph.
    `sent`: sent_per_request(ctx)."""
    calls = {rid: {fn: t["calls"] for fn, t in fns.items()} for rid, fns in ctx.xhprof.items()}
    db = accounting.db_callers(ctx.xhprof_profiles.values(), ctx.is_internal if ctx.internal_functions else None)
    reach = reaching({edge for edges in ctx.xhprof_edges.values() for edge in edges}, db)
    return senders_by_count(sent, calls, reach)


def sent_per_request(ctx: Context) -> dict[str, dict[str, int]]:
    """Statement shape -> profiled request id -> executions (the requests with a call profile)."""
    out: dict[str, dict[str, int]] = {}
    for s in ctx.statements:
        if s.request in ctx.xhprof:
            per = out.setdefault(fingerprint(s.sql), {})
            per[s.request] = per.get(s.request, 0) + 1
    return out


def calls_per_request(bundle: Bundle) -> dict[str, float]:
    """Function (and "caller==>callee" edge) -> mean calls per xhprof-instrumented request:
    which functions the capture saw run, and from where."""
    ids = bundle.xhprof_ids()
    totals: dict[str, float] = {}
    for rid in ids:
        for edge, data in bundle.xhprof(rid).items():
            n = data.get("ct", 0) if isinstance(data, dict) else 0
            callee = edge.rpartition("==>")[2]
            totals[callee] = totals.get(callee, 0) + n
            if "==>" in edge:
                totals[edge] = totals.get(edge, 0) + n
    return {fn: n / len(ids) for fn, n in totals.items()} if ids else {}


def _account(ctx: Context, findings: list[Finding], probed: bool, out: Path, say: Progress) -> TimeAccounting:
    """accounting.json: the share of the timed requests' sampled time the run's findings explain
    (after the argument probe, so a dismissed candidate explains nothing), and the top
    unexplained hotspots (analyzers/accounting.py); one line of it on the terminal."""
    got = accounting.of_context(ctx, findings)
    got.findings_source = ("the run's findings (findings.json), after the argument probe" if probed
                           else "the run's findings (findings.json), without the argument probe (--no-probe)")
    document = TimeAccounting.of(got)
    write_document(out, ACCOUNTING, document)
    say(accounting_line(document))
    return document


def accounting_line(t: TimeAccounting) -> str:
    """The time accounting in one line: "findings explain N% of the sampled request time; top
    unexplained: F (x%), G (y%), H (z%)" (the self hotspots: they partition the unexplained time)."""
    if not t.total_us or t.explained_pct is None:
        return ("findings explain none of the sampled request time: no samples of timed requests "
                "(were the excimer and perf collectors off?)")
    top = ", ".join(f"{h.name} ({numbers.share(h.share_pct)})" for h in t.hotspots.self[:3]) or "none"
    return f"findings explain {numbers.share(t.explained_pct)} of the sampled request time; top unexplained: {top}"


def run_document(plan: RunPlan, measured: Measured) -> RunDocument:
    """findings.json of the run."""
    o, t = plan.options, plan.target
    return RunDocument(
        target=t.name, bundle=str(measured.bundle.root),
        # what `lockdown verify DIR` needs to serve and capture the target the same way again
        run=RunSettings(target_dir=str(t.directory), php_ini=plan.php_ini, requests=o.requests,
                        xhprof_every=o.xhprof_every, thresholds=plan.limits,
                        # how to run it again (reports/reproduce.py): TARGET as it resolves anywhere,
                        # and the options given, as `lockdown run` takes them
                        target_arg=plan.target_arg, options=list(o.recorded),
                        # the verified fixes this run started from (--on-top-of); verify applies them too
                        base=measured.base.to_json() if measured.base else None),
        findings=measured.findings, dismissed=measured.dismissed)


def write_run(plan: RunPlan, measured: Measured, say: Progress = print) -> RunOutcome:
    """findings.json, the write-ups, the flame graphs and report.html; then the directory is
    marked finished."""
    out = measured.out
    document = run_document(plan, measured)
    write_document(out, FINDINGS, document)
    write_finding_writeups(out)
    say("== report")
    flames = write_flamegraphs(measured.bundle, out)
    report = write_report(out)
    run_marker.finished(out)
    return RunOutcome(out, document, measured.bench, measured.bundle.root, report, flames)


def run(target: str, out: Path, options: RunOptions | None = None, say: Progress = print) -> RunOutcome:
    """`lockdown run TARGET -o OUT` from Python: every stage, and the finished directory."""
    plan = plan_run(target, Path(out), options or RunOptions())
    return write_run(plan, measure(plan, say), say)
