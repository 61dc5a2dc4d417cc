"""The agent's side in Python: where agent.php is, the pool lines that load it, and its switch.

lockdown never edits a system file: `lockdown agent snippet` prints the lines for a php-fpm
pool (or php.ini), the administrator adds them; `lockdown agent off` puts the switch file in the
agent's state directory, which every request checks with one stat, so the agent stops at the
next request without a restart.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from ..errors import UsageError
from .collector import DEFAULT_STREAM

AGENT = Path(__file__).parent / "php" / "agent.php"
SWITCH = "off"
LOST = "lost"
_SAFE = re.compile(r"^[^\x00-\x1f\"';{}\\]*$")      # nothing that could end a directive


def pool_env(redis: str, stream: str = DEFAULT_STREAM, pool: str | None = None,
             state: Path | None = None, period: float = 0.05, host: str | None = None,
             password: str | None = None, maxlen: int = 1_000_000, timeout: float = 0.05) -> dict:
    """The agent's environment variables (agent.php's header names each)."""
    env = {"LOCKDOWN_FLEET_REDIS": redis, "LOCKDOWN_FLEET_STREAM": stream,
           "LOCKDOWN_FLEET_PERIOD": f"{period:g}", "LOCKDOWN_FLEET_MAXLEN": str(maxlen),
           "LOCKDOWN_FLEET_TIMEOUT": f"{timeout:g}"}
    if pool:
        env["LOCKDOWN_FLEET_POOL"] = pool
    if host:
        env["LOCKDOWN_FLEET_HOST"] = host
    if state is not None:
        env["LOCKDOWN_FLEET_STATE"] = str(state)
    if password:
        env["LOCKDOWN_FLEET_AUTH"] = password
    for key, value in env.items():
        if not _SAFE.match(value):
            raise UsageError(f"{key}: {value!r} holds a character a pool file cannot take (quote, "
                             f"semicolon, brace, backslash or control character)")
    return env


def snippet(env: dict, form: str = "fpm", agent: Path = AGENT) -> str:
    """The lines to add: a php-fpm pool's (`fpm`) or php.ini's with the environment set by the
    web server (`ini`)."""
    if form == "fpm":
        lines = ["; lockdown fleet agent (docs/fleet.md): add to the pool's section, then reload php-fpm",
                 "; needs php-redis, and php-excimer for the stacks",
                 f'php_admin_value[auto_prepend_file] = "{agent}"']
        lines += [f'env[{k}] = "{v}"' for k, v in env.items()]
        if "LOCKDOWN_FLEET_STATE" not in env:
            lines.append("; no --state: records lost are not counted, and `lockdown agent off` cannot reach it")
        if "LOCKDOWN_FLEET_AUTH" in env:
            lines.append("; the pool file now holds the Redis password: keep it readable by root only")
        return "\n".join(lines) + "\n"
    lines = ["; lockdown fleet agent (docs/fleet.md): php.ini, or a file of its conf.d",
             f'auto_prepend_file = "{agent}"',
             "; and in the web server's environment of PHP (Apache: SetEnv NAME VALUE):"]
    lines += [f"; {k}={v}" for k, v in env.items()]
    return "\n".join(lines) + "\n"


def switch(state: Path, on: bool) -> str:
    """The agent on or off at the next request (the switch file in its state directory)."""
    if not state.is_dir():
        raise UsageError(f"{state}: not a directory; give the agent's LOCKDOWN_FLEET_STATE")
    flag = state / SWITCH
    if on:
        flag.unlink(missing_ok=True)
        return f"agent on: {flag} removed; the next request is recorded"
    tmp = state / f".{SWITCH}.{os.getpid()}"
    tmp.write_text("lockdown agent off\n")
    tmp.replace(flag)
    return f"agent off: {flag} written; the next request is not recorded"


def pending_losses(state: Path) -> int:
    """Records lost and not reported yet (they wait for the next record sent): the sure count
    plus the unsure sends (`RID N` lines), which makes this an upper bound."""
    try:
        text = (state / LOST).read_text()
    except FileNotFoundError:
        return 0
    total = 0
    for line in text.split("\n"):
        fields = line.split()
        if len(fields) == 1 and fields[0].isdigit():
            total += int(fields[0])
        elif len(fields) == 2 and fields[1].isdigit():
            total += int(fields[1])
        elif fields:
            raise UsageError(f"{state / LOST}: not a loss count; remove it (the agent starts again from 0)")
    return total
