"""`lockdown verify`: measure a finding's remediation. The target is served twice, as it was
and with the remediation applied to copies (app tree, database, php.ini), benchmarked in
interleaved pairs; then the patched copy is captured again and the detectors (and the
argument probe, as in `run`) run on it, to see whether the finding is gone. Results go to
DIR/verify/KEY/ (verify.json, the after bundle, differential flame graphs), replaced whole
only when complete.

Several findings can be verified together (`--all`, or `--finding` given more than once):
their remediations are applied to the same copy and measured as one change -- what the whole
lockdown buys, which is not the sum of the single gains (fixes overlap, and the bottleneck
moves). KEY is then `all`, or the findings' keys joined with `+`.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .. import paths
from ..analyzers.detectors import with_defaults
from ..analyzers.findings import Finding, Remediation, predicted_ratio
from ..errors import LockdownError
from ..harness.ab_bench import DEFAULT_MAX_RUNS, PairPlan
from ..harness.bench import BenchOptions
from ..harness.stack import StackOptions
from ..rundir.store import FINDINGS, open_run, write_json_atomic
from ..signals import held
from ..targets.config import Target
from ..targets.registry import resolve
from .apply import ini_changes, remedy
from .base import Base


# the measuring step `verify` runs in its work directory: (run, findings, key, remediations, bench,
# requests, probe, work, final, say, each, plan) -> verify.json's document
Measure = Callable[..., dict]


@dataclass
class RunRecord:
    """What `lockdown run` left in DIR/findings.json that verify needs."""
    directory: Path
    target: Target
    findings: list[Finding]
    php_ini: dict
    requests: int
    xhprof_every: int
    thresholds: dict
    bundle: Path
    base: Base | None = None        # fixes the run started from (run --on-top-of): both arms get them


def load_run(directory: Path) -> RunRecord:
    """What verify needs of the run in `directory` (rundir/store.py open_run): its findings,
    how it served and captured the target, and the fixes it started from."""
    opened = open_run(directory)
    doc, run = opened.document, opened.document.settings
    path = opened.path(FINDINGS)
    try:
        target = resolve(run.target_dir or doc.target)
    except (LockdownError, ValueError) as e:      # moved or deleted since, or the file is damaged
        raise LockdownError(f"{path}: the run's target: {e}") from None
    base = Base(None if run.base.get("source") is None else str(run.base["source"]), run.base_remediations(),
                dict(run.base["php_ini"])) if run.base else None
    return RunRecord(opened.directory, target, doc.findings, dict(run.php_ini), run.capture_requests,
                     run.capture_xhprof_every, with_defaults(run.thresholds), opened.bundle_dir, base)


def pick_finding(run: RunRecord, wanted: str) -> Finding:
    """By key (fs-scan, repeated-call-2), or by id when only one finding has it."""
    keys = [f.key for f in run.findings]
    for f in run.findings:
        if f.key == wanted:
            return f
    same_id = [f for f in run.findings if f.id == wanted]
    if len(same_id) == 1:
        return same_id[0]
    if same_id:
        raise LockdownError(f"{len(same_id)} findings are {wanted}: give one key of "
                            f"{', '.join(f.key for f in same_id)}")
    raise LockdownError(f"no finding {wanted!r} in {run.directory / 'findings.json'}; its findings: "
                        f"{', '.join(keys) or 'none'}")


ALL = "all"


def verify_key(findings: list[Finding], everything: bool = False) -> str:
    """The verify/ directory name: the finding's key, `all`, or the keys joined with `+`."""
    if everything:
        return ALL
    return "+".join(f.key for f in findings)


def pick_all(run: RunRecord, say=print) -> list[Finding]:
    """Every defect finding with a concrete remediation lockdown can apply, in findings.json's
    order. One it cannot (unloading an extension the system php.ini loads) is left out, and
    said so, rather than stopping the others."""
    chosen = []
    for f in run.findings:
        if not (f.is_defect and f.remediations):
            continue
        try:
            ini_changes(f.remediations[:1], run.php_ini)
        except LockdownError as e:
            say(f"[verify] left out {f.key}: {e}")
            continue
        chosen.append(f)
    if not chosen:
        raise LockdownError(f"no finding in {run.directory / 'findings.json'} has a concrete "
                            f"remediation lockdown can apply")
    return chosen


def _ident(r: Remediation) -> tuple:
    return (r.kind, r.file, r.content)


def distinct(remediations: list[Remediation]) -> list[Remediation]:
    """Each remediation once: two findings can propose the same change (minicms's two
    repeated-query findings both turn on its query memo), and a diff applies only once."""
    seen, out = set(), []
    for r in remediations:
        if _ident(r) not in seen:
            seen.add(_ident(r))
            out.append(r)
    return out


def pick_remediations(f: Finding, numbers: tuple[int, ...]) -> list[Remediation]:
    if not f.remediations:
        where = (f.details or {}).get("located")
        raise LockdownError(f"finding {f.key} has no concrete remediation to verify; write the change"
                            f"{f' (at {where})' if where else ''} as a unified diff of the app tree or a .sql file "
                            f"and give it with --patch FILE")
    numbers = numbers or (1,)
    bad = [n for n in numbers if not 1 <= n <= len(f.remediations)]
    if bad:
        raise LockdownError(f"finding {f.key} has remediations 1..{len(f.remediations)}, not {bad[0]}")
    return [f.remediations[n - 1] for n in numbers]


