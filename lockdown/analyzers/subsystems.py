"""Which engine subsystem each native sample's CPU went to (rules in subsystems.toml).

The categories are those of the PHP 7 rewrite's first table: interpreting bytecode, the
memory manager, hash tables, strings, regular expressions, compilation, GC, I/O, plus the
kernel and profiler extensions. Pure functions of frames; no process is started here.
"""
from __future__ import annotations

import functools
import re
import tomllib
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

CATEGORIES = ("vm", "memory", "gc", "hashtable", "string", "regex", "compile", "builtin",
              "fs-io", "net-io", "kernel", "profiler-ext", "other")

RULES_FILE = Path(__file__).with_name("subsystems.toml")


@dataclass(frozen=True)
class _Rule:
    category: str
    dso: re.Pattern | None
    symbol: re.Pattern | None
    under_dso: re.Pattern | None = None  # only when some caller frame's DSO matches this

    def matches(self, symbol: str, dso_name: str) -> bool:
        return ((self.dso is None or self.dso.search(dso_name) is not None) and
                (self.symbol is None or self.symbol.match(symbol) is not None))

    def matches_under(self, callers: list) -> bool:
        return self.under_dso is None or any(
            self.under_dso.search(dso_name(f[3])) is not None for f in callers)


@dataclass(frozen=True)
class Rules:
    passthrough: tuple[_Rule, ...]
    rules: tuple[_Rule, ...]


def load_rules(path: Path = RULES_FILE) -> Rules:
    data = tomllib.loads(path.read_text())

    def rule(d: dict, category: str) -> _Rule:
        if category not in CATEGORIES:
            raise ValueError(f"{path}: unknown category {category!r}")
        return _Rule(category, *(re.compile(d[k]) if k in d else None
                                 for k in ("dso", "symbol", "under_dso")))
    return Rules(tuple(rule(d, d["fallback"]) for d in data.get("passthrough", [])),
                 tuple(rule(d, d["category"]) for d in data.get("rule", [])))


@functools.lru_cache(maxsize=None)
def _default_rules() -> Rules:
    return load_rules()


def dso_name(dso: str) -> str:
    """What `dso` rules match: the file name, or the whole name of anonymous memory."""
    return dso.rsplit("/", 1)[-1] if "/" in dso and not dso.endswith("//anon") else dso


def passes_through(symbol: str, dso: str, rules: Rules | None = None) -> bool:
    """A libc, kernel or JIT frame: its time belongs to its caller ([[passthrough]])."""
    rules = rules or _default_rules()
    name = dso_name(dso)
    return any(p.matches(symbol, name) for p in rules.passthrough)


def categorise(frames: list, rules: Rules | None = None) -> str:
    """`frames` leaf first, each [addr, symbol, offset, dso] (a bundle PerfSample's frames)."""
    rules = rules or _default_rules()
    fallback = None
    for i, (_, symbol, _, dso) in enumerate(frames):
        name = dso_name(dso)
        through = next((p for p in rules.passthrough if p.matches(symbol, name)), None)
        if through is not None:
            fallback = fallback or through.category
            continue
        for r in rules.rules:
            if r.matches(symbol, name) and r.matches_under(frames[i + 1:]):
                return r.category
    return fallback or "other"


def breakdown(samples: Iterable, key=None, rules: Rules | None = None) -> dict:
    """Sample counts per category, overall (key None) or per `key(sample)` (URL, request)."""
    out: dict = defaultdict(Counter)
    for s in samples:
        out[key(s) if key else None][categorise(s.frames, rules)] += 1
    return dict(out) if key else out.get(None, Counter())
