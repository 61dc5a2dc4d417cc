"""`lockdown compare` as a pipeline: two configurations of one target (php.ini settings, diffs
of its code) measured against each other in interleaved A/B runs.

    from lockdown.pipeline.compare import CompareOptions, compare
    outcome = compare("hello", CompareOptions(with_ini={"opcache.enable": "0"}), say=print)

`say` is the progress callback (a line at a time, as `print` takes it). The stages are apart
for the CLI, which bounds the measuring with its --timeout and not the writing: `plan_compare`
checks the inputs before anything starts (the target, the verified fixes to start from, the
settings, the diffs read), `measure` checks the diffs against the target, makes the run
directory and runs the pairs, `write_compare` writes compare.json.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .. import paths
from ..analyzers.findings import Remediation, remediation_names
from ..errors import LockdownError
from ..harness.ab_bench import DEFAULT_MAX_RUNS, PairPlan, run_ab
from ..harness.app_tree import diff_files
from ..harness.bench import BenchOptions
from ..harness.stack import StackOptions
from ..remediation.apply import remedy
from ..remediation.base import Base, load_base, own_patch_path
from ..remediation.user_patch import checked, load_patch
from ..reports.output import write_json_atomic
from ..targets.config import Target
from ..targets.registry import resolve as resolve_target

Progress = Callable[[str], None]
COMPARE = "compare.json"


@dataclass
class CompareOptions:
    """What `lockdown compare` measures and how (its options; defaults as the command's)."""
    with_ini: dict[str, str] = field(default_factory=dict)   # the second configuration's php.ini (--with)
    php_ini: dict[str, str] = field(default_factory=dict)    # both configurations' (--php-ini)
    patches: list[Path] = field(default_factory=list)        # diffs of the app for the second (--patch)
    on_top_of: Path | None = None       # a confirmed verification both start from (--on-top-of)
    bench: BenchOptions = field(default_factory=BenchOptions)   # the runs of each arm
    resolve: float | None = None        # plan the pairs to resolve a change of this many percent
    max_runs: int = DEFAULT_MAX_RUNS    # pairs at most, with `resolve`
    run_dir: Path | None = None         # new or empty; None: a new one under $LOCKDOWN_HOME/runs


@dataclass
class ComparePlan:
    """A comparison's inputs, checked before anything starts."""
    target: Target
    options: CompareOptions
    start: Base | None                  # the verified fixes both arms start from
    base: dict[str, str]                # both arms' php.ini: the start's, --php-ini on top
    change: dict[str, str]              # the second arm's php.ini on top of `base`
    patches: list[Remediation]          # the diffs, read (checked against the target in `measure`)
    plan: PairPlan | None               # how many pairs, with `resolve`


@dataclass
class Measured:
    directory: Path                     # the run directory: both arms' configs and logs
    patches: list[Remediation]          # the diffs as checked
    ab: dict                            # run_ab's result


@dataclass
class CompareOutcome:
    """A finished comparison: compare.json's document, and where it is."""
    directory: Path
    path: Path                          # DIRECTORY/compare.json
    result: dict                        # compare.json: php_ini, patches, responses, bench, ...

    @property
    def change(self) -> dict:
        """The paired change, after against before: ratio, change_pct, ci95_pct, significant, ..."""
        return self.result["bench"]["change"]


def plan_compare(target: str, options: CompareOptions) -> ComparePlan:
    """Every input checked (LockdownError, one line, when one is wrong) before anything starts."""
    o = options
    plan = PairPlan(o.resolve, o.max_runs, "a change of") if o.resolve is not None else None
    t = resolve_target(target)
    start = load_base(o.on_top_of, t.name) if o.on_top_of is not None else None
    # both arms: the starting point's php.ini (its verified after arm's), --php-ini on top
    base, change = {**(start.php_ini if start else {}), **o.php_ini}, dict(o.with_ini)
    if not change and not o.patches:
        raise LockdownError("nothing to compare: give the second configuration's settings with "
                            "--with KEY=VALUE (e.g. --with opcache.enable=0), or a diff of its code with --patch FILE")
    patches = [load_patch(p) for p in o.patches]
    same = sorted(k for k, v in change.items() if base.get(k) == v)
    if change and not patches and len(same) == len(change):
        raise LockdownError(f"--with {', '.join(same)} is what --php-ini already sets: both "
                            "configurations would be the same")
    return ComparePlan(t, o, start, base, change, patches, plan)


def measure(plan: ComparePlan, say: Progress = print) -> Measured:
    """The diffs checked, the run directory made, both arms run in interleaved pairs."""
    t, start, patches = plan.target, plan.start, plan.patches
    fixes = start.remediations if start else []
    if patches:     # before the run directory: a diff that does not apply leaves nothing behind
        patches = checked(t, patches, say, fixes)
        say(f"[patch] {len(patches)} diff(s) apply to a copy of the prepared app tree"
            + (" with the verified fixes applied" if fixes else "") + ": "
            + "; ".join(f"{r.description} ({r.file})" for r in patches))
    run_dir = plan.options.run_dir
    directory = paths.new_run_dir(t.name, "compare") if run_dir is None else paths.empty_dir(run_dir, "--run-dir")
    if start:
        say(f"[base] both arms start from {start.describe()}: {remediation_names(fixes)}")
    before = StackOptions(php_ini=dict(plan.base), remedy=remedy(fixes, say) if fixes else None)
    after = StackOptions(php_ini={**plan.base, **plan.change},
                         remedy=remedy(fixes + patches, say) if fixes or patches else None)
    ab = run_ab(t, directory, before, after, plan.options.bench, say=say, plan=plan.plan)
    return Measured(directory, patches, ab)


def write_compare(plan: ComparePlan, measured: Measured) -> CompareOutcome:
    """DIRECTORY/compare.json written."""
    start, directory, ab = plan.start, measured.directory, measured.ab
    result = {"target": plan.target.name, "php_ini": {"both": plan.base, "with": plan.change},
              **({"base": start.to_json()} if start else {}),
              "patches": [{"path": own_patch_path(r), "files": diff_files(r.content), "content": r.content,
                           "checked": r.checked} for r in measured.patches],
              "responses": ab.pop("responses", None), "bench": ab, "run_dir": str(directory)}
    write_json_atomic(directory / COMPARE, result)
    return CompareOutcome(directory, directory / COMPARE, result)


def compare(target: str, options: CompareOptions | None = None, say: Progress = print) -> CompareOutcome:
    """`lockdown compare TARGET` from Python: plan, measure, write."""
    plan = plan_compare(target, options or CompareOptions())
    return write_compare(plan, measure(plan, say))
