"""A/B benchmark: the same target served twice at once, as it is ("before") and with a change
("after"), measured in interleaved pairs; optionally with more arms measured in the same rounds.

All stacks run side by side for the whole comparison (each on its own port, with its own
MariaDB copy and php-fpm), but only one is under load at a time. Runs go in rounds, one run
of every arm per round, the order rotated each round (with two arms: before-after,
after-before, ...), so that slow drift of the machine falls on all arms alike;
`stats.compare_paired` then pairs the runs of one round. Extra arms (`verify --each`: each
fix left out once) are compared with the after arm, whose runs they share.
"""
from __future__ import annotations

import contextlib
import math
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from ..analyzers.stats import compare_paired, compare_speed_adjusted, pairs_needed, power, resolvable_pct
# (DEFAULT_RUNS, DEFAULT_MAX_RUNS: lockdown/options.py, which reports read too; named here for
# the modules that take them from harness.ab_bench)
from ..options import DEFAULT_MAX_RUNS, DEFAULT_RUNS  # noqa: F401
from ..targets.config import Target
from .bench import (BenchOptions, load_version, measured_run, rps_of, run_line, sanity_check,
                    capacities_of, server_cpu_of, settle_opcache, summary_of, versions, warm_concurrent, warm_single)
from .responses import compare_arms
from .stack import Stack, StackOptions

ARMS = ("before", "after")


@dataclass
class PairPlan:
    """Take more pairs when the first ones (the pilot: BenchOptions.runs) are too noisy to
    resolve a change (verify: the one the finding predicts; compare --resolve: the one asked
    for) with 80% power, up to `max_runs`: the internal pilot of analyzers/stats.py, which
    plans from the pilot's noise, never from its result."""
    change_pct: float | None        # the change to resolve; None: no plan
    max_runs: int = DEFAULT_MAX_RUNS
    named: str = "the predicted"    # how the messages name it ("the predicted +3.9%")


def _df_at(change: dict):
    """Degrees of freedom of the verdict's estimate at m pairs: the speed-adjusted fit has
    2m runs and 3 coefficients, the plain paired one m - 1."""
    return (lambda m: 2 * m - 3) if "elasticity" in change else (lambda m: m - 1)


def planned_runs(plan: PairPlan, pilot: dict, runs: int) -> dict:
    """How many rounds to measure in all, given the verdict's estimate over the `runs` pilot
    rounds: `{"pilot_runs", "max_runs", "planned_change_pct", "named", "pilot_se_log",
    "runs_needed" (None: not within 1000), "runs"}`."""
    out = {"pilot_runs": runs, "max_runs": max(plan.max_runs, runs), "planned_change_pct": plan.change_pct,
           "named": plan.named, "pilot_se_log": pilot.get("se_log"), "runs_needed": None, "runs": runs}
    se = pilot.get("se_log")
    if plan.change_pct is None or plan.change_pct <= -100 or not se:
        return out
    effect = math.log1p(plan.change_pct / 100)
    needed = pairs_needed(effect, se, pilot["pairs"], _df_at(pilot))
    out["runs_needed"] = needed
    out["runs"] = min(needed or out["max_runs"], out["max_runs"])
    return out


def resolution(change: dict, planned_pct: float | None = None) -> dict:
    """What a finished A/B could resolve: `resolvable_pct`, the smallest change it detects with
    80% power, and (given the change planned for) `power`, its chance of resolving that one."""
    se, df = change.get("se_log"), change.get("df")
    if not se or not df or df < 1:
        return {}
    out = {"resolvable_pct": resolvable_pct(se, df)}
    if planned_pct is not None and planned_pct > -100:
        out["power"] = power(math.log1p(planned_pct / 100), se, df)
    return out


def arm_order(arms: tuple[str, ...], runs: int) -> list[str]:
    """`runs` rounds of one run per arm, each round's order rotated by one: every arm comes
    first equally often, and a round's runs (the ones paired) are close in time."""
    order: list[str] = []
    for i in range(runs):
        k = i % len(arms)
        order.extend(arms[k:] + arms[:k])
    return order


def pair_order(runs: int) -> list[str]:
    """before, after, after, before, before, after, ...: each pair adjacent, order flipped."""
    return arm_order(ARMS, runs)


def _design(opts: BenchOptions, arms: tuple[str, ...], runs: int) -> str:
    more = (f" (the first {opts.runs} a pilot: more were needed to resolve the change planned for)"
            if runs > opts.runs else "")
    if len(arms) == 2:
        return (f"{runs} interleaved pairs of {opts.duration:g} s runs{more}, order flipped each "
                f"pair (before-after, after-before, ...); both stacks up throughout, one under load")
    return (f"{runs} rounds of {opts.duration:g} s runs{more}, one per arm ({len(arms)} arms: "
            f"{', '.join(arms)}), order rotated each round; all stacks up throughout, one under load")