def still_there(f: Finding, after: list[Finding]) -> list[Finding]:
    """Defect findings of the re-capture that are the same problem as `f`."""
    return [g for g in after if g.is_defect and g.subject == f.subject]


def new_in(before: list[Finding], after: list[Finding]) -> list[Finding]:
    """Defect findings of the re-capture about a problem the run did not report: with the fix
    in, something else became worth reporting (the bottleneck moved)."""
    known = {f.subject for f in before}
    return [g for g in after if g.is_defect and g.subject not in known]


def predicted_change(findings: list[Finding]) -> float | None:
    """The RPS change, in percent, to plan the pairs for: what the largest share among the
    findings predicts if its fix removes all of it (`predicted_ratio`). Fixes together are
    planned for their largest part, not the sum of their shares, which overlap."""
    ratios = [r for r in (predicted_ratio(f.share_pct) for f in findings) if r is not None]
    return 100.0 * (max(ratios) - 1.0) if ratios else None


def verify(run: RunRecord, findings: list[Finding], remediations: list[Remediation], bench: BenchOptions,
           requests: int | None, measure: Measure, probe: bool = True, say=print, key: str | None = None,
           each: bool = False, max_runs: int = DEFAULT_MAX_RUNS) -> dict:
    """Verify `findings` (one, or several together) with `remediations`: the verification's
    transaction. `measure` (lockdown/pipeline/verify.py's) measures into a work directory beside
    DIR/verify/KEY (KEY: `verify_key`) and returns verify.json's document, which is written
    there; the work directory then replaces DIR/verify/KEY whole, or is removed on failure.
    The first `bench.runs` pairs are a pilot: more are taken, up to `max_runs`, when they are
    too noisy to resolve the predicted change (`predicted_change`)."""
    key = key or verify_key(findings)
    final = run.directory / "verify" / key
    work = final.with_name(f".{key}.tmp-{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    # what a killed verify of this run left: its copies of the app and database, ~140 MB for minicms
    paths.remove_abandoned(final.parent, r"\..+\.(?:tmp|old)-(?P<pid>\d+)")
    try:
        work.mkdir(parents=True)
    except OSError as e:
        raise LockdownError(f"cannot write {final.parent}: {e.strerror or e}; verify keeps its results "
                            f"in the run directory: make it writable, or copy it somewhere that is")
    try:
        plan = PairPlan(predicted_change(findings), max_runs, "the predicted")
        result = measure(run, findings, key, remediations, bench, requests, probe, work, final, say, each, plan)
        write_json_atomic(work / "verify.json", result)
        old = final.with_name(f".{key}.old-{os.getpid()}")
        with held():       # the old result out and the new one in, not one without the other
            if final.exists():
                final.rename(old)
            work.rename(final)
            shutil.rmtree(old, ignore_errors=True)
        return result
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


def recaptured(g: Finding) -> dict:
    """A finding of the re-capture as verify.json lists it; a repeated-call one with what the
    argument probe counted, so the reader sees it was checked."""
    row = {"key": g.key, "id": g.id, "subject": g.subject, "severity": g.severity,
           "share_pct": g.share_pct, "title": g.title}
    probe = g.details.get("probe")
    if isinstance(probe, dict):
        row["probe"] = {k: probe[k] for k in ("located", "calls", "repeats", "repeat_pct", "not_probed")
                        if k in probe}
    return row


def summary_of(f: Finding) -> dict:
    return {"key": f.key, "id": f.id, "title": f.title, "subject": f.subject, "share_pct": f.share_pct}


def base_of(run: RunRecord) -> list[Remediation]:
    """The remediations of the fixes `run` started from (none for a run of the target as it ships)."""
    return list(run.base.remediations) if run.base else []


def left_out_arms(run: RunRecord, findings: list[Finding], rems: list[Remediation], say) -> dict[str, tuple]:
    """The extra arms of `--each`: every distinct remediation left out once ("all but it"),
    arm name -> (the findings it fixes, its remediation's identity, the arm's StackOptions).
    Findings sharing one remediation are left out together."""
    groups: dict[tuple, list[str]] = {}
    for f in findings:
        groups.setdefault(_ident(f.remediations[0]), []).append(f.key)
    arms = {}
    for n, (ident, keys) in enumerate(groups.items(), 1):
        others = base_of(run) + [r for r in rems if _ident(r) != ident]
        say(f"[each] arm without-{n}: all fixes but {', '.join(keys)}")
        arms[f"without-{n}"] = (keys, ident, StackOptions(php_ini=ini_changes(others, run.php_ini),
                                                          remedy=remedy(others, say)))
    return arms


def each_adds(left_out: dict[str, tuple], ab: dict) -> list[dict]:
    """What each fix adds to the others: "all but it" against "all" (the after arm), paired by
    round in the same benchmark as the main A/B. The complement of verifying a fix alone,
    which says what it buys on the unpatched site."""
    out = []
    for arm, (keys, ident, _) in left_out.items():
        got = ab["others"][arm]
        change, pages = got["change"], got.get("responses") or {}
        out.append({"findings": keys, "remediation": {"kind": ident[0], "file": ident[1]}, "arm": arm,
                    "without_rps": got["summary"]["rps_mean"],
                    "all_rps": ab["after"]["summary"]["rps_mean"],
                    "change": {k: change[k] for k in ("ratio", "change_pct", "ci95_pct", "significant", "pairs",
                                                       "method", "elasticity") if k in change},
                    "pages": {k: pages.get(k) for k in ("same", "urls")}})
    return out

