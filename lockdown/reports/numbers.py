"""How each kind of number is printed, the same on the terminal, in report.html and in the
markdown write-ups (one rule per kind, so a value reads the same wherever it is quoted):

| kind | rule | example |
|---|---|---|
| requests per second, milliseconds | one decimal, thousands separated | `1,220.9` |
| a standard deviation of req/s | two decimals | `2.66` |
| a change | signed percent, one decimal | `+2,137.5%` |
| a share of request time | percent, one decimal | `56.2%` |
| a ratio | two decimals and x | `22.37x` |
| a count | integer, thousands separated | `1,613` |
| an interval | its two ends in the value's own format, `lo .. hi` | `+1,505.7% .. +3,017.9%` |
| an evidence value | a whole number as a count, else at most two decimals | `1,613`, `6.44` |

And what the measured change of `lockdown verify` (and `compare`) is, in words: the verdict's
estimate is not the ratio of the two printed means (docs/verify.md), so every place that shows
it says which estimate it is (`estimate_name`) and keeps the means labelled as means."""
from __future__ import annotations

import json
import math

from ..rundir.model import ABResult, Change, DocumentError, PairPlanResult

NONE = "-"


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _fmt(v, spec: str, none: str, suffix: str = "") -> str:
    """`v` formatted; `none` for a missing value (None); anything else that is not a number is
    a damaged file, a TypeError the readers turn into one line naming it."""
    if v is None:
        return none
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"{v!r} where a number was expected")
    return format(v, spec) + suffix


def rps(v, none: str = NONE) -> str:
    return _fmt(v, ",.1f", none)


ms = rps


def sd(v, none: str = NONE) -> str:
    return _fmt(v, ",.2f", none)


def change(v, none: str = NONE) -> str:
    return _fmt(v, "+,.1f", none, "%")


def share(v, none: str = NONE) -> str:
    return _fmt(v, ".1f", none, "%")


def ratio(v, none: str = NONE) -> str:
    return _fmt(v, ",.2f", none, "x")


def count(v, none: str = NONE) -> str:
    if _is_num(v) and float(v).is_integer():
        return f"{int(v):,}"
    return _fmt(v, ",.1f", none)


def plural(n: int, word: str) -> str:
    """"1 worker", "4 workers": a count with its noun (regular plurals only)."""
    return f"{n} {word}" + ("" if n == 1 else "s")


def size(v, none: str = NONE) -> str:
    """Bytes in binary units, one decimal: "16.0 KB", "20.5 MB" (what php.ini's K and M mean)."""
    if v is None:
        return none
    _fmt(v, ",d" if isinstance(v, int) else ",.1f", none)       # a damaged value raises here
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if abs(v) >= scale:
            return f"{v / scale:,.1f} {unit}"
    return f"{v:,.0f} B"


def excimer_weight(total, samples=None) -> str:
    """An Excimer base in words: a sample that came late (during a long builtin, say) stands
    for every timer period it covers, and shares sum those periods, so when they differ from
    the samples both are named ('1,787 timer periods in 1,743 samples')."""
    if samples is None or samples == total:
        return f"{count(total)} samples"
    return f"{count(total)} timer periods in {count(samples)} samples"


def interval(lo, hi, fmt=rps, none: str = NONE) -> str:
    """`lo .. hi` in the value's own format; `none` when either end is missing."""
    if lo is None or hi is None:
        return none
    return f"{fmt(lo)} .. {fmt(hi)}"


def value(v) -> str:
    """An evidence value as text: whole numbers as counts (1613 and 1613.0 alike), other
    numbers with at most two decimals, lists and dicts as JSON, text as it is."""
    if isinstance(v, bool) or v is None:
        return "" if v is None else str(v)
    if isinstance(v, int) or (isinstance(v, float) and math.isfinite(v) and v.is_integer()):
        return f"{int(v):,}"
    if isinstance(v, float):
        return f"{v:,.2f}".rstrip("0").rstrip(".") if math.isfinite(v) else str(v)
    if isinstance(v, (dict, list)):
        return json.dumps(v, ensure_ascii=False)
    return str(v)


def rps_interval_problem(lo, runs) -> str | None:
    """Why a req/s interval cannot be used as it stands: one whose lower end is below zero
    (Student's t with few runs, e.g. t = 12.71 for 2) bounds nothing, since a rate cannot be
    negative. The interval is still shown as computed, with this beside it."""
    if not _is_num(lo) or lo >= 0:
        return None
    n = f"{runs} runs are" if isinstance(runs, int) and not isinstance(runs, bool) else "these runs are"
    return f"below zero: {n} too few for a usable interval"


def rps_ci_text(lo, hi, runs) -> str:
    """`95% CI lo .. hi req/s`, flagged when it is too wide to bound anything."""
    if lo is None or hi is None:
        return "no 95% CI (one run)"
    problem = rps_interval_problem(lo, runs)
    return f"95% CI {interval(lo, hi)} req/s" + (f" ({problem})" if problem else "")


# ---------------------------------------------------------------- the measured change

def ab_result(bench) -> ABResult:
    """An A/B result's model (rundir/model.py ABResult): verify.json's `bench` read through
    rundir/store.py open_run is one; compare.json's, or a part of one, is read into one here;
    anything else (a value of the wrong shape) is an empty one, which has nothing to say."""
    if isinstance(bench, ABResult):
        return bench
    try:
        return ABResult.from_json(bench)
    except DocumentError:
        return ABResult()


def _change_of(c) -> Change:
    """A change's model, as `ab_result` reads an A/B (an empty one for a missing or damaged one)."""
    if isinstance(c, Change):
        return c
    try:
        return Change.from_json(c)
    except DocumentError:
        return Change()


