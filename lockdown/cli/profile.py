"""`lockdown profile TARGET -o BUNDLE`: capture what each request did, into a bundle."""
from __future__ import annotations

from pathlib import Path

import click

from .. import paths
from ..collectors.settings import (COLLECTORS, CaptureSettings, parse_collect,
                                   parse_xhprof_flags, XHPROF_FLAGS)
from ..errors import LockdownError
from ..harness.profile import DEFAULT_REQUESTS, ProfileOptions, run_profile
from ..remediation.apply import applied, remedy
from ..remediation.user_patch import checked, load_patch
from ..progress import for_command
from ..reports.bundle_summary import format_summary
from ..bundle.store import open_bundle
from ..targets.registry import resolve
from .bench import check_bounds, parse_ini
from .json_output import check_destination, emit, json_option, to_stdout, written_line
from .main import deadline, main
from .stack_options import stack_options

d = CaptureSettings()


@main.command("profile")
@click.argument("target")
@click.option("-o", "--output", "output", required=True, type=click.Path(path_type=Path),
              help="Bundle directory to create (must not exist).")
@click.option("--requests", "-n", type=click.IntRange(1), default=None,
              help=f"Requests to capture (default {DEFAULT_REQUESTS} unless --duration).")
@click.option("--duration", "-d", type=click.FloatRange(0.5), default=None,
              help="Capture for this many seconds instead of a number of requests.")
@click.option("--concurrency", "-c", type=click.IntRange(1), default=1, show_default=True,
              help="Concurrent requests; 1 gives exact statement attribution.")
@click.option("--workers", "-w", type=click.IntRange(1), default=None,
              help="php-fpm static workers (default as for bench).")
@click.option("--collect", default=",".join(COLLECTORS), show_default=True,
              help=f"Collectors: any of {','.join(COLLECTORS)}, or none (request log only).")
@click.option("--perf-freq", type=click.IntRange(1, 20000), default=d.perf_freq, show_default=True,
              help="perf sampling frequency (Hz).")
@click.option("--excimer-period", type=click.FloatRange(0.01), default=None,
              help="Excimer sampling period (ms). Default: about 10 samples per request of the "
                   "warmup's median latency, between 2 and 20 ms (each sample costs a thread start).")
@click.option("--excimer-clock", type=click.Choice(["cpu", "wall"]), default=d.excimer_clock,
              show_default=True, help="Excimer timer: CPU time or wall time.")
@click.option("--xhprof-every", type=click.IntRange(0), default=d.xhprof_every, show_default=True,
              help="Instrument 1 request in K of each URL with tideways_xhprof (0: none).")
@click.option("--xhprof-flags", default="", metavar="FLAGS",
              help=f"tideways_xhprof flags, comma-separated: {','.join(XHPROF_FLAGS)}.")
@click.option("--url", "urls", multiple=True, metavar="PATH",
              help="Drive this path instead of the target's URL list (repeatable).")
@click.option("--warmup-requests", type=click.IntRange(0), default=20, show_default=True,
              help="Requests before the capture, one at a time, nothing collected.")
@click.option("--overhead-check/--no-overhead-check", default=True, show_default=True,
              help="Also drive half as many requests before and after, uncollected, to record the overhead.")
@click.option("--overhead-slices", type=click.IntRange(1, 50), default=1, show_default=True, metavar="K",
              help="Cut the capture into K slices with uncollected slices of the same size between and "
                   "around them (perf and the slow log paused): each capture slice is compared with its "
                   "neighbours, so drift of the host's speed cancels out.")
@click.option("--patch", "patch_files", multiple=True, metavar="FILE",
              type=click.Path(dir_okay=False, path_type=Path),
              help="Your own unified diff of the app's files (repeatable, in order), applied to the copy "
                   "captured and checked before anything starts; `lockdown analyze BUNDLE --baseline "
                   "UNPATCHED` then shows what it moved.")
@stack_options("after-capture", "Shell command run after the capture.")
@json_option("the bundle's path and manifest")
def profile_cmd(target, output, requests, duration, concurrency, workers, collect, perf_freq,
                excimer_period, excimer_clock, xhprof_every, xhprof_flags, urls, warmup_requests,
                overhead_check, overhead_slices, patch_files, php_ini, port, mysql, exec_before_warmup,
                exec_after_warmup, exec_after_capture, run_dir, timeout, json_out):
    """Capture TARGET per request: perf samples, Excimer stacks, xhprof call counts and SQL
    statements, tied to the request that caused them, into the bundle OUTPUT."""
    if requests is not None and duration is not None:
        raise LockdownError("give --requests or --duration, not both")
    check_bounds(concurrency=concurrency, workers=workers, duration=duration, requests=requests)
    bad = [u for u in urls if not u.startswith("/")]
    if bad:
        raise LockdownError(f"bad --url {bad[0]!r}: give a path starting with /")
    t = resolve(target)
    patches = [load_patch(p) for p in patch_files]
    settings = CaptureSettings(collect=parse_collect(collect), perf_freq=perf_freq,
                               excimer_period_ms=excimer_period, excimer_clock=excimer_clock,
                               xhprof_every=xhprof_every, xhprof_flags=parse_xhprof_flags(xhprof_flags))
    opts = ProfileOptions(requests=requests, duration=duration, concurrency=concurrency,
                          capture=settings, warmup_requests=warmup_requests,
                          overhead_check=overhead_check, overhead_slices=overhead_slices, urls=urls,
                          php_ini=parse_ini(php_ini), port=port, mysql=mysql,
                          hooks={"before-warmup": exec_before_warmup,
                                 "after-warmup": exec_after_warmup,
                                 "after-capture": exec_after_capture})
    if workers is not None:
        opts.workers = workers
    check_destination(json_out)
    output = output.resolve()
    if output.exists():
        raise LockdownError(f"{output} already exists; choose another -o or remove it")
    # a run directory of its own: the run's copies (app/, mysql/data/) are removed at the end,
    # and an existing directory's own app/ went with them
    say = for_command(f"profile {t.name}", to_stdout(json_out))
    with deadline(timeout):
        if patches:   # before the run directory: a diff that does not apply leaves nothing behind
            patches = checked(t, patches, say)
            opts.remedy, opts.applied = remedy(patches, say), applied(patches)
        run_dir = (paths.new_run_dir(t.name, "profile") if run_dir is None
                   else paths.empty_dir(run_dir, "--run-dir")).resolve()
        bundle = run_profile(t, run_dir, output, opts, say=say)
    if json_out is not None:
        emit(json_out, {"bundle": str(bundle), "run_dir": str(run_dir),
                        "manifest": open_bundle(bundle).manifest})
        if to_stdout(json_out):
            return
    click.echo("")
    click.echo(format_summary(open_bundle(bundle)))
    click.echo(f"bundle written to {bundle}; logs in {run_dir / 'logs'}")
    if (line := written_line(json_out)) is not None:
        click.echo(line)
