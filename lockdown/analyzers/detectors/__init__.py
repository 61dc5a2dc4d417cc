"""Detectors of known pathologies (../../../docs/detectors.md): one module each, each with an
`ID`, a `SUBJECT` (the details key that tells its findings apart across captures, one of
findings.SUBJECT_KEYS, or None when it reports one finding at most) and a pure
`detect(ctx) -> list[Finding]` over the bundle's `Context`. Adding one means adding a module
here, its name to DETECTORS, its thresholds in thresholds.toml, and its fixture test;
tests/test_detectors_registry.py fails when one of them is missing."""
from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

from ...errors import LockdownError
from ..findings import Evidence, Finding
from .context import Context, build_context  # noqa: F401
from .related import link_consequences

DETECTORS = ("fs_scan", "db_static_cache", "file_static_cache", "write_on_read", "n_plus_one",
             "repeated_query", "session_probe", "session_per_request", "php_warning", "unindexed_query",
             "disk_spill", "repeated_call", "debug_extension", "opcache", "pcre_jit_off",
             "regex_compile", "failed_lookups", "stat_storm", "autoload", "per_call_setup", "blocking_wait",
             "hot_builtins", "hotspot")
THRESHOLDS = Path(__file__).with_name("thresholds.toml")


def load_thresholds(override: Path | None = None) -> dict:
    """Defaults from thresholds.toml, with the values of `override` on top."""
    merged = tomllib.loads(THRESHOLDS.read_text())
    if override is not None:
        try:
            extra = tomllib.loads(Path(override).read_text())
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise LockdownError(f"{override}: cannot read thresholds ({e}); see docs/detectors.md")
        for section, values in extra.items():
            if section not in merged or not isinstance(values, dict):
                raise LockdownError(f"{override}: unknown detector [{section}]; known: {', '.join(merged)}")
            unknown = set(values) - set(merged[section])
            if unknown:
                raise LockdownError(f"{override}: [{section}] has no threshold {sorted(unknown)[0]!r}; "
                                    f"known: {', '.join(merged[section])}")
            merged[section].update(values)
    return merged


def with_defaults(recorded: dict | None) -> dict:
    """A run's recorded thresholds over today's defaults: a run written before a threshold
    existed gets its default, not a KeyError."""
    merged = load_thresholds()
    for section, values in (recorded or {}).items():
        if isinstance(values, dict):
            merged.setdefault(section, {}).update(values)
    return merged


def modules():
    return [importlib.import_module(f"{__name__}.{name}") for name in DETECTORS]


def detect(ctx: Context) -> list[Finding]:
    """Every detector's findings, defects first by share of request time, then informational.
    A module with `AFTER` (hotspot) runs last, on the others' findings: what they leave
    unexplained is its input."""
    found: list[Finding] = []
    after = [mod for mod in modules() if getattr(mod, "AFTER", False)]
    for mod in modules():
        if mod not in after:
            found.extend(mod.detect(ctx))
    found = link_consequences(ctx, found)
    for mod in after:
        found = found + mod.detect(ctx, found)
    return rank(guard_shares(found))


def guard_shares(found: list[Finding]) -> list[Finding]:
    """The last check on every share: a share of request time is a part of the same requests'
    time, at most 100%. Each detector's estimate is built to stay within it (docs/detectors.md);
    one that did not is set to 100 here, with its own value in the evidence, rather than ranked
    on an impossible number."""
    for f in found:
        if f.share_pct is not None and not 0 <= f.share_pct <= 100:
            f.evidence.append(describe_out_of_bounds(f.share_pct))
            f.share_pct = min(100.0, max(0.0, f.share_pct))
    return found


def describe_out_of_bounds(share_pct: float) -> Evidence:
    return Evidence("share of request time as estimated, outside 0-100% (an estimate at fault; reported as "
                    "the bound)", share_pct, "lockdown/analyzers/detectors/__init__.py guard_shares")


def rank(found: list[Finding]) -> list[Finding]:
    """Defects first by share of request time, then informational; keys id, id-2, id-3..."""
    order = {"high": 0, "medium": 1, "low": 2, "info": 3}
    found.sort(key=lambda f: (order[f.severity], -(f.share_pct or 0), f.id))
    seen: dict[str, int] = {}
    for f in found:
        seen[f.id] = seen.get(f.id, 0) + 1
        f.key = f.id if seen[f.id] == 1 else f"{f.id}-{seen[f.id]}"
    return found
