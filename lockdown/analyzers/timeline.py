"""One request's PHP stacks in the order Excimer took them, and its native stacks in the order
perf took them, for time-ordered views (speedscope's "Time Order"): what the request ran
first comes first.

Why: folded stacks (analyzers/folded.py) merge equal stacks and sort them, which is what flame
graphs want and what a timeline must not do. Excimer records each sample's time
(`[time_ns, weight, stack index]`, docs/bundle-format.md), so one request's samples can be put
back in the order they were taken, each weighing its timer periods; perf's samples carry their
time too (`time_ns`), each weighing its period (ns of CPU), named and folded one by one as
`stacks.native_stacks` folds them all."""
from __future__ import annotations

from ..bundle.store import Bundle
from ..errors import LockdownError
from .folded import fold_perf_records
from .off_cpu import app_relative
from .symbolize import jit_name, symbolize, tables_for

Number = int | float


def php_timeline(bundle: Bundle, request: str) -> list[tuple[str, Number]]:
    """(stack, weight in timer periods) of `request`'s Excimer samples, by their time (ties in
    the order recorded); script frames named relative to the app tree, as the flame graphs
    name them."""
    profiles = [p for p in bundle.excimer() if p.request == request]
    if not profiles:
        raise LockdownError(f"{bundle.root}: no PHP stacks for request {request} (was the excimer "
                            f"collector on? see `lockdown validate {bundle.root}`)")
    run_dir = bundle.manifest.get("run_dir")
    taken: list[tuple[int, int, str, Number]] = []
    for p in profiles:
        names = [app_relative(stack, run_dir) for stack in p.stacks]
        taken.extend((time_ns, len(taken), names[index], weight) for time_ns, weight, index in p.samples)
    taken.sort(key=lambda x: (x[0], x[1]))
    return [(stack, weight) for _, _, stack, weight in taken]


def native_timeline(bundle: Bundle, request: str) -> list[tuple[str, Number]]:
    """(stack, period in ns of CPU) of `request`'s perf samples, by their time; each folded as
    stackcollapse-perf.pl --kernel --jit folds it (analyzers/folded.py), process name as root."""
    chosen = sorted((s for s in bundle.perf_samples() if s.request == request), key=lambda s: s.time_ns)
    if not chosen:
        raise LockdownError(f"{bundle.root}: no native stacks for request {request} (was the perf "
                            f"collector on? see `lockdown validate {bundle.root}`)")
    named = symbolize(chosen, tables_for(bundle.build_ids()), jit=jit_name(bundle.manifest))
    out: list[tuple[str, Number]] = []
    for sample in named:
        for stack, weight in fold_perf_records([sample], annotate_kernel=True, annotate_jit=True).items():
            out.append((stack, weight))
    return out
