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
import time
from dataclasses import asdict, replace
from pathlib import Path

from ..analyzers.stats import compare_paired, compare_speed_adjusted
from ..targets.config import Target
from .bench import (BenchOptions, load_version, measured_run, rps_of, run_line, sanity_check,
                    capacities_of, settle_opcache, summary_of, versions, warm_concurrent, warm_single)
from .responses import compare_arms
from .stack import Stack, StackOptions

ARMS = ("before", "after")
DEFAULT_RUNS = 5       # per arm: `verify` and `compare` (cli/stack_options.ab_options)


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


def _design(opts: BenchOptions, arms: tuple[str, ...]) -> str:
    if len(arms) == 2:
        return (f"{opts.runs} interleaved pairs of {opts.duration:g} s runs, order flipped each "
                f"pair (before-after, after-before, ...); both stacks up throughout, one under load")
    return (f"{opts.runs} rounds of {opts.duration:g} s runs, one per arm ({len(arms)} arms: "
            f"{', '.join(arms)}), order rotated each round; all stacks up throughout, one under load")


def run_ab(target: Target, run_dir: Path, before: StackOptions, after: StackOptions,
           opts: BenchOptions, say=print, others: dict[str, StackOptions] | None = None) -> dict:
    """Start both arms (and `others`), check and warm them, compare the pages they serve
    (`responses.compare_arms`: after against before, each other arm against after), then
    measure `opts.runs` interleaved rounds. `others` come back under "others", each with its
    runs, pages and its change to the after arm (`change`: after over it)."""
    others = others or {}
    specs = {"before": before, "after": after, **others}
    arms = tuple(specs)
    paths = target.weighted_paths()
    result: dict = {
        "design": _design(opts, arms),
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
        for i, arm in enumerate(result["order"]):
            n = len(result[arm]["runs"]) + 1
            run = measured_run(stacks[arm], opts, paths, run_dir / arm / "load", f"run-{n}", say,
                               f"run {i + 1}/{len(result['order'])} ({arm})")
            result[arm]["runs"].append(run)
            say(f"[measure] {i + 1}/{len(result['order'])} {arm:{width}} run {n}: {run_line(run)}")
        result["measure_seconds"] = round(time.monotonic() - started, 1)
    for arm in arms:
        result[arm]["summary"] = summary_of(result[arm]["runs"])
    result["change_paired"], result["change"] = _change(result["before"]["runs"], result["after"]["runs"])
    if others:
        result["others"] = {arm: result.pop(arm) for arm in others}
        for arm, got in result["others"].items():
            got["change_paired"], got["change"] = _change(got["runs"], result["after"]["runs"])
    return result


def _change(before: list[dict], after: list[dict]) -> tuple[dict, dict]:
    """The paired change from `before`'s runs to `after`'s, and the verdict's estimate."""
    paired = compare_paired(rps_of(before), rps_of(after))
    adjusted = compare_speed_adjusted(rps_of(before), capacities_of(before), rps_of(after), capacities_of(after))
    return paired, verdict_change(paired, adjusted)


def verdict_change(paired: dict, adjusted: dict | None) -> dict:
    """The estimate the verdict uses: adjusted for the host's capacity (speed and steal) when
    every run has a host speed."""
    if adjusted is None:
        return paired
    return {**adjusted, "pairs": paired["pairs"]}
