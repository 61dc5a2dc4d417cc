"""`lockdown verify` as a pipeline: a finding's remediation (or several findings' together)
applied to copies of the target and measured against it in interleaved A/B pairs, the patched
copy captured again to see whether the finding is gone, the differential flame graphs drawn,
the run's report and write-ups rewritten with the verification.

    from lockdown.pipeline.verify import VerifyOptions, verify
    outcome = verify(Path("out"), VerifyOptions(findings=["fs-scan"]), say=print)

`say` is the progress callback (a line at a time, as `print` takes it). The stages are apart
for the CLI, which bounds the measuring with its --timeout and not the rewriting: `open_verify`
reads the diffs given and the run, `plan_verify` picks the findings and their remediations,
`measure_verify` checks the diffs against the files the run served and measures (DIR/verify/KEY
replaced whole only when complete: remediation/verify.py `verify`), `rewrite_reports` rewrites
RUN/report.html and RUN/findings/*.md. What is remediation logic (which findings, which
remediations, "gone", the extra arms of --each) stays in lockdown/remediation/verify.py.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from ..analyzers.detectors import build_context, detect
from ..analyzers.findings import Finding, Remediation
from ..analyzers.stacks import stacks
from ..bundle.store import open_bundle
from ..bundle.validate import coverage_checks
from ..collectors.settings import CaptureSettings
from ..errors import LockdownError
from ..harness.ab_bench import DEFAULT_MAX_RUNS, PairPlan, run_ab
from ..harness.bench import BenchOptions
from .hotspots import hotspot_step
from .probe import check_repeated_calls
from ..harness.profile import ProfileOptions, run_profile
from ..harness.stack import StackOptions
from ..paths import check_config_path
from ..remediation import verify as remediation
from ..remediation.apply import applied, ini_changes, remedy
from ..remediation.user_patch import checked, load_patch
from ..remediation.verify import (RunRecord, base_of, distinct, each_adds, left_out_arms, load_run, new_in,
                                  pick_all, pick_finding, pick_remediations, recaptured, still_there, summary_of,
                                  verify_key)
from ..reports.flamegraph import FlameOptions, php_builtins, render_diff_flamegraph
from ..reports.run_documents import write_finding_writeups, write_report
from ..rundir.model import VERIFY_FORMAT
from ..rundir.store import write_text_atomic

Progress = Callable[[str], None]


@dataclass
class VerifyOptions:
    """What `lockdown verify` verifies and how (its options; defaults as the command's)."""
    findings: list[str] = field(default_factory=list)   # keys or ids (--finding): fixed together
    everything: bool = False            # every defect finding with a concrete remediation (--all)
    each: bool = False                  # with several: also each fix left out once (--each)
    numbers: tuple[int, ...] = ()       # which of one finding's remediations, 1-based (--remediation)
    patches: list[Path] = field(default_factory=list)   # the user's own diffs or SQL instead (--patch)
    bench: BenchOptions = field(default_factory=BenchOptions)   # the runs of each arm
    max_runs: int = DEFAULT_MAX_RUNS    # pairs at most, when the pilot is too noisy
    requests: int | None = None         # in the re-capture; None: as many as the run's capture
    probe: bool = True                  # the argument probe of the re-capture's repeated-call candidates


@dataclass
class Opened:
    """The run to verify and the diffs given, read."""
    run: RunRecord
    patches: list[Remediation]


@dataclass
class VerifyPlan:
    run: RunRecord
    findings: list[Finding]
    remediations: list[Remediation]     # the patches given (checked in `measure_verify`), or the proposed ones
    patches: bool                       # the remediations are the user's patches (diffs, SQL)
    key: str                            # the verify/ directory name: a key, `all`, or keys joined with +
    options: VerifyOptions


@dataclass
class Published:
    """The run's documents rewritten with the verification: None where one could not be (the
    verification stays saved; `lockdown writeup` / `lockdown report` can be run again)."""
    writeups: Path | None               # RUN/findings
    writeups_error: str | None
    report: Path | None                 # RUN/report.html
    report_error: str | None


@dataclass
class VerifyOutcome:
    directory: Path                     # RUN/verify/KEY
    path: Path                          # RUN/verify/KEY/verify.json
    result: dict                        # verify.json's document
    published: Published

    @property
    def confirmed(self) -> bool:
        """The change is significant and positive, and the re-capture no longer shows the findings."""
        return bool(self.result["confirmed"])


def open_verify(directory: Path, options: VerifyOptions) -> Opened:
    """The patches given read (unified diffs, or SQL for the database copy: one file each),
    and the run in `directory` (a finished `lockdown run`)."""
    patches = [load_patch(p, sql=True) for p in options.patches]
    run = load_run(Path(directory).resolve())
    check_config_path(run.directory, "copy the run directory to a path without them and verify it there")
    return Opened(run, patches)


def plan_verify(opened: Opened, options: VerifyOptions, say: Progress = print) -> VerifyPlan:
    """The findings to verify and the remediations to apply (LockdownError when none fits)."""
    run, o = opened.run, options
    if bool(o.findings) == o.everything:
        raise LockdownError("give the findings to verify, or all of them, not both and not neither")
    if o.everything:
        findings = pick_all(run, say)
        rems = distinct([f.remediations[0] for f in findings])
    else:
        findings = list({f.key: f for f in (pick_finding(run, w) for w in o.findings)}.values())
        rems = opened.patches or distinct([r for f in findings for r in pick_remediations(f, o.numbers)])
    return VerifyPlan(run, findings, rems, bool(opened.patches), verify_key(findings, o.everything), o)


def measure_verify(plan: VerifyPlan, say: Progress = print) -> dict:
    """The patches given checked against what the run served (diffs on its files, SQL on a copy
    of its database, its base's first), then measured; verify.json is written to RUN/verify/KEY,
    and returned."""
    run, o, rems = plan.run, plan.options, plan.remediations
    if plan.patches:
        rems = checked(run.target, rems, say, run.base.remediations if run.base else [])
    return remediation.verify(run, plan.findings, rems, o.bench, o.requests, measure, probe=o.probe, say=say,
                              key=plan.key, each=o.each, max_runs=o.max_runs)


def rewrite_reports(run_dir: Path) -> Published:
    """RUN/findings/*.md and RUN/report.html rewritten with the verifications; a failure of
    either is said, not raised: verify.json is already written by then."""
    try:
        notes, notes_error = write_finding_writeups(run_dir), None
    except (LockdownError, OSError) as e:
        notes, notes_error = None, str(e)
    try:
        report, problem = write_report(run_dir), None
    except (LockdownError, OSError) as e:
        report, problem = None, str(e)
    return Published(notes, notes_error, report, problem)


def verify(directory: Path, options: VerifyOptions, say: Progress = print) -> VerifyOutcome:
    """`lockdown verify DIR` from Python: open, plan, measure, rewrite the run's documents."""
    plan = plan_verify(open_verify(directory, options), options, say)
    result = measure_verify(plan, say)
    final = plan.run.directory / "verify" / plan.key
    return VerifyOutcome(final, final / "verify.json", result, rewrite_reports(plan.run.directory))


def time_per_unit(bundle) -> dict[str, float | None]:
    """Per kind of stack, the ms per timed request that one sample of `stacks(bundle, kind,
    counts=True)` stands for: an Excimer sample is its period of wall time, a perf sample
    1/perf_freq s of CPU; None when the manifest does not say."""
    cap = bundle.manifest.get("capture", {})
    timed = sum(1 for r in bundle.requests() if not r.instrumented)
    units = {"php": cap.get("excimer_period_ms"),
             "native": 1000.0 / cap["perf_freq"] if cap.get("perf_freq") else None}
    return {kind: unit / timed if unit and timed else None for kind, unit in units.items()}


def diff_svgs(before: Path, after: Path, out: Path, title: str) -> dict:
    """PHP and native differential flame graphs, before -> after, where both captures have them:
    one with AFTER's widths (what the patched code spends), one with BEFORE's (where what the
    patch removed shows, blue). Colours compare time per request: BEFORE's samples are scaled by
    its sampling period and request count to AFTER's, so a frame that got cheaper is blue even
    when it is a larger share of a much faster page (shares turned nearly everything red after
    a 20x fix), and captures sampled at different Excimer periods compare fairly."""
    written = {}
    b, a = open_bundle(before), open_bundle(after)
    units_b, units_a = time_per_unit(b), time_per_unit(a)
    builtins = php_builtins(a.manifest.get("php", {}))
    for kind in ("php", "native"):
        try:
            old, new = stacks(b, kind, counts=True), stacks(a, kind, counts=True)
        except LockdownError:
            written[kind] = None
            continue
        if not old or not new:
            written[kind] = None
            continue
        unit_b, unit_a = units_b[kind], units_a[kind]
        factor = unit_b / unit_a if unit_b and unit_a else None
        for widths, key, name in (("after", kind, f"diff-{kind}.svg"),
                                  ("before", f"{kind}_before_widths", f"diff-{kind}-before.svg")):
            # the picture's own samples stay real counts; the other side is scaled to them
            if factor is None:
                pair, how = (old, new), "(shares of the total)"
            elif widths == "after":
                pair = ({k: v * factor for k, v in old.items()}, new)
                how = f"in time per request (before's samples x {factor:.3g}: its sampling and request count)"
            else:
                pair = (old, {k: v / factor for k, v in new.items()})
                how = f"in time per request (after's samples x {1 / factor:.3g}: its sampling and request count)"
            opts = FlameOptions(title=f"{title}: {kind} stacks, before -> after",
                                subtitle=f"widths from {widths}; red grew, blue shrank {how}",
                                builtins=builtins, palette=kind)
            write_text_atomic(out / name, render_diff_flamegraph(*pair, opts, normalize=factor is None,
                                                                 widths=widths))
            written[key] = name
    return written



def measure(run: RunRecord, findings: list[Finding], key: str, rems: list[Remediation], bench: BenchOptions,
            requests: int | None, probe: bool, work: Path, final: Path, say: Progress, each: bool = False,
            plan: PairPlan | None = None) -> dict:
    """verify.json's document, measured into `work` (remediation/verify.py `verify` moves it to
    `final`): the A/B pairs, the re-capture with its detectors and probe, the differential
    flame graphs."""
    t = run.target
    after_ini = ini_changes(rems, run.php_ini)
    base = base_of(run)
    patch = remedy(base + rems, say)
    # a run on top of verified fixes (run --on-top-of): the before arm is the site as they left it
    if base:
        say(f"[base] both arms start from {run.base.describe()}")
    before_opts = StackOptions(php_ini=dict(run.php_ini), remedy=remedy(base, say) if base else None)
    after_opts = StackOptions(php_ini=after_ini, remedy=patch)
    if len(findings) == 1:
        finding = summary_of(findings[0])
    else:
        finding = {"key": key, "id": None, "subject": None, "share_pct": None,
                   "title": f"{len(findings)} fixes together: {', '.join(g.key for g in findings)}"}
    say(f"== A/B benchmark: {finding['key']} ({finding['title']})")
    left_out = left_out_arms(run, findings, rems, say) if each and len(findings) > 1 else {}
    ab = run_ab(t, work / "ab", before_opts, after_opts, bench, say=say,
                others={arm: spec[2] for arm, spec in left_out.items()}, plan=plan)
    say("== re-profile with the remediation applied")
    capture = CaptureSettings(xhprof_every=run.xhprof_every)
    bundle_dir = run_profile(t, work / "profile-run", work / "bundle",
                             ProfileOptions(requests=requests or run.requests, capture=capture,
                                            php_ini=after_ini, remedy=patch, applied=applied(base + rems)),
                             say=say)
    after_bundle = open_bundle(bundle_dir)
    checks = coverage_checks(after_bundle)   # validate's checks; the files were just written whole
    for c in checks:
        if not c.ok:     # the verdict stands, but "gone" rests on a thinner capture than promised
            say(f"[reprofile] warning: check failed on the re-capture: {c.name}: {c.detail}")
    after_ctx = build_context(after_bundle, run.thresholds)
    after = detect(after_ctx)
    dismissed: list[dict] = []
    if probe:   # as `run` does, so a candidate its probe dismissed is not "still there" here
        after, dismissed = check_repeated_calls(t, after, run.thresholds, work / "probe-run",
                                                php_ini=after_ini, remedy=patch, say=say)
        # and its hotspot step: "gone" and "new" judged on the hotspot findings `run` reports
        after = hotspot_step(t, after_ctx, after, dismissed, work / "hotspot-probe-run",
                             php_ini=after_ini, remedy=patch, say=say)
    left = {g.key: still_there(g, after) for g in findings}
    contributions = each_adds(left_out, ab) if left_out else None
    remaining = list({h.key: h for g in findings for h in left[g.key]}.values())
    diffs = diff_svgs(run.bundle, bundle_dir, work, key) if run.bundle.is_dir() else {}
    change = ab["change"]
    confirmed = not remaining and change["significant"] and change["change_pct"] > 0
    return {
        "format": VERIFY_FORMAT,
        "finding": finding,
        "findings": [summary_of(g) for g in findings],
        "target": t.name,
        # description: where it came from (a recipe, the memo, `--patch FILE`: verify --patch)
        "remediations": [{"kind": r.kind, "file": r.file, "content": r.content, "steps": r.steps,
                          "description": r.description} for r in rems],
        "php_ini": {"before": run.php_ini, "after": after_ini},
        # applied to both arms (run --on-top-of); a run on top of this verification starts from them too
        "base_remediations": [asdict(r) for r in base],
        "base_source": run.base.source if run.base else None,
        "responses": ab.pop("responses", None),
        "bench": ab,
        "reprofile": {"bundle": str(final / "bundle"), "requests": requests or run.requests,
                      "gone": not remaining, "remaining": [g.key for g in remaining],
                      "gone_by_finding": {k: not v for k, v in left.items()},
                      "new": [g.key for g in new_in(run.findings, after)],
                      "findings": [recaptured(g) for g in after],
                      "probed": probe, "dismissed": dismissed,
                      "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in checks]},
        "before_bundle": str(run.bundle),
        "diff_svg": diffs,
        "confirmed": confirmed,
        **({"each": contributions} if contributions is not None else {}),
    }
