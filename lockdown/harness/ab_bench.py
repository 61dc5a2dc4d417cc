"""A/B benchmark: the same target served twice at once, as it is ("before") and with a change
("after"), measured in interleaved pairs.

Both stacks run side by side for the whole comparison (each on its own port, with its own
MariaDB copy and php-fpm), but only one is under load at a time. Runs alternate in pairs whose
order flips each time (before-after, after-before, ...), so that slow drift of the machine
falls on both arms alike; `stats.compare_paired` then uses the pairing.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import asdict, replace
from pathlib import Path

from ..analyzers.stats import compare_paired, compare_speed_adjusted
from ..targets.config import Target
from .bench import (BenchOptions, load_version, measured_run, rps_of, run_line, sanity_check,
                    capacities_of, summary_of, versions, warm_concurrent, warm_single)
from .responses import compare_arms
from .stack import Stack, StackOptions

ARMS = ("before", "after")


def pair_order(runs: int) -> list[str]:
    """before, after, after, before, before, after, ...: each pair adjacent, order flipped."""
    order: list[str] = []
    for i in range(runs):
        order.extend(ARMS if i % 2 == 0 else ARMS[::-1])
    return order


def run_ab(target: Target, run_dir: Path, before: StackOptions, after: StackOptions,
           opts: BenchOptions, say=print) -> dict:
    """Start both arms, check and warm both, compare the pages they serve
    (`responses.compare_arms`), then measure `opts.runs` interleaved pairs."""
    paths = target.weighted_paths()
    result: dict = {
        "design": f"{opts.runs} interleaved pairs of {opts.duration:g} s runs, order flipped each "
                  f"pair (before-after, after-before, ...); both stacks up throughout, one under load",
        "runs_per_arm": opts.runs, "duration": opts.duration, "concurrency": opts.concurrency,
        "workers": opts.workers, "load": opts.load, "warmup_requests": opts.warmup_requests,
        "warmup_duration": opts.warmup_duration, "urls": [asdict(u) for u in target.urls],
        "versions": {**versions(), "load": load_version(opts.load)}, "order": pair_order(opts.runs),
        "before": {"runs": []}, "after": {"runs": []},
    }
    with contextlib.ExitStack() as running:
        stacks = {}
        for arm, stack_opts in zip(ARMS, (before, after)):
            say(f"[start] {arm}")
            stack_opts = replace(stack_opts, workers=opts.workers)
            stacks[arm] = running.enter_context(Stack(target, run_dir / arm, stack_opts, say=say))
            result[arm]["base_url"] = stacks[arm].base_url
            result[arm]["php_ini_effective_overrides"] = stacks[arm].php.overrides
            if stacks[arm].db is not None:
                result["versions"]["mariadb"] = stacks[arm].db.version
        for arm, stack in stacks.items():
            sanity_check(stack)
            say(f"[sanity] {arm}: {target.sanity_url} returned 200 with {target.sanity_expect!r}")
        for arm, stack in stacks.items():
            say(f"[warmup] {arm}")
            warm_single(stack, opts, paths, say)
            warm_concurrent(stack, opts, paths, run_dir / arm / "load", say)
        pages = result["responses"] = compare_arms(stacks, paths, target.volatile)
        say(f"[compare] {pages['same']} of {pages['urls']} URLs serve the same page on both arms")
        started = time.monotonic()
        for i, arm in enumerate(result["order"]):
            n = len(result[arm]["runs"]) + 1
            run = measured_run(stacks[arm], opts, paths, run_dir / arm / "load", f"run-{n}", say,
                               f"run {i + 1}/{len(result['order'])} ({arm})")
            result[arm]["runs"].append(run)
            say(f"[measure] {i + 1}/{len(result['order'])} {arm:6} run {n}: {run_line(run)}")
        result["measure_seconds"] = round(time.monotonic() - started, 1)
    for arm in ARMS:
        result[arm]["summary"] = summary_of(result[arm]["runs"])
    before, after = result["before"]["runs"], result["after"]["runs"]
    result["change_paired"] = compare_paired(rps_of(before), rps_of(after))
    adjusted = compare_speed_adjusted(rps_of(before), capacities_of(before), rps_of(after), capacities_of(after))
    result["change"] = verdict_change(result["change_paired"], adjusted)
    return result


def verdict_change(paired: dict, adjusted: dict | None) -> dict:
    """The estimate the verdict uses: adjusted for the host's capacity (speed and steal) when
    every run has a host speed."""
    if adjusted is None:
        return paired
    return {**adjusted, "pairs": paired["pairs"]}
