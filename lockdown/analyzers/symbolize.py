"""Give `[unknown]` native frames a function identity before anything counts them.

perf names only exported functions of Debian's stripped php-fpm8.2, so samples in static
functions arrive as `[unknown]`. The bundle records each DSO's build id; the symbol table for
that build (`symbols.py`: .symtab, debug symbols, .dynsym, PLT stubs and .eh_frame ranges) names
every function, unexported ones as `php-fpm8.2+0x3368e0`. Tables come from the build-id cache or
from the DSO on this machine when its build id still matches; otherwise frames stay `[unknown]`.
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from ..bundle.model import PerfSample
from . import symbols
from .symbols import SymbolTable

UNKNOWN = "[unknown]"


def tables_for(build_ids: Mapping[str, str]) -> dict[str, SymbolTable]:
    """DSO path -> symbol table of exactly the build the bundle saw."""
    out: dict[str, SymbolTable] = {}
    for dso, bid in build_ids.items():
        if not dso.startswith("/") or not bid:
            continue
        table = symbols.cached(bid)
        if table is None and os.path.isfile(dso):
            try:
                if symbols.build_id(dso) == bid:
                    table = symbols.load(dso)
            except (OSError, ValueError, Exception):  # not an ELF, unreadable: stays unnamed
                table = None
        if table is not None:
            out[dso] = table
    return out


@dataclass
class Identity:
    """How many samples keep a leaf with no name at all, the done-when figure of the analysis."""
    samples: int = 0
    leaf_unknown_before: int = 0
    leaf_unknown_after: int = 0
    frames_named: int = 0

    @property
    def leaf_unknown_pct(self) -> float:
        return 100.0 * self.leaf_unknown_after / self.samples if self.samples else 0.0

    def to_json(self) -> dict:
        return {"samples": self.samples, "leaf_unknown_before": self.leaf_unknown_before,
                "leaf_unknown_after": self.leaf_unknown_after, "frames_named": self.frames_named,
                "leaf_unknown_pct": round(self.leaf_unknown_pct, 2)}


def symbolize(samples: Iterable[PerfSample], tables: Mapping[str, SymbolTable],
              identity: Identity | None = None) -> list[PerfSample]:
    """Samples with `[unknown]` frames named from `tables` (frame offsets become offsets from
    the function start); other frames untouched. Counts go to `identity` when given."""
    ident = identity if identity is not None else Identity()
    memo: dict[tuple[str, str], tuple[str, int | None] | None] = {}
    out = []
    for s in samples:
        ident.samples += 1
        if s.frames and s.frames[0][1] == UNKNOWN:
            ident.leaf_unknown_before += 1
        frames = s.frames
        if any(f[1] == UNKNOWN and f[3] in tables for f in frames):
            frames = [_named(f, tables, memo, ident) for f in frames]
            s = replace(s, frames=frames)
        if frames and frames[0][1] == UNKNOWN:
            ident.leaf_unknown_after += 1
        out.append(s)
    return out


def _named(frame: list, tables: Mapping[str, SymbolTable], memo: dict, ident: Identity) -> list:
    addr, sym, _off, dso = frame
    if sym != UNKNOWN or dso not in tables:
        return frame
    key = (dso, addr)
    if key not in memo:
        table = tables[dso]
        hit = table.find(table.perf_to_vaddr(int(addr, 16)))
        memo[key] = None if hit is None else (hit[2], table.perf_to_vaddr(int(addr, 16)) - hit[0])
    named = memo[key]
    if named is None:
        return frame
    ident.frames_named += 1
    return [addr, named[0], named[1], dso]