def adjusted(c) -> bool:
    """Whether a change (verify.json bench.change) took the host's capacity out."""
    return _change_of(c).adjusted


def estimate_name(c) -> str:
    """What the number in bench.change is, in words."""
    return "with host speed and steal taken out" if adjusted(c) else "from the paired ratios"


def change_interval(c) -> str:
    """A change's 95% CI (`ci95_pct`) as `lo .. hi` percent."""
    return interval(*_change_of(c).ci95, change)


def paired_clause(bench) -> str | None:
    """The plain paired estimate (bench.change_paired) beside the adjusted one, as a clause;
    None when the verdict's estimate is the paired one already, or there is none."""
    b = ab_result(bench)
    p = b.change_paired
    if b.change is None or not b.change.adjusted or p is None or len(p.ci95_pct) != 2 or p.change_pct is None:
        return None
    text = f"paired ratios alone: {change(p.change_pct)}"
    lo, hi = p.ci95
    if lo is not None and hi is not None:
        text += f", 95% CI {interval(lo, hi, change)}"
    return text


def resolution_clause(bench) -> str | None:
    """How finely an A/B measured, as a clause: that the first pairs were a pilot and more were
    taken (bench.plan), and, when the interval includes zero, the smallest change the pairs
    resolve (bench.change.resolvable_pct) and their chance of resolving the one planned for,
    so "not confirmed" reads as "too few pairs" when that is what it was. None when there is
    nothing to say, or verify.json is from before these were recorded."""
    b = ab_result(bench)
    c, plan = b.change or Change(), b.plan or PairPlanResult()
    pilot, runs, planned = plan.pilot_runs, plan.runs, plan.planned_change_pct
    wanted = f"{plan.named or 'the planned'} {change(planned)}"
    parts = []
    if pilot is not None and runs is not None and runs > pilot and planned is not None:
        need = plan.runs_needed
        parts.append(f"the first {pilot} pairs were a pilot, too noisy to resolve {wanted} with 80% "
                     f"power: that needed " + (f"{need} pairs" if need else "more than 1000 pairs")
                     + ("" if need == runs else f", and --max-runs allowed {runs}"))
    smallest = c.resolvable_pct
    if not c.significant and smallest is not None:
        text = f"these pairs resolve changes of \u00b1{smallest:.1f}% or more (80% power)"
        if c.power is not None and planned is not None:
            text += f"; their chance of resolving {wanted} was {100 * c.power:.0f}%"
        parts.append(text)
    return "; ".join(parts) or None


def speed_explains_nothing(elasticity) -> bool:
    """Whether a bench summary's fitted elasticity (`speed_elasticity`) is zero or below: a
    faster host served no more requests, so the host's speed explains none of the RPS spread and
    the "CV with it taken out" (fitted with one degree of freedom fewer) says nothing the raw CV
    does not (2026-11-23, WordPress: elasticity -0.67, raw CV 4.72%, "adjusted" 5.18%)."""
    return _is_num(elasticity) and elasticity <= 0


def latency_resolution_note(runs) -> str | None:
    """What a latency of 0.0 means when the load generator rounds its times (siege to 10 ms,
    ab to 1 ms; loadgen.LATENCY_RESOLUTION_MS), from the runs' `latency_resolution_ms`; None
    for wrk's microseconds and for runs that did not record it."""
    return _latency_note({(r.get("tool"), r.get("latency_resolution_ms")) for r in runs or [] if isinstance(r, dict)})


def latency_note(runs) -> str | None:
    """`latency_resolution_note` of measured runs read through their model (rundir/model.py
    BenchRun)."""
    return _latency_note({(r.tool, r.latency_resolution_ms) for r in runs})


def _latency_note(found: set) -> str | None:
    coarse = sorted((tool, res) for tool, res in found if _is_num(res) and res >= 1 and tool)
    if not coarse:
        return None
    return "; ".join(f"{tool} reports latency to the nearest {res:g} ms: 0.0 means under {res / 2:g} ms"
                     for tool, res in coarse)


def ms_fine(v, none: str = NONE) -> str:
    """Milliseconds with two decimals under 10 (a server's CPU per request can be 0.05 ms)."""
    return _fmt(v, ".2f" if _is_num(v) and abs(v) < 10 else ".1f", none)


def server_cpu_clause(bench) -> str | None:
    """The servers' CPU time per request in both arms (php-fpm, nginx and MariaDB, from /proc;
    harness/server_cpu.py), each server's part, and its paired change with the 95% CI: what a
    request costs, beside what the throughput did. None when the runs did not record it."""
    b = ab_result(bench)
    before, after, c = b.before.stats, b.after.stats, b.change_server_cpu
    if c is None or before.server_cpu_ms_mean is None or after.server_cpu_ms_mean is None:
        return None
    text = f"{ms_fine(before.server_cpu_ms_mean)} -> {ms_fine(after.server_cpu_ms_mean)} ms"
    split_b, split_a = before.server_cpu_by_server_ms or {}, after.server_cpu_by_server_ms or {}
    names = [name for name in split_b if name in split_a]
    if names:
        text += " (" + ", ".join(f"{name} {ms_fine(split_b[name])} -> {ms_fine(split_a[name])}" for name in names) + ")"
    if c.change_pct is not None:
        text += f", change {change(c.change_pct)}"
        if c.ci95_pct and c.ci95_pct[0] is not None:
            text += f" (95% CI {change_interval(c)})"
    return text


def server_cpu_cell(bench) -> str:
    """Both arms' servers' CPU ms per request, `before -> after`, for a table; "-" unknown."""
    b = ab_result(bench)
    means = [b.before.stats.server_cpu_ms_mean, b.after.stats.server_cpu_ms_mean]
    return f"{ms_fine(means[0])} -> {ms_fine(means[1])}" if None not in means else NONE
