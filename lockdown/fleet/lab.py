"""App stacks with the fleet agent loaded, on loopback: how the tests and bench/agent_overhead.py
stand up "hosts" of a fleet on one machine. The agent file is copied into the run directory
(the workers read it there); its state directory (switch, loss count) is the workers'."""
from __future__ import annotations

import shutil
from pathlib import Path

from ..harness import service_account
from ..harness.stack import Stack, StackOptions
from ..targets.config import Target
from . import agent

EXCIMER = "excimer"


def agent_options(run_dir: Path, redis_where: str, password: str, host: str, stream: str,
                  period: float = 0.01, workers: int = 2, timeout: float = 0.05) -> StackOptions:
    """StackOptions whose pool loads the agent (auto_prepend_file) with its environment; the
    agent file and its state directory made under `run_dir/fleet`."""
    base = run_dir / "fleet"
    state = base / "state"
    state.mkdir(parents=True, exist_ok=True)
    copy = base / "agent.php"
    shutil.copyfile(agent.AGENT, copy)
    service_account.give(state, service_account.account())
    env = agent.pool_env(redis_where, stream, pool="www", state=state, period=period, host=host,
                         password=password, timeout=timeout)
    return StackOptions(workers=workers, extensions=frozenset({EXCIMER}), pool_env=env,
                        php_ini={"auto_prepend_file": str(copy)})


def state_dir(run_dir: Path) -> Path:
    return run_dir / "fleet" / "state"


def agent_stack(target: Target, run_dir: Path, redis_where: str, password: str, host: str,
                stream: str, period: float = 0.01, workers: int = 2, say=print,
                timeout: float = 0.05) -> Stack:
    """A Stack (a context manager) serving `target` with the agent on."""
    return Stack(target, run_dir, agent_options(run_dir, redis_where, password, host, stream,
                                                period, workers, timeout), say=say)
