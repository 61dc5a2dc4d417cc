"""`lockdown run TARGET -o DIR`: the whole loop -- bench, profile, analyze, detect, propose
patches -- with findings.json, one markdown write-up per finding, flame graphs and the HTML
report in DIR."""
from __future__ import annotations

import shlex
from pathlib import Path

import click
from click.core import ParameterSource

from .. import paths, run_marker
from ..analyzers.analysis import analyze
from ..analyzers.detectors import build_context, detect, load_thresholds
from ..analyzers.findings import remediation_names
from ..bundle.store import open_bundle
from ..collectors.settings import CaptureSettings
from ..errors import LockdownError
from ..harness.bench import BenchOptions, run_bench
from ..harness.probe import check_repeated_calls
from ..harness.profile import ProfileOptions, run_profile
from ..progress import for_command
from ..remediation.apply import applied, remedy
from ..remediation.base import load_base, with_patches
from ..remediation.user_patch import checked, load_patch
from ..remediation.propose import propose_all
from ..reports.analysis_text import notable_lines
from ..reports.bench_table import format_bench
from ..reports.findings_text import format_dismissed, format_findings
from ..reports.reproduce import RUN_DEFAULTS
from ..reports.run_documents import write_finding_writeups, write_flamegraphs, write_report
from ..rundir.model import Analysis, BenchResult, RunDocument, RunSettings
from ..rundir.store import ANALYSIS, BENCH, FINDINGS, write_document
from ..targets.registry import resolve
from .bench import check_bounds, parse_ini
from .json_output import check_destination, emit, json_option, to_stdout, written_line
from .main import deadline, main


@main.command("run")
@click.argument("target")
@click.option("-o", "--output", "out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Directory for bench.json, the bundle, analysis.json, findings.json, write-ups, "
                   "flame graphs and report.html.")
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
def run_cmd(target, out, runs, duration, warmup_duration, requests, xhprof_every, thresholds, php_ini, no_bench, no_probe,
            on_top_of, patch_files, timeout, json_out):
    """Benchmark TARGET, capture it per request, analyse the capture, detect known pathologies
    and propose checked patches; print the findings and write them to OUTPUT."""
    check_bounds(duration=duration, warmup_duration=warmup_duration, requests=requests)
    t = resolve(target)
    limits = load_thresholds(thresholds)
    given = _given_options(click.get_current_context())
    check_destination(json_out)
    base = load_base(on_top_of, t.name) if on_top_of is not None else None
    patches = [load_patch(p) for p in patch_files]
    # the base's php.ini (its verified after arm's), the options given on top
    ini = {**(base.php_ini if base else {}), **parse_ini(php_ini)}
    taken = run_marker.unfinished(out.resolve(), "-o")
    if taken:
        raise LockdownError(taken)
    say = for_command(f"run {t.name}", to_stdout(json_out))
    bench = None
    with deadline(timeout):
        if patches:      # checked before the output directory is made: one that does not fit leaves nothing
            patches = checked(t, patches, say, base.remediations if base else [])
            base = with_patches(base, patches)
        out = paths.empty_dir(out, "-o")
        run_marker.claim(out)          # DIR/incomplete.json until the report is written
        fixes = remedy(base.remediations, say) if base else None
        if base:
            say(f"[base] on top of {base.describe()}: {remediation_names(base.remediations)}")
        if not no_bench:
            say(f"== bench {t.name}")
            bench = run_bench(t, out / "bench-run", BenchOptions(runs=runs, duration=duration,
                                                                   warmup_duration=warmup_duration, php_ini=ini),
                              say=say, remedy=fixes, base=base.describe() if base else None)
            write_document(out, BENCH, BenchResult.from_json(bench))
            say(format_bench(bench))
        say(f"== profile {t.name}")
        settings = CaptureSettings(xhprof_every=xhprof_every)
        bundle_dir = run_profile(t, out / "profile-run", out / "bundle",
                                 ProfileOptions(requests=requests, capture=settings, php_ini=ini, remedy=fixes,
                                                applied=applied(base.remediations) if base else []),
                                 say=say)
        bundle = open_bundle(bundle_dir)
        say("== analyze")
        analysis = analyze(bundle)
        write_document(out, ANALYSIS, Analysis.from_json(analysis))
        for line in notable_lines(analysis):
            say(line)
        say(f"  (all of it: lockdown analyze {shlex.quote(str(bundle_dir))})")
        say("== detect")
        findings = detect(build_context(bundle, limits))
        dismissed: list[dict] = []
        if not no_probe:
            findings, dismissed = check_repeated_calls(t, findings, limits, out / "probe-run", php_ini=ini,
                                                       remedy=fixes, say=say)
        findings = propose_all(findings, bundle.statements(), t, out / "remedy-run", say=say, base=base)
    document = RunDocument(
        target=t.name, bundle=str(bundle_dir),
        # what `lockdown verify DIR` needs to serve and capture the target the same way again
        run=RunSettings(target_dir=str(t.directory), php_ini=ini, requests=requests, xhprof_every=xhprof_every,
                        thresholds=limits,
                        # how to run it again (reports/reproduce.py): TARGET as it resolves anywhere,
                        # and the options given, as `lockdown run` takes them
                        target_arg=str(t.directory) if _is_path(target) else target, options=given,
                        # the verified fixes this run started from (--on-top-of); verify applies them too
                        base=base.to_json() if base else None),
        findings=findings, dismissed=dismissed)
    write_document(out, FINDINGS, document)
    write_finding_writeups(out)
    say("== report")
    flames = write_flamegraphs(bundle, out)
    report = write_report(out)
    run_marker.finished(out)
    if json_out is not None:
        emit(json_out, {"directory": str(out), "findings_json": str(out / "findings.json"),
                        "report": str(report), "flamegraphs": [str(p) for p in flames],
                        "bench": bench and {"summary": bench["summary"], "runs": bench["runs"]},
                        **document.to_json()})
        if to_stdout(json_out):
            return
    click.echo("")
    click.echo(format_findings(findings))
    if dismissed:
        click.echo("\n" + format_dismissed(dismissed))
    click.echo(f"\nreport: {report}; findings: {out / 'findings.json'}; write-ups: {out / 'findings'}/*.md; "
               f"flame graphs: {', '.join(str(p) for p in flames) or 'none (no stacks captured)'}; "
               f"bundle: {bundle_dir}")
    if any(f.is_defect and f.remediations for f in findings):
        click.echo(f"next: lockdown verify {shlex.quote(str(out))} --finding KEY (one fix) or --all (every fix "
                   f"at once); lockdown writeup {shlex.quote(str(out))} -o {shlex.quote(str(out / 'issues'))}")
    if (line := written_line(json_out)) is not None:
        click.echo(line)


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


def _is_path(target: str) -> bool:
    """Whether TARGET named a directory rather than a built-in (as targets.registry.resolve
    tells them apart): a path is recorded absolute, so the command works from anywhere."""
    return "/" in target or target.startswith(".") or Path(target).expanduser().is_dir()
