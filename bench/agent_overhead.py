"""What the fleet agent costs: throughput and latency with the agent against no agent.

Two stacks of the same target run side by side, on one private Redis (docs/fleet.md): one with
the agent (auto_prepend_file, Excimer loaded, records sent to Redis), one without (no prepend,
no Excimer: production without the agent). wrk drives each for D seconds in turn, in pairs whose
order alternates (A B, B A, ...), so that the host's drift falls on both arms alike. The
throughput change is the geometric mean of the per-pair RPS ratios with a 95% interval
(stats.compare_paired). The cost per request is the per-pair difference of the time a request
holds the stacks, concurrency / RPS (at saturation, the default: more connections than workers,
the agent's work after the response counts as it takes a worker), and the added median latency
the per-pair difference of wrk's p50; each with its 95% interval. No collector runs: the stream
is trimmed by MAXLEN. The agent's entries in Redis are counted to show it was sending.

Beside throughput, which a shared host's drift moves by several percent, the CPU each request
costs: the user+system time of every process of the arm's stack (php-fpm master and workers,
nginx, MariaDB; from /proc, by process group) and, for the agent's arm, of Redis, over the
requests served, per pair; the agent's cost is the per-pair difference. CPU time moves far
less than throughput with the host's load, and it is what the agent takes from a saturated
server: its share of the arm without the agent is the throughput it would cost there.

With --swap, both stacks carry the agent and the arms are its switch (`lockdown agent off`): in
each pair one stack has it on and the other off, and the roles change every pair, so that a
difference between the two stacks themselves (their own database copies, their place in the
caches) falls on both arms alike; the baseline is then the agent loaded but switched off (one
is_file a request, Excimer loaded and idle), which `--off` measures against no agent.

    python3 bench/agent_overhead.py [--target minicms] [--pairs 10] [--duration 5]
                                    [--concurrency 4] [--period 0.05] [--off | --swap] [--json FILE]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _run import scratch_dir  # noqa: E402
from lockdown.analyzers.stats import compare_paired, summarize  # noqa: E402
from lockdown.fleet import agent  # noqa: E402
from lockdown.fleet.lab import agent_options, state_dir  # noqa: E402
from lockdown.fleet.redis_server import PrivateRedis  # noqa: E402
from lockdown.harness.loadgen import run_load  # noqa: E402
from lockdown.harness.processes import ProcessGroup  # noqa: E402
from lockdown.harness.stack import Stack, StackOptions  # noqa: E402
from lockdown.owner import stat_fields  # noqa: E402
from lockdown.targets.registry import resolve  # noqa: E402

STREAM = "lockdown:bench"
TICK = os.sysconf("SC_CLK_TCK")


def group_cpu_s(pgids: set[int]) -> float:
    """User+system CPU seconds of the live processes in process groups `pgids`, their reaped
    children's included (cutime, cstime)."""
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        fields = stat_fields(int(entry.name))
        if fields and int(fields[2]) in pgids:
            total += sum(int(v) for v in fields[11:15])
    return total / TICK


