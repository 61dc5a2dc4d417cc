"""`lockdown verify DIR --finding KEY`: apply a finding's remediation to copies of the target,
measure it against the unpatched target in interleaved A/B runs, capture the patched copy
again and check that the finding is gone."""
from __future__ import annotations

from pathlib import Path

import click

from ..errors import NOT_CONFIRMED, SUCCESS
from ..harness.bench import BenchOptions
from ..pipeline.verify import VerifyOptions, measure_verify, open_verify, plan_verify, rewrite_reports
from ..progress import for_command
from ..reports.verify_text import format_verify
from .json_output import check_destination, emit, json_option, to_stdout, written_line
from .destinations import check_not_input, run_inputs
from .bench import check_bounds
from .main import deadline, main
from .stack_options import ab_options, check_max_runs, max_runs_option

CONFIRMED = SUCCESS


@main.command("verify")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--finding", "wanted", multiple=True, metavar="KEY",
              help="The finding's key in findings.json (fs-scan, repeated-call-2, ...) or its id. "
                   "Repeatable: the fixes are applied together and measured as one change.")
@click.option("--all", "everything", is_flag=True,
              help="Every defect finding with a concrete remediation (the first of each), applied "
                   "together: what the whole lockdown buys. Results in DIR/verify/all/.")
@click.option("--each", is_flag=True,
              help="With several findings: also leave each fix out once and measure all but it against "
                   "all, to see what it adds to the others (one more A/B per fix).")
@click.option("--remediation", "numbers", type=click.IntRange(1), multiple=True, metavar="N",
              help="Which of the finding's remediations to apply, 1-based (repeatable) [default: 1]; "
                   "with one --finding only.")
@click.option("--patch", "patch_files", multiple=True, metavar="FILE",
              type=click.Path(dir_okay=False, path_type=Path),
              help="Verify the finding with your own change instead of the proposed one (repeatable, in "
                   "order; with --finding): a unified diff of the app's files, or SQL statements run on the after "
                   "arm's database copy; a diff and SQL together are two --patch files. Checked before anything "
                   "starts: a diff against the files as the run served them, SQL on a copy of the database.")
@ab_options("arm")
@max_runs_option("the change the finding predicts")
@click.option("--requests", type=click.IntRange(10), default=None,
              help="Requests in the re-capture [default: as many as the run's capture].")
@click.option("--no-probe", is_flag=True,
              help="Skip the argument probe of the re-capture's repeated-call candidates (docs/detectors.md).")
@click.option("--timeout", type=click.FloatRange(1), default=None, metavar="SECONDS",
              help="Stop everything and fail if the whole command takes longer.")
@json_option("verify.json (measured change, re-capture, paths)")
def verify_cmd(directory, wanted, everything, each, numbers, patch_files, runs, duration, concurrency, workers, load,
               warmup_duration, max_runs, requests, no_probe, timeout, json_out):
    """Verify a finding of the `lockdown run` in DIRECTORY by measurement: the RPS change with
    its 95% confidence interval, and whether a new capture still shows the finding. Several
    findings (--finding repeated, or --all) are fixed together and measured as one change.
    Exit 0 when both confirm the fix, 3 when they do not."""
    if bool(wanted) == everything:
        raise click.UsageError("give --finding KEY (one or more) or --all")
    if each and not (everything or len(wanted) > 1):
        raise click.UsageError("--each needs several findings: --all, or --finding given more than once")
    if numbers and (everything or len(wanted) > 1):
        raise click.UsageError("--remediation picks among one finding's remediations; with several "
                               "findings the first remediation of each is applied")
    check_max_runs(runs, max_runs)
    check_bounds(concurrency=concurrency, workers=workers, duration=duration, warmup_duration=warmup_duration,
                 requests=requests)
    if patch_files and (everything or each or numbers):
        raise click.UsageError("--patch is the fix of the findings given with --finding: not with --all, "
                               "--each or --remediation")
    bench = BenchOptions(runs=runs, duration=duration, concurrency=concurrency, workers=workers,
                         load=load, warmup_duration=warmup_duration)
    options = VerifyOptions(findings=list(wanted), everything=everything, each=each, numbers=numbers,
                            patches=list(patch_files), bench=bench, max_runs=max_runs, requests=requests,
                            probe=not no_probe)
    opened = open_verify(directory, options)
    check_destination(json_out)
    check_not_input(json_out, run_inputs(opened.run.directory), "--json")
    say = for_command(f"verify {'all' if everything else '+'.join(wanted)}", to_stdout(json_out))
    plan = plan_verify(opened, options, say)
    with deadline(timeout):
        result = measure_verify(plan, say)
    raise SystemExit(publish(plan.run.directory, plan.key, result, json_out))


def publish(run_dir: Path, key: str, result: dict, json_out: Path | None) -> int:
    """Rewrite RUN/report.html and RUN/findings/*.md with the verification and show the
    verdict; returns the exit status, which is the verdict's. verify.json is already written
    by then, so a report that cannot be rebuilt (a damaged analysis.json, say) costs one
    warning line, not the measurement: the old report stays as it was and `lockdown report`
    can be run again (the same for the write-ups, and `lockdown writeup`)."""
    written = run_dir / "verify" / key / "verify.json"
    published = rewrite_reports(run_dir)
    notes, report, problem = published.writeups, published.report, published.report_error
    if published.writeups_error is not None:
        click.echo(f"lockdown: warning: {run_dir / 'findings'}/*.md not updated: {published.writeups_error}; the "
                   f"verification is saved in {written}, and `lockdown writeup {run_dir} -o OUTDIR` writes them",
                   err=True)
    if problem is not None:
        click.echo(f"lockdown: warning: report.html not updated: {problem}; the verification is saved "
                   f"in {written}, and `lockdown report {run_dir}` rebuilds the report once that is fixed", err=True)
    paths = {"verify_json": str(written), "report": report and str(report)}
    if json_out is not None:
        emit(json_out, {**result, **paths, **({"report_error": problem} if problem else {})})
    if not to_stdout(json_out):
        click.echo("")
        click.echo(format_verify(result))
        click.echo(f"\nresults: {written}; " + (f"report updated: {report}" if report else "report NOT updated")
                   + (f"; write-ups updated: {notes}/*.md" if notes else "; write-ups NOT updated"))
        if (line := written_line(json_out)) is not None:
            click.echo(line)
    return CONFIRMED if result["confirmed"] else NOT_CONFIRMED
