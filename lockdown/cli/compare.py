"""`lockdown compare TARGET --with KEY=VALUE`: two engine configurations of one target (opcache
off, JIT on, pcre.jit off, ...) measured against each other in interleaved A/B runs, with the
host's capacity (speed and steal) taken out and the pages of both compared. Two separate `bench` runs minutes
apart differ by as much as the host's speed moves (docs/bench.md); interleaved pairs do not."""
from __future__ import annotations

from pathlib import Path

import click

from .. import paths
from ..errors import LockdownError
from ..harness.ab_bench import PairPlan, run_ab
from ..harness.bench import BenchOptions
from ..harness.app_tree import diff_files
from ..harness.stack import StackOptions
from ..analyzers.findings import remediation_names
from ..remediation.apply import remedy
from ..remediation.base import load_base, own_patch_path
from ..remediation.user_patch import checked, load_patch
from ..progress import for_command
from ..reports.compare_text import format_compare
from ..reports.output import write_json_atomic
from ..targets.registry import resolve as resolve_target
from .bench import check_bounds, parse_ini
from .destinations import check_not_input, target_inputs
from .json_output import check_destination, deliver, json_option, to_stdout
from .main import deadline, main
from .stack_options import ab_options, check_max_runs, max_runs_option


@main.command("compare")
@click.argument("target")
@click.option("--with", "with_ini", multiple=True, metavar="KEY=VALUE",
              help="php.ini setting of the second configuration (repeatable), e.g. opcache.jit=tracing "
                   "with opcache.jit_buffer_size=64M (the JIT needs both).")
@click.option("--patch", "patch_files", multiple=True, metavar="FILE",
              type=click.Path(dir_okay=False, path_type=Path),
              help="A unified diff of the app's files (`git diff`, `diff -u`; paths as `patch -p1` reads "
                   "them in the app tree) applied to the second configuration's copy (repeatable: in "
                   "order). Checked against the prepared tree before anything starts.")
@click.option("--php-ini", multiple=True, metavar="KEY=VALUE",
              help="php.ini override of both configurations (repeatable).")
@click.option("--on-top-of", "on_top_of", type=click.Path(file_okay=False, path_type=Path), default=None,
              metavar="VERIFIED",
              help="Both configurations start from the fixes of a confirmed `lockdown verify` (its result "
                   "directory; a run directory means its verify/all): compare a change on the site as a "
                   "lockdown left it.")
@ab_options("configuration")
@click.option("--resolve", type=float, default=None, metavar="PCT",
              help="Plan the pairs to resolve a change of PCT percent in RPS with 80% power: the "
                   "first --runs are a pilot, and as many more as their noise says it needs follow, "
                   "up to --max-runs [default: exactly --runs].")
@max_runs_option("the --resolve change")
@click.option("--run-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Run directory, new or empty (default: a new one under $LOCKDOWN_HOME/runs).")
@click.option("--timeout", type=click.FloatRange(1), default=None, metavar="SECONDS",
              help="Stop everything and fail if the whole command takes longer.")
@json_option("the comparison (both arms' runs, the change with its CI, the pages)")
def compare_cmd(target, with_ini, patch_files, php_ini, on_top_of, runs, duration, concurrency, workers, load, warmup_duration,
                resolve, max_runs, run_dir, timeout, json_out):
    """Compare TARGET as configured (baseline) with TARGET plus the --with php.ini settings
    and/or --patch diffs of its code: RPS change with its 95% CI from interleaved pairs, and
    whether both serve the same pages."""
    if resolve is not None and not (resolve > -100 and resolve != 0):
        raise click.UsageError(f"--resolve {resolve:g}: give the change in percent, e.g. 2 or -5 (not 0, "
                               f"above -100)")
    check_max_runs(runs, max_runs)
    check_bounds(concurrency=concurrency, workers=workers, duration=duration, warmup_duration=warmup_duration)
    plan = PairPlan(resolve, max_runs, "a change of") if resolve is not None else None
    t = resolve_target(target)
    start = load_base(on_top_of, t.name) if on_top_of is not None else None
    # both arms: the starting point's php.ini (its verified after arm's), --php-ini on top
    base, change = {**(start.php_ini if start else {}), **parse_ini(php_ini)}, parse_ini(with_ini, "--with")
    if not change and not patch_files:
        raise LockdownError("nothing to compare: give the second configuration's settings with "
                            "--with KEY=VALUE (e.g. --with opcache.enable=0), or a diff of its code with --patch FILE")
    patches = [load_patch(p) for p in patch_files]
    same = sorted(k for k, v in change.items() if base.get(k) == v)
    if change and not patches and len(same) == len(change):
        raise LockdownError(f"--with {', '.join(same)} is what --php-ini already sets: both "
                            "configurations would be the same")
    opts = BenchOptions(runs=runs, duration=duration, concurrency=concurrency, workers=workers,
                        load=load, warmup_duration=warmup_duration)
    check_destination(json_out)
    check_not_input(json_out, target_inputs(t) + [p.resolve() for p in patch_files], "--json")
    say = for_command(f"compare {t.name}", to_stdout(json_out))
    fixes = start.remediations if start else []
    with deadline(timeout):
        if patches:     # before the run directory: a diff that does not apply leaves nothing behind
            patches = checked(t, patches, say, fixes)
            say(f"[patch] {len(patches)} diff(s) apply to a copy of the prepared app tree"
                + (" with the verified fixes applied" if fixes else "") + ": "
                + "; ".join(f"{r.description} ({r.file})" for r in patches))
        directory = paths.new_run_dir(t.name, "compare") if run_dir is None else paths.empty_dir(run_dir, "--run-dir")
        if start:
            say(f"[base] both arms start from {start.describe()}: {remediation_names(fixes)}")
        before = StackOptions(php_ini=dict(base), remedy=remedy(fixes, say) if fixes else None)
        after = StackOptions(php_ini={**base, **change},
                             remedy=remedy(fixes + patches, say) if fixes or patches else None)
        ab = run_ab(t, directory, before, after, opts, say=say, plan=plan)
    result = {"target": t.name, "php_ini": {"both": base, "with": change},
              **({"base": start.to_json()} if start else {}),
              "patches": [{"path": own_patch_path(r), "files": diff_files(r.content), "content": r.content,
                           "checked": r.checked} for r in patches],
              "responses": ab.pop("responses", None), "bench": ab, "run_dir": str(directory)}
    write_json_atomic(directory / "compare.json", result)
    deliver(json_out, result, f"{format_compare(result)}\n\nresult: {directory / 'compare.json'}; "
                              f"logs in {directory}/before, {directory}/after")

