"""Folded stacks of a bundle for flame graphs and exports: native (perf, named from the bundle's
build ids) or PHP (Excimer), over the whole capture, one URL or one request.

xhprof-instrumented requests are left out unless asked for one by id: their stacks carry the
instrumentation's own cost (tideways frames, slower builtins)."""
from __future__ import annotations

from ..bundle.store import Bundle
from ..errors import LockdownError
from .analysis import select, symbolized
from .folded import fold_excimer, fold_perf_records
from .off_cpu import app_relative, off_cpu_stacks, wall_clock

KINDS = ("native", "php", "php-offcpu")
# each kind's graph title, in the order a run writes them (php first: what users open first)
TITLES = {"php": "PHP stacks", "php-offcpu": "PHP stacks off the CPU (us)", "native": "Native stacks"}


def request_ids(bundle: Bundle, request: str | None = None, url: str | None = None) -> set[str]:
    chosen = select(bundle.requests(), request, url, bundle.root / "requests.jsonl")
    if request is None:
        chosen = [r for r in chosen if not r.instrumented]
    return {r.id for r in chosen}


def native_stacks(bundle: Bundle, ids: set[str], counts: bool = False) -> dict[str, int]:
    """perf samples of the chosen requests, folded as stackcollapse-perf.pl --kernel --jit
    would fold them (process name as root); weights are the samples' periods (ns of CPU, as
    the script sums them), or sample counts with `counts`."""
    samples = [s for s in symbolized(bundle)[0] if s.request in ids]    # named once per bundle
    return fold_perf_records(samples, annotate_kernel=True, annotate_jit=True, counts=counts)


def php_stacks(bundle: Bundle, ids: set[str]) -> dict:
    """Excimer's PHP stacks of the chosen requests; weights are timer periods of the clock the
    capture used (a sample that came late stands for every period it covers). Script frames
    are named relative to the app tree (`index.php`, not `/…/profile-run/app/index.php`), so
    that the stacks of two captures of the same target line up in a differential flame graph."""
    return relative_scripts(fold_excimer(bundle.excimer(), ids), bundle.manifest)


def relative_scripts(folded: dict, manifest: dict) -> dict:
    """Script frames named relative to the capture's app tree (`off_cpu.app_relative`)."""
    run_dir = manifest.get("run_dir")
    if not run_dir:
        return folded
    out: dict = {}
    for stack, weight in folded.items():
        key = app_relative(stack, run_dir)
        out[key] = out.get(key, 0) + weight
    return out


def php_off_cpu_stacks(bundle: Bundle, ids: set[str]) -> dict:
    """PHP stacks weighted by the microseconds they spent off the CPU (analyzers/off_cpu.py):
    Excimer on the wall clock and perf, both of the chosen requests."""
    capture = bundle.manifest.get("capture") or {}
    if not wall_clock(capture):
        raise LockdownError(f"{bundle.root}: Excimer sampled the CPU clock in this capture, which "
                            f"shows no waits; capture again with --excimer-clock wall (the default)")
    samples = [s for s in bundle.perf_samples() if s.request in ids]
    profiles = [p for p in bundle.excimer() if p.request in ids]
    return relative_scripts(off_cpu_stacks(profiles, samples, capture.get("excimer_period_ms")), bundle.manifest)


def stacks(bundle: Bundle, kind: str, request: str | None = None, url: str | None = None,
           counts: bool = False) -> dict:
    ids = request_ids(bundle, request, url)
    folded = (native_stacks(bundle, ids, counts) if kind == "native" else php_stacks(bundle, ids)
              if kind == "php" else php_off_cpu_stacks(bundle, ids))
    if not folded:
        where = f"request {request}" if request else f"URL {url}" if url else "this capture"
        collectors = {"native": "was the perf collector", "php": "was the excimer collector"}.get(
            kind, "were the excimer and perf collectors both")
        raise LockdownError(f"{bundle.root}: no {kind} stacks for {where} ({collectors} on? see "
                            f"`lockdown validate {bundle.root}`)")
    return folded
