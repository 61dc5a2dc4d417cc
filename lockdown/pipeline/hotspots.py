"""`lockdown run`'s hotspot step, after the argument probe: the hotspot findings made again on
the probed findings (a dismissed repeated-call candidate explains nothing: its time is
unexplained now, and the probe's verdict on it is known), then a second probe pass for the
hotspot functions the probe has not run, so that each hotspot finding says whether its
function's arguments repeat (analyzers/detectors/hotspot.py). The pass starts a stack only
when such a function is left; a pass that fails leaves the findings as they were."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from ..analyzers.detectors import hotspot
from ..analyzers.detectors.context import Context
from ..analyzers.findings import Finding
from ..errors import LockdownError
from ..harness.probe import probe_arguments
from ..targets.config import Target


def hotspot_step(target: Target, ctx: Context, findings: list[Finding], dismissed: list[dict], run_dir: Path, *,
                 php_ini: dict | None = None, remedy: Callable | None = None, say=print) -> list[Finding]:
    findings = hotspot.after_probe(ctx, findings, dismissed)
    left = hotspot.candidates(findings)
    if not left:
        return findings
    say(f"== probe arguments of hotspot function(s) {', '.join(sorted(left))}")
    try:
        probe = probe_arguments(target, run_dir, sorted(left), sorted({u for us in left.values() for u in us}),
                                php_ini=php_ini, remedy=remedy, say=say)
    except LockdownError as e:
        say(f"[probe] failed, hotspot findings kept without the probe's counts: {e}")
        return findings
    return hotspot.attach_probe(findings, probe.located, probe.rows)