def run_ab(target: Target, run_dir: Path, before: StackOptions, after: StackOptions,
           opts: BenchOptions, say=print, others: dict[str, StackOptions] | None = None,
           plan: PairPlan | None = None) -> dict:
    """Start both arms (and `others`), check and warm them, compare the pages they serve
    (`responses.compare_arms`: after against before, each other arm against after), then
    measure `opts.runs` interleaved rounds, and with a `plan` as many more as it needs
    (`planned_runs`; result["plan"]). `others` come back under "others", each with its
    runs, pages and its change to the after arm (`change`: after over it)."""
    others = others or {}
    specs = {"before": before, "after": after, **others}
    arms = tuple(specs)
    paths = target.weighted_paths()
    result: dict = {
        "design": _design(opts, arms, opts.runs),
        "runs_per_arm": opts.runs, "duration": opts.duration, "concurrency": opts.concurrency,
        "workers": opts.workers, "load": opts.load, "warmup_requests": opts.warmup_requests,
        "warmup_duration": opts.warmup_duration, "urls": [asdict(u) for u in target.urls],
        "versions": {**versions(), "load": load_version(opts.load)}, "order": arm_order(arms, opts.runs),
        **{arm: {"runs": []} for arm in arms},
    }
    with contextlib.ExitStack() as running:
        stacks = {}
        for arm, stack_opts in specs.items():
            say(f"[start] {arm}")
            stack_opts = replace(stack_opts, workers=opts.workers)
            stacks[arm] = running.enter_context(Stack(target, run_dir / arm, stack_opts, say=say))
            result[arm]["base_url"] = stacks[arm].base_url
            result[arm]["php_ini_effective_overrides"] = stacks[arm].php.overrides
            if stacks[arm].db is not None:
                result["versions"]["mariadb"] = stacks[arm].db.version
        served_from = time.time()
        for arm, stack in stacks.items():
            sanity_check(stack)
            say(f"[sanity] {arm}: {target.sanity_url} returned 200 with {target.sanity_expect!r}")
        warmed_from = {}
        for arm, stack in stacks.items():
            say(f"[warmup] {arm}")
            warmed_from[arm] = time.time()
            warm_single(stack, opts, paths, say)
            warm_concurrent(stack, opts, paths, run_dir / arm / "load", say)
        for arm, stack in stacks.items():
            result[arm]["opcache_settle_s"] = settle_opcache(stack, paths, served_from, warmed_from[arm], say)
        pages = result["responses"] = compare_arms(stacks, paths, target.volatile)
        say(f"[compare] {pages['same']} of {pages['urls']} URLs serve the same page on both arms")
        for arm in others:
            result[arm]["responses"] = extra = compare_arms(stacks, paths, target.volatile, arm, "after")
            say(f"[compare] {arm}: {extra['same']} of {extra['urls']} URLs serve the same page as after")
        started = time.monotonic()
        width = max(map(len, arms))
        i = 0
        while i < len(result["order"]):
            arm = result["order"][i]
            n = len(result[arm]["runs"]) + 1
            run = measured_run(stacks[arm], opts, paths, run_dir / arm / "load", f"run-{n}", say,
                               f"run {i + 1}/{len(result['order'])} ({arm})", name=f"run {n} ({arm})")
            result[arm]["runs"].append(run)
            say(f"[measure] {i + 1}/{len(result['order'])} {arm:{width}} run {n}: {run_line(run)}")
            i += 1
            if plan is not None and i == len(arms) * opts.runs:
                _extend(result, plan, opts, arms, say)
        result["measure_seconds"] = round(time.monotonic() - started, 1)
    for arm in arms:
        result[arm]["summary"] = summary_of(result[arm]["runs"])
    result["change_paired"], result["change"] = _change(result["before"]["runs"], result["after"]["runs"])
    result["change_server_cpu"] = server_cpu_change(result["before"]["runs"], result["after"]["runs"])
    result["change"] = {**result["change"], **resolution(result["change"], plan.change_pct if plan else None)}
    if plan is not None:
        result["plan"]["measured_runs"] = len(result["after"]["runs"])
    if others:
        result["others"] = {arm: result.pop(arm) for arm in others}
        for arm, got in result["others"].items():
            got["change_paired"], got["change"] = _change(got["runs"], result["after"]["runs"])
    return result


def _extend(result: dict, plan: PairPlan, opts: BenchOptions, arms: tuple[str, ...], say) -> None:
    """After the pilot rounds: plan the rest from their noise, and lengthen the order."""
    _, pilot = _change(result["before"]["runs"], result["after"]["runs"])
    result["plan"] = got = planned_runs(plan, pilot, opts.runs)
    if plan.change_pct is None:
        return
    need, wanted = got["runs_needed"], f"{plan.named} {plan.change_pct:+.1f}%"
    if got["runs"] > opts.runs:
        result["order"] = arm_order(arms, got["runs"])
        result["runs_per_arm"] = got["runs"]
        result["design"] = _design(opts, arms, got["runs"])
        say(f"[plan] the first {opts.runs} pairs are too noisy to resolve {wanted}: it needs "
            + (f"{need} pairs" if need else "more than 1000 pairs")
            + (f"; measuring {got['runs']} (--max-runs)" if got["runs"] != need else f"; measuring {need}"))
    else:
        say(f"[plan] {opts.runs} pairs resolve {wanted} (80% power; {need} would do)")


def _change(before: list[dict], after: list[dict]) -> tuple[dict, dict]:
    """The paired change from `before`'s runs to `after`'s, and the verdict's estimate."""
    paired = compare_paired(rps_of(before), rps_of(after))
    adjusted = compare_speed_adjusted(rps_of(before), capacities_of(before), rps_of(after), capacities_of(after))
    return paired, verdict_change(paired, adjusted)


def server_cpu_change(before: list[dict], after: list[dict]) -> dict | None:
    """The paired change in the servers' CPU time per request (bench.server_cpu_of), a second
    view of the change beside the RPS: what a request costs, whatever the host stole. None
    unless every run has it."""
    b, a = server_cpu_of(before), server_cpu_of(after)
    if not b or None in b or None in a:
        return None
    return compare_paired(b, a)


def verdict_change(paired: dict, adjusted: dict | None) -> dict:
    """The estimate the verdict uses: adjusted for the host's capacity (speed and steal) when
    every run has a host speed."""
    if adjusted is None:
        return paired
    return {**adjusted, "pairs": paired["pairs"]}
