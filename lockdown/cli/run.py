"""`lockdown run TARGET -o DIR`: the whole loop -- bench, profile, analyze, detect, propose
patches -- with findings.json, one markdown write-up per finding, flame graphs and the HTML
report in DIR. The stages are lockdown/pipeline/run.py's; this parses, calls and prints."""
from __future__ import annotations

import shlex
from pathlib import Path

import click
from click.core import ParameterSource

from ..pipeline.run import RunOptions, RunOutcome, measure, plan_run, write_run
from ..progress import for_command
from ..reports.findings_text import format_dismissed, format_findings
from ..reports.reproduce import RUN_DEFAULTS
from .bench import check_bounds, parse_ini
from .json_output import check_destination, emit, json_option, to_stdout, written_line
from .main import deadline, main


@main.command("run")
@click.argument("target")
@click.option("-o", "--output", "out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Directory for bench.json, the bundle, analysis.json, findings.json, accounting.json, "
                   "write-ups, flame graphs and report.html.")
@click.option("--runs", type=click.IntRange(1), default=RUN_DEFAULTS["runs"], show_default=True,
              help="Measured benchmark runs.")
@click.option("--duration", type=click.IntRange(1), default=RUN_DEFAULTS["duration"], show_default=True,
              help="Seconds per measured run (whole seconds: the load generators take no fractions).")
@click.option("--warmup-duration", type=click.IntRange(0), default=RUN_DEFAULTS["warmup_duration"],
              show_default=True, help="Seconds of the benchmark's concurrent warmup.")
@click.option("--requests", type=click.IntRange(10), default=RUN_DEFAULTS["requests"], show_default=True,
              help="Requests in the profile capture.")
@click.option("--xhprof-every", type=click.IntRange(1), default=RUN_DEFAULTS["xhprof_every"], show_default=True,
              help="Call counts (xhprof) for 1 in K requests of each URL (sent after the timed ones).")
@click.option("--thresholds", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="TOML file overriding detector thresholds (docs/detectors.md).")
@click.option("--php-ini", multiple=True, metavar="KEY=VALUE", help="php.ini override (repeatable).")
@click.option("--no-bench", is_flag=True, help="Skip the benchmark (profile and detect only).")
@click.option("--no-probe", is_flag=True,
              help="Skip the argument probe that checks repeated-call candidates (docs/detectors.md).")
@click.option("--on-top-of", "on_top_of", type=click.Path(file_okay=False, path_type=Path), default=None,
              metavar="VERIFIED",
              help="The next round: serve TARGET with the fixes of a confirmed `lockdown verify` applied "
                   "(VERIFIED: its result directory, DIR/verify/all or DIR/verify/KEY; a run directory means "
                   "its verify/all), and find what is left. `lockdown verify` of this run applies them to "
                   "both arms.")
@click.option("--patch", "patch_files", multiple=True, metavar="FILE",
              type=click.Path(dir_okay=False, path_type=Path),
              help="Your own unified diff of the app's files (repeatable, in order; after --on-top-of's fixes), "
                   "applied to every copy the run serves, checked before anything starts: find what is "
                   "left with your change in. `lockdown verify` of this run applies it to both arms.")
@click.option("--timeout", type=click.FloatRange(1), default=None, metavar="SECONDS",
              help="Stop everything and fail if the whole command takes longer.")
@json_option("findings.json with the benchmark summary and the paths written")
def run_cmd(target, out, runs, duration, warmup_duration, requests, xhprof_every, thresholds, php_ini, no_bench,
            no_probe, on_top_of, patch_files, timeout, json_out):
    """Benchmark TARGET, capture it per request, analyse the capture, detect known pathologies
    and propose checked patches; print the findings and write them to OUTPUT."""
    check_bounds(duration=duration, warmup_duration=warmup_duration, requests=requests)
    options = RunOptions(runs=runs, duration=duration, warmup_duration=warmup_duration, requests=requests,
                         xhprof_every=xhprof_every, thresholds=thresholds, php_ini=parse_ini(php_ini),
                         bench=not no_bench, probe=not no_probe, on_top_of=on_top_of, patches=list(patch_files),
                         recorded=_given_options(click.get_current_context()))
    check_destination(json_out)
    plan = plan_run(target, out, options)
    say = for_command(f"run {plan.target.name}", to_stdout(json_out))
    with deadline(timeout):
        measured = measure(plan, say)
    outcome = write_run(plan, measured, say)
    if json_out is not None:
        emit(json_out, _json_document(outcome))
        if to_stdout(json_out):
            return
    _print_outcome(outcome)
    if (line := written_line(json_out)) is not None:
        click.echo(line)


def _json_document(o: RunOutcome) -> dict:
    """--json: findings.json with the benchmark summary and the paths written."""
    return {"directory": str(o.directory), "findings_json": str(o.directory / "findings.json"),
            "report": str(o.report), "flamegraphs": [str(p) for p in o.flamegraphs],
            "bench": o.bench and {"summary": o.bench["summary"], "runs": o.bench["runs"]},
            **o.document.to_json()}


def _print_outcome(o: RunOutcome) -> None:
    """The findings, what was dismissed, where everything is and what to run next."""
    out, findings, dismissed = o.directory, o.document.findings, o.document.dismissed
    click.echo("")
    click.echo(format_findings(findings))
    if dismissed:
        click.echo("\n" + format_dismissed(dismissed))
    click.echo(f"\nreport: {o.report}; findings: {out / 'findings.json'}; write-ups: {out / 'findings'}/*.md; "
               f"flame graphs: {', '.join(str(p) for p in o.flamegraphs) or 'none (no stacks captured)'}; "
               f"bundle: {o.bundle_dir}")
    if any(f.is_defect and f.remediations for f in findings):
        click.echo(f"next: lockdown verify {shlex.quote(str(out))} --finding KEY (one fix) or --all (every fix "
                   f"at once); lockdown writeup {shlex.quote(str(out))} -o {shlex.quote(str(out / 'issues'))}")


# The options a run records (findings.json run.options) so its command can be given again:
# everything that changes what is measured or found; not -o, --json or --timeout.
RECORDED = ("runs", "duration", "warmup_duration", "requests", "xhprof_every", "thresholds", "php_ini",
            "no_bench", "no_probe", "on_top_of", "patch_files")


def _given_options(ctx: click.Context) -> list[str]:
    """The recorded options given on the command line (or from the environment), as
    arguments `lockdown run` takes again; paths made absolute."""
    out: list[str] = []
    for name in RECORDED:
        if ctx.get_parameter_source(name) not in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT):
            continue
        flag, value = "--" + name.removesuffix("_files").replace("_", "-"), ctx.params[name]
        if name in ("no_bench", "no_probe"):
            out += [flag] if value else []
        elif name == "php_ini":
            for item in value:
                out += [flag, item]
        elif name == "patch_files":
            for item in value:
                out += [flag, str(Path(item).resolve())]
        elif name in ("thresholds", "on_top_of"):
            out += [flag, str(Path(value).resolve())]
        else:
            out += [flag, str(value)]
    return out
