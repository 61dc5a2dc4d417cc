"""The argument-probe step of `run` and `verify`'s re-capture: the detectors' repeated-call
candidates checked on a copy of the target by the probe pass (harness/probe.py), kept or
dismissed by the detector's own rule (analyzers/detectors/repeated_call.py apply_probe). A
pipeline step because it joins a harness pass to a detector's decision."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from ..analyzers.detectors import rank, repeated_call
from ..analyzers.findings import Finding
from ..errors import LockdownError
from ..harness.probe import probe_arguments
from ..harness.stack import Stack
from ..targets.config import Target


def check_repeated_calls(target: Target, findings: list[Finding], thresholds: dict, run_dir: Path, *,
                         php_ini: dict | None = None, remedy: Callable[[Stack], None] | None = None,
                         say=print) -> tuple[list[Finding], list[dict]]:
    """The detectors' findings with their repeated-call candidates checked by the probe:
    (findings kept, candidates dismissed). Shared by `run` and `verify`'s re-capture, so both
    report the same kind of finding. A probe that fails keeps its candidates, marked unprobed:
    it is a check of the findings, not a finding."""
    to_probe = repeated_call.candidates(findings)
    if not to_probe:
        return findings, []
    say(f"== probe arguments of {', '.join(to_probe)}")
    urls = sorted({u for us in to_probe.values() for u in us})
    try:
        probe = probe_arguments(target, run_dir, sorted(to_probe), urls, php_ini=php_ini, remedy=remedy,
                                say=say)
    except LockdownError as e:
        say(f"[probe] failed, repeated-call findings kept unprobed: {e}")
        return repeated_call.mark_unprobed(findings, f"the probe failed: {e}"), []
    kept, dismissed = repeated_call.apply_probe(findings, probe.located, probe.rows, thresholds)
    return rank(kept), dismissed