def measure(args, tmp: Path) -> dict:
    target = resolve(args.target)
    paths = [u.path for u in target.urls for _ in range(u.weight)]
    procs = ProcessGroup(tmp / "redis-run")
    redis = PrivateRedis(procs, tmp / "redis-run" / "redis").start()

    def quiet(message: str) -> None:
        pass

    arms = {"none": [], "agent": []}
    latency = {"none": [], "agent": []}
    per_request = {"none": [], "agent": []}
    cpu_ms = {"none": [], "agent": []}
    try:
        agent_opts = agent_options(tmp / "agent", redis.where, redis.password, "bench", STREAM,
                                   period=args.period, workers=args.workers)
        with contextlib.ExitStack() as up:
            if args.swap:            # both carry the agent; "agent" and "none" name whichever has it on
                other = agent_options(tmp / "none", redis.where, redis.password, "bench", STREAM,
                                      period=args.period, workers=args.workers)
                pair_of = [up.enter_context(Stack(target, tmp / "agent", agent_opts, say=quiet)),
                           up.enter_context(Stack(target, tmp / "none", other, say=quiet))]
                states = [state_dir(tmp / "agent"), state_dir(tmp / "none")]
                stacks = {"agent": pair_of[0], "none": pair_of[1]}
            else:
                stacks = {"agent": up.enter_context(Stack(target, tmp / "agent", agent_opts, say=quiet)),
                          "none": up.enter_context(Stack(target, tmp / "none", StackOptions(workers=args.workers),
                                                         say=quiet))}
            if args.off:
                agent.switch(state_dir(tmp / "agent"), on=False)
            for name, stack in stacks.items():          # warm both (OPcache, buffers)
                run_load("wrk", procs, stack.base_url, paths, args.concurrency, 3, tmp / "load", f"warm-{name}")
            groups = {name: {c.pid for c in stack.procs.children} for name, stack in stacks.items()}
            groups["agent"] |= {c.pid for c in procs.children if c.name == "redis-server"}
            for i in range(args.pairs):
                if args.swap:             # this pair's stack with the agent on: the first, then the second
                    on = (i // 2) % 2
                    stacks = {"agent": pair_of[on], "none": pair_of[1 - on]}
                    groups = {name: {c.pid for c in st.procs.children} for name, st in stacks.items()}
                    groups["agent"] |= {c.pid for c in procs.children if c.name == "redis-server"}
                    agent.switch(states[on], on=True)
                    agent.switch(states[1 - on], on=False)
                for name in (("none", "agent") if i % 2 == 0 else ("agent", "none")):
                    before = group_cpu_s(groups[name])
                    r = run_load("wrk", procs, stacks[name].base_url, paths, args.concurrency, args.duration,
                                 tmp / "load", f"{name}-{i}")
                    if r.failed or r.errors:
                        sys.exit(f"{name} pair {i}: {r.failed} failed responses, {r.errors} socket errors")
                    cpu_ms[name].append(1000.0 * (group_cpu_s(groups[name]) - before) / max(1, r.ok))
                    arms[name].append(r.rps)
                    latency[name].append(r.latency_ms["p50"])
                    per_request[name].append(1000.0 * args.concurrency / r.rps)
                print(f"pair {i + 1}/{args.pairs}: none {arms['none'][-1]:.1f} rps, agent {arms['agent'][-1]:.1f} rps",
                      file=sys.stderr)
            import redis as redis_py
            sent = redis_py.Redis(host="127.0.0.1", port=redis.port, password=redis.password).xlen(STREAM)
    finally:
        procs.stop_all()
    added = summarize([a - n for a, n in zip(per_request["agent"], per_request["none"])])
    p50 = summarize([a - n for a, n in zip(latency["agent"], latency["none"])])
    cpu = summarize([a - n for a, n in zip(cpu_ms["agent"], cpu_ms["none"])])
    cpu_share = compare_paired(cpu_ms["none"], cpu_ms["agent"])
    return {"target": args.target, "agent_off": args.off, "swap": args.swap, "pairs": args.pairs,
            "duration_s": args.duration, "concurrency": args.concurrency, "period_s": args.period,
            "workers": args.workers,
            "rps": arms, "latency_ms": latency, "throughput": compare_paired(arms["none"], arms["agent"]),
            "per_request_ms": per_request, "added_ms_per_request": added, "added_p50_ms": p50,
            "cpu_ms_per_request": cpu_ms, "added_cpu_ms_per_request": cpu, "cpu_per_request": cpu_share,
            "entries_in_redis": sent}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="minicms")
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--duration", type=float, default=5)
    ap.add_argument("--concurrency", type=int, default=4, help="connections (default: twice the workers)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--period", type=float, default=0.05, help="Excimer's sampling period (the agent's default)")
    ap.add_argument("--off", action="store_true",
                    help="the agent loaded but switched off (`lockdown agent off`): what the switch leaves")
    ap.add_argument("--json", type=Path, default=None, help="write the result document here too")
    ap.add_argument("--swap", action="store_true",
                    help="both stacks carry the agent, on in one and off in the other, swapped every two pairs")
    args = ap.parse_args()
    if args.off and args.swap:
        ap.error("--off and --swap are two designs: give one")
    with scratch_dir("lockdown-agent-overhead-") as tmp:
        doc = measure(args, Path(tmp))
    t, a, m = doc["throughput"], doc["added_ms_per_request"], doc["added_p50_ms"]
    lo, hi = t["ci95_pct"]
    alo, ahi = a["ci95"]
    mlo, mhi = m["ci95"]
    c, cs = doc["added_cpu_ms_per_request"], doc["cpu_per_request"]
    clo, chi = c["ci95"]
    slo, shi = cs["ci95_pct"]
    print(f"{args.target}: agent vs none, {t['pairs']} pairs of {args.duration:g} s, c={args.concurrency}: "
          f"throughput {t['change_pct']:+.2f}% (95% CI {lo:+.2f} to {hi:+.2f}); "
          f"per request {a['mean']:+.3f} ms (95% CI {alo:+.3f} to {ahi:+.3f}); "
          f"p50 latency {m['mean']:+.3f} ms (95% CI {mlo:+.3f} to {mhi:+.3f}); "
          f"CPU per request {c['mean']:+.3f} ms (95% CI {clo:+.3f} to {chi:+.3f}), "
          f"{cs['change_pct']:+.2f}% of the arm without the agent (95% CI {slo:+.2f} to {shi:+.2f}); "
          f"{doc['entries_in_redis']} records sent")
    if args.json:
        args.json.write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
