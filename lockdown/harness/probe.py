"""An argument-probe pass (collectors/arg_probe.py): serve a copy of the target with a probe
call at the top of each candidate function, request the URLs where the candidates were seen,
and count the distinct (object, arguments) pairs of their calls per request.

It starts its own stack (a private copy of the app tree, never the prepared one or the user's)
and stops it again, like `profile`. Nothing it measures is timing: the probe call costs time,
so only the counts are used.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..collectors import arg_probe
from ..progress import as_reporter
from ..targets.config import Target
from .bench import sanity_check
from .driver import drive
from .stack import Stack, StackOptions


@dataclass
class ProbeResult:
    definitions: dict[str, list[str]] = field(default_factory=dict)  # function -> every "file:line" in the app
    rows: dict[str, list[dict]] = field(default_factory=dict)        # function -> per-request counts

    @property
    def located(self) -> dict[str, str]:
        """function -> the definition that ran the most probed calls; all of them when none ran
        (the finding then says the probed requests did not call it)."""
        out = {}
        for fn, defs in self.definitions.items():
            ran: dict[str, int] = {}
            for row in self.rows.get(fn, []):
                ran[row["defined_at"]] = ran.get(row["defined_at"], 0) + row["calls"]
            out[fn] = max(ran, key=ran.get) if ran else ", ".join(defs)
        return out


def probe_arguments(target: Target, run_dir: Path, functions: list[str], urls: list[str], *,
                    php_ini: dict | None = None, remedy: Callable[[Stack], None] | None = None,
                    repeat: int = 3, say=print) -> ProbeResult:
    """Probe `functions` on `urls` (each requested once to warm up, then `repeat` times), in
    the app as `remedy` (a remediation under verification) leaves it, when given."""
    report = as_reporter(say)
    result = ProbeResult()
    numbers: dict[int, arg_probe.Site] = {}
    overrides = {**target.php_ini, **(php_ini or {})}
    prepend = arg_probe.install(run_dir / "probe", overrides.get("auto_prepend_file"))

    def instrument(stack: Stack) -> None:
        if remedy is not None:
            remedy(stack)
        sites = arg_probe.locate(stack.app_dir, functions)
        numbers.update(arg_probe.instrument([site for defs in sites.values() for site in defs]))
        for fn, defs in sites.items():
            result.definitions[fn] = [arg_probe.site_label(site, stack.app_dir) for site in defs]

    opts = StackOptions(workers=2, php_ini=dict(php_ini or {}),
                        pool_ini={"auto_prepend_file": str(prepend)}, remedy=instrument)
    with Stack(target, run_dir, opts, say=say) as stack:
        missing = sorted(set(functions) - set(result.definitions))
        say(f"[probe] {len(result.definitions)} of {len(functions)} function(s) located"
            + (f"; not found in the app's files: {', '.join(missing)}" if missing else ""))
        if not numbers:
            return result
        sanity_check(stack)
        drive(stack.base_url, urls, 1, requests=len(urls))
        with report.counted("argument probe", repeat * len(urls)) as done:
            drive(stack.base_url, urls, 1, requests=repeat * len(urls), capture=True,
                  id_prefix="p", headers={arg_probe.HEADER: "1"}, progress=done)
    # the copy is gone by now: its path only names the definitions that ran
    result.rows = arg_probe.results(run_dir / "probe", numbers, stack.app_dir)
    return result
